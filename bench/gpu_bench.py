#!/usr/bin/env python3
"""What bench/gpu_resnet50.sh and bench/gpu_bert.sh share: the line a dlbench-worker result gives the
comparison, and the GPU's dense peak for an MFU.

    gpu_bench.py result RESULT_JSON BATCH PRECISION [ENGINE]   # one JSON line for the comparison's rows
                                                              # (ENGINE: dlbench unless said, as dlbench-graph)
    gpu_bench.py status STATUS_JSON ENGINE                     # one line per case of a `dlbench run` status

Imported by the scripts' tables for peaks() and rows().
"""
import json
import subprocess
import sys

import nvml_energy  # beside this script

# Dense peaks, TFLOP/s (NVIDIA datasheets, SXM parts).
PEAKS = {"H100": {"fp32": 67, "tf32": 494.7, "amp": 989.4, "bf16": 989.4},
         "H200": {"fp32": 67, "tf32": 494.7, "amp": 989.4, "bf16": 989.4},
         "A100": {"fp32": 19.5, "tf32": 156, "amp": 312, "bf16": 312}}


def peaks():
    """This machine's GPU's peaks by precision, or None for a GPU not in the table."""
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout
    return next((p for name, p in PEAKS.items() if name in gpu), None)


def rows(path):
    """The JSON lines of a results file, keyed (batch, precision, engine)."""
    lines = [json.loads(line) for line in open(path) if line.startswith("{")]
    return {(r["batch"], r["precision"], r["engine"]): r for r in lines}


def result_line(path, batch, precision, engine="dlbench"):
    with open(path) as f:
        r = json.load(f)
    t = r.get("throughput", {})
    line = {"engine": engine, "batch": batch, "precision": precision, "median": t.get("median"),
            "state": r["state"], "reason": r.get("reason", "")}
    # energyJoules: every device's joules over each reported repeat's measured steps.
    samples = r.get("globalBatchSize", 0) * r.get("methodology", {}).get("measureSteps", 0)
    per_sample = nvml_energy.joules_per_sample(r.get("energyJoules"), samples)
    if per_sample is not None:
        line["joules_per_sample"] = per_sample
    return json.dumps(line)


def status_lines(path, engine):
    """The comparison's lines for each case of a `dlbench run` status (engine: command's, say)."""
    with open(path) as f:
        run = json.load(f)
    out = []
    for r in run["status"].get("results", []):
        line = {"model": run["spec"]["model"], "engine": engine, "batch": r["case"]["batchSizePerDevice"],
                "precision": r["case"]["precision"], "median": r.get("throughput", {}).get("median"),
                "state": r["state"], "reason": r.get("reason", "")}
        if "cv" in r.get("throughput", {}):
            line["cv"] = r["throughput"]["cv"]
        out.append(json.dumps(line))
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "status":
        print("\n".join(status_lines(sys.argv[2], sys.argv[3])))
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "result":
        print(result_line(sys.argv[2], int(sys.argv[3]), sys.argv[4], *sys.argv[5:]))
    else:
        sys.exit(__doc__)
