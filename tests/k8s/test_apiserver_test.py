#!/usr/bin/env python3
"""The test API server against the real kubectl: what the operator's tests will rely on."""
import http.client
import itertools
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from local_cluster import ROOT, start_apiserver, write_kubeconfig


class ApiServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, url = start_apiserver("--history", "40")
        cls.port = int(url.rsplit(":", 1)[1])
        cls.tmp = tempfile.TemporaryDirectory()
        cls.kubeconfig = write_kubeconfig(os.path.join(cls.tmp.name, "kubeconfig"), url)
        cls.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "benchmarkrun.yaml"))

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait()
        cls.tmp.cleanup()

    @classmethod
    def kubectl(cls, *args, check=True):
        result = subprocess.run(["kubectl", "--kubeconfig", cls.kubeconfig, *args], capture_output=True, text=True,
                                timeout=30)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def http(self, method, path, body=None, content_type="application/json"):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def test_apply_and_get_with_printer_columns(self):
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "examples", "quickstart.yaml"))
        self.kubectl("patch", "br", "quickstart", "--subresource=status", "--type=merge", "-p",
                     json.dumps({"status": {"phase": "Running", "progress": {"summary": "1/2"},
                                            "best": {"case": "1x1-bs8-fp32", "throughput": 40.8,
                                                     "unit": "samples/s"}}}))
        lines = self.kubectl("get", "br").stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "MODEL", "PHASE", "PROGRESS", "BEST", "UNIT", "AGE"])
        self.assertEqual(lines[1].split()[:6], ["quickstart", "resnet50", "Running", "1/2", "40.8", "samples/s"])
        wide = self.kubectl("get", "br", "-o", "wide").stdout.splitlines()[0].split()
        self.assertIn("BEST-CASE", wide)
        obj = json.loads(self.kubectl("get", "br", "quickstart", "-o", "json").stdout)
        self.assertEqual(obj["spec"]["model"], "resnet50")
        self.assertEqual(obj["status"]["phase"], "Running")

    def test_status_only_through_its_subresource(self):
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "examples", "vgg16-paddle-baseline.yaml"))
        self.kubectl("patch", "br", "vgg16-paddle-baseline", "--type=merge", "-p", '{"status":{"phase":"Failed"}}')
        self.assertEqual(self.kubectl("get", "br", "vgg16-paddle-baseline", "-o", "jsonpath={.status.phase}").stdout, "")
        before = json.loads(self.kubectl("get", "br", "vgg16-paddle-baseline", "-o", "json").stdout)
        self.kubectl("patch", "br", "vgg16-paddle-baseline", "--type=merge", "-p", '{"spec":{"model":"alexnet"}}')
        after = json.loads(self.kubectl("get", "br", "vgg16-paddle-baseline", "-o", "json").stdout)
        self.assertEqual(after["metadata"]["generation"], before["metadata"]["generation"] + 1)

    def test_stale_update_conflicts(self):
        path = "/api/v1/namespaces/default/configmaps"
        self.assertEqual(self.http("POST", path, {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "conflict"}})[0], 201)
        _, text = self.http("GET", path + "/conflict")
        stale = json.loads(text)
        self.assertEqual(self.http("PUT", path + "/conflict", {**stale, "data": {"a": "1"}})[0], 200)
        code, text = self.http("PUT", path + "/conflict", {**stale, "data": {"a": "2"}})
        self.assertEqual(code, 409)
        self.assertEqual(json.loads(text)["reason"], "Conflict")
        self.assertEqual(self.http("POST", path, {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "conflict"}})[0], 409)
        # A uid names one object: a write meant for a deleted namesake is refused.
        merge = "application/merge-patch+json"
        self.assertEqual(self.http("PATCH", path + "/conflict", {"metadata": {"uid": "another"}, "data": {"a": "3"}},
                                   merge)[0], 409)
        self.assertEqual(self.http("PATCH", path + "/conflict", {"metadata": {"uid": stale["metadata"]["uid"]},
                                                                 "data": {"a": "3"}}, merge)[0], 200)

    def test_label_selectors_and_owner_garbage_collection(self):
        path = "/api/v1/namespaces/default/pods"
        owner = json.loads(self.http("POST", "/api/v1/namespaces/default/configmaps",
                                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})[1])
        for i, role in enumerate(["worker", "worker", "launcher"]):
            self.http("POST", path, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"p{i}", "labels": {"role": role, "run": "r1"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                     "uid": owner["metadata"]["uid"]}]}})
        names = self.kubectl("get", "pods", "-l", "role=worker,run=r1", "-o", "name").stdout.split()
        self.assertEqual(names, ["pod/p0", "pod/p1"])
        self.assertEqual(self.kubectl("get", "pods", "-l", "role!=worker", "-o", "name").stdout.split(), ["pod/p2"])
        self.kubectl("delete", "configmap", "owner")
        self.assertEqual(self.kubectl("get", "pods", "-l", "run=r1", "-o", "name").stdout.split(), [])

    def test_a_pod_on_a_node_is_deleted_gracefully_and_gone_when_its_kubelet_says(self):
        """As the pod strategy decides: a pod no node runs, or one that has ended, goes at once; one
        on a node stays Terminating for its grace, until its kubelet deletes it with a grace of 0."""
        path = "/api/v1/namespaces/default/pods"

        def pod(name, owner=None):
            meta = {"name": name, **({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper",
                                                             "uid": owner}]} if owner else {})}
            return json.loads(self.http("POST", path, {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                       "spec": {"terminationGracePeriodSeconds": 20,
                                                                "containers": [{"name": "c", "image": "i"}]}})[1])

        def bind(name):
            self.assertEqual(self.http("POST", f"{path}/{name}/binding",
                                       {"kind": "Binding", "target": {"kind": "Node", "name": "node-0"}})[0], 201)

        pod("unbound")
        self.assertEqual(self.http("DELETE", f"{path}/unbound")[0], 200)
        self.assertEqual(self.http("GET", f"{path}/unbound")[0], 404)

        running = pod("bound")
        bind("bound")
        code, text = self.http("DELETE", f"{path}/bound")
        self.assertEqual(code, 200)
        answered = json.loads(text)
        self.assertEqual(answered["metadata"]["deletionGracePeriodSeconds"], 20)
        code, text = self.http("GET", f"{path}/bound")
        self.assertEqual(code, 200, "a pod on a node stays until its kubelet has stopped it")
        terminating = json.loads(text)["metadata"]
        self.assertIn("deletionTimestamp", terminating)
        self.assertIn("Terminating", self.kubectl("describe", "pod", "bound").stdout)
        # Asked again, with a longer grace: no later; with a wrong uid: refused; the kubelet's own
        # delete (grace 0, its uid): gone.
        self.http("DELETE", f"{path}/bound", {"kind": "DeleteOptions", "gracePeriodSeconds": 60})
        self.assertEqual(json.loads(self.http("GET", f"{path}/bound")[1])["metadata"]["deletionTimestamp"],
                         terminating["deletionTimestamp"])
        code, text = self.http("DELETE", f"{path}/bound", {"kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                                          "preconditions": {"uid": "another"}})
        self.assertEqual((code, json.loads(text)["reason"]), (409, "Conflict"))
        self.assertEqual(self.http("DELETE", f"{path}/bound", {"kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                                              "preconditions": {"uid": running["metadata"]["uid"]}})[0], 200)
        self.assertEqual(self.http("GET", f"{path}/bound")[0], 404)

        pod("ended")
        bind("ended")
        self.http("PATCH", f"{path}/ended/status", {"status": {"phase": "Succeeded"}}, "application/merge-patch+json")
        self.assertEqual(self.http("DELETE", f"{path}/ended")[0], 200)
        self.assertEqual(self.http("GET", f"{path}/ended")[0], 404)

        # The garbage collector deletes an owner's pods the same way.
        keeper = json.loads(self.http("POST", "/api/v1/namespaces/default/configmaps",
                                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keeper"}})[1])
        pod("owned-unbound", keeper["metadata"]["uid"])
        pod("owned-bound", keeper["metadata"]["uid"])
        bind("owned-bound")
        self.kubectl("delete", "configmap", "keeper")
        self.assertEqual(self.http("GET", f"{path}/owned-unbound")[0], 404)
        self.assertIn("deletionTimestamp", json.loads(self.http("GET", f"{path}/owned-bound")[1])["metadata"])
        self.http("DELETE", f"{path}/owned-bound?gracePeriodSeconds=0")
        self.assertEqual(self.http("GET", f"{path}/owned-bound")[0], 404)

        # An eviction (what `kubectl drain` asks for): the DisruptionTarget condition, then the same.
        pod("drained")
        bind("drained")
        self.assertEqual(self.http("POST", f"{path}/drained/eviction", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                                        "metadata": {"name": "drained"}})[0], 201)
        drained = json.loads(self.http("GET", f"{path}/drained")[1])
        self.assertIn("deletionTimestamp", drained["metadata"])
        self.assertEqual([(c["type"], c["reason"]) for c in drained["status"]["conditions"]],
                         [("DisruptionTarget", "EvictionByEvictionAPI")])
        self.http("DELETE", f"{path}/drained?gracePeriodSeconds=0")  # its kubelet's part: the server is shared

    def test_an_eviction_a_disruption_budget_forbids_is_refused(self):
        """As the real eviction subresource judges it: 429 while the budget would fall below
        minAvailable Ready pods; a pod not Ready goes under AlwaysAllow; Pending and ended pods go
        whatever the budget; two budgets over one pod are an error."""
        path = "/api/v1/namespaces/default/pods"

        def pod(name, ready, phase="Running"):
            self.http("POST", path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"pdb": "a"}},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}})
            self.http("POST", f"{path}/{name}/binding", {"kind": "Binding", "target": {"kind": "Node", "name": "node-0"}})
            self.http("PATCH", f"{path}/{name}/status", {"status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}, "application/merge-patch+json")

        def evict(name):
            code, text = self.http("POST", f"{path}/{name}/eviction", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                                       "metadata": {"name": name}})
            return code, json.loads(text).get("message", "")

        def budget(name, policy=None):
            spec = {"minAvailable": 2, "selector": {"matchLabels": {"pdb": "a"}},
                    **({"unhealthyPodEvictionPolicy": policy} if policy else {})}
            self.assertEqual(self.http("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                                       {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                        "metadata": {"name": name}, "spec": spec})[0], 201)

        budget("guard", "AlwaysAllow")
        self.assertEqual(self.kubectl("get", "pdb", "-o", "name").stdout.split(), ["poddisruptionbudget.policy/guard"])
        pod("pdb-0", True)
        pod("pdb-1", True)
        code, message = evict("pdb-0")
        self.assertEqual(code, 429)
        self.assertIn("The disruption budget guard needs 2 healthy pods and has 2 currently", message)
        self.assertNotIn("deletionTimestamp", json.loads(self.http("GET", f"{path}/pdb-0")[1])["metadata"])
        pod("pdb-2", True)
        self.assertEqual(evict("pdb-0")[0], 201, "3 Ready, 2 needed: one may go")
        self.assertEqual(evict("pdb-1")[0], 429, "one is going already: it counts no more")
        pod("pdb-sick", False)
        self.assertEqual(evict("pdb-sick")[0], 201, "not Ready, AlwaysAllow")
        pod("pdb-new", False, "Pending")
        self.assertEqual(evict("pdb-new")[0], 201, "Pending: whatever the budget")
        budget("second")
        code, message = evict("pdb-1")
        self.assertEqual(code, 500)
        self.assertIn("more than one PodDisruptionBudget", message)
        self.kubectl("delete", "pdb", "second", "guard")
        self.assertEqual(evict("pdb-1")[0], 201, "no budget: granted")
        for name in ("pdb-0", "pdb-1", "pdb-2", "pdb-sick", "pdb-new"):
            self.http("DELETE", f"{path}/{name}?gracePeriodSeconds=0")  # the server is shared

    def test_watch_from_a_version_and_gone_when_too_old(self):
        path = "/api/v1/namespaces/default/configmaps"
        start = json.loads(self.http("GET", path)[1])["metadata"]["resourceVersion"]
        self.http("POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w1", "labels": {"w": "1"}}})
        code, text = self.http("GET", f"{path}?watch=true&resourceVersion={start}&timeoutSeconds=1&labelSelector=w%3D1")
        events = [json.loads(line) for line in text.splitlines()]
        self.assertEqual(code, 200)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in events], [("ADDED", "w1")])
        for i in range(45):  # push the start out of the kept history
            self.http("POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"fill{i}"}})
        code, text = self.http("GET", f"{path}?watch=true&resourceVersion={start}&timeoutSeconds=1")
        self.assertEqual(code, 410)
        self.assertEqual(json.loads(text)["reason"], "Expired")

    def test_bookmarks(self):
        path = "/api/v1/namespaces/default/secrets"
        rv = json.loads(self.http("GET", path)[1])["metadata"]["resourceVersion"]
        code, text = self.http("GET", f"{path}?watch=true&resourceVersion={rv}&timeoutSeconds=2&allowWatchBookmarks=true")
        self.assertEqual(code, 200)
        self.assertIn("BOOKMARK", [json.loads(line)["type"] for line in text.splitlines()])



class KeptStateTest(unittest.TestCase):
    """--state: what the server acknowledged before SIGTERM is there after the restart. The
    operator's expectations wait for every child it was told was created, so a server that
    answered 201 and then forgot the object held a run 'stale' until they expired (CI, 12-07)."""

    def test_every_acknowledged_create_survives_a_sigterm(self):
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, "state.json")
            # A large store makes the snapshot's write take a while, the window a late write would use.
            with open(state, "w") as f:
                json.dump({"rv": 5000, "objects": [
                    [["", "configmaps", "default", f"old-{i}"],
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                         "name": f"old-{i}", "namespace": "default", "resourceVersion": str(i + 2), "uid": f"u{i}"},
                      "data": {"blob": "x" * 2000}}] for i in range(3000)]}, f)
            server, url = start_apiserver("--state", state)
            acknowledged, stop = [], threading.Event()

            def create(writer):
                for n in itertools.count():
                    if stop.is_set():
                        return
                    name = f"new-{writer}-{n}"
                    request = urllib.request.Request(
                        f"{url}/api/v1/namespaces/default/configmaps", method="POST", headers={
                            "Content-Type": "application/json"}, data=json.dumps(
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).encode())
                    try:
                        with urllib.request.urlopen(request, timeout=10) as response:
                            if response.status == 201:
                                acknowledged.append(name)
                    except (OSError, http.client.HTTPException):
                        return  # the server is gone: unanswered, so not promised

            writers = [threading.Thread(target=create, args=(w,)) for w in range(4)]
            for w in writers:
                w.start()
            time.sleep(1.0)
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
            stop.set()
            for w in writers:
                w.join(timeout=30)
            self.assertGreater(len(acknowledged), 20)
            server, url = start_apiserver("--state", state)
            try:
                with urllib.request.urlopen(f"{url}/api/v1/namespaces/default/configmaps", timeout=30) as response:
                    kept = {item["metadata"]["name"] for item in json.load(response)["items"]}
            finally:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            self.assertEqual(len(kept & {f"old-{i}" for i in range(3000)}), 3000)
            lost = [name for name in acknowledged if name not in kept]
            self.assertEqual(lost, [], f"{len(lost)} of {len(acknowledged)} acknowledged creates lost")

    def test_a_restored_snapshot_holds_what_it_held_and_every_older_watch_lists_again(self):
        """--snapshot (SIGUSR1) and --bump-revision: an etcd backup taken while serving, restored as
        Kubernetes' docs ask (the revision moved on, the history before it compacted)."""
        def call(url, method, path, body=None):
            request = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.load(response) if method != "GET" or "watch" not in path else None
            except urllib.error.HTTPError as e:
                return e.code, json.load(e)

        with tempfile.TemporaryDirectory() as tmp:
            snapshot = os.path.join(tmp, "snapshot.json")
            server, url = start_apiserver("--snapshot", snapshot)
            path = "/api/v1/namespaces/default/configmaps"
            try:
                call(url, "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "before"}})
                os.killpg(server.pid, signal.SIGUSR1)
                deadline = time.time() + 10
                while not os.path.exists(snapshot) and time.time() < deadline:
                    time.sleep(0.05)
                call(url, "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}})
                seen = int(call(url, "GET", path)[1]["metadata"]["resourceVersion"])
            finally:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            server, url = start_apiserver("--state", snapshot, "--bump-revision", "1000000")
            try:
                code, listed = call(url, "GET", path)
                self.assertEqual(code, 200)
                self.assertEqual([i["metadata"]["name"] for i in listed["items"]], ["before"])
                now = int(listed["metadata"]["resourceVersion"])
                self.assertGreater(now, seen + 999_000)
                code, gone = call(url, "GET", f"{path}?watch=true&resourceVersion={seen}&timeoutSeconds=1")
                self.assertEqual((code, gone["reason"]), (410, "Expired"))
                code, _ = call(url, "GET", f"{path}?watch=true&resourceVersion={now}&timeoutSeconds=1")
                self.assertEqual(code, 200)
                code, made = call(url, "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}})
                self.assertEqual(code, 201)
                self.assertGreater(int(made["metadata"]["resourceVersion"]), now)
            finally:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


if __name__ == "__main__":
    unittest.main(verbosity=2)
