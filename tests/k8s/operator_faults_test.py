#!/usr/bin/env python3
"""dlbench-operator when the world misbehaves: the real operator, the test API server and the
simulated kubelet (one node), with cases quick enough to run many (engine: command, a shell loop
that reports its steps to dlbench-exec).

    operator_faults_test.py OPERATOR DLBENCH WORKER
"""
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from local_cluster import Api, LocalCluster, wait_for

PROGRAMS = [os.path.abspath(sys.argv.pop(1)) for _ in range(3)] if len(sys.argv) > 3 else sys.exit(__doc__)
# An operator built with AddressSanitizer (the debug preset) keeps its shadow memory resident: its
# RSS is not the operator's.
with open(PROGRAMS[0], "rb") as operator_binary:
    SANITIZED = b"__asan_init" in operator_binary.read()
STEPS = 'for i in $(seq $DLBENCH_TOTAL_STEPS); do sleep {pause}; echo "@dlbench step $DLBENCH_GLOBAL_BATCH_SIZE"; done'


def benchmark_run(name, batches=(2,), pause=0.02, timeout=120, worker=None):
    """A run of len(batches) one-node cases, each about (warm-up + measured) x pause seconds."""
    return {"apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun", "metadata": {"name": name},
            "spec": {"model": "resnet50", "engine": "command", "command": ["sh", "-c", STEPS.format(pause=pause)],
                     "matrix": {"nodes": [1], "gpusPerNode": [1], "batchSizePerDevice": list(batches),
                                "precision": ["fp32"]},
                     "methodology": {"warmupSteps": 1, "measureSteps": 4, "repeats": 2},
                     "worker": worker or {}, "limits": {"backoffLimit": 0, "caseTimeoutSeconds": timeout}}}


def run_whose_node_zero_waits_on_a_lost_peer(name):
    """A run of a one-node case and a two-node one, 2x1-bs2-fp32, whose node 0 completes its first
    repeat (5 steps of 0.02 s) and then waits, as a command waits on a peer it lost (NCCL's
    collectives do); its node 1 waits from the start."""
    one_repeat = 'for i in 1 2 3 4 5; do sleep 0.02; echo "@dlbench step $DLBENCH_GLOBAL_BATCH_SIZE"; done'
    waits = ("if [ $DLBENCH_CASE = 2x1-bs2-fp32 ]; then [ $DLBENCH_NODE_RANK = 0 ] && { " + one_repeat +
             "; }; exec sleep 600; fi; " + STEPS.format(pause=0.02))
    run = benchmark_run(name, timeout=100)
    run["spec"]["command"] = ["sh", "-c", waits]
    run["spec"]["matrix"]["nodes"] = [2]
    return run


class PodWatch(threading.Thread):
    """Every pod ADDED since the start, from a watch of its own, by uid: a pod created twice has two.
    And when each began terminating and ended (its phase Succeeded or Failed: its containers
    stopped), by uid, with its case."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.added, self.stopping, self.seen = url, [], False, set()
        self.terminating, self.ended, self.case = {}, {}, {}

    def record(self, pod):
        meta = pod["metadata"]
        if meta["uid"] not in self.seen:
            self.seen.add(meta["uid"])
            self.added.append((time.time(), meta["name"], meta.get("labels", {}).get("dlbench.io/run")))

    def relist(self):
        """The pods there now, and the version to watch from (after a 410: history too short)."""
        listed = Api(self.url).call("GET", "/api/v1/pods")
        for pod in listed["items"]:
            self.record(pod)
        return listed["metadata"]["resourceVersion"]

    def run(self):
        version = Api(self.url).call("GET", "/api/v1/pods")["metadata"]["resourceVersion"]
        while not self.stopping:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/pods?watch=1&resourceVersion={version}"
                                            "&timeoutSeconds=5&allowWatchBookmarks=true", timeout=10) as stream:
                    for line in stream:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            # --expire-watches-every: the server's history still holds what came
                            # after `version`, so this exact count resumes from there.
                            break
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] == "ADDED":
                            self.record(event["object"])
                        meta = event["object"]["metadata"]
                        if event["type"] == "BOOKMARK":
                            continue
                        self.case[meta["uid"]] = meta.get("labels", {}).get("dlbench.io/case")
                        if "deletionTimestamp" in meta:
                            self.terminating.setdefault(meta["uid"], time.time())
                        if event["object"].get("status", {}).get("phase") in ("Succeeded", "Failed"):
                            self.ended.setdefault(meta["uid"], time.time())
            except urllib.error.HTTPError as e:
                # 410 at the start: other writers (--history N) moved the versions past ours. A
                # relist catches up; a pod made and gone entirely inside the gap goes unseen.
                if e.code == 410:
                    version = self.relist()
                else:
                    time.sleep(0.2)
            except OSError:
                time.sleep(0.2)


class OperatorFaultsTest(unittest.TestCase):
    def cluster(self, operator_args=(), apiserver_args=()):
        cluster = LocalCluster(*PROGRAMS, operator_args=["--log-level", "debug", *operator_args],
                               apiserver_args=apiserver_args)
        self.addCleanup(lambda: cluster.close(show_logs=self._outcome.result.failures or self._outcome.result.errors))
        self.pods = PodWatch(cluster.url)
        self.pods.start()
        self.addCleanup(setattr, self.pods, "stopping", True)
        return cluster

    def apply(self, cluster, *runs):
        path = os.path.join(cluster.tmp, f"runs-{time.time()}.json")
        with open(path, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": list(runs)}, f)
        cluster.kubectl("apply", "--validate=false", "-f", path)

    def status(self, cluster, name):
        return cluster.run_status(name)

    def finished(self, cluster, name, seconds=120):
        return wait_for(lambda: (lambda s: s if s.get("phase") in ("Succeeded", "Failed") else None)(
            self.status(cluster, name)), seconds, f"{name} to finish")

    def metrics(self, cluster):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    def ready(self, cluster):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/readyz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def counter(self, cluster, pattern):
        return sum(float(v) for v in re.findall("^" + pattern + r"\S* (\S+)$", self.metrics(cluster), re.MULTILINE))

    def operator_log(self, cluster):
        cluster.log.flush()
        with open(cluster.log.name) as f:
            return f.read()

    def assert_created_once(self, run=None):
        names = [name for _, name, owner in self.pods.added if run is None or owner == run]
        self.assertTrue(names)
        self.assertEqual(len(names), len(set(names)), f"a pod created twice: {sorted(names)}")

    # --- the scenarios ---------------------------------------------------------------------------

    def test_api_server_away_for_seconds_and_back_with_its_state(self):
        etcd = tempfile.mkdtemp(prefix="dlbench-etcd-")
        self.addCleanup(shutil.rmtree, etcd, True)
        cluster = self.cluster(apiserver_args=["--state", os.path.join(etcd, "state.json")])
        wait_for(lambda: self.ready(cluster), 30, "the operator to be ready")
        self.apply(cluster, benchmark_run("away", batches=(2, 4, 8), pause=0.5))
        wait_for(lambda: self.status(cluster, "away").get("results"), 60, "a first result")
        cluster.stop_apiserver(keep_state=True)
        wait_for(lambda: not self.ready(cluster), 15, "/readyz to say the API server is gone")
        time.sleep(12)
        self.assertFalse(self.ready(cluster))
        cluster.start_apiserver(*cluster.apiserver_args)
        wait_for(lambda: self.ready(cluster), 60, "ready again")
        status = self.finished(cluster, "away", 180)
        self.assertEqual(status["phase"], "Succeeded", status)
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 3, status["results"])
        self.assertGreater(self.counter(cluster, "dlbench_operator_watch_errors_total"), 0)
        log = self.operator_log(cluster)
        self.assertIn('"msg":"list or watch failed"', log)
        self.assertIn('"msg":"not ready: the API server does not answer"', log)

    def test_api_server_restored_from_a_backup_taken_mid_case(self):
        """etcd restored from a snapshot taken while the second of three cases ran, restored as
        Kubernetes' docs ask (the revision moved on, the history before it compacted). The world goes
        back: the run's status holds one result, the second case's pods are there again, Running
        (the operator had deleted them with its result, so their node knows nothing of them and runs
        them again, as a kubelet runs a pod it is given), and the third case's children are gone (their
        node kills their processes). The operator works on from the restored world: the first result
        kept, the second case measured again (its result was in what the restore lost), the third
        case's children made again, each case once in the results, the run Succeeded."""
        etcd = tempfile.mkdtemp(prefix="dlbench-etcd-")
        self.addCleanup(shutil.rmtree, etcd, True)
        snapshot = os.path.join(etcd, "snapshot.json")
        cluster = self.cluster(apiserver_args=["--snapshot", snapshot])
        wait_for(lambda: self.ready(cluster), 30, "the operator to be ready")
        self.apply(cluster, benchmark_run("restored", batches=(2, 4, 8), pause=0.5))
        first, second, third = "1x1-bs2-fp32", "1x1-bs4-fp32", "1x1-bs8-fp32"

        def running(case):
            return [p for p in cluster.pods(f"dlbench.io/run=restored,dlbench.io/case={case}")
                    if p.get("status", {}).get("phase") == "Running"]

        wait_for(lambda: len(self.status(cluster, "restored").get("results", [])) == 1 and running(second), 90,
                 "the second case to run")
        os.killpg(cluster.apiserver.pid, signal.SIGUSR1)
        wait_for(lambda: os.path.exists(snapshot), 10, "the snapshot")
        with open(snapshot) as f:
            backed_up = [o for k, o in json.load(f)["objects"] if k[1] == "benchmarkruns"][0]
        self.assertEqual([r["case"]["id"] for r in backed_up["status"]["results"]], [first])
        wait_for(lambda: running(third), 90, "the third case to run")
        before = {r["case"]["id"]: r for r in self.status(cluster, "restored")["results"]}
        self.assertEqual(sorted(before), [first, second])
        cluster.stop_apiserver(keep_state=False)
        restored_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cluster.start_apiserver("--state", snapshot, "--bump-revision", "1000000")
        status = self.finished(cluster, "restored", 180)
        self.assertEqual(status["phase"], "Succeeded", status)
        results = {r["case"]["id"]: r for r in status["results"]}
        self.assertEqual([r["case"]["id"] for r in status["results"]], [first, second, third], status["results"])
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 3, status["results"])
        self.assertEqual(results[first], before[first], "the result the backup held is kept as it was")
        for case in (second, third):  # measured (again) after the restore
            self.assertGreaterEqual(results[case]["completionTime"], restored_at, results[case])
        # The second case's pods came back with the backup (the same objects); only the third's, lost
        # with it, were created again.
        created = {}
        for _, name, run in self.pods.added:
            created[name] = created.get(name, 0) + 1
        self.assertEqual({name: n for name, n in created.items() if n > 1 and third not in name}, {}, created)
        self.assertEqual(created.get(f"restored-{third}-a1-worker-0"), 2, created)

    def test_api_server_frozen_for_45_seconds_is_noticed_and_the_run_finishes_after(self):
        """SIGSTOP: the server's kernel still accepts connections and nothing answers, as a hung
        API server or a path that drops packets. Each watch has a silence limit (its timeout, 10 s
        here, + 5 s), so /readyz turns not ready within about 15 s and says why in the log."""
        cluster = self.cluster()
        wait_for(lambda: self.ready(cluster), 30, "the operator to be ready")
        self.apply(cluster, benchmark_run("frozen", batches=(2, 4), pause=0.5))
        wait_for(lambda: self.status(cluster, "frozen").get("results"), 60, "a first result")
        os.killpg(cluster.apiserver.pid, signal.SIGSTOP)
        frozen_at = time.time()
        try:
            wait_for(lambda: not self.ready(cluster), 30, "/readyz to notice the frozen API server")
            noticed = time.time() - frozen_at
            self.assertLess(noticed, 20, f"noticed after {noticed:.1f} s")
            time.sleep(max(0.0, 45 - (time.time() - frozen_at)))
            self.assertFalse(self.ready(cluster), "ready while the API server is still frozen")
        finally:
            os.killpg(cluster.apiserver.pid, signal.SIGCONT)
        thawed_at = time.time()
        wait_for(lambda: self.ready(cluster), 30, "ready again after the thaw")
        self.assertLess(time.time() - thawed_at, 10, "readiness came back slowly after the thaw")
        status = self.finished(cluster, "frozen", 180)
        self.assertEqual(status["phase"], "Succeeded", status)
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 2, status["results"])
        self.assertGreater(self.counter(cluster, "dlbench_operator_watch_stalls_total"), 0)
        log = self.operator_log(cluster)
        self.assertIn('"msg":"watch stalled, restarting it: the API server sends nothing"', log)
        self.assertIn('"msg":"not ready: the API server does not answer"', log)

    def test_api_server_restarted_with_its_state_lost(self):
        cluster = self.cluster()
        self.apply(cluster, benchmark_run("lost", pause=2))
        wait_for(lambda: 'run="lost"' in self.metrics(cluster), 30, "series for the run")
        cluster.stop_apiserver(keep_state=False)
        cluster.start_apiserver()
        # Without its CRD the API server answers 404: not ready, retrying, for long enough that
        # a retry backoff without a low cap would have grown past 10 s.
        wait_for(lambda: not self.ready(cluster), 15, "not ready without the CRD")
        time.sleep(15)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cluster.kubectl("apply", "-f", os.path.join(root, "crds", "benchmarkrun.yaml"))
        # Retries back off to 2 s at most: ready again within a few seconds of the CRD's return.
        crd_back = time.time()
        wait_for(lambda: self.ready(cluster), 30, "ready once the CRD is back")
        back = time.time() - crd_back
        self.assertLess(back, 4, f"ready {back:.1f} s after the CRD: a long retry backoff")
        # The relist finds no run: its series go, and the operator works on with the new world.
        wait_for(lambda: 'run="lost"' not in self.metrics(cluster), 60, "the lost run's series to go")
        self.apply(cluster, benchmark_run("after"))
        self.assertEqual(self.finished(cluster, "after", 90)["phase"], "Succeeded")

    def test_churn_with_a_short_watch_history_and_every_run_still_finishes(self):
        cluster = self.cluster(operator_args=["--max-concurrent-cases", "3"], apiserver_args=["--history", "12"])
        # Other writers keep the API server busy (no quiet second, so no bookmark), and the runs take
        # longer than the operator's 10 s watches: they reconnect from versions long gone.
        stop = threading.Event()
        self.addCleanup(stop.set)
        api = Api(cluster.url)
        api.call("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "noise"}, "data": {}})

        def churn():
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    api.call("PATCH", "/api/v1/namespaces/default/configmaps/noise", {"data": {"n": str(n)}},
                             "application/merge-patch+json")
                except OSError:
                    pass
                time.sleep(0.02)
        threading.Thread(target=churn, daemon=True).start()
        self.apply(cluster, *[benchmark_run(f"churn-{i}", batches=(2, 4), pause=0.5, worker={"shareNodes": True})
                              for i in range(6)])
        for i in range(6):
            self.assertEqual(self.finished(cluster, f"churn-{i}", 180)["phase"], "Succeeded")
        # Whether a watch expired here depends on bookmarks timing; KubeClient's test proves the 410
        # path itself. What must hold either way: every run finished and no pod was created twice.
        self.assert_created_once()

    def test_conflicting_writes_are_retried_and_nothing_is_lost(self):
        cluster = self.cluster()
        self.apply(cluster, benchmark_run("busy", batches=(2, 4, 8), pause=0.1))
        stop = threading.Event()
        path = "/apis/dlbench.io/v1alpha1/namespaces/default/benchmarkruns/busy"

        def meddle():  # another writer (kubectl annotate, a GitOps tool) keeps changing the run
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    Api(cluster.url).call("PATCH", path, {"metadata": {"annotations": {"touched": str(n)}}},
                                          "application/merge-patch+json")
                except OSError:
                    pass
        # Several writers, back to back: a reconcile's read is almost never the latest by its write.
        for _ in range(3):
            threading.Thread(target=meddle, daemon=True).start()
        self.addCleanup(stop.set)
        status = self.finished(cluster, "busy", 120)
        stop.set()
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 3)
        # The writers did move the run under the operator's writes; each refused write was made
        # again on a fresh read, so no reconcile ended in a conflict (before, each waited for a
        # cache that back-to-back writers kept behind, and a run could miss its deadline).
        self.assertGreater(self.counter(cluster, "dlbench_operator_status_conflicts_total"), 0)
        self.assertEqual(self.counter(cluster, r'dlbench_operator_reconciles_total\{result="conflict"'), 0)
        self.assert_created_once("busy")

    def test_a_stale_cache_never_creates_a_child_twice(self):
        # Watch events arrive a second late: after each status write the cache still shows the old run.
        cluster = self.cluster(apiserver_args=["--watch-delay", "1"])
        self.apply(cluster, benchmark_run("stale", batches=(2, 4, 8)))
        status = self.finished(cluster, "stale", 120)
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 3)
        self.assertEqual([r["attempts"] for r in status["results"]], [1, 1, 1])
        self.assertGreater(self.counter(cluster, r'dlbench_operator_reconciles_total\{result="stale"'), 0)
        self.assert_created_once("stale")

    def test_a_run_deleted_mid_case_gets_no_new_child_and_no_stale_series(self):
        cluster = self.cluster()
        self.apply(cluster, benchmark_run("doomed", batches=(2, 4), pause=1))
        wait_for(lambda: 'dlbench_operator_runs{namespace="default",phase="Running",run="doomed"} 1'
                 in self.metrics(cluster), 30, "the run to run")
        # The series is set before the pass that set it makes the case's children (Service, budget,
        # pod): a pod that pass makes is not a new child of a deleted run.
        wait_for(lambda: any(run == "doomed" for _, _, run in self.pods.added), 30, "the first case's pod")
        cluster.kubectl("delete", "br", "doomed")
        deleted = time.time()
        time.sleep(4)
        late = [name for at, name, run in self.pods.added if run == "doomed" and at > deleted]
        self.assertEqual(late, [])
        self.assertEqual(cluster.kubectl("get", "pods,jobs,secrets,configmaps,services,poddisruptionbudgets", "-l",
                                         "dlbench.io/run=doomed", "-o", "name").strip(), "")
        self.assertNotIn('run="doomed"', self.metrics(cluster))
        errors = self.counter(cluster, r'dlbench_operator_reconciles_total\{result="error"')
        time.sleep(3)
        self.assertEqual(self.counter(cluster, r'dlbench_operator_reconciles_total\{result="error"'), errors,
                         "no error loop")

    def test_thirty_runs_at_once_finish_one_case_at_a_time(self):
        # Every watch is ended with 410 Expired after 3 s: the informers list again, mid-churn.
        cluster = self.cluster(apiserver_args=["--expire-watches-every", "3"])
        self.apply(cluster, *[benchmark_run(f"many-{i:02}", timeout=30) for i in range(30)])
        # With one case slot (the default) at most one run is Running at any time.
        most = 0
        deadline = time.time() + 300
        while time.time() < deadline:
            phases = [r.get("status", {}).get("phase", "Pending") for r in Api(cluster.url).list(
                "/apis/dlbench.io/v1alpha1/namespaces/default/benchmarkruns")]
            most = max(most, phases.count("Running"))
            if all(p in ("Succeeded", "Failed") for p in phases) and len(phases) == 30:
                break
            time.sleep(0.2)
        self.assertLessEqual(most, 1)
        statuses = [self.status(cluster, f"many-{i:02}") for i in range(30)]
        self.assertEqual([s["phase"] for s in statuses], ["Succeeded"] * 30)
        self.assertTrue(all(s["results"][0]["ranAlone"] for s in statuses))
        wait_for(lambda: "dlbench_operator_queue_depth 0" in self.metrics(cluster), 10, "the queue to drain")
        with open(f"/proc/{cluster.operator.pid}/status") as f:
            rss_mib = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
        if not SANITIZED:
            self.assertLess(rss_mib, 64)
        self.assert_created_once()
        relists = {kind: float(n) for kind, n in re.findall(
            r'dlbench_operator_watch_errors_total\{code="410",kind="(\w+)"\} (\S+)', self.metrics(cluster))}
        self.assertEqual(sorted(k for k, n in relists.items() if n >= 1),
                         ["BenchmarkRun", "ConfigMap", "Job", "Pod", "PodDisruptionBudget", "Secret", "Service"], relists)

    def test_an_evicted_worker_is_the_cases_reason(self):
        cluster = self.cluster()
        self.apply(cluster, benchmark_run("evicted", pause=5))
        pod = wait_for(lambda: cluster.kubectl("get", "pods", "-l", "dlbench.io/run=evicted", "-o", "name").strip(),
                       30, "the worker pod")
        wait_for(lambda: "Running" in cluster.kubectl("get", pod, "-o", "jsonpath={.status.phase}"), 30, "running")
        cluster.kubectl("annotate", pod, "kubelet.dlbench.io/fail=Evicted")
        status = self.finished(cluster, "evicted", 60)
        self.assertEqual(status["results"][0]["reason"], "Evicted")
        self.assertIn("low on resource", status["results"][0]["message"])

    def test_the_lease_lost_mid_case_stops_the_replica_and_the_next_one_finishes(self):
        cluster = self.cluster(operator_args=["--leader-elect", "true", "--lease-namespace", "default"])
        self.apply(cluster, benchmark_run("led", batches=(2, 4), pause=0.5))
        wait_for(lambda: self.status(cluster, "led").get("phase") == "Running", 30, "the run to start")
        lease = json.loads(cluster.kubectl("get", "lease", "dlbench-operator", "-o", "json"))
        lease["spec"]["holderIdentity"] = "another-replica"
        lease["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        lease_file = os.path.join(cluster.tmp, "lease.json")
        with open(lease_file, "w") as f:
            json.dump(lease, f)
        cluster.kubectl("replace", "-f", lease_file)
        self.assertEqual(cluster.operator.wait(timeout=20), 1)
        self.assertIn('"msg":"lost the lease"', self.operator_log(cluster))
        # The lease runs out (15 s) and a new replica takes over from the status it finds.
        cluster.operator = cluster.spawn(cluster.operator_argv)
        status = self.finished(cluster, "led", 120)
        self.assertEqual([r["state"] for r in status["results"]], ["Succeeded"] * 2)
        self.assert_created_once("led")

    def test_a_kueue_gated_case_waits_in_its_queue_then_runs(self):
        cluster = self.cluster()
        self.apply(cluster, benchmark_run("queued", timeout=10,
                                          worker={"gang": {"scheduler": "kueue", "queueName": "gpus"}}))
        pod = wait_for(lambda: cluster.kubectl("get", "pods", "-l", "dlbench.io/run=queued", "-o", "name").strip(),
                       30, "the gated worker pod")
        obj = json.loads(cluster.kubectl("get", pod, "-o", "json"))
        self.assertEqual(obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "gpus")
        self.assertEqual(obj["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"], "1")
        time.sleep(12)  # longer than caseTimeoutSeconds: the queue's wait is not the case's
        obj = json.loads(cluster.kubectl("get", pod, "-o", "json"))
        self.assertEqual(obj["status"]["phase"], "Pending")
        self.assertEqual(obj["status"]["conditions"][0]["reason"], "SchedulingGated")
        self.assertEqual(self.status(cluster, "queued").get("phase"), "Running")
        # Kueue admits the group: it removes the gate.
        cluster.kubectl("patch", pod, "--type=merge", "-p", '{"spec": {"schedulingGates": null}}')
        status = self.finished(cluster, "queued", 60)
        self.assertEqual(status["phase"], "Succeeded", status)

    def test_a_gang_scheduler_without_its_pod_group_crd_fails_at_once_saying_so(self):
        cluster = self.cluster()
        volcano = {"gang": {"scheduler": "volcano"}}
        self.apply(cluster, benchmark_run("no-volcano", batches=(2, 4), timeout=120, worker=volcano))
        status = self.finished(cluster, "no-volcano", 30)  # not the case timeout (120 s)
        self.assertEqual(status["phase"], "Failed", status)
        self.assertEqual([r["reason"] for r in status["results"]], ["GangSchedulerUnavailable"] * 2)
        self.assertEqual([r["attempts"] for r in status["results"]], [1, 1])
        self.assertIn("scheduling.volcano.sh/v1beta1", status["results"][0]["message"])
        self.assertIn("install Volcano", status["results"][0]["message"])
        # Volcano's CRD installed: the next run's PodGroup is created, owned by its worker 0, and it runs.
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "podgroups.scheduling.volcano.sh"},
               "spec": {"group": "scheduling.volcano.sh", "scope": "Namespaced",
                        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup"},
                        "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {
                            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
        path = os.path.join(cluster.tmp, "volcano-crd.json")
        with open(path, "w") as f:
            json.dump(crd, f)
        cluster.kubectl("apply", "-f", path)
        # Steps of 0.5 s: the PodGroup lives as long as the case's pods (it is theirs), and a case of
        # 0.02 s steps could end between two polls (CI once missed it so).
        self.apply(cluster, benchmark_run("with-volcano", pause=0.5, worker=volcano))
        groups = wait_for(lambda: Api(cluster.url).list(
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"), 30, "the PodGroup")
        self.assertEqual(groups[0]["spec"]["minMember"], 1)
        self.assertEqual(groups[0]["metadata"]["ownerReferences"][0]["kind"], "Pod")
        status = self.finished(cluster, "with-volcano", 90)
        self.assertEqual(status["phase"], "Succeeded", status)

    def test_a_case_starts_only_once_the_pods_of_the_case_before_it_have_ended(self):
        """Node 0 of a two-node case is lost (Evicted), which ends the case at once; node 1's command,
        deaf to SIGTERM, runs on, its pod Terminating, until dlbench-exec kills it (its own grace,
        10 s, within the pod's 30). The next case waits for that pod to end, saying so, and runs
        alone."""
        cluster = self.cluster()
        deaf = "trap '' TERM; [ $DLBENCH_CASE = 2x1-bs2-fp32 ] && sleep 600; " + STEPS.format(pause=0.02)
        run = benchmark_run("after", batches=(2, 4), timeout=100)
        run["spec"]["command"] = ["sh", "-c", deaf]
        run["spec"]["matrix"]["nodes"] = [2]
        self.apply(cluster, run)
        lost = "pod/after-2x1-bs2-fp32-a1-worker-0"
        wait_for(lambda: "Running" in cluster.kubectl("get", "pods", "-o", "jsonpath={.items[*].status.phase}",
                                                      "-l", "dlbench.io/case=2x1-bs2-fp32"), 30, "the first case to run")
        cluster.kubectl("annotate", lost, "kubelet.dlbench.io/fail=Evicted")
        waiting = wait_for(lambda: next((c for c in self.status(cluster, "after").get("conditions", [])
                                         if c["type"] == "Progressing" and c["reason"] == "AwaitingPreviousPods"), None),
                           30, "the second case to wait for the first one's pods")
        self.assertEqual(waiting["message"],
                         "2x1-bs4-fp32 attempt 1 starts once the pods before it have ended: after-2x1-bs2-fp32-a1-worker-1")
        status = self.finished(cluster, "after", 120)
        # The planner puts each batch size's 1x1 baseline first.
        self.assertEqual([r["case"]["id"] for r in status["results"]],
                         ["1x1-bs2-fp32", "1x1-bs4-fp32", "2x1-bs2-fp32", "2x1-bs4-fp32"])
        first, second = status["results"][2:]
        self.assertEqual((first["state"], first["reason"]), ("Failed", "Evicted"))
        self.assertEqual(second["state"], "Succeeded", second)
        self.assertTrue(second["ranAlone"])
        survivor = next(uid for uid, c in self.pods.case.items() if c == "2x1-bs2-fp32" and uid in self.pods.terminating)
        self.assertGreater(self.pods.ended[survivor] - self.pods.terminating[survivor], 8,
                           "the survivor ran on after its SIGTERM: the test tested")
        started = min(t for t, name, _ in self.pods.added if "-2x1-bs4-fp32-" in name)
        self.assertGreater(started, self.pods.ended[survivor], "the next case began beside the pod before it")
        self.assertIn("Progressing", {c["type"] for c in status["conditions"]})

    def test_a_command_left_waiting_on_its_lost_peer_is_stopped_and_its_repeats_kept(self):
        """Node 1 of a two-node case is OOMKilled. Node 0's command, its first repeat complete, waits on
        the lost peer (as NCCL's collectives do) instead of failing: after the margin it is stopped
        (its pod deleted), its dlbench-exec writes the repeat it completed, and the result keeps it
        under the lost worker's reason."""
        cluster = self.cluster()
        self.apply(cluster, run_whose_node_zero_waits_on_a_lost_peer("peer"))
        lost = "pod/peer-2x1-bs2-fp32-a1-worker-1"
        wait_for(lambda: "Running Running" in cluster.kubectl("get", "pods", "-o", "jsonpath={.items[*].status.phase}",
                                                              "-l", "dlbench.io/case=2x1-bs2-fp32"), 30, "the case to run")
        time.sleep(1)  # node 0's first repeat: 5 steps of 0.02 s
        cluster.kubectl("annotate", lost, "kubelet.dlbench.io/fail=OOMKilled")
        killed = time.time()
        status = self.finished(cluster, "peer", 90)
        result = status["results"][-1]
        self.assertEqual((result["case"]["id"], result["state"], result["reason"]), ("2x1-bs2-fp32", "Failed", "OOMKilled"))
        self.assertIn("peer-2x1-bs2-fp32-a1-worker-1: container worker exited with code 137", result["message"])
        self.assertIn("stopped by a signal after 5 of 10 step markers; 1 of 2 repeats complete, kept here unjudged",
                      result["message"])
        self.assertEqual(len(result["throughput"]["repeats"]), 1, result)
        self.assertGreater(result["throughput"]["repeats"][0], 0)
        events = json.loads(cluster.kubectl("get", "events", "-o", "json"))["items"]
        stopping = [e for e in events if e.get("reason") == "StoppingWorkerZero"]
        self.assertEqual(len(stopping), 1, [e.get("reason") for e in events])
        self.assertIn("peer-2x1-bs2-fp32-a1-worker-0 is deleted so that its dlbench-exec stops the command",
                      stopping[0]["message"])
        worker_zero = next(uid for uid, c in self.pods.case.items() if c == "2x1-bs2-fp32" and uid in self.pods.terminating)
        self.assertGreater(self.pods.terminating[worker_zero] - killed, 15, "given the margin to end on its own first")

    def test_a_command_worker_deleted_at_once_is_lost_not_made_again(self):
        """A two-node case's worker 1 is force-deleted (grace 0: gone before any cache shows it end)
        once both commands run. It is lost, never made again (a new one would join no job); worker
        0, its command waiting on the lost peer, is stopped at once, and its repeat is kept."""
        cluster = self.cluster()
        self.apply(cluster, run_whose_node_zero_waits_on_a_lost_peer("gone"))
        wait_for(lambda: cluster.kubectl("get", "configmaps", "-o", "name", "-l", "dlbench.io/case=2x1-bs2-fp32"),
                 30, "every worker of the case Ready, recorded")
        time.sleep(1)  # node 0's first repeat: 5 steps of 0.02 s
        cluster.kubectl("delete", "pod", "gone-2x1-bs2-fp32-a1-worker-1", "--grace-period=0", "--force")
        status = self.finished(cluster, "gone", 60)
        result = status["results"][-1]
        self.assertEqual((result["case"]["id"], result["reason"]), ("2x1-bs2-fp32", "WorkerDeleted"), result)
        self.assertIn("worker gone-2x1-bs2-fp32-a1-worker-1 was deleted mid-case", result["message"])
        self.assertIn("1 of 2 repeats complete, kept here unjudged", result["message"])
        self.assertEqual(len(result["throughput"]["repeats"]), 1, result)
        made = [name for _, name, _ in self.pods.added if name == "gone-2x1-bs2-fp32-a1-worker-1"]
        self.assertEqual(len(made), 1, "made once, not again")

    def test_cases_of_different_runs_do_not_share_a_node_unless_they_say_so(self):
        cluster = self.cluster(operator_args=["--max-concurrent-cases", "2"])
        self.apply(cluster, benchmark_run("alone-a", pause=0.4), benchmark_run("alone-b", pause=0.4))
        # Both runs hold a case slot, but the second case's worker waits for the node.
        wait_for(lambda: any("didn't match pod anti-affinity rules" in c.get("message", "")
                             for p in Api(cluster.url).list("/api/v1/namespaces/default/pods")
                             for c in p.get("status", {}).get("conditions", [])), 30, "a worker kept off the node")
        results = []
        for name in ("alone-a", "alone-b"):
            status = self.finished(cluster, name, 90)
            self.assertEqual(status["phase"], "Succeeded")
            self.assertTrue(status["results"][0]["ranAlone"])
            results.append(status["results"][0])
        first, second = sorted(results, key=lambda r: r["startTime"])
        self.assertGreaterEqual(second["startTime"], first["completionTime"])
        shared = {"shareNodes": True}
        self.apply(cluster, benchmark_run("shared-a", pause=0.4, worker=shared),
                   benchmark_run("shared-b", pause=0.4, worker=shared))
        alone = [self.finished(cluster, n, 90)["results"][0]["ranAlone"] for n in ("shared-a", "shared-b")]
        self.assertEqual(alone, [False, False])


if __name__ == "__main__":
    unittest.main(verbosity=2)
