#!/usr/bin/env python3
"""The simulated kubelet runs every Job's pod exactly once, even when the API server answers late.

A frozen API server (SIGSTOP in k8s.OperatorFaults) still queues what clients send: a client
gives up after its timeout, and the server applies the request when it thaws. So a kubelet's
"Running" report may land although the kubelet saw it fail, and a Secret read for the pod's
volumes may fail after the pod was reported Running. Once, in CI, that left a launcher pod
Running with no process and its case timed out. These tests make such answers happen on purpose,
against the real test API server, one sync at a time. And it ends a deleted pod as a kubelet
does, SIGTERM first, SIGKILL when the pod's grace is spent, the pod Terminating until then.
"""
import json
import os
import shutil
import signal
import tempfile
import time
import unittest
import urllib.request

from local_cluster import Api, start_apiserver, wait_for
from simulated_kubelet import Kubelet, stat_fields

NAMESPACE = "default"


class LateApi(Api):
    """The test API server, except that the first request `late_when` picks times out: after the
    server applied it (applied=True, as a thawed server does) or before it reached it."""

    def __init__(self, base, late_when, applied):
        super().__init__(base)
        self.late_when, self.applied, self.spent = late_when, applied, False

    def call(self, method, path, body=None, content_type="application/json"):
        if not self.spent and self.late_when(method, path, body):
            self.spent = True
            if self.applied:
                super().call(method, path, body, content_type)
            raise TimeoutError(f"{method} {path}: timed out")
        return super().call(method, path, body, content_type)


def is_running_report(method, path, body):
    return method == "PATCH" and path.endswith("/status") and (body or {}).get("status", {}).get("phase") == "Running"


def is_secret_read(method, path, _body):
    return method == "GET" and "/secrets/" in path


class SimulatedKubeletTest(unittest.TestCase):
    def setUp(self):
        self.server, self.url = start_apiserver()
        self.addCleanup(self.stop_server)
        self.work = tempfile.mkdtemp(prefix="dlbench-kubelet-test-")
        self.addCleanup(shutil.rmtree, self.work, True)
        self.api = Api(self.url)
        self.api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets",
                      {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "keys"}, "data": {"key": "aGk="}})

    def stop_server(self):
        os.killpg(self.server.pid, signal.SIGKILL)
        self.server.wait()

    def job(self, name):
        """A Job whose one pod appends a line to a file of its own, so that each run of it counts."""
        runs = os.path.join(self.work, f"{name}.runs")
        self.api.call("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "keys", "secret": {"secretName": "keys"}}],
                "containers": [{"name": "launcher", "command": ["/bin/sh", "-c", f"echo ran >> {runs}"],
                                "volumeMounts": [{"name": "keys", "mountPath": "/etc/keys"}]}]}}}})
        return runs

    def job_condition(self, name):
        job = self.api.call("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}") or {}
        return [c["type"] for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"]

    def run_to_completion(self, kubelet, name):
        """Syncs as the kubelet's loop does (a request that times out ends that sync) until the Job
        completes; the conditions it ended with."""
        def synced():
            try:
                kubelet.sync_jobs()
                kubelet.sync_pods()
            except TimeoutError:
                pass
            return self.job_condition(name)
        return wait_for(synced, 20, f"job {name} to finish", period=0.05)

    def runs_once(self, name, late_when, applied):
        """The Job `name` completes, its pod's command ran exactly once, and the late answer came."""
        runs = self.job(name)
        api = LateApi(self.url, late_when, applied)
        kubelet = Kubelet(api, [], os.path.join(self.work, "node"), 0.05, {})
        self.assertEqual(self.run_to_completion(kubelet, name), ["Complete"])
        self.assertTrue(api.spent, "no request was answered late: the test did not test")
        with open(runs) as f:
            self.assertEqual(f.read(), "ran\n")

    def test_a_running_report_the_server_took_late_still_runs_the_pod_once(self):
        self.runs_once("late-report", is_running_report, applied=True)

    def test_a_running_report_that_never_arrived_is_sent_again_and_the_pod_runs_once(self):
        self.runs_once("lost-report", is_running_report, applied=False)

    def test_a_volume_read_that_times_out_after_the_running_report_still_runs_the_pod_once(self):
        self.runs_once("late-secret", is_secret_read, applied=False)

    def test_a_pod_shown_running_after_it_ended_is_reported_again_not_run_again(self):
        """An API server restored from a backup taken while the pod ran shows it Running, its Job
        active: the node reports what it knows again (as the kubelet's status manager does), so the
        Job completes with the same termination message and the command never runs twice."""
        runs = self.job("restored")
        kubelet = Kubelet(self.api, [], os.path.join(self.work, "node"), 0.05, {})
        self.assertEqual(self.run_to_completion(kubelet, "restored"), ["Complete"])
        pod = self.api.list(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name%3Drestored")[0]
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}"
        ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        self.api.call("PUT", path + "/status", {**pod, "status": {"phase": "Running", "containerStatuses": [
            {"name": "launcher", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "then"}}}]}})
        job = self.api.call("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/restored")
        self.api.call("PUT", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/restored/status", {**job, "status": {"active": 1}})
        self.assertEqual(self.job_condition("restored"), [])
        self.assertEqual(self.run_to_completion(kubelet, "restored"), ["Complete"])
        again = self.api.call("GET", path)["status"]
        self.assertEqual(again["phase"], "Succeeded")
        self.assertEqual(again["containerStatuses"][0]["state"]["terminated"], ended)
        with open(runs) as f:
            self.assertEqual(f.read(), "ran\n")

    def test_a_deleted_pod_is_stopped_as_a_kubelet_stops_it_and_stays_terminating_until_then(self):
        """SIGTERM first, SIGKILL when the pod's grace is spent; a pod that runs sshd takes
        --sshd-stop-seconds; each is reported ended and deleted with a grace of 0 only then."""
        kubelet = Kubelet(self.api, [], os.path.join(self.work, "node"), 0.05, {}, sshd_stop_seconds=1.0)
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        termed = os.path.join(self.work, "termed")

        def pod(name, command, grace=30):
            self.api.call("POST", pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "c", "command": command}]}})

        pod("sshd", ["/usr/sbin/sshd", "-De"])
        pod("polite", ["/bin/sh", "-c", f"trap 'echo term > {termed}; exit 0' TERM; while :; do sleep 0.05; done"])
        # Deaf to SIGTERM, with a child in a process group of its own (as dlbench-exec starts a command).
        orphan = os.path.join(self.work, "orphan")
        pod("deaf", ["/bin/sh", "-c", f"trap '' TERM; setsid sleep 600 & echo $! > {orphan}; while :; do sleep 0.05; done"],
            grace=2)
        wait_for(lambda: kubelet.sync_pods() or all(
            (self.api.call("GET", f"{pods}/{n}") or {}).get("status", {}).get("phase") == "Running"
            for n in ("sshd", "polite", "deaf")), 10, "the pods to run", period=0.05)
        wait_for(lambda: len(kubelet.running) == 2, 10, "their processes", period=0.05)
        since = self.api.call("GET", pods)["metadata"]["resourceVersion"]
        deleted_at = {}
        for name in ("sshd", "polite", "deaf"):
            self.api.call("DELETE", f"{pods}/{name}")
            deleted_at[name] = time.monotonic()
        seen = {}  # name -> the phases it was shown in while terminating

        def gone():
            kubelet.sync_pods()
            for name in deleted_at:
                shown = self.api.call("GET", f"{pods}/{name}")
                if shown is None:
                    seen.setdefault(name, []).append(time.monotonic() - deleted_at[name])
                else:
                    self.assertIn("deletionTimestamp", shown["metadata"])
                    seen.setdefault(name, []).append(shown["status"].get("phase"))
            return all(isinstance(seen[n][-1], float) for n in deleted_at)
        wait_for(gone, 15, "the deleted pods to go", period=0.05)
        after = {name: next(x for x in phases if isinstance(x, float)) for name, phases in seen.items()}
        with open(termed) as f:
            self.assertEqual(f.read(), "term\n", "the polite pod's process heard SIGTERM")
        self.assertLess(after["polite"], 1.0, "a process that ends on SIGTERM ends its pod at once")
        self.assertGreaterEqual(after["sshd"], 1.0, seen["sshd"])
        self.assertGreaterEqual(after["deaf"], 2.0, "a process deaf to SIGTERM keeps its pod for its grace")
        self.assertLess(after["deaf"], 5.0, "and is killed when the grace is spent")
        with open(orphan) as f:
            pid = int(f.read())

        def ended():
            try:
                return stat_fields(pid)[0] == "Z"  # killed, not yet reaped
            except FileNotFoundError:
                return True
        wait_for(ended, 5, "the child in a group of its own to die with its pod", period=0.05)
        with urllib.request.urlopen(f"{self.url}{pods}?watch=true&resourceVersion={since}&timeoutSeconds=1") as w:
            events = [json.loads(line) for line in w.read().decode().splitlines() if line.strip()]
        sshd = [(e["type"], e["object"]["status"].get("phase")) for e in events if e["object"]["metadata"]["name"] == "sshd"]
        self.assertEqual(sshd[-2:], [("MODIFIED", "Failed"), ("DELETED", "Failed")],
                         "an sshd pod is reported ended before it goes")
        self.assertEqual(kubelet.running, {})


if __name__ == "__main__":
    unittest.main(verbosity=2)
