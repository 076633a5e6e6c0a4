#!/usr/bin/env python3
"""One of the CPU backend's developer switches (DLBENCH_CPU_CONV_BACKWARD_DATA, ...) timed inside
a whole model, layer by layer: `dlbench-worker --profile` with each value in turn, round after
round (A, B, A, B, ...), so that the machine's drift falls on both. Prints the step's median for
each value and, for the layer kind asked, each layer's median backward and forward time.
Whole runs measured one after the other (bench/cpu_switch_compare.sh) cannot show a few percent
on a shared VM; alternating rounds of the same layers can.

    bench/cpu_switch_profile.py --variable DLBENCH_CPU_CONV_BACKWARD_DATA --values primitive,auto \\
        --model vgg16 --batch 8 --image-size 224 --precision fp32 --rounds 4 [--build build/ci] [--kind Conv2d]

Extra environment (DNNL_MAX_CPU_ISA=AVX2, say) applies to every round.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys


def profile(worker, args, value):
    env = dict(os.environ, **{args.variable: value})
    command = [worker, "--model", args.model, "--backend", "cpu", "--batch-size", str(args.batch),
               "--precision", args.precision, "--warmup-steps", "1", "--measure-steps", "1", "--repeats", "1",
               "--extra-repeats", "0", "--profile", str(args.steps)]
    command += ["--sequence-length" if args.model == "bert-base" else "--image-size", args.image_size]
    p = subprocess.run(command, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(command)} with {args.variable}={value} failed:\n{p.stderr[-2000:]}")
    result = json.loads(p.stdout)
    options = result["environment"].get("backendOptions", {})
    return result["profile"], options


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variable", required=True)
    parser.add_argument("--values", required=True, help="two or more, comma-separated; the first is the baseline")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--image-size", required=True, help="N, HxW, or a sequence length for bert-base")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="profiled steps a run")
    parser.add_argument("--kind", default="Conv2d", help="the layer kind to list layer by layer")
    parser.add_argument("--build", default="build/ci")
    args = parser.parse_args()
    worker = os.path.join(args.build, "bin", "dlbench-worker")
    values = args.values.split(",")
    steps = collections.defaultdict(list)
    layers = collections.defaultdict(lambda: collections.defaultdict(list))
    options = {}
    for _ in range(args.rounds):
        for value in values:
            p, options[value] = profile(worker, args, value)
            steps[value].append(p["stepSeconds"] * 1e3)
            for layer in p["layers"]:
                if layer.get("kind") == args.kind:
                    layers[layer["name"]][value].append((layer["forwardSeconds"] * 1e3, layer["backwardSeconds"] * 1e3))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"{args.model} batch {args.batch} {args.image_size} {args.precision}, {args.rounds} rounds of "
          f"{args.steps} profiled steps, {cpu}, {os.cpu_count()} CPUs; {args.variable}")
    base = statistics.median(steps[values[0]])
    for value in values:
        step = statistics.median(steps[value])
        print(f"  {value:>10}: step {step:8.1f} ms (median of {', '.join(f'{s:.1f}' for s in steps[value])}), "
              f"{base / step:.3f}x the baseline's speed; backendOptions {options[value]}")
    print(f"  {args.kind} layers, median backward ms ({' | '.join(values)}) and forward ms:")
    totals = [0.0] * len(values)
    for name in layers:
        backward = [statistics.median(b for _, b in layers[name][v]) for v in values]
        forward = [statistics.median(f for f, _ in layers[name][v]) for v in values]
        totals = [t + b for t, b in zip(totals, backward)]
        print(f"    {name:34} " + " | ".join(f"{b:8.2f}" for b in backward) + "   fwd " +
              " | ".join(f"{f:7.2f}" for f in forward) + f"   {backward[0] / backward[-1]:.2f}x")
    print(f"    {'all':34} " + " | ".join(f"{t:8.2f}" for t in totals) + f"   {totals[0] / totals[-1]:.3f}x")


if __name__ == "__main__":
    main()
