#!/usr/bin/env python3
"""Peak memory and speed of ResNet-50 training on the CPU: dlbench-worker (fp32 with memory
planned by lifetime and with --memory-plan none; bf16 where the CPU has AVX512_BF16) next to
Debian's PyTorch (fp32 channels_last, and bf16 autocast), all in one run, at two batch sizes,
on the same threads.

Each configuration runs as its own process; its peak resident set comes from wait4()'s
ru_maxrss. The per-sample figure is the slope between the two batches, (RSS(b2) - RSS(b1)) /
(b2 - b1): what one more sample costs, free of the fixed part (libraries, weights).

    bench/cpu_memory_vs_pytorch.py [--build build/default] [--batches 8 16] [--measure 3]

Needs a python3 that imports torch and torchvision (/usr/bin/python3 with python3-torch).
Prints a markdown section for bench/RESULTS.md.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

from bench_process import machine, run_measured

PYTORCH_STEP = r"""
import sys, time, torch, torchvision
batch, precision, measure, threads = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
torch.manual_seed(42)
model = torchvision.models.resnet50().to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, 224, 224).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,))
def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
step()  # warm-up
start = time.perf_counter()
for _ in range(measure):
    step()
print(batch * measure / (time.perf_counter() - start))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--batches", type=int, nargs=2, default=[8, 16])
    parser.add_argument("--measure", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--python", default="/usr/bin/python3", help="a python3 with torch and torchvision")
    args = parser.parse_args()
    worker = os.path.join(args.build, "bin", "dlbench-worker")
    if not os.access(worker, os.X_OK):
        sys.exit(f"no {worker}: build first (cmake --workflow --preset programs)")

    configs = [
        ("dlbench-worker fp32, memory planned", "dlbench", ["--memory-plan", "lifetime"], "fp32"),
        ("dlbench-worker fp32, --memory-plan none", "dlbench", ["--memory-plan", "none"], "fp32"),
        ("PyTorch 1.13 fp32, channels_last", "pytorch", [], "fp32"),
        ("PyTorch 1.13 bf16 autocast, channels_last", "pytorch", [], "bf16"),
    ]
    devices = subprocess.run([worker, "--list-devices"], capture_output=True, text=True).stdout
    if "bf16" in devices.split("\n")[0]:
        configs.insert(2, ("dlbench-worker bf16, memory planned", "dlbench", ["--memory-plan", "lifetime"], "bf16"))
    else:
        # Without AVX512_BF16 PyTorch's autocast emulates bf16 (on an AVX2 EPYC, ResNet-50 at
        # batch 8 had not done 7 steps after 7 minutes): not a bf16 measurement, and
        # dlbench-worker refuses it for that reason.
        configs = [c for c in configs if c[3] != "bf16"]
        print(f"(no bf16 rows: {devices.splitlines()[0]})", file=sys.stderr)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for batch in args.batches:
            for name, engine, extra, precision in configs:
                if engine == "dlbench":
                    result = os.path.join(tmp, "r.json")
                    _, rss = run_measured([worker, "--model", "resnet50", "--image-size", "224", "--batch-size",
                                           str(batch), "--warmup-steps", "1", "--measure-steps", str(args.measure),
                                           "--repeats", "1", "--threads", str(args.threads), "--precision", precision,
                                           "--output", result] + extra)
                    doc = json.load(open(result))
                    speed = doc["throughput"]["median"]
                    planned = doc["memory"]["activationBytes"]
                else:
                    out, rss = run_measured([args.python, "-c", PYTORCH_STEP, str(batch), precision, str(args.measure),
                                             str(args.threads)])
                    speed = float(out.strip().splitlines()[-1])
                    planned = None
                rows.setdefault(name, {})[batch] = (speed, rss, planned)

    b1, b2 = args.batches
    gib = 1 << 30
    print(f"### ResNet-50 training memory on the CPU, dlbench-worker vs PyTorch — {datetime.date.today()}")
    print()
    print(f"Machine: {machine()}, {args.threads} threads each. Command: "
          f"`bench/cpu_memory_vs_pytorch.py --build {args.build} --batches {b1} {b2} --measure {args.measure}` "
          f"(warm-up 1, {args.measure} timed steps; peak RSS from wait4).")
    print()
    print(f"| configuration | img/s at {b2} | peak RSS at {b1} GiB | peak RSS at {b2} GiB | MiB per extra sample | "
          f"dlbench's planned activations at {b2} GiB |")
    print("|---|---|---|---|---|---|")
    for name, _, _, _ in configs:
        r = rows[name]
        slope = (r[b2][1] - r[b1][1]) / (b2 - b1) / (1 << 20)
        planned = f"{r[b2][2] / gib:.2f}" if r[b2][2] is not None else "—"
        print(f"| {name} | {r[b2][0]:.2f} | {r[b1][1] / gib:.2f} | {r[b2][1] / gib:.2f} | {slope:.0f} | {planned} |")
    print()
    for precision, ours, theirs in [("fp32", "dlbench-worker fp32, memory planned", "PyTorch 1.13 fp32, channels_last"),
                                    ("bf16", "dlbench-worker bf16, memory planned",
                                     "PyTorch 1.13 bf16 autocast, channels_last")]:
        if ours in rows:
            speed = rows[ours][b2][0] / rows[theirs][b2][0]
            memory = rows[ours][b2][1] / rows[theirs][b2][1]
            print(f"- {precision} at batch {b2}: dlbench-worker {speed:.2f}× PyTorch's speed, {memory:.2f}× its peak RSS.")


if __name__ == "__main__":
    main()
