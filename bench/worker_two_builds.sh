#!/usr/bin/env bash
# dlbench-worker's throughput from two builds side by side (a change and the commit before it): one
# case run ROUNDS times by each build, the builds alternating so that the machine's drift falls on
# both, each run's median throughput kept. Prints a markdown table: per build the median of those
# medians and their range, and after / before. Run it on an otherwise idle machine.
#
#   bench/worker_two_builds.sh BUILD_BEFORE BUILD_AFTER ROUNDS WORKER_ARGUMENTS...
#   e.g. bench/worker_two_builds.sh /tmp/oldtree/build/ci build/ci 5 --model resnet50 --batch-size 16 \
#          --warmup-steps 3 --measure-steps 6 --repeats 3
#   DNNL_MAX_CPU_ISA=AVX2 bench/worker_two_builds.sh ...   both builds on AVX2 kernels
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n 2,10p "$0" >&2; exit 2; }
before=$1 after=$2 rounds=$3
shift 3
for build in "$before" "$after"; do
  [[ -x $build/bin/dlbench-worker ]] || { echo "no $build/bin/dlbench-worker: build it first" >&2; exit 2; }
done
for ((r = 0; r < rounds; ++r)); do
  for build in "$before" "$after"; do
    printf '%s ' "$build"
    # --max-cv 1: every run's median kept, a noisy one too; the spread shows in the range.
    "$build/bin/dlbench-worker" "$@" --max-cv 1 | python3 -c '
import json, sys
doc = json.load(sys.stdin)
if doc.get("state") != "Succeeded":
    sys.exit("the case ended %s: %s: %s" % (doc.get("state"), doc.get("reason"), doc.get("message")))
print(doc["throughput"]["median"], doc["throughput"]["unit"])'
  done
done | python3 -c '
import statistics, sys
runs, unit = {}, ""
for line in sys.stdin:
    build, value, unit = line.split()
    runs.setdefault(build, []).append(float(value))
before, after = list(runs)
print(f"| build | median {unit} (min to max, {len(runs[before])} runs) |")
print("|---|---|")
for build in (before, after):
    values = runs[build]
    print(f"| {build} | {statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f}) |")
print(f"| after / before | {statistics.median(runs[after]) / statistics.median(runs[before]):.3f} |")'
