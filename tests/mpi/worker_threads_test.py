#!/usr/bin/env python3
"""Ranks on one node share its cores: under mpirun -np 2 with --threads left at 0, each
dlbench-worker rank runs with half of the cores it may use (at least one), as the operator's
worker pods start them. And without --learning-rate the 2 ranks train at the model's recipe
for their global batch (2 x 2 samples), not for one rank's.

    worker_threads_test.py PATH/dlbench-worker
"""
import json
import os
import subprocess
import sys
import tempfile

worker = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    result_path = os.path.join(tmp, "result.json")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.pop("OMP_NUM_THREADS", None)
    subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", worker, "--model", "resnet50",
                    "--image-size", "32", "--batch-size", "2", "--warmup-steps", "0", "--measure-steps", "1",
                    "--repeats", "1", "--output", result_path], env=env, check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(result_path) as f:
        result = json.load(f)
expected = max(1, len(os.sched_getaffinity(0)) // 2)
threads = result["environment"]["cpuCores"]
if threads != expected:
    sys.exit(f"FAILED: each of 2 ranks used {threads} threads, expected {expected}")
rate = result["optimizer"]["learningRate"]
if rate != 0.1 * 4 / 256:  # ResNet-50's 0.1 at a global batch of 256, linearly less at 4
    sys.exit(f"FAILED: 2 ranks of batch 2 trained at learning rate {rate}, expected {0.1 * 4 / 256}")
print(f"PASSED: 2 ranks with {threads} threads each, at learning rate {rate}")
