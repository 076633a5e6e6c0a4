#!/usr/bin/env python3
"""The Helm chart, rendered by the real Helm 3: lint, manifests, RBAC, security, monitoring, schema.

    chart_test.py [PATH/helm] [PATH/dlbench-operator]
"""
import filecmp
import json
import os
import shutil
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
        self.assertEqual(rules[(("policy",), ("poddisruptionbudgets",))], {"get", "list", "watch", "create", "delete"})
        # Without the budgets, no right to them either.
        unguarded = by_kind(render("--set", "worker.disruptionBudgets=false"))
        self.assertNotIn(("policy",), [tuple(r["apiGroups"]) for r in unguarded["ClusterRole"][0]["rules"]])
        self.assertIn("--disruption-budgets=false",
                      unguarded["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"])
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
        self.assertIn("--disruption-budgets=true", container["args"])  # a drain waits for the case
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
                                     "worker.communicator=mpi,operator.maxConcurrentCases=4,"
                                     "worker.disruptionBudgets=false",
                            "--set-string", "worker.resources.requests.cpu=500m,worker.resources.requests.memory="]):
            args = by_kind(render(*values))["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
            # --kubeconfig to a missing file: the flags parse, then the config fails (exit 1, not 2 = usage).
            result = subprocess.run([OPERATOR, *args, "--kubeconfig", "/nonexistent"], capture_output=True, text=True,
                                    timeout=30)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("nonexistent", result.stderr)

    def test_alerts_fire_as_promtool_evaluates_them(self):
        """The PrometheusRule's rules through the real promtool: they parse, and on series shaped as
        the operator exports them each alert fires where it should, with its labels and text, and
        only there (an Unsupported case, a clean case, an operator that is up: none)."""
        kinds = by_kind(render("--api-versions", "monitoring.coreos.com/v1",
                               "--set", "monitoring.labels.release=kube-prometheus-stack"))
        rule, = kinds["PrometheusRule"]
        self.assertEqual(rule["metadata"]["labels"]["release"], "kube-prometheus-stack")
        self.assertNotIn("PrometheusRule", by_kind(render("--api-versions", "monitoring.coreos.com/v1",
                                                          "--set", "monitoring.prometheusRule=false")))
        if not shutil.which("promtool"):
            self.skipTest("promtool (Debian's prometheus) is not installed")
        tmp = tempfile.mkdtemp(prefix="dlbench-alerts-")
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(os.path.join(tmp, "rules.yaml"), "w") as f:
            yaml.safe_dump(rule["spec"], f)
        checked = subprocess.run(["promtool", "check", "rules", os.path.join(tmp, "rules.yaml")],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertIn("SUCCESS: 8 rules found", checked.stdout)

        ml = {"namespace": "ml", "run": "nightly"}
        series = lambda name, labels: name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        trouble = [  # 30 one-minute samples each
            {"series": series("up", {"job": "bench-dlbench", "namespace": "dlbench-system"}), "values": "0x30"},
            {"series": series("dlbench_operator_runs", {**ml, "phase": "Failed"}), "values": "1x30"},
            {"series": series("dlbench_operator_runs", {"namespace": "ml", "run": "fine", "phase": "Succeeded"}),
             "values": "1x30"},
            {"series": series("dlbench_case_failed", {**ml, "case": "1x8-bs256-amp", "reason": "OOMKilled"}),
             "values": "1x30"},
            {"series": series("dlbench_case_failed", {"namespace": "ml", "run": "cpu", "case": "1x1-bs8-amp",
                                                      "reason": "Unsupported"}), "values": "1x30"},
            {"series": series("dlbench_operator_reconciles_total", {"namespace": "dlbench-system", "result": "error"}),
             "values": "0+1x30"},
            {"series": series("dlbench_operator_reconciles_total",
                              {"namespace": "dlbench-system", "result": "changed"}), "values": "0+5x30"},
            # One child found gone at minute 3, in a list asked for after its creation.
            {"series": series("dlbench_operator_expectations_abandoned_total",
                              {"namespace": "dlbench-system", "awaiting": "child", "reason": "relisted"}),
             "values": "0 0 0 1x27"},
            {"series": series("dlbench_operator_expectations_abandoned_total",
                              {"namespace": "dlbench-system", "awaiting": "status", "reason": "expired"}),
             "values": "0x30"},
            # A status written trimmed at minute 10.
            {"series": series("dlbench_operator_status_results_trimmed_total",
                              {"namespace": "dlbench-system", "detail": "trimmed"}), "values": "0x10 1x20"},
            {"series": series("dlbench_case_cpu_pressure_ratio", {**ml, "case": "1x1-bs256-amp",
                                                                  "verdict": "interfered"}), "values": "0.42x30"},
            {"series": series("dlbench_case_cpu_pressure_ratio", {**ml, "case": "1x8-bs256-amp", "verdict": "clean"}),
             "values": "0.01x30"},
            {"series": series("dlbench_case_repeats_cv_ratio", {**ml, "case": "1x1-bs256-amp", "verdict": "unstable"}),
             "values": "0.07x30"},
            {"series": series("dlbench_case_repeats_cv_ratio", {**ml, "case": "1x8-bs256-amp", "verdict": "stable"}),
             "values": "0.01x30"},
        ]
        warning = {"severity": "warning"}
        expected = [
            (5, "DlbenchOperatorDown", []),  # for: 10m
            (15, "DlbenchOperatorDown", [{"exp_labels": warning,  # absent() of a comparison keeps no labels
                                          "exp_annotations": {
                                              "summary": "dlbench-operator has not been scraped for 10 minutes",
                                              "description": "No BenchmarkRun is reconciled while the operator is "
                                                             "down. Check its pod in dlbench-system, and that the "
                                                             "Prometheus selects the ServiceMonitor's labels."}}]),
            (10, "DlbenchReconcileErrors", []),  # for: 15m
            (28, "DlbenchReconcileErrors", [{"exp_labels": {**warning, "namespace": "dlbench-system"},
                                             "exp_annotations": {
                                                 "summary": "dlbench-operator's reconciles have been failing for 15 "
                                                            "minutes",
                                                 "description": "The operator's log says why (each error is logged "
                                                                "with its run)."}}]),
            (2, "DlbenchOperatorActedWithoutItsWrites", []),
            (5, "DlbenchOperatorActedWithoutItsWrites", [{
                "exp_labels": {"severity": "info", "namespace": "dlbench-system", "awaiting": "child",
                               "reason": "relisted"},
                "exp_annotations": {
                    "summary": "dlbench-operator acted without child writes it had made (relisted) in the last 30 "
                               "minutes",
                    "description": "relisted: a list asked for after the write did not hold it, so the API server "
                                   "lost it (restored from a backup?) or someone overwrote or deleted it. expired: no "
                                   "watch showed it for 5 minutes, so the API server's watches lag. The operator's "
                                   "log names each run and child."}}]),
            (9, "DlbenchRunStatusTrimmed", []),
            (12, "DlbenchRunStatusTrimmed", [{
                "exp_labels": {"severity": "info", "namespace": "dlbench-system", "detail": "trimmed"},
                "exp_annotations": {
                    "summary": "dlbench-operator wrote a run's status with trimmed results in the last 30 minutes",
                    "description": "The status outgrew what the API server takes (etcd's 1.5 MiB a request by "
                                   "default): each result keeps what the report and compare read, the rest is left "
                                   "out (docs/benchmarkrun.md, Status). The operator's log names the run."}}]),
            (1, "DlbenchRunFailed", [{"exp_labels": {**warning, **ml},
                                      "exp_annotations": {
                                          "summary": "BenchmarkRun ml/nightly failed",
                                          "description": "kubectl describe benchmarkrun nightly -n ml shows the "
                                                         "Failed condition's reason and each case's."}}]),
            (1, "DlbenchCaseFailed", [{"exp_labels": {**warning, **ml, "case": "1x8-bs256-amp", "reason": "OOMKilled"},
                                       "exp_annotations": {
                                           "summary": "Case 1x8-bs256-amp of BenchmarkRun ml/nightly failed: OOMKilled",
                                           "description": "The result's message in the run's status says what "
                                                          "happened, with the worker's last lines."}}]),
            (1, "DlbenchCaseMeasuredUnderLoad", [{"exp_labels": {"severity": "info", **ml, "case": "1x1-bs256-amp"},
                                                  "exp_annotations": {
                                                      "summary": "Case 1x1-bs256-amp of ml/nightly was measured while "
                                                                 "tasks waited for a CPU 42% of the time",
                                                      "description": "Its figures stand but are not the machine's; "
                                                                     "measure it again on quiet nodes."}}]),
            (1, "DlbenchCaseUnstable", [{"exp_labels": {"severity": "info", **ml, "case": "1x1-bs256-amp"},
                                         "exp_annotations": {
                                             "summary": "Case 1x1-bs256-amp of ml/nightly stayed unstable (repeats cv "
                                                        "7%)",
                                             "description": "It is left out of best and scaling; measure it again."}}]),
        ]
        quiet = [{"series": series("up", {"job": "bench-dlbench", "namespace": "dlbench-system"}), "values": "1x30"},
                 {"series": series("dlbench_operator_reconciles_total",
                                   {"namespace": "dlbench-system", "result": "changed"}), "values": "0+5x30"}]

        def promtool_test(cases):
            tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                     "tests": [{"interval": "1m", "input_series": trouble,
                                "alert_rule_test": [{"eval_time": f"{m}m", "alertname": name, "exp_alerts": alerts}
                                                    for m, name, alerts in cases]},
                               {"interval": "1m", "input_series": quiet,
                                "alert_rule_test": [{"eval_time": "20m", "alertname": name, "exp_alerts": []}
                                                    for name in ("DlbenchOperatorDown", "DlbenchReconcileErrors",
                                                                 "DlbenchOperatorActedWithoutItsWrites",
                                                                 "DlbenchRunStatusTrimmed")]}]}
            with open(os.path.join(tmp, "tests.yaml"), "w") as f:
                yaml.safe_dump(tests, f)
            return subprocess.run(["promtool", "test", "rules", os.path.join(tmp, "tests.yaml")],
                                  capture_output=True, text=True, timeout=60)

        tested = promtool_test(expected)
        self.assertEqual(tested.returncode, 0, tested.stdout + tested.stderr)
        # The same test fails where it should: the Unsupported case expected to alert too.
        wrong = expected + [(1, "DlbenchCaseFailed", [{"exp_labels": {**warning, "namespace": "ml", "run": "cpu",
                                                                      "case": "1x1-bs8-amp", "reason": "Unsupported"}}])]
        self.assertNotEqual(promtool_test(wrong).returncode, 0)

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
