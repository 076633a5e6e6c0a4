#!/usr/bin/env python3
"""The launcher's deadline under real mpirun: `dlbench launch --stop-after S -- mpirun -np 2
dlbench-worker ...`, as the operator's launcher Job runs a case, stops mpirun with SIGTERM S
seconds in; mpirun stops both ranks, rank 0 writes the repeats it measured (Stopped) through
mpirun's stdout, and the launcher's termination message is a valid Timeout result that keeps them.
Before, the operator's deadline came with nothing measured: the launcher, PID 1 in its container,
ignored the Job's SIGTERM, and the kubelet's SIGKILL then lost every repeat.

Then a SIGTERM to the launcher itself (the Job's activeDeadlineSeconds, a pod's deletion) goes the
same way, its result Stopped.

    launcher_deadline_test.py PATH/bin   (dlbench-worker and dlbench)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

worker = os.path.join(os.path.abspath(sys.argv[1]), "dlbench-worker")
dlbench = os.path.join(os.path.abspath(sys.argv[1]), "dlbench")
env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
# A thousand repeats outlast any deadline here; each is a few tenths of a second on two cores.
job = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS", worker,
       "--model", "resnet50", "--image-size", "32", "--batch-size", "1", "--warmup-steps", "1",
       "--measure-steps", "3", "--repeats", "1000", "--threads", "1"]
STOP_AFTER = 20
GRACE = 15  # dlbench launch's SIGKILL comes this long after its SIGTERM


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def result(tmp, log_path):
    text = open(os.path.join(tmp, "message")).read()
    try:
        return json.loads(text)
    except ValueError:
        sys.exit(f"FAILED: the termination message is no document: {text[:2000]}\n{open(log_path).read()[-2000:]}")


def deadline(tmp):
    log_path = os.path.join(tmp, "deadline.log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.call([dlbench, "launch", "--termination-log", "message", "--stop-after", str(STOP_AFTER),
                                "--case-timeout", "300", "--"] + job, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                               stderr=log, timeout=STOP_AFTER + GRACE + 60)
    took = time.monotonic() - started
    check(took < STOP_AFTER + GRACE + 5, f"the launcher took {took:.0f} s, past its deadline and grace")
    check(code != 0, "a case stopped at its deadline is no success")
    d = result(tmp, log_path)
    kept = len(d.get("throughput", {}).get("repeats", []))
    print(f"deadline: {d['state']} {d.get('reason')}: {d.get('message')} ({took:.1f} s, exit {code})")
    check(d["state"] == "Failed" and d.get("reason") == "Timeout", f"not a Timeout: {d.get('reason')}")
    check(kept >= 1, "the repeats rank 0 measured before the stop were lost")
    check(d["message"] == "no result within limits.caseTimeoutSeconds (300 s); the "
          f"{kept} {'repeat measured before is' if kept == 1 else 'repeats measured before are'} kept, unjudged",
          f"the message: {d['message']}")
    check(d["devices"] == 2 and d["case"]["gpusPerNode"] == 2, "the case is the two-rank job's")


def sigterm(tmp):
    log_path = os.path.join(tmp, "sigterm.log")
    with open(log_path, "w") as log:
        launcher = subprocess.Popen([dlbench, "launch", "--termination-log", "message", "--"] + job, cwd=tmp, env=env,
                                    stdout=subprocess.DEVNULL, stderr=log)
    started = time.monotonic()
    while "repeat 1/" not in open(log_path).read():
        check(launcher.poll() is None, f"the job ended before its first repeat: {open(log_path).read()[-2000:]}")
        check(time.monotonic() - started < 300, "no repeat reported within 300 s")
        time.sleep(0.2)
    launcher.send_signal(signal.SIGTERM)
    try:
        code = launcher.wait(timeout=GRACE + 30)
    except subprocess.TimeoutExpired:
        launcher.kill()
        sys.exit(f"FAILED: the launcher outlived its SIGTERM: {open(log_path).read()[-2000:]}")
    d = result(tmp, log_path)
    print(f"SIGTERM: {d['state']} {d.get('reason')}: {d.get('message')[:300]} (exit {code})")
    check(d.get("reason") == "Stopped", f"not Stopped: {d.get('reason')}")
    check(len(d["throughput"]["repeats"]) >= 1, "the repeats were lost")
    check("dlbench launch: SIGTERM: stopping the command" in open(log_path).read(), "the launcher said nothing")


with tempfile.TemporaryDirectory() as tmp:
    deadline(tmp)
    sigterm(tmp)
print("PASSED: the launcher's deadline and SIGTERM reach every rank, and the repeats come back")
