#!/usr/bin/env python3
"""A case of more than one rank says where its scaling goes: after its repeats the worker times
the whole gradient reduced alone (bus bandwidth as nccl-tests reports it) and steps with and
without their reduction, and the result's `communication` holds what it timed. AlexNet at 64 px
carries 61 million parameters (244 MB of gradient) for little arithmetic, so on two CPU ranks its
reduction is most of a step: exposed, and the steps without it faster by much of the reduction's
own time. One rank reduces nothing and says nothing of it.

    communication_test.py PATH/dlbench-worker
"""
import json
import os
import subprocess
import sys
import tempfile

worker = sys.argv[1]
env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
case = ["--model", "alexnet", "--image-size", "64", "--batch-size", "1", "--warmup-steps", "1", "--measure-steps", "10",
        "--repeats", "1", "--threads", "1", "--bucket-mb", "16"]


def run(ranks):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        launcher = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] if ranks > 1 else []
        done = subprocess.run(launcher + [worker, *case, "--output", path], env=env, timeout=600, capture_output=True,
                              text=True)
        if done.returncode != 0:
            sys.exit(f"FAILED: {ranks} ranks exited {done.returncode}: {done.stderr[-2000:]}")
        with open(path) as f:
            return json.load(f), done.stderr


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


alone, _ = run(1)
check(alone["state"] == "Succeeded", f"one rank: {alone.get('message')}")
check("communication" not in alone, "one rank reduces nothing, yet its result has a communication block")

result, log = run(2)
check(result["state"] == "Succeeded", f"two ranks: {result.get('message')}")
c = result.get("communication")
check(c is not None, "two ranks' result has no communication block")
# The whole flat gradient, its padding included: a third of the parameters' bytes in the result's
# memory block (values, gradients and SGD's momentum, each one flat fp32 buffer).
check(3 * c["gradientBytes"] == result["memory"]["parameterBytes"],
      f"gradientBytes {c['gradientBytes']} is not a third of the parameters' {result['memory']['parameterBytes']}")
check(c["gradientBytes"] > 240e6, f"AlexNet's gradient is 244 MB, not {c['gradientBytes']} bytes")
# 16 MiB buckets are cut at whole parameters: AlexNet's first two linear weights (151 and 67 MB)
# are a bucket each, the third (16 MB) with or without a neighbour, the convolutions another.
check(4 <= c["buckets"] <= 8, f"{c['buckets']} buckets of 16 MiB")
# nccl-tests' bus bandwidth on 2 ranks: 2 (2 - 1) / 2 = 1 times the data over the time.
expected = c["gradientBytes"] / c["allreduceSeconds"]
check(abs(c["busBandwidth"] - expected) <= 1e-9 * expected, f"busBandwidth {c['busBandwidth']} against {expected}")
check(abs(c["exposedShare"] - max(0.0, 1 - c["stepSecondsWithoutReduction"] / c["stepSeconds"])) < 1e-12,
      "exposedShare is not 1 - without / with")
# The reduction is most of such a step: the steps without it are faster by a good part of it.
check(c["stepSeconds"] - c["stepSecondsWithoutReduction"] > 0.3 * c["allreduceSeconds"],
      f"steps with the reduction {c['stepSeconds']:.4f} s, without {c['stepSecondsWithoutReduction']:.4f} s, the "
      f"reduction alone {c['allreduceSeconds']:.4f} s: it should show in the step")
check(c["exposedShare"] > 0.2, f"exposedShare {c['exposedShare']}")
check("gradient reduction:" in log and "% of the step" in log, "rank 0 did not say what it timed")
print(f"PASSED: 2 ranks reduce {c['gradientBytes'] / 1e6:.0f} MB in {c['buckets']} buckets in "
      f"{c['allreduceSeconds'] * 1e3:.1f} ms (bus bandwidth {c['busBandwidth'] / 1e9:.2f} GB/s); a step "
      f"{c['stepSeconds'] * 1e3:.1f} ms with it, {c['stepSecondsWithoutReduction'] * 1e3:.1f} ms without "
      f"({100 * c['exposedShare']:.0f}% exposed)")
