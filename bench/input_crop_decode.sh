#!/usr/bin/env bash
# Decoding only the rows and columns each RandomResizedCrop needs (`--crop-only on`, the default
# since 2026-11-30) against decoding every JPEG whole, in the imagefolder pipeline, side by side
# on generated JPEGs: ROUNDS rounds, the two interleaved in each, medians printed. Both give the
# same bytes (tests/input: JpegDecoder.APartHoldsTheBytesTheWholeImageHoldsThere). THREADS
# decoding threads, batches of 256 at 224 pixels in fp16 (amp's), 6 timed batches after the
# first. bench/RESULTS.md has the numbers.
#
#   bench/input_crop_decode.sh [BUILD_DIR=build/ci] [THREADS=2] [ROUNDS=5] [DCT_SCALING=on]
set -euo pipefail
build=${1:-build/ci}
threads=${2:-2}
rounds=${3:-5}
dct=${4:-on}
data=$(mktemp -d /tmp/dlbench-crop-decode.XXXXXX)
trap 'rm -rf "$data"' EXIT
"$build/bin/dlbench-input" generate "$data/images" --classes 16 --per-class 64 > /dev/null
for ((r = 0; r < rounds; ++r)); do
  for mode in on off; do
    "$build/bin/dlbench-input" measure "$data/images" --threads "$threads" --batch-size 256 --batches 6 \
      --pixel-type fp16 --dct-scaling "$dct" --crop-only "$mode" | sed "s/^{/{\"cropOnly\": \"$mode\", /"
  done
done | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    row = json.loads(line)
    runs.setdefault(row["cropOnly"], []).append(row["imagesPerSecond"])
print("| decoding | images/s, median (min to max) | rounds |")
print("|---|---|---|")
for mode, rates in runs.items():
    label = "only the crop (--crop-only on)" if mode == "on" else "the whole image (--crop-only off)"
    print(f"| {label} | {statistics.median(rates):.0f} ({min(rates):.0f} to {max(rates):.0f}) | {len(rates)} |")
if len(runs) == 2:
    ratio = statistics.median(runs["on"]) / statistics.median(runs["off"])
    print(f"crop only / whole, medians: {ratio:.3f}")
'
