#!/usr/bin/env python3
"""dlbench-operator as a process: kubectl applies runs to the test API server, the operator
creates their children, serves /healthz /readyz /metrics, and stops cleanly on SIGTERM."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from local_cluster import ROOT, free_port, start_apiserver, wait_for, write_kubeconfig

OPERATOR = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1].endswith("dlbench-operator") else "dlbench-operator"


class OperatorProcessTest(unittest.TestCase):
    def setUp(self):
        self.metrics_port = free_port()
        self.api, url = start_apiserver()
        self.tmp = tempfile.TemporaryDirectory()
        self.kubeconfig = write_kubeconfig(os.path.join(self.tmp.name, "config"), url)
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "benchmarkrun.yaml"))
        self.log = open(os.path.join(self.tmp.name, "operator.log"), "w+")
        self.operator = subprocess.Popen([OPERATOR, "--kubeconfig", self.kubeconfig, "--metrics-port", str(self.metrics_port),
                                          "--worker-backend", "cpu", "--communicator", "mpi"], stdout=self.log, stderr=self.log)

    def tearDown(self):
        if self.operator.poll() is None:
            self.operator.kill()
            self.operator.wait()
        self.api.terminate()
        self.api.wait()
        self.log.close()
        self.tmp.cleanup()

    def kubectl(self, *args):
        result = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def test_runs_are_picked_up_and_the_operator_stops_cleanly(self):
        wait_for(lambda: self.get("/readyz")[0] == 200)
        self.assertEqual(self.get("/healthz")[0], 200)
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "examples", "quickstart.yaml"))
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "examples", "invalid-values.yaml"))
        pods = wait_for(lambda: self.kubectl("get", "pods", "-l", "dlbench.io/run=quickstart", "-o", "name").split())
        self.assertEqual(pods, ["pod/quickstart-1x1-bs8-fp32-a1-worker-0"])
        rows = {line.split()[0]: line.split() for line in self.kubectl("get", "br").splitlines()[1:]}
        self.assertEqual(rows["quickstart"][1:4], ["resnet50", "Running", "0/2"])
        invalid = json.loads(wait_for(lambda: (lambda o: o if "status" in json.loads(o) else None)(
            self.kubectl("get", "br", "invalid-values", "-o", "json"))))
        self.assertEqual(invalid["status"]["phase"], "Failed")
        self.assertIn("spec.model", [c for c in invalid["status"]["conditions"] if c["type"] == "Invalid"][0]["message"])
        self.assertEqual(self.kubectl("get", "pods", "-l", "dlbench.io/run=invalid-values", "-o", "name").strip(), "")
        code, metrics = self.get("/metrics")
        self.assertEqual(code, 200)
        self.assertIn('dlbench_operator_reconciles_total{result="changed"}', metrics)
        # Which build runs: --version's string, as the build_info gauge's label.
        version = subprocess.run([OPERATOR, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
        self.assertIn(f'dlbench_operator_build_info{{version="{version}"}} 1', metrics)
        started = time.time()
        self.operator.send_signal(signal.SIGTERM)
        self.assertEqual(self.operator.wait(timeout=30), 0)
        self.assertLess(time.time() - started, 20)


    def test_bad_flags_exit_2_naming_the_flag_and_what_is_allowed(self):
        for args, message in ((["--workers", "0"], "--workers: 0 is out of range; allowed: 1 to 64"),
                              (["--worker-backend", "rocm"], '--worker-backend: "rocm" is not one of cuda, cpu'),
                              (["--communicator", "mpi"], "allowed with cuda: nccl"),
                              (["--metrics-port=x"], '--metrics-port: "x" is not a number'),
                              (["--frobnicate", "1"], "unknown option --frobnicate")):
            result = subprocess.run([OPERATOR, *args, "--kubeconfig", self.kubeconfig], capture_output=True, text=True,
                                    timeout=30)
            self.assertEqual(result.returncode, 2, args)
            self.assertIn(message, result.stderr, args)

    def test_a_second_replica_waits_for_the_lease(self):
        self.operator.kill()
        self.operator.wait()
        ports = [free_port(), free_port()]
        start = lambda port: subprocess.Popen([OPERATOR, "--kubeconfig", self.kubeconfig, "--metrics-port", str(port),
                                               "--leader-elect", "true", "--worker-backend", "cpu"],
                                              stdout=self.log, stderr=self.log)
        replicas = [start(ports[0])]
        try:
            self.metrics_port = ports[0]
            wait_for(lambda: "dlbench_operator_leader 1" in self.get("/metrics")[1])
            replicas.append(start(ports[1]))
            self.metrics_port = ports[1]
            wait_for(lambda: self.get("/readyz")[0] == 200)  # a standby is ready: rollouts must not hang
            time.sleep(3)
            self.assertIn("dlbench_operator_leader 0", self.get("/metrics")[1], "a follower must not reconcile")
            self.assertNotIn("dlbench_operator_reconciles_total{", self.get("/metrics")[1])
            replicas[0].send_signal(signal.SIGTERM)
            self.assertEqual(replicas[0].wait(timeout=30), 0)
            # The lease expires (15 s), then the standby takes it.
            wait_for(lambda: "dlbench_operator_leader 1" in self.get("/metrics")[1], seconds=40)
        finally:
            for r in replicas:
                if r.poll() is None:
                    r.kill()
                    r.wait()


if __name__ == "__main__":
    unittest.main(verbosity=2)
