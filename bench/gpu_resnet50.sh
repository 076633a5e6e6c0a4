#!/usr/bin/env bash
# ResNet-50 training throughput on one GPU: dlbench-worker and PyTorch (eager and torch.compile)
# side by side in one run, same batch, precision and methodology; one comparison table.
#
#   bench/gpu_resnet50.sh BIN_DIR [WARMUP MEASURE REPEATS]
#
# BIN_DIR holds a dlbench-worker built with CUDA (sm_90 for H100/H200; the `default` preset
# builds 80;90); on a machine without Debian's packages use scripts/gpu-bundle.sh's OUT_DIR/bin
# (its libraries, OUT_DIR/lib, go on LD_LIBRARY_PATH). Defaults: 20 warm-up, 100 measured steps,
# 7 repeats.
# MFU = images/s × 24.5 GFLOP (3 × the 2 × 4.09 G multiply-adds of one 224² forward pass) over
# the GPU's dense peak for the precision (tensor cores for tf32/amp/bf16, FMA for fp32).
set -euo pipefail

source "$(dirname "$0")/gpu_setup.sh"
for batch in 128 256; do
  for precision in fp32 tf32 amp bf16; do
    rm -f /tmp/dlbench-result.json
    if "$bin/dlbench-worker" --backend cuda --model resnet50 --batch-size "$batch" --precision "$precision" \
         --warmup-steps "$warmup" --measure-steps "$measure" --repeats "$repeats" --output /tmp/dlbench-result.json \
         > /dev/null 2> /tmp/dlbench-stderr.txt || [[ -s /tmp/dlbench-result.json ]]; then
      python3 "$here/gpu_bench.py" result /tmp/dlbench-result.json "$batch" "$precision" >> "$results"
    fi
    for compile in "" "--compile"; do
      python3 "$here/pytorch_resnet50.py" --batch "$batch" --precision "$precision" --warmup "$warmup" \
        --measure "$measure" --repeats "$repeats" $compile >> "$results" || true
    done
  done
done

python3 - "$results" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import gpu_bench
peak = gpu_bench.peaks()
by = {key: r.get("median") for key, r in gpu_bench.rows(sys.argv[1]).items()}
print("| batch | precision | dlbench img/s | PyTorch eager img/s | torch.compile img/s | dlbench / eager | MFU dlbench | MFU eager |")
print("|---|---|---|---|---|---|---|---|")
for batch in (128, 256):
    for precision in ("fp32", "tf32", "amp", "bf16"):
        d, e, c = (by.get((batch, precision, k)) for k in ("dlbench", "pytorch", "pytorch-compile"))
        mfu = lambda v: f"{100 * v * 24.5e9 / (peak[precision] * 1e12):.1f}%" if v and peak else "-"
        fmt = lambda v: f"{v:.1f}" if v else "-"
        ratio = f"{d / e:.2f}" if d and e else "-"
        print(f"| {batch} | {precision} | {fmt(d)} | {fmt(e)} | {fmt(c)} | {ratio} | {mfu(d)} | {mfu(e)} |")
PY
