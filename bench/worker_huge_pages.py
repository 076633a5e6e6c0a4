#!/usr/bin/env python3
"""Two dlbench-worker builds side by side on what a large model's first touch of memory costs: one
--record-step of VGG16 (138M parameters; the step itself is tiny at 32x32, batch 4: the time is the
weights' initialisation and the 4 GB of weights, gradients, momenta, oneDNN's weight formats and
the record that are touched for the first time). Rounds alternate the builds (A B A B ...); each
run is its own process, with its wall time, user and system seconds, minor page faults and peak
resident set from wait4(). The two records must be byte for byte the same. The medians over the
rounds are printed as a markdown section for bench/RESULTS.md.

Made for the CPU backend's huge-page buffers (worker/host_memory.hpp, 2026-11-30): build A from
the tree, B from the commit before (or any two builds to compare).

    bench/worker_huge_pages.py WORKER_A WORKER_B [--label-a A] [--label-b B] [--model vgg16]
                               [--image-size 32] [--rounds 3] [--threads 2]
"""
import argparse
import datetime
import filecmp
import os
import statistics
import tempfile

from bench_process import machine, run_with_usage


def transparent_huge_pages():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().strip()
    except OSError:
        return "not available"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("worker_a")
    parser.add_argument("worker_b")
    parser.add_argument("--label-a", default="A")
    parser.add_argument("--label-b", default="B")
    parser.add_argument("--model", default="vgg16")
    parser.add_argument("--image-size", default="32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    runs = {args.label_a: [], args.label_b: []}
    with tempfile.TemporaryDirectory(prefix="dlbench-huge-pages-") as work:
        for r in range(args.rounds):
            records = []
            for label, worker in ((args.label_a, args.worker_a), (args.label_b, args.worker_b)):
                record = os.path.join(work, f"{label}.safetensors")
                _, usage, wall = run_with_usage([
                    worker, "--model", args.model, "--image-size", args.image_size, "--batch-size", "4",
                    "--seed", "46", "--threads", str(args.threads), "--optimizer", "sgd", "--learning-rate", "0.1",
                    "--momentum", "0.9", "--weight-decay", "0.0001", "--record-step", record])
                runs[label].append((wall, usage.ru_utime, usage.ru_stime, usage.ru_minflt, usage.ru_maxrss / 1024))
                records.append(record)
            if not filecmp.cmp(records[0], records[1], shallow=False):
                raise SystemExit(f"round {r}: the two builds recorded different steps")
    print(f"### {args.model} --record-step, {args.label_a} against {args.label_b} "
          f"({datetime.date.today().isoformat()})\n")
    print(f"{machine()}; transparent huge pages: {transparent_huge_pages()}; {args.rounds} rounds, "
          f"--threads {args.threads}, image {args.image_size}, batch 4; the records byte for byte the same.\n")
    print("| build | wall s | user s | system s | minor page faults | peak MiB |")
    print("|---|---|---|---|---|---|")
    for label, rows in runs.items():
        medians = [statistics.median(column) for column in zip(*rows)]
        print(f"| {label} | {medians[0]:.1f} | {medians[1]:.1f} | {medians[2]:.1f} | {medians[3]:,.0f} | {medians[4]:,.0f} |")
    a, b = (statistics.median(row[0] for row in runs[label]) for label in runs)
    print(f"\nwall, {args.label_a} / {args.label_b} (medians): {a / b:.2f}")


if __name__ == "__main__":
    main()
