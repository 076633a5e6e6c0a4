#!/usr/bin/env bash
# dlbench-exec's peak memory while a command floods it with output (256 MB without a newline, then
# 300,000 short lines, as command.DlbenchExec's flood test does), for each build named, ROUNDS
# rounds with the builds interleaved in each, medians printed. The test holds a release build to
# 64 MiB; a sanitized one (the debug preset) is AddressSanitizer's memory, which this shows apart.
#
#   bench/exec_flood_memory.sh [ROUNDS=5] BUILD_DIR...      (e.g. 5 build/ci build/asan)
set -euo pipefail
rounds=${1:-5}
shift
(($# > 0)) || set -- build/ci
work=$(mktemp -d /tmp/dlbench-flood.XXXXXX)
trap 'rm -rf "$work"' EXIT
export DLBENCH_RUN=flood DLBENCH_MODEL=resnet50 DLBENCH_IMAGE_SIZE=224 DLBENCH_NODES=1 DLBENCH_NODE_RANK=0 \
  DLBENCH_GPUS_PER_NODE=1 DLBENCH_BATCH_SIZE=4 DLBENCH_PRECISION=fp32 DLBENCH_WARMUP_STEPS=0 \
  DLBENCH_MEASURE_STEPS=1 DLBENCH_REPEATS=1 ASAN_OPTIONS=detect_leaks=0
# ...then the one step marker the case needs, so that it succeeds as the test's does.
flood="head -c 268435456 /dev/zero | tr '\\0' x; echo; yes 'flood line' | head -n 300000; echo '@dlbench step 4'"
for ((r = 0; r < rounds; ++r)); do
  for build in "$@"; do
    # GNU time's %M: the largest resident set of dlbench-exec itself (its children are not waited
    # for by time, only by the shim).
    /usr/bin/time -f "$build %M" -o "$work/time" "$build/bin/dlbench-exec" --quiet --output "$work/r.json" \
      -- sh -c "$flood" > /dev/null 2>&1 || { echo "exec_flood_memory.sh: the case failed under $build" >&2; exit 1; }
    tail -n 1 "$work/time"
  done
done | python3 -c '
import collections, statistics, sys
peaks = collections.defaultdict(list)
for line in sys.stdin:
    build, kib = line.split()
    peaks[build].append(int(kib))
for build, kib in peaks.items():
    print(f"{build}: peak resident {statistics.median(kib) / 1024:.1f} MiB (median of {len(kib)}; min {min(kib) / 1024:.1f}, max {max(kib) / 1024:.1f})")'
