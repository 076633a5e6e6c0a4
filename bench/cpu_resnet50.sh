#!/usr/bin/env bash
# ResNet-50 v1.5 fp32 training at 224×224 on this machine's CPU, batch 16 and 32:
# dlbench-worker's throughput and achieved GFLOP/s next to what oneDNN's convolutions alone
# reach for the same shapes (bench/conv_throughput), so that framework overhead shows.
# Prints a markdown section for bench/RESULTS.md.
#
#   bench/cpu_resnet50.sh [BUILD_DIR] [MEASURE_STEPS] [REPEATS]
set -euo pipefail
build=${1:-build/default}
measure=${2:-3}
repeats=${3:-3}
worker="$build/bin/dlbench-worker"
conv="$build/bin/conv_throughput"
[[ -x $worker && -x $conv ]] || { echo "build first: cmake --workflow --preset programs" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "### ResNet-50 fp32, 224×224, CPU — $(date -u +%Y-%m-%d)"
echo
echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB;" \
     "oneDNN $(dpkg-query -W -f='${Version}' libdnnl2 2>/dev/null || echo '?'); dlbench $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
echo "Command: \`bench/cpu_resnet50.sh $build $measure $repeats\` (warm-up 1, measure $measure, repeats $repeats, median)."
echo
echo "| batch | dlbench-worker img/s | step s | training GFLOP/s | convolutions alone img/s | conv GFLOP/s | conv share of step | activations GiB |"
echo "|---|---|---|---|---|---|---|---|"
for batch in 16 32; do
  "$worker" --model resnet50 --image-size 224 --batch-size "$batch" --warmup-steps 1 --measure-steps "$measure" \
    --repeats "$repeats" --output "$tmp/r$batch.json" > "$tmp/t$batch.txt"
  "$conv" --model resnet50 --image-size 224 --batch-size "$batch" --iterations 5 --json > "$tmp/c$batch.json"
  python3 - "$tmp/r$batch.json" "$tmp/c$batch.json" "$tmp/t$batch.txt" "$batch" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2])); table = open(sys.argv[3]).read()
batch = int(sys.argv[4])
median = r["throughput"]["median"]
step = batch / median
gflops = median * r["modelFlopsPerSample"]["training"] / 1e9
arena = re.search(r"activations ([0-9.]+) GiB", table).group(1)
print(f"| {batch} | {median:.2f} | {step:.2f} | {gflops:.1f} | {c['convSamplesPerSecond']:.2f} | "
      f"{c['convGflops']:.1f} | {100 * c['convSecondsPerStep'] / step:.0f}% | {arena} |")
PY
done
