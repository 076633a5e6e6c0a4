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
`dlbench run` has it. Then one rank alone loses its data: it fails at once, its first repeat kept.

Then a rank killed from outside (SIGKILL, as the OOM killer sends): mpirun stops the others with
SIGTERM, and rank 0 writes what it measured, reason Stopped, the launcher adding mpirun's lines
(rank 0's deputy, rank 1 here, alive too); rank 0 killed, its deputy writes them, the third rank
ending after it; one rank stopped alone keeps its repeats the same way.

Last, a failure no other rank learns of: a step that throws on one rank (DLBENCH_INJECT_FAILURE,
as a device error inside a step would), while the others wait in the step's allreduce. The failing
rank writes the case's result, or rank 0 does where it failed itself, and ends the job by
MPI_Abort; the result names the rank and keeps the repeats before. Before, a rank other than 0
left no result at all: the abort ended rank 0, the only writer.

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
# Each repeat ~3 s on two cores (15 steps): a job that went on without the data would succeed,
# about 90 s later; one that fails does so at the end of the repeat its data went away in.
case = ["--model", "resnet50", "--data", "imagefolder", "--image-size", "32", "--batch-size", "2",
        "--warmup-steps", "1", "--measure-steps", "15", "--repeats", "30", "--threads", "1", "--decode-threads", "1"]
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


def unagreed_failure(tmp, failing_rank, to_stdout):
    """A rank's step fails where no other rank learns of it (DLBENCH_INJECT_FAILURE, as a device
    error would): it writes its result, or rank 0 does, and ends the job; rank 0 would otherwise
    wait in the step's allreduce until the case's timeout. Its repeats before are kept."""
    result_path = os.path.join(tmp, f"unagreed{failing_rank}.json")
    termination_log = os.path.join(tmp, "termination-log")
    output = [] if to_stdout else ["--output", result_path]
    launcher = [dlbench, "launch", "--termination-log", termination_log, "--"] if to_stdout else []
    # Steps 1-6 the first repeat, 7-12 the second: the third repeat's third step fails.
    synthetic = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
                 "--measure-steps", "5", "--repeats", "30", "--threads", "1"]
    command = launcher + ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", worker, *synthetic, *output]
    what = f"rank {failing_rank}'s step failed alone ({'stdout' if to_stdout else '--output'})"
    started = time.monotonic()
    try:
        done = subprocess.run(command, env={**env, "DLBENCH_INJECT_FAILURE": f"{failing_rank}:15"},
                              capture_output=True, text=True, timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED: {what}, and the job still ran {BOUND_SECONDS} s later")
    took = time.monotonic() - started
    check(done.returncode != 0, f"{what}, yet the job exited 0")
    check(f"dlbench-worker rank {failing_rank}: ending the job" in done.stderr, f"{what}: {done.stderr[-2000:]}")
    text = open(termination_log).read() if to_stdout else open(result_path).read()
    check(text.startswith("{"), f"{what}: no valid result: {text[:1000]}")
    result = json.loads(text)
    check(result["state"] == "Failed" and result["reason"] == "WorkerError" and
          result["message"] == ("rank 1: " if failing_rank == 1 else "") +
          "a failure injected by DLBENCH_INJECT_FAILURE in step 15",
          f"{what}: {result['state']} {result.get('reason')}: {result.get('message')}")
    repeats = result.get("throughput", {}).get("repeats", [])
    check(len(repeats) == 2 and len(result.get("lossAfterRepeats", [])) == 2,
          f"{what}: the two repeats before the failure are not kept: {repeats}, {result.get('lossAfterRepeats')}")
    check("stability" not in result and "communication" not in result, f"{what}: a failed case's repeats were judged")
    print(f"{what}: the job ended in {took:.1f} s, rank {failing_rank}'s message in the result, 2 repeats kept")


def wait_for(log_path, text, job, what):
    started = time.monotonic()
    while text not in open(log_path).read():
        check(job.poll() is None, f"{what}: the job ended before {text!r}: {open(log_path).read()[-2000:]}")
        check(time.monotonic() - started < 300, f"{what}: no {text!r} within 300 s")
        time.sleep(0.1)


def rank_killed(tmp, victim, ranks, to_stdout):
    """A rank ended from outside (the OOM killer's SIGKILL, a node lost): mpirun stops the others
    with SIGTERM, and rank 0 writes the repeats it measured as a Failed result, reason Stopped,
    which the launcher gives the job's last lines (mpirun names the rank that ended). Before, the
    job ended with no result. Rank 0 killed, its deputy (rank 1 on one host) writes them, naming
    itself; before, they were lost. Both stopped (a third rank killed), rank 0's is the case's."""
    what = f"rank {victim} of {ranks} killed ({'stdout' if to_stdout else '--output'})"
    termination_log, log_path = os.path.join(tmp, "termination-log"), os.path.join(tmp, "killed.log")
    result_path = os.path.join(tmp, f"killed{victim}.json")
    synthetic = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
                 "--measure-steps", "5", "--repeats", "30", "--threads", "1"] + ([] if to_stdout else ["--output", result_path])
    launcher = [dlbench, "launch", "--termination-log", termination_log, "--"] if to_stdout else []
    command = launcher + ["mpirun", "--oversubscribe", "--bind-to", "none"]
    # The mark names this run's folder: a job of another run of this test on the host is not ours.
    mark = f"DLBENCH_TEST_RANK_TO_KILL={tmp}"
    for rank in range(ranks):
        marked = ["env", mark] if rank == victim else []
        command += ([":"] if rank > 0 else []) + ["-np", "1", *marked, worker, *synthetic]
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
        wait_for(log_path, "repeat 2/", job, what)
        victims = [pid for pid in os.listdir("/proc") if pid.isdigit() and
                   mark.encode() + b"\0" in open_or_empty(f"/proc/{pid}/environ") and
                   open_or_empty(f"/proc/{pid}/comm").startswith(b"dlbench-worker")]
        check(len(victims) == 1, f"{what}: its process not found: {victims}")
        os.kill(int(victims[0]), 9)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            sys.exit(f"FAILED: {what}, and the job still ran 60 s later")
    check(job.returncode != 0, f"{what}, yet the job exited 0")
    text = open(termination_log if to_stdout else result_path).read()
    check(text.startswith("{"), f"{what}: no valid result: {text[:1000]}")
    result = json.loads(text)
    repeats = result.get("throughput", {}).get("repeats", [])
    writer = "rank 1: " if victim == 0 else ""
    check(result["state"] == "Failed" and result["reason"] == "Stopped" and
          result["message"].startswith(writer + "stopped by SIGTERM after ") and
          (not to_stdout or "exited on signal 9" in result["message"]),
          f"{what}: {result['state']} {result.get('reason')}: {result.get('message')}")
    check(2 <= len(repeats) < 30 and len(result.get("lossAfterRepeats", [])) == len(repeats),
          f"{what}: the repeats measured are not kept: {repeats}")
    # Where rank 0 wrote, Open MPI kills the others once it has ended, and the deputy mostly with them.
    log_text = open(log_path).read()
    deputy_wrote = "dlbench-worker rank 1: stopped by SIGTERM" in log_text
    check(deputy_wrote or victim != 0, f"{what}: rank 0's deputy (rank 1) did not say it wrote: {log_text[-2000:]}")
    if to_stdout:
        os.remove(termination_log)
    else:
        os.remove(result_path)
    keeper = "rank 1, rank 0's deputy," if victim == 0 else "rank 0"
    print(f"{what}: {keeper} kept {len(repeats)} repeats, Stopped"
          + (f"; the launcher added why: {result['message'].splitlines()[-1]}" if to_stdout else ""))


def stopped_alone(tmp):
    """One rank stopped by SIGTERM (a pod deleted) keeps its repeats in --output and exits 143; stopped
    before its first repeat, it has nothing to keep and ends by the signal, as before."""
    result_path, log_path = os.path.join(tmp, "stopped.json"), os.path.join(tmp, "stopped.log")
    synthetic = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
                 "--measure-steps", "5", "--repeats", "30", "--threads", "1", "--output", result_path]
    with open(log_path, "w") as log:
        job = subprocess.Popen([worker, *synthetic], env=env, stdout=subprocess.DEVNULL, stderr=log)
        wait_for(log_path, "repeat 1/", job, "one rank stopped")
        job.send_signal(15)
        job.wait(timeout=60)
    check(job.returncode == 143, f"one rank stopped: exit {job.returncode}")
    result = json.load(open(result_path))
    check(result["reason"] == "Stopped" and len(result["throughput"]["repeats"]) >= 1,
          f"one rank stopped: {result.get('reason')}: {result.get('message')}")
    os.remove(result_path)
    early = subprocess.Popen([worker, *synthetic], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # parsing its options, building the model: no repeat yet
    early.send_signal(15)
    early.wait(timeout=60)
    check(early.returncode == -15 and not os.path.exists(result_path),
          f"stopped before its first repeat: exit {early.returncode}, a result written: {os.path.exists(result_path)}")
    print("one rank stopped: its repeats kept, exit 143; stopped before any, ended by the signal")


def open_or_empty(path):
    try:
        return open(path, "rb").read()
    except OSError:
        return b""


def injection_refused_or_idle():
    """A malformed value is a usage error naming the variable; a rank the job lacks (the one-rank
    baseline a BenchmarkRun's worker.env also reaches) fails nothing, and the worker says so."""
    short = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
             "--measure-steps", "1", "--repeats", "1", "--threads", "1"]
    wrong = subprocess.run([worker, *short], env={**env, "DLBENCH_INJECT_FAILURE": "1"}, capture_output=True, text=True,
                           timeout=60)
    check(wrong.returncode == 2 and 'DLBENCH_INJECT_FAILURE: "1" is not RANK:STEP' in wrong.stderr,
          f"a malformed DLBENCH_INJECT_FAILURE: exit {wrong.returncode}: {wrong.stderr[-500:]}")
    idle = subprocess.run([worker, *short], env={**env, "DLBENCH_INJECT_FAILURE": "1:1"}, capture_output=True, text=True,
                          timeout=120)
    check(idle.returncode == 0 and "names rank 1; this job has 1 rank: nothing is injected" in idle.stderr,
          f"rank 1 named in a one-rank job: exit {idle.returncode}: {idle.stderr[-500:]}")
    print("DLBENCH_INJECT_FAILURE: a malformed value refused, a rank the job lacks left alone")


with tempfile.TemporaryDirectory() as tmp:
    injection_refused_or_idle()
    for victim, ranks, to_stdout in ((2, 3, True), (0, 3, True), (0, 2, False)):
        rank_killed(tmp, victim, ranks, to_stdout)
    stopped_alone(tmp)
    for failing_rank, to_stdout in ((1, True), (1, False), (0, False)):
        unagreed_failure(tmp, failing_rank, to_stdout)
    node_without_the_precision(tmp)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "input", "make_dataset.py"), os.path.join(tmp, "data"),
                    "--classes", "2", "--per-class", "24"], check=True, stdout=subprocess.DEVNULL)
    lose_copy(tmp, 1, to_stdout=True)
    lose_copy(tmp, 0, to_stdout=False)
    lose_data_alone(tmp)
print("PASSED: one rank's failure, in setup or inside the steps, fails the case on every rank, with its reason")
