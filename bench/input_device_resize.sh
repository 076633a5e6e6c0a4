#!/usr/bin/env bash
# The decoding threads' rate when they only decode and pack each crop with Pillow's taps for a GPU
# to resize (DLBENCH_INPUT_RESIZE=device, `measure --resize-on device`) against resizing,
# normalising and converting to halves themselves (host, the default), side by side on generated
# JPEGs: ROUNDS rounds, the two interleaved in each, medians printed. The GPU's kernel is not run
# here: this is the host's side of the trade only. Both make the same values once the kernel has
# run (tests/gpu: PackedJpegFolder.TheKernelMakesTheHostsBatchFromThePackedOneBitForBit, emulated).
# THREADS decoding threads, batches of 256 at 224 pixels in fp16 (amp's), 6 timed batches after the
# first. bench/RESULTS.md has the numbers.
#
#   bench/input_device_resize.sh [BUILD_DIR=build/ci] [THREADS=2] [ROUNDS=5] [DCT_SCALING=on]
set -euo pipefail
build=${1:-build/ci}
threads=${2:-2}
rounds=${3:-5}
dct=${4:-on}
data=$(mktemp -d /tmp/dlbench-device-resize.XXXXXX)
trap 'rm -rf "$data"' EXIT
"$build/bin/dlbench-input" generate "$data/images" --classes 16 --per-class 64 > /dev/null
for ((r = 0; r < rounds; ++r)); do
  for where in device host; do
    "$build/bin/dlbench-input" measure "$data/images" --threads "$threads" --batch-size 256 --batches 6 \
      --pixel-type fp16 --dct-scaling "$dct" --resize-on "$where"
  done
done | python3 -c '
import json, statistics, sys
runs, sent = {}, {}
for line in sys.stdin:
    row = json.loads(line)
    runs.setdefault(row["resizeOn"], []).append(row["imagesPerSecond"])
    sent.setdefault(row["resizeOn"], []).append(row["bytesPerImage"])
print("| the threads | images/s, median (min to max) | bytes sent to the GPU an image | rounds |")
print("|---|---|---|---|")
for name, rates in runs.items():
    label = "decode and pack (device resizes)" if name == "device" else "decode, resize, normalise, halves (host)"
    print(f"| {label} | {statistics.median(rates):.0f} ({min(rates):.0f} to {max(rates):.0f}) | "
          f"{statistics.mean(sent[name]):,.0f} | {len(rates)} |")
if len(runs) == 2:
    ratio = statistics.median(runs["device"]) / statistics.median(runs["host"])
    print(f"device / host, medians: {ratio:.3f}")
'
