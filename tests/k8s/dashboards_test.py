#!/usr/bin/env python3
"""The Grafana dashboards against a real Prometheus with real data.

A BenchmarkRun goes through the local cluster (test API server, simulated kubelet running the real
dlbench-worker under mpirun, dlbench-operator). A real Prometheus (Debian's) scrapes the worker
pods with the relabeling of the chart's PodMonitor (keep ports named metrics-N). Debian builds
Prometheus without Kubernetes service discovery, so this test plays it: it lists the pods from the
API server and writes one file_sd target per container port with the same __meta_kubernetes_*
labels kubernetes_sd gives, and Prometheus's own relabeling does the rest. The operator is scraped
with honor_labels, as the chart's ServiceMonitor does. A small DCGM exporter stand-in serves GPU series for the same pods
under `pod`, which Prometheus renames to `exported_pod` as in a kube-prometheus-stack cluster.

Then every panel target and every variable query of every dashboard is evaluated through
Prometheus's HTTP API: a query error fails, and so does a panel that shows no data.

    dashboards_test.py PATH/dlbench-operator PATH/dlbench PATH/dlbench-worker
"""
import glob
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

from local_cluster import ROOT, Api, LocalCluster, free_port, wait_for

PROGRAMS = [os.path.abspath(sys.argv.pop(1)) for _ in range(3)] if len(sys.argv) > 3 else sys.exit(__doc__)
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "charts", "dlbench", "dashboards", "*.json")))
RUN = {"apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun", "metadata": {"name": "dash"},
       # Real data from a claim, so that the input panels have series too.
       "spec": {"model": "resnet50", "data": {"source": "imagefolder", "imageSize": 64, "decodeThreads": 1,
                                              "volume": {"persistentVolumeClaim": {"claimName": "images"}}},
                "matrix": {"nodes": [1], "gpusPerNode": [1, 2, 4], "batchSizePerDevice": [8], "precision": ["fp32"]},
                # Every panel must show data: unstable cases (a shared CI machine) are scaled too.
                "methodology": {"warmupSteps": 2, "measureSteps": 6, "repeats": 3,
                                "stability": {"includeUnstable": True}},
                # 1x4's worker is OOMKilled (the test asks the simulated node): a failure for the
                # Failures panel. The timeout only bounds a hang: a loaded 2-core machine once took
                # over 60 s for the 1x1 case's repeats.
                "limits": {"backoffLimit": 0, "caseTimeoutSeconds": 180}}}
LIVE_CASE = "1x2-bs8-fp32"
# The run the "Against the baseline run" panel compares dash with: one case dash has too, on
# synthetic data, measured before it.
BASELINE = {"apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun", "metadata": {"name": "dash-before"},
            "spec": {"model": "resnet50", "data": {"imageSize": 64},
                     "matrix": {"gpusPerNode": [1], "batchSizePerDevice": [8], "precision": ["fp32"]},
                     "methodology": {"warmupSteps": 1, "measureSteps": 3, "repeats": 2,
                                     "stability": {"includeUnstable": True}},
                     "limits": {"backoffLimit": 0, "caseTimeoutSeconds": 180}}}


class FakeDcgmExporter(http.server.BaseHTTPRequestHandler):
    """DCGM exporter's series for each GPU of the worker pods that exist (pod names from the API)."""
    pods = []

    def do_GET(self):
        lines = []
        for metric, value in (("DCGM_FI_DEV_GPU_UTIL", 97), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.61),
                              ("DCGM_FI_DEV_FB_USED", 40213), ("DCGM_FI_DEV_POWER_USAGE", 612.5)):
            lines.append(f"# TYPE {metric} gauge")
            for pod in list(self.pods):
                for gpu in (0, 1):
                    lines.append(f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                                 f'Hostname="node-1",container="worker",namespace="default",pod="{pod}"}} {value}')
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def prometheus_config(pods_file, operator_port, dcgm_port):
    return f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  # The chart's ServiceMonitor: the operator's case gauges keep their own namespace label.
  - job_name: dlbench-operator
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{operator_port}"]
        labels: {{namespace: dlbench-system, pod: dlbench-operator-0}}
  # The chart's PodMonitor: worker pods found through the API server, every metrics-N port.
  - job_name: dlbench-workers
    file_sd_configs:
      - files: ["{pods_file}"]
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
        regex: worker
        action: keep
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: metrics-[0-9]+
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
  # DCGM exporter through its ServiceMonitor (no honor_labels): its pod label becomes exported_pod.
  - job_name: dcgm-exporter
    static_configs:
      - targets: ["127.0.0.1:{dcgm_port}"]
        labels: {{namespace: gpu-operator, pod: nvidia-dcgm-exporter-x7k2p}}
"""


def discover_pods(api_url, pods_file, stop):
    """What kubernetes_sd_configs (role: pod) gives: a target per container port of each pod with an IP."""
    api = Api(api_url, timeout=5)
    while not stop.is_set():
        try:
            pods = api.list("/api/v1/namespaces/default/pods")
        except OSError:
            pods = []
        groups = []
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            if not ip:
                continue
            meta = {"__meta_kubernetes_namespace": pod["metadata"]["namespace"],
                    "__meta_kubernetes_pod_name": pod["metadata"]["name"],
                    "__meta_kubernetes_pod_phase": pod["status"].get("phase", "")}
            for key, value in pod["metadata"].get("labels", {}).items():
                meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
            for container in pod["spec"]["containers"]:
                for port in container.get("ports", []):
                    groups.append({"targets": [f"{ip}:{port['containerPort']}"],
                                   "labels": {**meta, "__meta_kubernetes_pod_container_name": container["name"],
                                              "__meta_kubernetes_pod_container_port_name": port.get("name", "")}})
        try:
            with open(pods_file + ".tmp", "w") as f:
                json.dump(groups, f)
            os.replace(pods_file + ".tmp", pods_file)
        except FileNotFoundError:
            return  # the cluster's directory is gone: the test is over
        stop.wait(0.5)


# Series that only a GPU case has (this test's cluster runs CPU workers).
GPU_ONLY_METRICS = ("dlbench_case_energy_joules_per_sample",)


class DashboardsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dashboards = {}
        for path in DASHBOARDS:
            with open(path) as f:
                cls.dashboards[os.path.basename(path)] = json.load(f)

    def test_dashboards_are_portable(self):
        self.assertEqual(sorted(self.dashboards), ["live-case.json", "runs.json"])
        uids = set()
        for name, d in self.dashboards.items():
            self.assertNotIn("__inputs", d, name)
            self.assertRegex(d["uid"], r"^dlbench-[a-z-]+$")
            uids.add(d["uid"])
            variables = {v["name"]: v for v in d["templating"]["list"]}
            self.assertEqual((variables["datasource"]["type"], variables["datasource"]["query"]),
                             ("datasource", "prometheus"))
            self.assertIn("namespace", variables)
            self.assertIn("run", variables)
            ids = [p["id"] for p in d["panels"]]
            self.assertEqual(len(ids), len(set(ids)), f"{name}: panel ids must be unique")
            for panel in d["panels"]:
                if panel["type"] == "row":
                    continue
                self.assertTrue(panel["targets"], f"{name}: {panel['title']} has no query")
                for target in panel["targets"]:
                    self.assertEqual(target["datasource"], {"type": "prometheus", "uid": "${datasource}"},
                                     f"{name}: {panel['title']}")
                grid = panel["gridPos"]
                self.assertLessEqual(grid["x"] + grid["w"], 24, f"{name}: {panel['title']}")
        self.assertEqual(len(uids), len(self.dashboards))

    def test_every_panel_query_returns_data_from_a_real_prometheus(self):
        images = tempfile.mkdtemp(prefix="dlbench-images-")
        self.addCleanup(shutil.rmtree, images, True)
        subprocess.run([os.path.join(os.path.dirname(PROGRAMS[2]), "dlbench-input"), "generate", images,
                        "--classes", "2", "--per-class", "12"], check=True, capture_output=True)
        RUN["spec"]["data"]["path"] = images  # the simulated node shows the claim at the same path
        cluster = LocalCluster(*PROGRAMS, claims={"images": images})
        failed = True
        try:
            self.run_against(cluster)
            failed = False
        finally:
            cluster.close(show_logs=failed)

    def run_against(self, cluster):
        dcgm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeDcgmExporter)
        threading.Thread(target=dcgm.serve_forever, daemon=True).start()
        pods_file = os.path.join(cluster.tmp, "pods.json")
        stop = threading.Event()
        discovery = threading.Thread(target=discover_pods, args=(cluster.url, pods_file, stop), daemon=True)
        discovery.start()
        self.addCleanup(stop.set)
        self.addCleanup(dcgm.server_close)
        self.addCleanup(dcgm.shutdown)
        config = os.path.join(cluster.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(prometheus_config(pods_file, cluster.metrics_port, dcgm.server_address[1]))
        subprocess.run(["promtool", "check", "config", config], check=True, capture_output=True)
        port = free_port()
        cluster.spawn(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={cluster.tmp}/tsdb",
                       f"--web.listen-address=127.0.0.1:{port}"])
        self.prometheus = f"http://127.0.0.1:{port}"
        wait_for(lambda: self.get("/-/ready") is not None, 60, "Prometheus to be ready")

        started = time.time()
        for name, run in (("baseline.json", BASELINE), ("run.json", RUN)):
            run_file = os.path.join(cluster.tmp, name)
            with open(run_file, "w") as f:
                json.dump(run, f)
            cluster.kubectl("apply", "-f", run_file)

        # The waits poll over HTTP (LocalCluster.run_status, pods): kubectl twice every 0.2 s took
        # most of a core from the ranks the test waits for. The pods are annotated, and what is
        # asserted read, with the real kubectl.
        def worker_pods():
            pods = cluster.pods("app.kubernetes.io/component=worker")
            FakeDcgmExporter.pods = sorted(set(FakeDcgmExporter.pods) | {p["metadata"]["name"] for p in pods})
            for p in pods:
                if p["metadata"]["labels"].get("dlbench.io/case") == "1x4-bs8-fp32" and \
                        "kubelet.dlbench.io/fail" not in p["metadata"].get("annotations", {}):
                    cluster.kubectl("annotate", "pod", p["metadata"]["name"], "kubelet.dlbench.io/fail=OOMKilled")
            return cluster.run_status("dash").get("phase") in ("Succeeded", "Failed")

        wait_for(worker_pods, 400, "the run to finish")
        wait_for(lambda: cluster.run_status("dash-before").get("phase") in ("Succeeded", "Failed"), 200, "the baseline run to finish")
        before = json.loads(cluster.kubectl("get", "br", "dash-before", "-o", "json"))["status"]
        status = json.loads(cluster.kubectl("get", "br", "dash", "-o", "json"))["status"]
        states = {r["case"]["id"]: r["state"] for r in status["results"]}
        self.assertEqual(states, {"1x1-bs8-fp32": "Succeeded", "1x2-bs8-fp32": "Succeeded", "1x4-bs8-fp32": "Failed"},
                         json.dumps(status["results"], indent=1)[-3000:])
        # A speed-up a loaded machine makes impossible is refused, not published (scalingRefused):
        # then no case of more than one device has an efficiency to show (seen with a build beside
        # the test). Otherwise the efficiency panel must show it, and does (below).
        self.scaled = {r["case"]["id"]: r["scalingEfficiency"] for r in status["results"]
                       if "scalingEfficiency" in r and r["case"]["nodes"] * r["case"]["gpusPerNode"] > 1}
        time.sleep(4)  # the operator's final gauges and the last DCGM samples are scraped
        self.window = (started, time.time())
        self.variables = {"namespace": "default", "run": "dash", "baseline": "dash-before", "case": LIVE_CASE}

        problems = []
        for name, dashboard in self.dashboards.items():
            for variable in dashboard["templating"]["list"]:
                if variable["type"] == "query":
                    values = self.label_values(variable["query"]["query"])
                    if self.variables[variable["name"]] not in values:
                        problems.append(f"{name}: variable {variable['name']} offers {values}")
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    problem = self.evaluate(target)
                    if problem:
                        problems.append(f"{name}: panel \"{panel['title']}\" {target['refId']}: {problem}")
        self.assertEqual(problems, [], "\n".join(problems))

        # Spot checks of values, not only presence.
        results = {r["case"]["id"]: r for r in status["results"]}
        speedup = self.instant('max by (case) (dlbench_case_speedup{namespace="default", run="dash"})')
        if "speedup" in results[LIVE_CASE]:
            self.assertAlmostEqual(float(speedup[LIVE_CASE]), results[LIVE_CASE]["speedup"], places=6)
        else:  # refused (unstable, or a disturbed baseline): no speed-up to show
            self.assertNotIn(LIVE_CASE, speedup)
        cv = self.instant('max by (case) (dlbench_case_repeats_cv_ratio{namespace="default", run="dash"})')
        self.assertAlmostEqual(float(cv[LIVE_CASE]), results[LIVE_CASE]["stability"]["cv"], places=6)
        refused = self.instant('max by (case) (dlbench_case_scaling_refused{namespace="default", run="dash"})')
        self.assertEqual(refused[LIVE_CASE], "1" if results[LIVE_CASE].get("scalingRefused") else "0")
        flops = self.instant('max by (case) (dlbench_case_training_flops_per_second{namespace="default", run="dash"})')
        self.assertAlmostEqual(float(flops[LIVE_CASE]) / results[LIVE_CASE]["flops"]["perSecondPerDevice"], 1, places=9)
        loss = self.instant('max by (case) (dlbench_case_loss{namespace="default", run="dash"})')
        self.assertAlmostEqual(float(loss[LIVE_CASE]), results[LIVE_CASE]["lossAfterRepeats"][-1], places=6)
        # Against the baseline run: the ratio of the two runs' reported throughputs for the case they share.
        panel = next(p for p in self.dashboards["runs.json"]["panels"] if p["title"] == "Against the baseline run")
        ratio = self.instant(next(t["expr"] for t in panel["targets"] if t["refId"] == "C"))
        self.assertEqual(list(ratio), ["1x1-bs8-fp32"])
        self.assertEqual(before["results"][0]["state"], "Succeeded", before["results"])
        self.assertAlmostEqual(float(ratio["1x1-bs8-fp32"]), results["1x1-bs8-fp32"]["throughput"]["median"] /
                               before["results"][0]["throughput"]["median"], places=6)
        failed = self.instant('max by (reason) (dlbench_case_failed{namespace="default", run="dash"})')
        self.assertEqual(list(failed), ["OOMKilled"])
        panel = next(p for p in self.dashboards["runs.json"]["panels"] if p["title"] == "Best scaling efficiency")
        best = self.instant(panel["targets"][0]["expr"])
        if self.scaled:
            self.assertAlmostEqual(float(best[""]), max(self.scaled.values()), places=6)
        else:
            self.assertEqual(best, {})
        # The operator's Warnings: the OOMKilled case's one CaseFailed, as its Events say.
        panel = next(p for p in self.dashboards["runs.json"]["panels"] if p["title"] == "Warnings the operator recorded, by reason")
        warnings = self.instant(panel["targets"][0]["expr"])
        events = json.loads(cluster.kubectl("get", "events", "-o", "json"))["items"]
        recorded = sorted(e["reason"] for e in events
                          if e.get("type") == "Warning" and e.get("source", {}).get("component") == "dlbench-operator")
        self.assertIn("CaseFailed", recorded)
        self.assertEqual({reason: int(float(n)) for reason, n in warnings.items()},
                         {reason: recorded.count(reason) for reason in set(recorded)})
        # The throughput series name their unit as the results do (images: samples/s).
        for metric in ("dlbench_case_throughput_samples_per_second", "dlbench_worker_throughput_samples_per_second"):
            units = self.get("/api/v1/label/unit/values", **{"match[]": metric + '{run="dash"}'})["data"]
            self.assertEqual(units, [results[LIVE_CASE]["throughput"]["unit"]], metric)
        # One unit per name: no images counted under a sequences name.
        for metric in ("dlbench_case_throughput_sequences_per_second", "dlbench_worker_throughput_sequences_per_second"):
            self.assertEqual(self.instant(metric + '{run="dash"}'), {}, metric)

    # --- Prometheus's HTTP API --------------------------------------------------------------
    def get(self, path, **params):
        url = self.prometheus + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = r.read()
                return json.loads(body) if path.startswith("/api") else body
        except urllib.error.HTTPError as e:
            # The API answers its errors in JSON (what a failed assertion then shows); anything else
            # that errs, /-/ready while Prometheus's storage starts (503, plain text), is not there yet.
            return json.loads(e.read()) if path.startswith("/api") else None
        except OSError:
            return None

    def interpolate(self, expr):
        for name, value in self.variables.items():
            expr = expr.replace("$" + name, value)
        for name, value in (("$__rate_interval", "15s"), ("$__interval", "2s"), ("$__range", "5m")):
            expr = expr.replace(name, value)
        self.assertNotRegex(expr, r"\$[a-zA-Z_]", f"a variable is left in {expr}")
        return expr

    def instant(self, expr):
        answer = self.get("/api/v1/query", query=self.interpolate(expr), time=self.window[1])
        self.assertEqual(answer["status"], "success", answer)
        return {next(iter(s["metric"].values()), ""): s["value"][1] for s in answer["data"]["result"]}

    def evaluate(self, target):
        expr = self.interpolate(target["expr"])
        if target.get("instant"):
            answer = self.get("/api/v1/query", query=expr, time=self.window[1])
        else:
            answer = self.get("/api/v1/query_range", query=expr, start=self.window[0], end=self.window[1], step=1)
        if answer is None or answer.get("status") != "success":
            return f"query error: {answer and answer.get('error')} in {expr}"
        if not answer["data"]["result"]:
            # A GPU's energy counter has no CPU counterpart: its query must run, and may be empty here.
            if any(metric in expr for metric in GPU_ONLY_METRICS):
                return None
            if "dlbench_case_scaling_efficiency" in expr and "> 1" in expr and not self.scaled:
                return None
            return f"no data for {expr}"
        # A legend's {{label}} must be a label the query keeps, or Grafana shows it empty.
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
            if any(label not in series["metric"] for series in answer["data"]["result"]):
                return f"legend {{{{{label}}}}} is not a label of every series of {expr}"
        return None

    def label_values(self, query):
        m = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query)
        self.assertIsNotNone(m, f"unsupported variable query {query}")
        selector, label = m.group(1), m.group(2)
        params = {"start": self.window[0], "end": self.window[1]}
        if selector:
            params["match[]"] = self.interpolate(selector)
        answer = self.get(f"/api/v1/label/{label}/values", **params)
        self.assertEqual(answer["status"], "success", answer)
        return answer["data"]


if __name__ == "__main__":
    unittest.main(verbosity=2)
