#!/usr/bin/env python3
"""Where a ResNet-50 training step goes on the CPU, dlbench-worker --profile next to PyTorch's
profiler (bench/pytorch_resnet50.py --device cpu --profile, charged by bench/pytorch_profile.py),
in one run: the same batch, image size, threads (every CPU this process may use) and SGD, rounds
alternating the engines (A B A B ...), medians over the rounds. The same pair gpu_check.sh sets
side by side on a GPU, so the CPU shows first that the two sides' kinds compare.

    bench/cpu_profile_vs_pytorch.py [--build build/ci] [--batch 8] [--image-size 224] [--rounds 3]
                                    [--warmup 2] [--measure 3] [--profile 3] [--python /usr/bin/python3]

The kinds do not match one to one: dlbench fuses batch norm with the ReLU after it and puts a
bottleneck's residual add and ReLU in the block's own row; PyTorch's rows are its ops. The rows
below pair them as closely as they allow. Prints a markdown section for bench/RESULTS.md.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_process import machine

HERE = os.path.dirname(os.path.abspath(__file__))
# (row, dlbench kinds summed, PyTorch kinds summed)
ROWS = (
    ("convolution", ("Conv2d",), ("convolution",)),
    ("batch norm and ReLU", ("BatchNorm2d", "BatchNorm2d+ReLU", "BatchNorm2d+Add+ReLU", "ReLU"), ("batch norm", "relu")),
    ("residual add (dlbench: the block's add and ReLU)", ("Bottleneck",), ("add",)),
    ("pooling, classifier, loss", ("MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Linear", "Flatten"),
     ("pooling", "linear", "softmax and loss")),
)


def dlbench_profile(worker, args, precision, work):
    out = os.path.join(work, f"dlbench-{precision}.json")
    subprocess.run([worker, "--backend", "cpu", "--model", "resnet50", "--batch-size", str(args.batch),
                    "--image-size", str(args.image_size), "--precision", precision, "--threads", str(threads()),
                    "--warmup-steps", str(args.warmup), "--measure-steps", str(args.measure), "--repeats", "1",
                    "--profile", str(args.profile), "--output", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=3600)
    with open(out) as f:
        doc = json.load(f)
    profile = doc["profile"]
    kinds = {k["kind"]: k["forwardSeconds"] + k["backwardSeconds"] for k in profile["kinds"]}
    kinds["outside the layers"] = profile["outsideLayersSeconds"]
    return doc["throughput"]["median"], profile["stepSeconds"], kinds


def pytorch_profile(args, precision):
    done = subprocess.run([args.python, os.path.join(HERE, "pytorch_resnet50.py"), "--device", "cpu",
                           "--batch", str(args.batch), "--image-size", str(args.image_size), "--precision", precision,
                           "--warmup", str(args.warmup), "--measure", str(args.measure), "--repeats", "1",
                           "--profile", str(args.profile)],
                          check=True, capture_output=True, text=True, timeout=3600, cwd=HERE)
    line = json.loads(done.stdout.strip().splitlines()[-1])
    profile = line["profile"]
    return line["median"], profile["stepSeconds"], {k["kind"]: k["seconds"] for k in profile["kinds"]}


def threads():
    return len(os.sched_getaffinity(0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/ci")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--measure", type=int, default=3)
    parser.add_argument("--profile", type=int, default=3)
    parser.add_argument("--python", default="/usr/bin/python3", help="a python3 that imports torch and torchvision")
    args = parser.parse_args()
    worker = os.path.join(args.build, "bin", "dlbench-worker")
    with open("/proc/cpuinfo") as f:
        precisions = ["fp32"] + (["bf16"] if "avx512_bf16" in f.read() else [])

    runs = {(side, p): [] for side in ("dlbench", "pytorch") for p in precisions}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            for precision in precisions:
                runs["dlbench", precision].append(dlbench_profile(worker, args, precision, work))
                runs["pytorch", precision].append(pytorch_profile(args, precision))
                print(f"round {round_ + 1} {precision}: dlbench {runs['dlbench', precision][-1][0]:.2f}, "
                      f"PyTorch {runs['pytorch', precision][-1][0]:.2f} samples/s", file=sys.stderr)

    def median(side, precision, pick):
        return statistics.median(pick(run) for run in runs[side, precision])

    print(f"### Where a ResNet-50 step goes on the CPU, dlbench-worker --profile and PyTorch's profiler — "
          f"{datetime.date.today().isoformat()}\n")
    print(f"Machine: {machine()}, {threads()} threads each.")
    print(f"Command: `bench/cpu_profile_vs_pytorch.py --batch {args.batch} --image-size {args.image_size} "
          f"--rounds {args.rounds} --warmup {args.warmup} --measure {args.measure} --profile {args.profile}` "
          f"(rounds alternate the engines; medians over the rounds; ms a step).\n")
    for precision in precisions:
        print(f"| {precision}, batch {args.batch} | dlbench-worker | PyTorch {('bf16 autocast' if precision == 'bf16' else 'fp32')}"
              f", channels_last | PyTorch's time / dlbench's |")
        print("|---|---|---|---|")

        def row(name, ours, theirs):
            ratio = f"{theirs / ours:.2f}" if ours > 0 else "-"
            print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ratio} |")

        ours, theirs = median("dlbench", precision, lambda r: r[0]), median("pytorch", precision, lambda r: r[0])
        print(f"| samples/s without the profiler (dlbench / PyTorch {ours / theirs:.2f}) | {ours:.2f} | {theirs:.2f} | |")
        row("step under the profiler", 1e3 * median("dlbench", precision, lambda r: r[1]),
            1e3 * median("pytorch", precision, lambda r: r[1]))
        for name, ours, theirs in ROWS:
            row(name, 1e3 * median("dlbench", precision, lambda r: sum(r[2].get(k, 0.0) for k in ours)),
                1e3 * median("pytorch", precision, lambda r: sum(r[2].get(k, 0.0) for k in theirs)))
        paired = {k for _, _, theirs in ROWS for k in theirs}
        row("the rest (dlbench: outside the layers; PyTorch: optimizer, copies, fills, outside ops)",
            1e3 * median("dlbench", precision, lambda r: r[2].get("outside the layers", 0.0)),
            1e3 * median("pytorch", precision, lambda r: sum(v for k, v in r[2].items() if k not in paired)))
        print()


if __name__ == "__main__":
    main()
