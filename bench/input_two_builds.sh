#!/usr/bin/env bash
# The decoding threads' rate from two builds of dlbench-input side by side (a change and the commit
# before it), on the same generated JPEGs: ROUNDS rounds, the builds interleaved in each, for each
# side of the resize (host, device) and each number of timed batches in BATCHES (a short measure
# weighs what the first pass over the ring of batches costs, a long one the steady state). THREADS
# decoding threads, batches of 256 at 224 in fp16 (amp's). Medians printed; bench/RESULTS.md has them.
#
#   bench/input_two_builds.sh BUILD_BEFORE BUILD_AFTER [THREADS=2] [ROUNDS=3] [BATCHES="6 30"]
set -euo pipefail
before=$1
after=$2
threads=${3:-2}
rounds=${4:-3}
batch_counts=${5:-6 30}
data=$(mktemp -d /tmp/dlbench-two-builds.XXXXXX)
trap 'rm -rf "$data"' EXIT
"$after/bin/dlbench-input" generate "$data/images" --classes 16 --per-class 256 > /dev/null
for ((r = 0; r < rounds; ++r)); do
  for batches in $batch_counts; do
    for where in host device; do
      for build in "$before" "$after"; do
        printf '%s %s %s ' "$build" "$batches" "$where"
        "$build/bin/dlbench-input" measure "$data/images" --threads "$threads" --batch-size 256 \
          --batches "$batches" --pixel-type fp16 --resize-on "$where"
      done
    done
  done
done | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    build, batches, where, row = line.split(" ", 3)
    runs.setdefault((int(batches), where, build), []).append(json.loads(row)["imagesPerSecond"])
builds = list(dict.fromkeys(key[2] for key in runs))
print("| timed batches | resize on | " + " | ".join(f"{b}, images/s (min to max)" for b in builds) + " | after / before |")
print("|---|---|" + "---|" * len(builds) + "---|")
for batches, where in dict.fromkeys(key[:2] for key in runs):
    cells, medians = [], []
    for b in builds:
        rates = runs[(batches, where, b)]
        medians.append(statistics.median(rates))
        cells.append(f"{medians[-1]:.0f} ({min(rates):.0f} to {max(rates):.0f})")
    print(f"| {batches} | {where} | " + " | ".join(cells) + f" | {medians[-1] / medians[0]:.3f} |")
'
