"""A Kubernetes cluster on this machine for tests and benchmarks: the test API server, the
simulated kubelet (which runs launcher Jobs as local processes), dlbench-operator with the CPU
backend and the MPI communicator, and kubectl pointed at them."""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    """A port for a server a test starts and names the port of (the operator's metrics, Prometheus).

    Drawn below the kernel's ephemeral range, as free_port_range draws: a port the kernel handed
    out (bind 0, close) is one it may hand any client's connection next, before the server binds
    it. Servers that can say where they listen are started on port 0 instead (start_apiserver)."""
    return free_port_range(1)


class Api:
    """Plain JSON over HTTP to the test API server: what the kubelet, tests and benchmarks need."""

    def __init__(self, base, timeout=10):
        self.base = base.rstrip("/")
        self.timeout = timeout

    def call(self, method, path, body=None, content_type="application/json"):
        """The decoded answer; None for 404 Not Found (other errors raise)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        except http.client.HTTPException as e:
            # A reply cut off mid-way (the server killed while answering: IncompleteRead, a torn status
            # line) is a transport failure like a refused connection, and callers retry it as one. An
            # IncompleteRead escaping the simulated kubelet's retry loop is the likely cause of a CI
            # run whose pods were never run after the API server was killed.
            raise ConnectionError(f"{method} {path}: {e!r}") from e

    def list(self, path):
        return (self.call("GET", path) or {}).get("items", [])

    def patch_status(self, path, status, uid=None):
        """uid: only if the object is still that one (409 Conflict where a namesake replaced it), as
        the kubelet's status reports say."""
        body = {"status": status, **({"metadata": {"uid": uid}} if uid else {})}
        return self.call("PATCH", path + "/status", body, "application/merge-patch+json")


def collapse_repeats(log):
    """The log with each run of lines that differ only in their details (the operator's watch
    warnings while the API server is away, the kubelet's retries) cut to its first line and a
    count, so that a failure's tail shows what happened rather than one message many times."""
    out, last_key, repeats = [], None, 0
    for line in log.splitlines():
        key = re.sub(r'"(error|kind|ms|reconcile)":("[^"]*"|[0-9.]+),?|[0-9]+', "", line)
        if key == last_key:
            repeats += 1
            continue
        if repeats:
            out.append(f"    ... and {repeats} more like it")
        out.append(line)
        last_key, repeats = key, 0
    if repeats:
        out.append(f"    ... and {repeats} more like it")
    return "\n".join(out) + "\n"


def write_kubeconfig(path, server):
    """A kubeconfig for a server without authentication (the test API server)."""
    with open(path, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: t, cluster: {{server: "{server}"}}}}]
users: [{{name: t, user: {{}}}}]
contexts: [{{name: t, context: {{cluster: t, user: t, namespace: default}}}}]
current-context: t
""")
    return path


def start_apiserver(*args, stderr=subprocess.DEVNULL, port=None):
    """The test API server, listening when this returns: (process, URL). Without `port` it binds one
    of the kernel's choosing (--port 0) and says which: a port drawn here and handed over could be
    taken by a parallel test's server, or a client's ephemeral port, before the server binds it."""
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "test_apiserver.py"), "--port", str(port or 0), *args],
                               stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
    said = process.stdout.readline().decode()  # "test apiserver on http://127.0.0.1:PORT"
    process.stdout.close()
    match = re.search(r":(\d+)\s*$", said)
    if not match:
        process.kill()
        raise RuntimeError(f"the test API server did not say where it listens: {said!r}")
    return process, f"http://127.0.0.1:{match.group(1)}"


_handed_out = set()  # the ports this process has drawn


def free_port_range(count):
    """A first port p with p .. p+count-1 all free (workers bind metrics port + local rank).

    Drawn below the kernel's ephemeral range: a busy test leaves thousands of client ports of
    that range in TIME_WAIT, and CI once found no 8 consecutive free ones in 100 tries there.
    Probed with SO_REUSEADDR, as the workers' metrics server binds, so TIME_WAIT does not count."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low, high = (10000, ephemeral_low - count) if ephemeral_low - count > 11000 else (1024, 65535 - count)
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(low, high)
        if _handed_out.intersection(range(first, first + count)):
            continue  # free until the server it went to starts; two draws must not meet there
        sockets = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                sockets.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("", port))
            _handed_out.update(range(first, first + count))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{high + count - 1}")


def wait_for(predicate, seconds=30, what="the condition", period=0.2):
    """The first true value of predicate(), polled every `period` seconds."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(period)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


class LocalCluster:
    def __init__(self, operator, dlbench, worker, capacity=None, operator_args=(), bin_dirs=(), claims=None,
                 apiserver_args=()):
        self.tmp = tempfile.mkdtemp(prefix="dlbench-cluster-")
        self.log = open(os.path.join(self.tmp, "processes.log"), "w+")
        self.processes = []
        try:
            self.apiserver_args = list(apiserver_args)
            self.apiserver, self.url = start_apiserver(*self.apiserver_args, stderr=self.log)
            self.processes.append(self.apiserver)
            self.kubeconfig = write_kubeconfig(os.path.join(self.tmp, "config"), self.url)
            # Extra directories first: they can put another python3 (one with PyTorch) on the pods' PATH.
            bin_dirs = [os.path.abspath(d) for d in bin_dirs] + sorted(
                {os.path.dirname(os.path.abspath(p)) for p in (operator, dlbench, worker)})
            capacity_args = [a for k, v in (capacity or {}).items() for a in ("--capacity", f"{k}={v}")]
            capacity_args += [a for k, v in (claims or {}).items() for a in ("--claim", f"{k}={v}")]
            self.spawn([sys.executable, os.path.join(HERE, "simulated_kubelet.py"), "--api", self.url,
                        "--work-dir", os.path.join(self.tmp, "node"), *capacity_args,
                        *[a for d in bin_dirs for a in ("--bin-dir", d)]])
            self.kubectl("apply", "-f", os.path.join(ROOT, "crds", "benchmarkrun.yaml"))
            self.metrics_port = free_port()
            self.worker_metrics_port = free_port_range(8)
            self.operator_argv = [operator, "--kubeconfig", self.kubeconfig, "--metrics-port", str(self.metrics_port),
                                  "--worker-backend", "cpu", "--communicator", "mpi",
                                  "--worker-metrics-port", str(self.worker_metrics_port), *operator_args]
            self.operator = self.spawn(self.operator_argv)
        except BaseException:
            self.close(show_logs=True)
            raise

    def stop_apiserver(self, keep_state):
        """SIGTERM (it writes its --state) or SIGKILL (what it held is lost)."""
        os.killpg(self.apiserver.pid, signal.SIGTERM if keep_state else signal.SIGKILL)
        self.apiserver.wait()

    def start_apiserver(self, *args):
        """The API server again, on the same port (clients reconnect there)."""
        port = int(self.url.rsplit(":", 1)[1])
        for _ in range(50):  # the old socket may linger a moment
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.1)
        self.apiserver, _ = start_apiserver(*args, stderr=self.log, port=port)
        self.processes.append(self.apiserver)

    def restart_operator(self):
        """Kills the operator without warning (SIGKILL: no graceful shutdown) and starts a new one."""
        os.killpg(self.operator.pid, signal.SIGKILL)
        self.operator.wait()
        self.operator = self.spawn(self.operator_argv)

    def spawn(self, argv, stdout=None):
        process = subprocess.Popen(argv, stdout=stdout or self.log, stderr=self.log, start_new_session=True)
        self.processes.append(process)
        return process

    def run_status(self, name):
        """A BenchmarkRun's status in namespace default, {} before it has one or once it is gone, read
        over plain HTTP: what a wait polls. A kubectl call costs 0.2 s of CPU, and polled every 0.2 s
        it took most of a core from the ranks a test waited for; what a test asserts it reads with
        kubectl."""
        run = Api(self.url).call("GET", f"/apis/dlbench.io/v1alpha1/namespaces/default/benchmarkruns/{name}")
        return (run or {}).get("status", {})

    def pods(self, selector=None):
        """The pods in namespace default (those a label selector picks), read over HTTP as run_status."""
        query = "?labelSelector=" + urllib.parse.quote(selector) if selector else ""
        return Api(self.url).list("/api/v1/namespaces/default/pods" + query)

    def kubectl(self, *args):
        result = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                                timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def close(self, show_logs=False):
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if show_logs:
            self.log.seek(0)
            print("--- operator, API server and kubelet output ---\n" + collapse_repeats(self.log.read())[-12000:],
                  file=sys.stderr)
        self.log.close()
        if os.environ.get("DLBENCH_KEEP_CLUSTER"):  # pod logs and volumes under node/<namespace>/<pod>/
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
