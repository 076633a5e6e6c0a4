#!/usr/bin/env bash
# The resampler's horizontal pass 8 output pixels at a time with AVX2 gathers (the default where
# the CPU has AVX2, since 2026-11-30) against pixel by pixel (DLBENCH_CPU_RESAMPLER=portable), in
# the imagefolder pipeline, side by side on generated JPEGs: ROUNDS rounds, the two interleaved in
# each, medians printed. Both give the same bytes (tests/input:
# BilinearResampler.TheAvx2HorizontalPassWritesThePortablePassesBytes, and
# input.GoldenAgainstTorchvision both ways). THREADS decoding threads, batches of 256 at 224
# pixels in fp16 (amp's), 6 timed batches after the first. bench/RESULTS.md has the numbers.
#
#   bench/input_resampler.sh [BUILD_DIR=build/ci] [THREADS=2] [ROUNDS=5] [DCT_SCALING=on]
set -euo pipefail
build=${1:-build/ci}
threads=${2:-2}
rounds=${3:-5}
dct=${4:-on}
grep -qw avx2 /proc/cpuinfo || { echo "input_resampler.sh: this CPU has no AVX2; there is nothing to compare" >&2; exit 1; }
data=$(mktemp -d /tmp/dlbench-resampler.XXXXXX)
trap 'rm -rf "$data"' EXIT
"$build/bin/dlbench-input" generate "$data/images" --classes 16 --per-class 64 > /dev/null
for ((r = 0; r < rounds; ++r)); do
  for pass in avx2 portable; do
    DLBENCH_CPU_RESAMPLER=$pass "$build/bin/dlbench-input" measure "$data/images" --threads "$threads" \
      --batch-size 256 --batches 6 --pixel-type fp16 --dct-scaling "$dct" | sed "s/^{/{\"pass\": \"$pass\", /"
  done
done | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    row = json.loads(line)
    runs.setdefault(row["pass"], []).append(row["imagesPerSecond"])
print("| horizontal pass | images/s, median (min to max) | rounds |")
print("|---|---|---|")
for name, rates in runs.items():
    label = "8 pixels a gather (avx2)" if name == "avx2" else "pixel by pixel (portable)"
    print(f"| {label} | {statistics.median(rates):.0f} ({min(rates):.0f} to {max(rates):.0f}) | {len(rates)} |")
if len(runs) == 2:
    ratio = statistics.median(runs["avx2"]) / statistics.median(runs["portable"])
    print(f"avx2 / portable, medians: {ratio:.3f}")
'
