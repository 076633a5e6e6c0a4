#!/usr/bin/env python3
"""The Helm chart, rendered by the real Helm 3: lint, manifests, RBAC, security, monitoring, schema.

    chart_test.py [PATH/helm] [PATH/dlbench-operator]
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "dlbench")
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
from local_cluster import start_apiserver, write_kubeconfig  # noqa: E402

HELM = sys.argv.pop(1) if len(sys.argv) > 1 else "helm"
OPERATOR = sys.argv.pop(1) if len(sys.argv) > 1 else None


def helm(*args, check=True):
    result = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}")
    return result


def render(*args):
    out = helm("template", "bench", CHART, "--namespace", "dlbench-system", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objects):
    out = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o)
    return out


class ChartTest(unittest.TestCase):
    def test_lint_is_clean_in_strict_mode(self):
        result = helm("lint", "--strict", CHART)
        self.assertIn("0 chart(s) failed", result.stdout)
        result = helm("lint", "--strict", CHART, "--set", "operator.replicas=2,operator.watchNamespace=bench")
        self.assertIn("0 chart(s) failed", result.stdout)

    def test_the_chart_crd_is_the_project_crd(self):
        self.assertTrue(filecmp.cmp(os.path.join(ROOT, "crds", "benchmarkrun.yaml"),
                                    os.path.join(CHART, "crds", "benchmarkrun.yaml"), shallow=False),
                        "charts/dlbench/crds/benchmarkrun.yaml differs from crds/benchmarkrun.yaml: copy it")
        crds = [d for d in render("--include-crds") if d["kind"] == "CustomResourceDefinition"]
        self.assertEqual([c["metadata"]["name"] for c in crds], ["benchmarkruns.dlbench.io"])

    def test_without_prometheus_operator_there_are_no_monitors(self):
        kinds = by_kind(render())
        self.assertNotIn("ServiceMonitor", kinds)
        self.assertNotIn("PodMonitor", kinds)
        self.assertEqual(sorted(kinds), ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Pod", "Role",
                                         "RoleBinding", "Service", "ServiceAccount"])

    def test_with_prometheus_operator_monitors_carry_the_extra_labels(self):
        kinds = by_kind(render("--api-versions", "monitoring.coreos.com/v1",
                               "--set", "monitoring.labels.release=kube-prometheus-stack"))
        service_monitor, pod_monitor = kinds["ServiceMonitor"][0], kinds["PodMonitor"][0]
        for monitor in (service_monitor, pod_monitor):
            self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus-stack")
        endpoint = service_monitor["spec"]["endpoints"][0]
        self.assertEqual((endpoint["port"], endpoint["honorLabels"]), ("metrics", True))
        service = kinds["Service"][0]
        self.assertEqual(service_monitor["spec"]["selector"]["matchLabels"], service["spec"]["selector"])
        self.assertEqual(pod_monitor["spec"]["namespaceSelector"], {"any": True})
        self.assertEqual(pod_monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"], "worker")
        keep = pod_monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
        self.assertEqual((keep["action"], keep["regex"]), ("keep", "metrics-[0-9]+"))
        self.assertEqual(keep["sourceLabels"], ["__meta_kubernetes_pod_container_port_name"])
        # Turned off, they go even where the API is served.
        kinds = by_kind(render("--api-versions", "monitoring.coreos.com/v1", "--set", "monitoring.enabled=false"))
        self.assertNotIn("ServiceMonitor", kinds)

    def test_rbac_is_least_privilege(self):
        kinds = by_kind(render())
        role = kinds["ClusterRole"][0]
        rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
        self.assertEqual(rules[(("dlbench.io",), ("benchmarkruns",))], {"get", "list", "watch"})
        self.assertEqual(rules[(("dlbench.io",), ("benchmarkruns/status",))], {"get", "patch"})
        self.assertEqual(rules[(("",), ("pods", "services", "configmaps", "secrets"))],
                         {"get", "list", "watch", "create", "delete"})
        self.assertEqual(rules[(("batch",), ("jobs",))], {"get", "list", "watch", "create", "delete"})
        self.assertEqual(rules[(("",), ("events",))], {"create"})
        self.assertEqual(rules[(("scheduling.volcano.sh", "scheduling.x-k8s.io"), ("podgroups",))], {"create"})
        for r in role["rules"] + [r for role in kinds["Role"] for r in role["rules"]]:
            self.assertNotIn("*", r["verbs"])
            self.assertNotIn("*", r["resources"])
            self.assertNotIn("*", r["apiGroups"])
            self.assertFalse({"pods/exec", "pods/attach", "pods/portforward", "nodes"} & set(r["resources"]), r)
            self.assertFalse({"escalate", "bind", "impersonate", "update"} & set(r["verbs"]), r)
        lease = next(r for r in kinds["Role"] if r["metadata"]["name"].endswith("leader-election"))
        self.assertEqual(lease["metadata"]["namespace"], "dlbench-system")
        self.assertEqual([r.get("resourceNames") for r in lease["rules"]], [None, ["dlbench-operator"]])
        account = kinds["ServiceAccount"][0]["metadata"]["name"]
        for binding in kinds["ClusterRoleBinding"] + kinds["RoleBinding"]:
            self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": account,
                                                    "namespace": "dlbench-system"}])

    def test_one_watched_namespace_means_a_role_there_not_a_cluster_role(self):
        kinds = by_kind(render("--set", "operator.watchNamespace=bench"))
        self.assertNotIn("ClusterRole", kinds)
        namespaces = sorted(r["metadata"]["namespace"] for r in kinds["Role"])
        self.assertEqual(namespaces, ["bench", "dlbench-system"])
        self.assertIn("--namespace=bench", kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"])

    def test_operator_pod_is_locked_down_and_probed(self):
        deployment = by_kind(render())["Deployment"][0]
        self.assertEqual(deployment["metadata"]["name"], "bench-dlbench")
        pod = deployment["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
        self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault")
        container = pod["containers"][0]
        security = container["securityContext"]
        self.assertTrue(security["readOnlyRootFilesystem"])
        self.assertFalse(security["allowPrivilegeEscalation"])
        self.assertEqual(security["capabilities"]["drop"], ["ALL"])
        self.assertNotIn("add", security["capabilities"])
        self.assertEqual(container["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(container["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertIn("memory", container["resources"]["limits"])
        self.assertIn("--leader-elect=false", container["args"])
        self.assertIn("--max-concurrent-cases=1", container["args"])  # one case at a time by default
        labels = deployment["metadata"]["labels"]
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                    "app.kubernetes.io/managed-by", "app.kubernetes.io/component", "helm.sh/chart"):
            self.assertIn(key, labels)
        self.assertEqual(container["image"], "dlbench-operator:0.1.0")
        # Every image value has one shape, {repository, tag, pullPolicy}: the worker's reaches the
        # operator as the default image and the pull policy of the pods it creates.
        self.assertIn("--default-worker-image=dlbench-worker:0.1.0", container["args"])
        self.assertIn("--worker-image-pull-policy=IfNotPresent", container["args"])
        custom = by_kind(render("--set", "worker.image.repository=registry.local/w,worker.image.pullPolicy=Always",
                                "--set-string", "worker.image.tag=7"))["Deployment"][0]
        args = custom["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--default-worker-image=registry.local/w:7", args)
        self.assertIn("--worker-image-pull-policy=Always", args)
        # Every worker container requests CPU and memory (never BestEffort); "" requests none.
        self.assertIn("--worker-cpu-request=1", container["args"])
        self.assertIn("--worker-memory-request=2Gi", container["args"])
        sized = by_kind(render("--set-string", "worker.resources.requests.cpu=15500m,worker.resources.requests.memory="))
        args = sized["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--worker-cpu-request=15500m", args)
        self.assertIn("--worker-memory-request=", args)

    def test_more_than_one_replica_turns_leader_election_on(self):
        args = by_kind(render("--set", "operator.replicas=3"))["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--leader-elect=true", args)
        self.assertIn("--lease-namespace=dlbench-system", args)

    def test_the_operator_accepts_every_argument_the_chart_gives_it(self):
        if OPERATOR is None:
            self.skipTest("no dlbench-operator given")
        for values in ([], ["--set", "operator.replicas=2,operator.watchNamespace=bench,worker.backend=cpu,"
                                     "worker.communicator=mpi,operator.maxConcurrentCases=4",
                            "--set-string", "worker.resources.requests.cpu=500m,worker.resources.requests.memory="]):
            args = by_kind(render(*values))["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
            # --kubeconfig to a missing file: the flags parse, then the config fails (exit 1, not 2 = usage).
            result = subprocess.run([OPERATOR, *args, "--kubeconfig", "/nonexistent"], capture_output=True, text=True,
                                    timeout=30)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("nonexistent", result.stderr)

    def test_dashboards_are_configmaps_for_the_grafana_sidecar(self):
        maps = {c["metadata"]["name"]: c for c in by_kind(render())["ConfigMap"]}
        self.assertEqual(sorted(maps), ["bench-dlbench-dashboard-live-case", "bench-dlbench-dashboard-runs"])
        for name, config_map in maps.items():
            self.assertEqual(config_map["metadata"]["labels"]["grafana_dashboard"], "1")
            (file_name, content), = config_map["data"].items()
            with open(os.path.join(CHART, "dashboards", file_name)) as f:
                self.assertEqual(json.loads(content), json.load(f))

    def test_schema_rejects_bad_values_naming_the_field(self):
        for setting, field in (("worker.backend=rocm", "backend"), ("operator.replicas=0", "replicas"),
                               ("monitoring.interval=fast", "interval"), ("operator.metricsPort=70000", "metricsPort"),
                               ("operator.unknownKey=1", "unknownKey"),
                               ("operator.maxConcurrentCases=-1", "maxConcurrentCases"),
                               ("worker.image.pullPolicy=Sometimes", "pullPolicy"),
                               ("worker.resources.requests.memory=2GB", "memory")):
            result = helm("template", "bench", CHART, "--set", setting, check=False)
            self.assertNotEqual(result.returncode, 0, setting)
            self.assertIn(field, result.stderr, setting)

    def test_helm_test_pod_asks_the_operator_service(self):
        objects = render()
        test_pod = next(o for o in objects if o["kind"] == "Pod")
        self.assertEqual(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test")
        service = next(o for o in objects if o["kind"] == "Service")
        url = test_pod["spec"]["containers"][0]["command"][-1]
        self.assertEqual(url, f"http://{service['metadata']['name']}.dlbench-system.svc:8080/readyz")

    def test_helm_test_runs_the_workers_self_test_on_a_gpu_node_when_asked(self):
        self.assertFalse([o for o in render() if o["metadata"]["name"].endswith("test-self-test")],
                         "off by default: it needs a GPU node")
        one = next(o for o in render("--set", "tests.selfTest.enabled=true")
                   if o["metadata"]["name"].endswith("test-self-test"))
        self.assertEqual(one["metadata"]["annotations"]["helm.sh/hook"], "test")
        container = one["spec"]["containers"][0]
        self.assertEqual(container["image"], "dlbench-worker:0.1.0")
        self.assertEqual(container["imagePullPolicy"], "IfNotPresent")
        self.assertEqual(container["command"], ["dlbench-worker", "--self-test", "--backend", "cuda", "--communicator",
                                                "none", "--precision", "fp32,tf32,amp,bf16"])
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu": 1})
        eight = next(o for o in render("--set", "tests.selfTest.enabled=true", "--set", "tests.selfTest.gpus=8",
                                       "--set-string", "tests.selfTest.precisions=fp32\\,amp",
                                       "--set", "tests.selfTest.nodeSelector.gpu=h100")
                     if o["metadata"]["name"].endswith("test-self-test"))
        command = eight["spec"]["containers"][0]["command"]
        self.assertEqual(command[:4], ["mpirun", "--allow-run-as-root", "-np", "8"])
        self.assertIn("nccl", command)
        self.assertEqual(command[-2:], ["--precision", "fp32,amp"])
        self.assertEqual(eight["spec"]["containers"][0]["resources"]["limits"], {"nvidia.com/gpu": 8})
        self.assertEqual(eight["spec"]["nodeSelector"], {"gpu": "h100"})
        for setting, field in (("tests.selfTest.gpus=0", "gpus"), ("tests.selfTest.precisions=fp8", "precisions")):
            result = helm("template", "bench", CHART, "--set", "tests.selfTest.enabled=true", "--set", setting,
                          check=False)
            self.assertNotEqual(result.returncode, 0, setting)
            self.assertIn(field, result.stderr, setting)

    def test_notes_tell_what_to_do_next(self):
        # Only `helm install` renders NOTES.txt, and even its client-side dry run asks a cluster for
        # its version: the test API server answers. Releases are kept in memory, not in Secrets.
        server, url = start_apiserver()
        self.addCleanup(server.wait)
        self.addCleanup(server.kill)
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = write_kubeconfig(os.path.join(tmp, "config"), url)
            releases = os.path.join(tmp, "releases.yaml")
            with open(releases, "w") as f:
                f.write("[]\n")
            os.environ.update(KUBECONFIG=kubeconfig, HELM_DRIVER="memory", HELM_MEMORY_DRIVER_DATA=releases)
            try:
                notes = helm("install", "bench", CHART, "--dry-run=client", "--namespace", "dlbench-system").stdout
            finally:
                for key in ("KUBECONFIG", "HELM_DRIVER", "HELM_MEMORY_DRIVER_DATA"):
                    os.environ.pop(key)
        self.assertIn("kubectl get benchmarkruns -w", notes)
        self.assertIn("helm test bench", notes)
        self.assertIn("monitoring.coreos.com/v1 is not served", notes)


if __name__ == "__main__":
    unittest.main(verbosity=2)
