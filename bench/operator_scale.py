#!/usr/bin/env python3
"""dlbench-operator at scale: resident memory with N BenchmarkRuns, and apply-to-objects latency.

    bench/operator_scale.py OPERATOR [OPERATOR ...] [--runs 1000] [--probes 30]

Several operator binaries (this build and an older one, say) are measured one after another in
the same invocation, each against a fresh API server, for a side-by-side table.

1. The test API server (tests/k8s) gets the CRD and N BenchmarkRuns (DLPerf-style 4-case sweeps).
2. dlbench-operator starts (CPU backend flags, no case limit, no kubelet: pods stay Pending, so every run holds its
   first case's Secret, hostfile ConfigMap, Service and worker pod). Measured: the time until every
   run has its worker pod (the initial sync), and the operator's VmRSS / VmHWM once it is idle.
3. The operator's CPU use over 10 s once synced (it should idle: nothing changes).
4. Apply-to-objects latency: with the N runs in place and the operator idle, one more run is
   created at a time; the time from the create returning until the API server announces its
   worker pod on a watch (the last object the operator creates for a case). Median, p90, max.

Prints a table and one JSON line. The API server is Python: its list and watch cost is part of
what is measured (a real API server is faster), so these numbers are an upper bound.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
from local_cluster import Api, start_apiserver, write_kubeconfig  # noqa: E402


def run_object(name):
    return {"apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun", "metadata": {"name": name},
            "spec": {"model": "resnet50", "data": {"source": "synthetic"},
                     "matrix": {"nodes": [1, 2], "gpusPerNode": [1, 8], "batchSizePerDevice": [256],
                                "precision": ["amp"]}}}


def rss_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def worker_pods(api):
    pods = api.call("GET", "/api/v1/namespaces/default/pods?labelSelector=app.kubernetes.io/component%3Dworker")
    return {p["metadata"]["labels"]["dlbench.io/run"] for p in pods["items"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operators", nargs="+", metavar="operator")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=30)
    args = parser.parse_args()
    results = [measure(operator, args) for operator in args.operators]
    print(f"| operator | runs | initial sync s | RSS MiB | peak RSS MiB | idle CPU (cores) | apply→worker pod ms "
          f"(median / p90 / max, {args.probes} probes) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['operator']} | {r['runs']} | {r['initial_sync_s']} | {r['rss_mib']} | {r['peak_rss_mib']} | "
              f"{r['idle_cpu_cores']} | {r['apply_to_pod_ms_median']} / {r['apply_to_pod_ms_p90']} / "
              f"{r['apply_to_pod_ms_max']} |")
    for r in results:
        print(json.dumps(r))


def measure(operator_path, args):

    server, url = start_apiserver("--history", "100000")
    api = Api(url, timeout=60)  # lists of thousands of objects from a Python server
    operator = None
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = write_kubeconfig(os.path.join(tmp, "config"), url)
        try:
            subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f",
                            os.path.join(ROOT, "crds", "benchmarkrun.yaml")], check=True, capture_output=True)
            for i in range(args.runs):
                api.call("POST", "/apis/dlbench.io/v1alpha1/namespaces/default/benchmarkruns",
                         run_object(f"sweep-{i:04d}"))
            log = open(os.path.join(tmp, "operator.log"), "w")
            started = time.monotonic()
            # No case limit (older operators, from before the flag, have none).
            usage = subprocess.run([operator_path, "--help"], capture_output=True, text=True)
            unlimited = ["--max-concurrent-cases", "0"] if "--max-concurrent-cases" in usage.stdout + usage.stderr else []
            operator = subprocess.Popen([operator_path, "--kubeconfig", kubeconfig, "--metrics-port", "0",
                                         "--worker-backend", "cpu", "--communicator", "mpi", *unlimited],
                                        stdout=log, stderr=log)
            while len(worker_pods(api)) < args.runs:
                if operator.poll() is not None:
                    sys.exit(f"the operator exited with {operator.returncode}: {open(log.name).read()[-2000:]}")
                time.sleep(0.5)
            initial_sync = time.monotonic() - started
            time.sleep(5)  # let the last status writes and requeues settle
            rss_synced, _ = rss_kib(operator.pid)

            idle_cpu = cpu_seconds(operator.pid)
            time.sleep(10)
            idle_cpu = (cpu_seconds(operator.pid) - idle_cpu) / 10

            latencies = []
            for i in range(args.probes):
                name = f"probe-{i:03d}"
                # Watch for the probe's worker pod from now on: the moment the API server stores it.
                selector = f"dlbench.io/run%3D{name},app.kubernetes.io/component%3Dworker"
                now_rv = api.call("GET", f"/api/v1/namespaces/default/pods?labelSelector={selector}")["metadata"]["resourceVersion"]
                watch = urllib.request.urlopen(f"{api.base}/api/v1/namespaces/default/pods?watch=1&labelSelector="
                                               f"{selector}&resourceVersion={now_rv}", timeout=60)
                api.call("POST", "/apis/dlbench.io/v1alpha1/namespaces/default/benchmarkruns", run_object(name))
                created = time.monotonic()
                for line in watch:
                    if json.loads(line).get("type") == "ADDED":
                        break
                latencies.append(time.monotonic() - created)
                watch.close()
                time.sleep(0.2)
            rss, peak = rss_kib(operator.pid)
        finally:
            if operator and operator.poll() is None:
                operator.kill()
                operator.wait()
            server.kill()
            server.wait()

    latencies.sort()
    return {"operator": operator_path, "runs": args.runs, "initial_sync_s": round(initial_sync, 2),
            "rss_mib_after_sync": round(rss_synced / 1024, 1), "rss_mib": round(rss / 1024, 1),
            "peak_rss_mib": round(peak / 1024, 1), "idle_cpu_cores": round(idle_cpu, 3), "probes": args.probes,
            "apply_to_pod_ms_median": round(statistics.median(latencies) * 1000, 1),
            "apply_to_pod_ms_p90": round(latencies[int(0.9 * (len(latencies) - 1))] * 1000, 1),
            "apply_to_pod_ms_max": round(latencies[-1] * 1000, 1)}


if __name__ == "__main__":
    main()
