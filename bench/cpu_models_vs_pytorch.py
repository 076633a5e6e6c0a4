#!/usr/bin/env python3
"""Training throughput of a model on the CPU, dlbench-worker next to Debian's PyTorch 1.13 in one
run: the same torchvision architecture, batch, image size, threads and SGD settings, synthetic
data, fp32 (and bf16 where the CPU has AVX512_BF16: dlbench's bf16 against PyTorch's bf16
autocast). Rounds alternate the engines (A B A B ...) so that the machine's drift hits both; each
run is its own process (warm-up steps, then timed steps: samples/s) and its peak resident set comes
from wait4()'s ru_maxrss. The medians over the rounds are reported. PyTorch runs twice a round: as
it comes, and on transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, bench_process.py),
since it frees its tensors every step and pays the page faults of fresh memory again each time.

The PyTorch models and losses are bench/pytorch_image_models.py's: InceptionV3 with its auxiliary
classifier (main + 0.4 * aux, as dlbench's), DeepLabV3+ the golden test's network at a height x
width crop (--image-size 256x512).

    bench/cpu_models_vs_pytorch.py --model inception_v3 [--build build/default] [--batch 8]
                                   [--image-size 299] [--rounds 3] [--warmup 1] [--measure 4]

Needs a python3 that imports torch and torchvision (/usr/bin/python3 with python3-torch).
Prints a markdown section for bench/RESULTS.md.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

from bench_process import PYTORCH_HUGE_PAGES, huge_pages_environment, machine, run_measured

PYTORCH_STEP = r"""
import sys, time, torch
model_name, batch, image, precision, warmup, measure, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], \
    sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
sys.path.insert(0, sys.argv[8])
import pytorch_image_models
height, _, width = image.partition("x")
height, width = int(height), int(width or height)
torch.set_num_threads(threads)
torch.manual_seed(42)
model, y, loss_of = pytorch_image_models.build(model_name, batch, height, width, "cpu")
model = model.to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, height, width).to(memory_format=torch.channels_last)
def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = loss_of(model(x), y)
    loss.backward()
    optimizer.step()
for _ in range(warmup):
    step()
start = time.perf_counter()
for _ in range(measure):
    step()
print(batch * measure / (time.perf_counter() - start))
"""


def dlbench(worker, args, precision, work):
    output = os.path.join(work, "result.json")
    _, rss = run_measured([worker, "--model", args.model, "--batch-size", str(args.batch), "--image-size",
                           str(args.image_size), "--precision", precision, "--threads", str(args.threads),
                           "--warmup-steps", str(args.warmup), "--measure-steps", str(args.measure), "--repeats", "1",
                           "--output", output])
    with open(output) as f:
        result = json.load(f)
    if result["state"] != "Succeeded":
        return None, rss, result.get("reason")
    return result["throughput"]["median"], rss, None


def pytorch(python, args, precision, huge_pages):
    out, rss = run_measured([python, "-c", PYTORCH_STEP, args.model, str(args.batch), str(args.image_size), precision,
                             str(args.warmup), str(args.measure), str(args.threads),
                             os.path.dirname(os.path.abspath(__file__))],
                            huge_pages_environment() if huge_pages else None)
    return float(out.strip().splitlines()[-1]), rss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", default="299", help="N, or HxW (deeplabv3plus: 256x512)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--measure", type=int, default=4)
    args = parser.parse_args()
    worker = os.path.join(args.build, "bin", "dlbench-worker")

    rows = {}  # configuration -> ([samples/s], [rss])
    skipped = {}
    with tempfile.TemporaryDirectory(prefix="dlbench-bench-") as work:
        for round_ in range(args.rounds):
            for precision in ("fp32", "bf16"):
                if precision in skipped:
                    continue
                speed, rss, why = dlbench(worker, args, precision, work)
                if speed is None:
                    skipped[precision] = why
                    continue
                mine = rows.setdefault(f"dlbench-worker {precision}", ([], []))
                mine[0].append(speed)
                mine[1].append(rss)
                said = [f"dlbench {mine[0][-1]:.2f}"]
                for huge_pages in (False, True):
                    speed, rss = pytorch(args.python, args, precision, huge_pages)
                    theirs = rows.setdefault(f"PyTorch 1.13 {precision}" + (" autocast" if precision == "bf16" else "") +
                                             ", channels_last" + (f", {PYTORCH_HUGE_PAGES}" if huge_pages else ""),
                                             ([], []))
                    theirs[0].append(speed)
                    theirs[1].append(rss)
                    said.append(f"PyTorch{' on huge pages' if huge_pages else ''} {speed:.2f}")
                print(f"round {round_ + 1} {precision}: " + ", ".join(said) + " samples/s", file=sys.stderr)

    print(f"### {args.model} on the CPU, dlbench-worker vs PyTorch — {datetime.date.today().isoformat()}\n")
    print(f"Machine: {machine()}, {args.threads} threads each.")
    print(f"Command: `bench/cpu_models_vs_pytorch.py --model {args.model} --batch {args.batch} --image-size "
          f"{args.image_size} --rounds {args.rounds} --warmup {args.warmup} --measure {args.measure}` "
          f"(rounds alternate the engines; medians over the rounds).\n")
    print(f"| configuration | samples/s at batch {args.batch}, median (min–max) | peak RSS GiB |")
    print("|---|---|---|")
    for name, (speeds, rss) in rows.items():
        print(f"| {name} | {statistics.median(speeds):.2f} ({min(speeds):.2f}–{max(speeds):.2f}) | "
              f"{statistics.median(rss) / 2**30:.2f} |")
    print()
    for precision in ("fp32", "bf16"):
        mine = [v for k, v in rows.items() if k == f"dlbench-worker {precision}"]
        for name, theirs in rows.items():
            if mine and name.startswith(f"PyTorch 1.13 {precision}"):
                ratio = statistics.median(mine[0][0]) / statistics.median(theirs[0])
                memory = statistics.median(mine[0][1]) / statistics.median(theirs[1])
                on = " on huge pages" if PYTORCH_HUGE_PAGES in name else ", as it comes"
                print(f"- {precision}: dlbench-worker {ratio:.2f}× PyTorch's speed{on}, {memory:.2f}× its peak RSS.")
    for precision, why in skipped.items():
        print(f"- {precision}: not run here ({why}).")


if __name__ == "__main__":
    main()
