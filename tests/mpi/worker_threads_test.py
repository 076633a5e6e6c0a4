#!/usr/bin/env python3
"""Ranks on one node share its cores: under mpirun -np 2 with --threads left at 0, each
dlbench-worker rank runs with half of the cores it may use (at least one), as the operator's
worker pods start them.

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
print(f"PASSED: 2 ranks with {threads} threads each")
