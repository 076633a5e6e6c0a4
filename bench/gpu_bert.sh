#!/usr/bin/env bash
# BERT-base pretraining throughput on one GPU, DLPerf's shape (sequence length 128, AdamW after
# clipping): dlbench-worker and PyTorch (bench/pytorch_bert.py, eager) side by side in one run, same
# batch, precision and methodology; one comparison table in sequences/s.
#
#   bench/gpu_bert.sh BIN_DIR [WARMUP MEASURE REPEATS]
#
# BIN_DIR holds a dlbench-worker built with CUDA (see bench/gpu_resnet50.sh). Defaults: 20 warm-up,
# 100 measured steps, 7 repeats. A precision the GPU cannot run (bf16 before Ampere) ends as a
# Failed result with reason Unsupported on both sides; the table shows it as "—".
# MFU = sequences/s × 69.93 GFLOP (the layer-by-layer training FLOPs of one 128-token sequence,
# README "BERT-base") over the GPU's dense peak for the precision.
set -euo pipefail

source "$(dirname "$0")/gpu_setup.sh"
for batch in 32 64; do
  for precision in fp32 tf32 amp bf16; do
    rm -f /tmp/dlbench-result.json
    if "$bin/dlbench-worker" --backend cuda --model bert-base --sequence-length 128 --batch-size "$batch" \
         --precision "$precision" --optimizer adamw --learning-rate 0.0001 --weight-decay 0.01 \
         --warmup-steps "$warmup" --measure-steps "$measure" --repeats "$repeats" --output /tmp/dlbench-result.json \
         > /dev/null 2> /tmp/dlbench-stderr.txt || [[ -s /tmp/dlbench-result.json ]]; then
      python3 "$here/gpu_bench.py" result /tmp/dlbench-result.json "$batch" "$precision" >> "$results"
    fi
    python3 "$here/pytorch_bert.py" --device cuda --batch "$batch" --precision "$precision" --warmup "$warmup" \
      --measure "$measure" --repeats "$repeats" >> "$results" || true
  done
done

python3 - "$results" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import gpu_bench
peak = gpu_bench.peaks()
training_gflop = 69.93  # per 128-token sequence
by = gpu_bench.rows(sys.argv[1])
print("| batch | precision | dlbench sequences/s | PyTorch eager sequences/s | dlbench / eager | MFU dlbench | MFU eager |")
print("|---|---|---|---|---|---|---|")
for batch in (32, 64):
    for precision in ("fp32", "tf32", "amp", "bf16"):
        ours, theirs = by.get((batch, precision, "dlbench"), {}), by.get((batch, precision, "pytorch"), {})
        mine, eager = ours.get("median"), theirs.get("median")
        def mfu(speed):
            return f"{100 * speed * training_gflop / 1e3 / peak[precision]:.1f}%" if speed and peak else "—"
        shown = f"{mine:.1f}" if mine else f"{ours.get('state', 'not run')} {ours.get('reason', '')}".strip()
        print(f"| {batch} | {precision} | {shown} | {f'{eager:.1f}' if eager else '—'} | "
              f"{f'{mine / eager:.2f}×' if mine and eager else '—'} | {mfu(mine)} | {mfu(eager)} |")
PY
