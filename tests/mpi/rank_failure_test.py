#!/usr/bin/env python3
"""One rank's failure reaches every rank: the case fails with that rank's reason, and no rank is
left waiting in a collective for it.

First, what a node can run: rank 0 runs amp with fp16 emulated, rank 1 refuses amp on the CPU, as a
node without a precision among nodes with it does. Before, rank 0 waited in the weights' setup
for a rank that had left, with no result, until the job was killed.

Then a rank whose data goes away inside the timed steps (its node's disk, its volume).

Two ranks each read their own copy of one ImageFolder data set (mpirun's MPMD form gives each its
own --data-path, as nodes with local copies have). Once the first repeat is reported, one copy is
deleted. The failing rank keeps step on its last batch until the end of that repeat, where the
ranks agree; rank 0 then writes a Failed result with reason DataUnavailable naming the rank, and
the job ends. Before, the job waited until it was killed, with no result (rank 1's copy), or with
rank 0's result written and then the wait (rank 0's copy). The repeats that ended before the
failure stay in the Failed result, as a diverged case's do. The first job runs as the operator's
launcher runs it (`dlbench launch -- mpirun ...`, the result on stdout), which validates the
document and writes it to the termination log; the second writes it with --output, as
`dlbench run` has it. Last, one rank alone loses its data: it fails at once, its first repeat kept.

    rank_failure_test.py PATH/bin   (dlbench-worker and dlbench)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
worker = os.path.join(sys.argv[1], "dlbench-worker")
dlbench = os.path.join(sys.argv[1], "dlbench")
env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Each repeat ~2 s on two cores: a job that went on without the data would succeed, later.
case = ["--model", "resnet50", "--data", "imagefolder", "--image-size", "32", "--batch-size", "2",
        "--warmup-steps", "1", "--measure-steps", "40", "--repeats", "30", "--threads", "1", "--decode-threads", "1"]
BOUND_SECONDS = 240  # from the deletion to the job's end; the wait it replaces never ended


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def delete_after_first_repeat(job, log_path, data, what):
    """Deletes `data` once `job` has reported its first repeat; the seconds from then to its end."""
    started = time.monotonic()
    while "repeat 1/" not in open(log_path).read():
        check(job.poll() is None, f"{what}: the job ended before its first repeat: {open(log_path).read()[-2000:]}")
        check(time.monotonic() - started < 300, f"{what}: no repeat reported within 300 s")
        time.sleep(0.2)
    shutil.rmtree(data)
    deleted = time.monotonic()
    try:
        job.wait(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        sys.exit(f"FAILED: {what}: the job still ran {BOUND_SECONDS} s later: {open(log_path).read()[-2000:]}")
    return time.monotonic() - deleted


def lose_copy(tmp, lost_rank, to_stdout):
    copies = [os.path.join(tmp, f"node{r}") for r in range(2)]
    for c in copies:
        shutil.rmtree(c, ignore_errors=True)
        shutil.copytree(os.path.join(tmp, "data"), c)
    result_path = os.path.join(tmp, f"lost{lost_rank}.json")
    output = [] if to_stdout else ["--output", result_path]
    termination_log = os.path.join(tmp, "termination-log")
    launcher = [dlbench, "launch", "--termination-log", termination_log, "--"] if to_stdout else []
    command = launcher + ["mpirun", "--oversubscribe", "--bind-to", "none"]
    for r in range(2):
        command += ["-np", "1", worker, *case, *output, "--data-path", copies[r]] + ([":"] if r == 0 else [])
    log_path = os.path.join(tmp, f"lost{lost_rank}.log")
    with open(log_path, "w") as log, open(os.path.join(tmp, "stdout"), "w") as out:
        job = subprocess.Popen(command, env=env, stdout=out, stderr=log)
        took = delete_after_first_repeat(job, log_path, copies[lost_rank], f"rank {lost_rank}'s data gone")
    log = open(log_path).read()
    # The launcher writes the document it validated, compacted, or why it found none.
    text = open(termination_log).read() if to_stdout else open(result_path).read()
    check(job.returncode != 0, f"rank {lost_rank}'s data gone, yet the job exited 0")
    check(text.startswith("{"), f"no valid result: {text[:1000]}")
    result = json.loads(text)
    check(result["state"] == "Failed" and result["reason"] == "DataUnavailable",
          f"rank {lost_rank}'s data gone: {result['state']} {result.get('reason')}: {result.get('message')}")
    message = result["message"]
    check(f"of rank {lost_rank}'s share of {copies[lost_rank]} can be decoded" in message, f"message: {message}")
    check(message.startswith("rank 1: ") == (lost_rank == 1), f"the failed rank is not named as it should be: {message}")
    check(f"dlbench-worker rank {lost_rank}: none of the" in log and "until the ranks agree" in log,
          f"rank {lost_rank} did not say it keeps step: {log[-2000:]}")
    check("MPI_ABORT" not in log, f"an agreed failure ended the job by MPI_Abort: {log[-2000:]}")
    repeats = result.get("throughput", {}).get("repeats", [])
    check(1 <= len(repeats) < 30, f"the repeats before the failure are not kept: {repeats}")
    check(len(result.get("lossAfterRepeats", [])) == len(repeats),
          f"{len(result.get('lossAfterRepeats', []))} losses for {len(repeats)} repeats kept")
    check("stability" not in result and "communication" not in result, "a failed case's repeats were judged")
    print(f"rank {lost_rank}'s data gone: the job ended {took:.1f} s later, {len(repeats)} repeats kept, "
          f"{result['reason']}: {message[:120]}")


def node_without_the_precision(tmp):
    amp = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1", "--measure-steps",
           "2", "--repeats", "1", "--threads", "1", "--precision", "amp"]
    result_path = os.path.join(tmp, "mixed.json")
    command = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1", "env", "DLBENCH_CPU_FP16=emulated", worker,
               *amp, "--output", result_path, ":", "-np", "1", worker, *amp, "--output", result_path]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED: rank 1 refused amp, and the job still ran {BOUND_SECONDS} s later")
    check(done.returncode != 0, "rank 1 refused amp, yet the job exited 0")
    result = json.load(open(result_path))
    check(result["state"] == "Failed" and result["reason"] == "Unsupported" and
          result["message"].startswith("rank 1: --precision amp on --backend cpu: "),
          f"rank 1 refused amp: {result['state']} {result.get('reason')}: {result.get('message')}")
    print(f"a node without amp among nodes with it: {result['reason']}: {result['message'][:80]}")


def lose_data_alone(tmp):
    """One rank fails at once, inside the repeat; the repeats before are kept all the same."""
    copy = os.path.join(tmp, "alone")
    shutil.copytree(os.path.join(tmp, "data"), copy)
    result_path, log_path = os.path.join(tmp, "alone.json"), os.path.join(tmp, "alone.log")
    with open(log_path, "w") as log:
        job = subprocess.Popen([worker, *case, "--data-path", copy, "--output", result_path], stderr=log,
                               stdout=subprocess.DEVNULL)
        delete_after_first_repeat(job, log_path, copy, "one rank's data gone")
    result = json.load(open(result_path))
    repeats = result.get("throughput", {}).get("repeats", [])
    check(result["reason"] == "DataUnavailable" and "of rank 0's share of" in result["message"],
          f"one rank's data gone: {result['state']} {result.get('reason')}: {result.get('message')}")
    check(1 <= len(repeats) < 30 and len(result["lossAfterRepeats"]) == len(repeats),
          f"one rank's repeats before the failure: {repeats}, losses {result.get('lossAfterRepeats')}")
    print(f"one rank's data gone: {len(repeats)} repeats kept, {result['reason']}")


with tempfile.TemporaryDirectory() as tmp:
    node_without_the_precision(tmp)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "input", "make_dataset.py"), os.path.join(tmp, "data"),
                    "--classes", "2", "--per-class", "24"], check=True, stdout=subprocess.DEVNULL)
    lose_copy(tmp, 1, to_stdout=True)
    lose_copy(tmp, 0, to_stdout=False)
    lose_data_alone(tmp)
print("PASSED: one rank's failure, in setup or inside the steps, fails the case on every rank, with its reason")
