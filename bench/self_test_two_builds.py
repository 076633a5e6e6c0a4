#!/usr/bin/env python3
"""How long `dlbench-worker --self-test` takes, from two builds side by side (a change and the commit
before it): the builds alternate round by round, so that a shared machine's drift falls on both.
Each run must pass; its wall seconds, CPU seconds and peak resident memory (the kernel's own
accounting of the finished process, os.wait4) are kept. Prints a markdown table of medians with
their ranges, and after / before. Run it on an otherwise idle machine.

    python3 bench/self_test_two_builds.py BUILD_BEFORE BUILD_AFTER ROUNDS [SELF_TEST_ARGUMENTS...]
    e.g. python3 bench/self_test_two_builds.py /tmp/oldtree/build/ci build/ci 5
         python3 bench/self_test_two_builds.py /tmp/oldtree/build/ci build/ci 3 --model vgg16 \\
             --precision fp32 --self-test-checks "vgg16 step"
"""
import os
import statistics
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    before, after, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    arguments = sys.argv[4:]
    workers = {build: os.path.join(build, "bin", "dlbench-worker") for build in (before, after)}
    for build, worker in workers.items():
        if not os.access(worker, os.X_OK):
            sys.exit(f"no {worker}: build it first")
    runs = {build: [] for build in workers}
    for _ in range(rounds):
        for build, worker in workers.items():
            start = time.monotonic()
            pid = os.posix_spawn(worker, [worker, "--self-test", *arguments], os.environ,
                                 file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                               (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
            _, status, usage = os.wait4(pid, 0)
            wall = time.monotonic() - start
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"{worker} --self-test {' '.join(arguments)} failed "
                         f"(exit {os.waitstatus_to_exitcode(status)}): run it by hand to see which check")
            runs[build].append((wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024))

    def column(values, digits):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"

    print(f"`dlbench-worker --self-test {' '.join(arguments)}`, {rounds} rounds alternating the builds; "
          "medians (min to max)\n")
    print("| build | wall s | cpu s | peak MiB |")
    print("|---|---|---|---|")
    for build in workers:
        walls, cpus, peaks = zip(*runs[build])
        print(f"| {build} | {column(walls, 2)} | {column(cpus, 2)} | {column(peaks, 0)} |")
    ratio = statistics.median(w for w, _, _ in runs[after]) / statistics.median(w for w, _, _ in runs[before])
    print(f"| after / before, wall | {ratio:.3f} | | |")


if __name__ == "__main__":
    main()
