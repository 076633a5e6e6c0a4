#!/usr/bin/env bash
# Where a real-data batch becomes fp16: on the training step's thread (until 2026-11-29) or in the
# pipeline's decoding threads (now), and by the CPU's F16C unit (now) or in software one value at
# a time (DLBENCH_CPU_HALVES=software, until 2026-11-29), side by side on generated JPEGs, ROUNDS
# rounds interleaved, medians printed. bench/RESULTS.md has the numbers.
#
#   bench/input_conversion.sh [BUILD_DIR=build/ci] [THREADS=2] [ROUNDS=3]
set -euo pipefail
build=${1:-build/ci}
threads=${2:-2}
rounds=${3:-3}
data=$(mktemp -d /tmp/dlbench-conversion.XXXXXX)
trap 'rm -rf "$data"' EXIT
"$build/bin/dlbench-input" generate "$data/images" --classes 16 --per-class 64 > /dev/null
for ((r = 0; r < rounds; ++r)); do
  "$build/bin/input_conversion" "$data/images" "$threads" 256 6
  DLBENCH_CPU_HALVES=software "$build/bin/input_conversion" "$data/images" "$threads" 256 6
done | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    row = json.loads(line)
    runs.setdefault(row["mode"], []).append(row)
print("| mode | images/s (median) | the step converting, ms a batch (median) | rounds |")
print("|---|---|---|---|")
for mode, rows in runs.items():
    rate = statistics.median(r["imagesPerSecond"] for r in rows)
    step = statistics.median(r["stepConvertsMsPerBatch"] for r in rows)
    print(f"| {mode} | {rate:.0f} | {step:.1f} | {len(rows)} |")
'
