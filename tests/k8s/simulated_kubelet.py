#!/usr/bin/env python3
"""A simulated node for the test API server: kubelet, Job controller and cluster DNS + SSH.

    simulated_kubelet.py --api http://127.0.0.1:PORT --bin-dir DIR [--bin-dir DIR ...] --work-dir DIR

- Pods are scheduled and started at once: Pending -> Running, Ready, podIP 127.0.0.1; a pod that
  asks for more of an extended resource (nvidia.com/gpu, rdma/...) than the node has (--capacity)
  stays Pending with PodScheduled=False, reason Unschedulable, as the scheduler reports it.
- The scheduler's part, for the one node "node-0": a pod with schedulingGates stays Pending
  (PodScheduled=False, SchedulingGated) until they are removed (Kueue's admission); required pod
  anti-affinity is honoured both ways against the node's running pods (Unschedulable while a
  match runs there); a pod that names a PodGroup (Volcano's annotation, scheduler-plugins' label)
  waits until the group exists, as those schedulers hold a gang; a scheduled pod is bound through
  pods/NAME/binding (spec.nodeName), and Pending pods are tried again every period, as the
  scheduler retries.
- Deletion as the kubelet does it: a pod the API server marks Terminating (deletionTimestamp) has
  its processes sent SIGTERM, then SIGKILL when its grace is spent; its end is reported and the pod
  deleted with a grace of 0 (uid precondition). A pod that runs sshd (none here) takes
  --sshd-stop-seconds to stop, within its grace; a terminating pod holds its place on the node
  (anti-affinity) until it is gone, as the scheduler counts it.
- Failure on request: annotate a pod with `kubelet.dlbench.io/fail=<what>` (kubectl annotate) and it
  fails the way a real node would report it:
    OOMKilled      phase Failed, container terminated with exit code 137, reason OOMKilled
    Evicted        phase Failed, pod reason Evicted (node memory pressure)
    Error          phase Failed, container terminated with exit code 1, reason Error
- Jobs get one pod from their template (name <job>-<suffix>, label job-name, owned by the Job); the
  Job's status follows the pod (Complete / Failed with BackoffLimitExceeded), and a pod that runs past
  activeDeadlineSeconds is killed and the Job fails with DeadlineExceeded.
- Pods owned by a Job run their container's real command line as a local process: Secret and
  ConfigMap volumes are written to a per-pod directory, mount paths in the command and environment
  are mapped to it, PATH finds the --bin-dir programs (dlbench, dlbench-worker, mpirun). The exit code
  and the terminationMessagePath file (or the log's tail, FallbackToLogsOnError) become the container's
  terminated state, as the kubelet reports them.
- A persistentVolumeClaim volume mounts the directory given for that claim (--claim NAME=DIR: a
  claim bound to a volume that holds DIR), a hostPath volume its path.
- Pods whose container runs anything but sshd (engine: command's worker pods) run too: their init
  containers first, in order, then the container; emptyDir volumes are per-pod directories. The pod
  network is the host's loopback: an environment value that names a pod by its cluster DNS name
  (<hostname>.<subdomain>.<namespace>.svc) becomes 127.0.0.1, and MASTER_PORT / PET_MASTER_PORT get
  a free port per headless Service, so that two cases' rendezvous never meet.
- Worker pods that run sshd run no process (their sshd is simulated): mpirun's rsh agent is this script's `ssh`
  subcommand, which resolves <hostname>.<subdomain>.<namespace>.svc the way cluster DNS does for a
  headless Service, checks that the launcher's key is in the worker's authorized_keys Secret, and runs
  the remote command (Open MPI's orted) locally. A wrong host name or key fails like ssh does (255).
  The command has the pod's host name (its own UTS namespace, where unshare --uts is allowed),
  so that ranks on two pods count two nodes. What it runs is recorded as running on that pod, and is killed (SIGKILL, orted and its ranks) when
  the pod fails on request, stops after its deletion, or is gone, as a container's processes end
  with its PID 1.
"""
import argparse
import base64
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.error

from local_cluster import Api
from test_apiserver import exit_with_parent

FAIL_ANNOTATION = "kubelet.dlbench.io/fail"
FAILURES = ("OOMKilled", "Evicted", "Error")


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def pod_path(namespace, name=""):
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def job_path(namespace, name=""):
    return f"/apis/batch/v1/namespaces/{namespace}/jobs" + (f"/{name}" if name else "")


def controller_of(obj):
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref.get("controller"):
            return ref
    return None


def unschedulable_because(pod, capacity):
    """The scheduler's message when a container asks for more of a resource than the node has."""
    for container in pod["spec"]["containers"]:
        for resource, quantity in container.get("resources", {}).get("requests", {}).items():
            if resource in capacity and int(quantity) > capacity[resource]:
                return f"0/1 nodes are available: 1 Insufficient {resource}."
    return None


NODE = "node-0"


def term_selects(term, pod):
    """A required anti-affinity term's labelSelector (matchLabels, matchExpressions) against a pod."""
    labels = pod["metadata"].get("labels", {})
    selector = term.get("labelSelector", {})
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value, op = labels.get(e["key"]), e["operator"]
        if (op == "In" and value not in e.get("values", [])) or (op == "NotIn" and value in e.get("values", [])) or \
                (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


def anti_affinity_terms(pod):
    return pod["spec"].get("affinity", {}).get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])


def anti_affinity_conflict(pod, placed):
    """The scheduler's message when a pod on the node and this pod exclude each other."""
    for other in placed:
        if any(term_selects(t, other) for t in anti_affinity_terms(pod)) or \
                any(term_selects(t, pod) for t in anti_affinity_terms(other)):
            return "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    return None


# A gang scheduler's pods name their PodGroup; the scheduler holds them until the group exists.
POD_GROUPS = {"scheduling.k8s.io/group-name": ("annotations", "/apis/scheduling.volcano.sh/v1beta1"),
              "scheduling.x-k8s.io/pod-group": ("labels", "/apis/scheduling.x-k8s.io/v1alpha1")}


def missing_pod_group(api, pod):
    """Volcano's and scheduler-plugins' word while the pod's PodGroup does not exist yet."""
    meta = pod["metadata"]
    for key, (where, group_api) in POD_GROUPS.items():
        name = meta.get(where, {}).get(key)
        if name and api.call("GET", f"{group_api}/namespaces/{meta['namespace']}/podgroups/{name}") is None:
            return f"pod group {name} is not found"
    return None


def runs_sshd(pod):
    return os.path.basename(pod["spec"]["containers"][0].get("command", [""])[0]) == "sshd"


def stat_fields(pid):
    """/proc/PID/stat's fields after the command name (field 3, the state, first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_start(pid):
    """A process's start time in clock ticks (/proc/PID/stat field 22): with its pid, names it once."""
    return stat_fields(pid)[19]


def descendants(pid):
    """pid and every process below it, parents first."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(stat_fields(entry)[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def kill_tree(pid):
    """SIGKILL to pid and every process below it, in whatever process group: a container's
    processes all end with it, a command that dlbench-exec started in a group of its own too."""
    try:
        os.kill(pid, signal.SIGSTOP)  # no new children while they are gathered
    except ProcessLookupError:
        return
    for each in descendants(pid):
        try:
            os.kill(each, signal.SIGKILL)
        except ProcessLookupError:
            pass


def session_dir(node_dir, namespace, pod):
    """Where the ssh agent records each command it runs on a pod (pid and start time, one file each):
    under one folder for all pods (no namespace starts with a dot), so that a sync looks only at
    pods that ran something over ssh."""
    return os.path.join(node_dir, ".ssh-sessions", namespace, pod)


def kill_sessions(node_dir, namespace, pod):
    """What ran on a pod over ssh (Open MPI's orted and its ranks) dies with it: a container's
    processes end with its PID 1, sshd here. The pod's record goes with them."""
    where = session_dir(node_dir, namespace, pod)
    for name in os.listdir(where) if os.path.isdir(where) else []:
        with open(os.path.join(where, name)) as f:
            started = f.read().strip()
        pid = int(name)
        try:
            if process_start(pid) == started:  # else it ended, and the pid names another process
                kill_tree(pid)
        except (OSError, IndexError):
            pass
    shutil.rmtree(where, ignore_errors=True)


def own_host_names():
    """Whether a command run on a pod can have the pod's own host name: a UTS namespace of its own
    (unshare --uts, which needs CAP_SYS_ADMIN). Without it every pod shares this machine's name."""
    try:
        return subprocess.run(["unshare", "--uts", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def is_pod_dns_name(value):
    parts = value.split(".")
    return len(parts) in (4, 6) and parts[3] == "svc" and (len(parts) == 4 or parts[4:] == ["cluster", "local"])


def failed_status(what):
    """The status a real node reports for each failure the tests can ask for."""
    if what == "Evicted":
        return {"phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory.", "conditions": [{"type": "Ready", "status": "False"}]}
    code = 137 if what == "OOMKilled" else 1
    return {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "worker", "ready": False, "restartCount": 0, "state": {
                "terminated": {"exitCode": code, "reason": what, "finishedAt": now()}}}]}


class Kubelet:
    def __init__(self, api, bin_dirs, work_dir, period, capacity, claims=None, sshd_stop_seconds=0.0):
        self.api = api
        self.capacity = capacity
        self.claims = claims or {}  # PersistentVolumeClaim name -> the directory its volume holds
        self.bin_dirs = [os.path.abspath(d) for d in bin_dirs]
        self.work_dir = os.path.abspath(work_dir)
        self.period = period
        self.running = {}  # pod uid -> subprocess.Popen
        self.started = set()  # uids of the pods whose processes this node started (sync loop only)
        self.reported = {}  # pod uid -> the terminal status this node reported for it
        self.terminating = {}  # pod uid -> (when its grace ends, whether it ran a process here): being deleted
        self.sshd_stop_seconds = sshd_stop_seconds
        self.ports = {}  # (namespace, headless Service) -> the rendezvous port its pods share
        self.lock = threading.Lock()

    # --- the Job controller -------------------------------------------------------------------
    def sync_jobs(self):
        for job in self.api.list("/apis/batch/v1/jobs"):
            meta, status = job["metadata"], job.get("status", {})
            ns = meta["namespace"]
            if any(c["status"] == "True" and c["type"] in ("Complete", "Failed") for c in status.get("conditions", [])):
                continue
            pods = [p for p in self.api.list(pod_path(ns)) if (controller_of(p) or {}).get("uid") == meta["uid"]]
            if not pods:
                self.create_job_pod(job)
                self.api.patch_status(job_path(ns, meta["name"]), {"startTime": now(), "active": 1})
                continue
            phase = pods[0].get("status", {}).get("phase", "Pending")
            if phase == "Succeeded":
                self.api.patch_status(job_path(ns, meta["name"]), {
                    "active": 0, "succeeded": 1, "completionTime": now(),
                    "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now()}]})
            elif phase == "Failed":
                reason = pods[0]["status"].get("reason")
                self.api.patch_status(job_path(ns, meta["name"]), {"active": 0, "failed": 1, "conditions": [{
                    "type": "Failed", "status": "True", "lastTransitionTime": now(),
                    "reason": "DeadlineExceeded" if reason == "DeadlineExceeded" else "BackoffLimitExceeded",
                    "message": "Job was active longer than specified deadline" if reason == "DeadlineExceeded"
                    else "Job has reached the specified backoff limit"}]})

    def create_job_pod(self, job):
        meta, template = job["metadata"], job["spec"]["template"]
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        labels = dict(template.get("metadata", {}).get("labels", {}))
        labels.update({"job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"]})
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{meta['name']}-{suffix}", "namespace": meta["namespace"], "labels": labels,
                            "annotations": {"dlbench.test/active-deadline-seconds":
                                            str(job["spec"].get("activeDeadlineSeconds", 0))},
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
               "spec": template["spec"]}
        self.api.call("POST", pod_path(meta["namespace"]), pod)

    # --- the kubelet ---------------------------------------------------------------------------
    def sync_pods(self):
        alive = set()
        pods = self.api.list("/api/v1/pods")
        # What runs on the node: bound and not ended. A pod being deleted is there until it is gone,
        # as the scheduler counts it.
        placed = [p for p in pods if p["spec"].get("nodeName") and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status", {})
            alive.add(meta["uid"])
            if "deletionTimestamp" in meta:
                self.terminate(pod)
                continue
            phase = status.get("phase", "Pending")
            if phase in ("Succeeded", "Failed"):
                continue
            path = pod_path(meta["namespace"], meta["name"])
            with self.lock:
                ended = self.reported.get(meta["uid"])
            if ended:
                # The API server shows a pod running that ended here (restored from a backup taken
                # before its report): the kubelet's status manager reports what it knows again.
                print(f"simulated kubelet: {meta['name']} ended here, shown {phase}: reporting it again",
                      file=sys.stderr, flush=True)
                self.api.patch_status(path, ended, meta["uid"])
                continue
            fail = meta.get("annotations", {}).get(FAIL_ANNOTATION)
            if fail in FAILURES:
                self.stop(meta["uid"])
                kill_sessions(self.work_dir, meta["namespace"], meta["name"])
                self.api.patch_status(path, failed_status(fail), meta["uid"])
                continue
            if phase == "Pending" and not self.place(pod, placed):
                continue
            # What this node started is its own record, not the pod's phase: a Running report that a
            # frozen API server took late (the client had given up) reads Running before anything ran.
            owner = controller_of(pod)
            if ((owner and owner.get("kind") == "Job") or not runs_sshd(pod)) and meta["uid"] not in self.started:
                self.started.add(meta["uid"])
                try:
                    self.start(pod)
                except BaseException:
                    self.started.discard(meta["uid"])  # the next sync starts it again
                    raise
        with self.lock:
            gone = [uid for uid in self.running if uid not in alive]
        for uid in gone:  # deleted pods: their processes are killed, as the runtime would
            self.stop(uid)
        # Pods gone at once (a delete with a grace of 0): what ran on them over ssh ends too.
        names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
        sessions = os.path.join(self.work_dir, ".ssh-sessions")
        for namespace in os.listdir(sessions) if os.path.isdir(sessions) else []:
            for name in os.listdir(os.path.join(sessions, namespace)):
                if (namespace, name) not in names:
                    kill_sessions(self.work_dir, namespace, name)
        self.started &= alive
        with self.lock:
            self.reported = {uid: status for uid, status in self.reported.items() if uid in alive}
            self.terminating = {uid: at for uid, at in self.terminating.items() if uid in alive}

    def terminate(self, pod):
        """A pod being deleted, as the kubelet ends one: SIGTERM to its processes, SIGKILL once its
        grace (deletionGracePeriodSeconds) is spent, its end reported, then the pod deleted with a
        grace of 0 and its uid as a precondition. A pod that runs sshd (no process here) takes
        --sshd-stop-seconds, within its grace."""
        meta = pod["metadata"]
        uid, path = meta["uid"], pod_path(meta["namespace"], meta["name"])
        with self.lock:
            process = self.running.get(uid)  # gone from here once it has ended
            first = uid not in self.terminating
            if first:
                grace = float(meta.get("deletionGracePeriodSeconds", 30))
                self.terminating[uid] = (time.time() + (grace if process else min(grace, self.sshd_stop_seconds)),
                                         process is not None or uid in self.started)
            grace_ends, had_process = self.terminating[uid]
        if process is not None and process.poll() is None:
            if first:
                os.killpg(process.pid, signal.SIGTERM)
            if time.time() < grace_ends:
                return
            kill_tree(process.pid)
            process.wait()
        elif not had_process and time.time() < grace_ends:
            return
        kill_sessions(self.work_dir, meta["namespace"], meta["name"])
        if not had_process and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and pod["spec"].get("nodeName"):
            container = pod["spec"]["containers"][0]["name"]  # sshd, ended by the SIGTERM
            self.api.patch_status(path, {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}],
                                         "containerStatuses": [{"name": container, "ready": False, "restartCount": 0,
                                                                "state": {"terminated": {"exitCode": 143, "reason": "Error",
                                                                                         "finishedAt": now()}}}]}, uid)
        try:
            self.api.call("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                           "preconditions": {"uid": uid}})
        except urllib.error.HTTPError as e:
            if e.code != 409:  # 409: a namesake, not this pod
                raise

    def place(self, pod, placed):
        """The scheduler's part for a Pending pod: bound to the node and reported Running (True), or
        left Pending with the scheduler's reason (False)."""
        meta, status = pod["metadata"], pod.get("status", {})
        path = pod_path(meta["namespace"], meta["name"])
        scheduled = [c for c in status.get("conditions", []) if c.get("type") == "PodScheduled"]
        if pod["spec"].get("schedulingGates"):
            reason, why = "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"
        else:
            reason = "Unschedulable"
            why = (unschedulable_because(pod, self.capacity) or anti_affinity_conflict(pod, placed) or
                   missing_pod_group(self.api, pod))
        if why:
            if not scheduled or scheduled[0].get("reason") != reason or scheduled[0].get("message") != why:
                self.api.patch_status(path, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": reason, "message": why,
                     "lastTransitionTime": now()}]}, meta["uid"])
            return False
        if not pod["spec"].get("nodeName"):
            self.api.call("POST", path + "/binding", {"apiVersion": "v1", "kind": "Binding",
                                                      "metadata": {"name": meta["name"]},
                                                      "target": {"kind": "Node", "name": NODE}})
            pod["spec"]["nodeName"] = NODE
        placed.append(pod)
        self.api.patch_status(path, {
            "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1", "startTime": now(),
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                           {"type": "Ready", "status": "True", "lastTransitionTime": now()}],
            "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": now()}}}
                                  for c in pod["spec"]["containers"]]}, meta["uid"])
        return True

    def stop(self, uid):
        with self.lock:
            process = self.running.pop(uid, None)
        if process and process.poll() is None:
            kill_tree(process.pid)

    def rendezvous_port(self, namespace, subdomain):
        with self.lock:
            key = (namespace, subdomain)
            if key not in self.ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    self.ports[key] = s.getsockname()[1]
            return self.ports[key]

    def start(self, pod):
        meta, container = pod["metadata"], pod["spec"]["containers"][0]
        root = os.path.join(self.work_dir, meta["namespace"], meta["name"])
        os.makedirs(root, exist_ok=True)
        sources = self.materialize_volumes(pod, root)

        def mounts_of(c):
            mounts = []
            for mount in c.get("volumeMounts", []):
                where = sources.get(mount["name"])
                if where is not None:
                    mounts.append((mount["mountPath"], os.path.join(where, mount["subPath"]) if "subPath" in mount else where))
            mounts.append((c.get("terminationMessagePath", "/dev/termination-log"), os.path.join(root, "termination-log")))
            mounts.sort(key=lambda m: -len(m[0]))  # the most specific mount path wins
            return mounts

        def localizer(c):
            # Mount paths as whole path prefixes, in one pass: "/dlbench" maps "/dlbench/x" but
            # not "/etc/dlbench", nor the inside of a path it has just produced.
            mounts = dict(mounts_of(c))
            pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
                                 + r")(?=/|$|[^\w.-])")

            def local(text):
                return pattern.sub(lambda m: mounts[m.group(1)], text)
            return local

        def environment(c):
            local = localizer(c)
            env = {"PATH": os.pathsep.join(self.bin_dirs + [os.environ.get("PATH", "/usr/bin:/bin")]),
                   "HOME": root, "HOSTNAME": meta["name"], "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
            for e in c.get("env", []):
                if "value" not in e:
                    continue
                value = local(e["value"])
                if is_pod_dns_name(value):
                    value = "127.0.0.1"  # every simulated pod's IP
                if e["name"] in ("MASTER_PORT", "PET_MASTER_PORT") and pod["spec"].get("subdomain"):
                    value = str(self.rendezvous_port(meta["namespace"], pod["spec"]["subdomain"]))
                env[e["name"]] = value
            return env

        # Init containers, in order, before the container; one that fails fails the pod.
        for init in pod["spec"].get("initContainers", []):
            local = localizer(init)
            command = [local(arg) for arg in init["command"] + init.get("args", [])]
            try:
                done = subprocess.run(command, cwd=root, env=environment(init), capture_output=True, text=True, timeout=60)
                code, message = done.returncode, (done.stdout + done.stderr)[-2048:]
            except OSError as e:
                code, message = 127, str(e)
            if code != 0:
                self.api.patch_status(pod_path(meta["namespace"], meta["name"]), {
                    "phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}],
                    "initContainerStatuses": [{"name": init["name"], "ready": False, "restartCount": 0, "state": {
                        "terminated": {"exitCode": code, "reason": "Error", "message": message, "finishedAt": now()}}}]},
                    meta["uid"])
                return

        local = localizer(container)
        env = environment(container)
        # The pod network: mpirun reaches the workers through this script's ssh subcommand.
        agent = os.path.join(root, "ssh")
        with open(agent, "w") as f:
            f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.abspath(__file__)} ssh --api {self.api.base} "
                    f"--namespace {meta['namespace']} --ssh-dir {local('/etc/dlbench/ssh')} --node-dir {self.work_dir} "
                    f"\"$@\"\n")
        os.chmod(agent, 0o755)
        env["OMPI_MCA_plm_rsh_agent"] = agent
        command = [local(arg) for arg in container["command"] + container.get("args", [])]
        log = open(os.path.join(root, "log"), "w+")
        process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        with self.lock:
            self.running[meta["uid"]] = process
        deadline = int(meta.get("annotations", {}).get("dlbench.test/active-deadline-seconds", "0"))
        threading.Thread(target=self.wait, args=(pod, process, log, os.path.join(root, "termination-log"), deadline),
                         daemon=True).start()

    def materialize_volumes(self, pod, root):
        """Secret and ConfigMap volumes as files, emptyDir as a directory; returns {volume name: local path}."""
        ns = pod["metadata"]["namespace"]
        sources = {}
        for volume in pod["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume or "hostPath" in volume:
                # A bound claim or a host directory: the node's directory itself (read-only is not
                # enforced here). An unknown claim mounts nothing that exists.
                claim = volume.get("persistentVolumeClaim", {}).get("claimName")
                sources[volume["name"]] = (self.claims.get(claim, os.path.join(root, "unbound-claim", claim)) if claim
                                           else volume["hostPath"]["path"])
                continue
            directory = os.path.join(root, "volumes", volume["name"])
            os.makedirs(directory, exist_ok=True)
            if "secret" in volume:
                secret = self.api.call("GET", f"/api/v1/namespaces/{ns}/secrets/{volume['secret']['secretName']}") or {}
                for key, value in secret.get("data", {}).items():
                    with open(os.path.join(directory, key), "wb") as f:
                        f.write(base64.b64decode(value))
                    os.chmod(os.path.join(directory, key), volume["secret"].get("defaultMode", 0o644))
            elif "configMap" in volume:
                config_map = self.api.call("GET", f"/api/v1/namespaces/{ns}/configmaps/{volume['configMap']['name']}") or {}
                for key, value in config_map.get("data", {}).items():
                    with open(os.path.join(directory, key), "w") as f:
                        f.write(value)
            sources[volume["name"]] = directory  # emptyDir: the directory itself
        return sources

    def wait(self, pod, process, log, termination_log, deadline):
        meta = pod["metadata"]
        try:
            code = process.wait(timeout=deadline or None)
            reason = None
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            code = process.wait()
            reason = "DeadlineExceeded"
        with self.lock:
            if self.running.pop(meta["uid"], None) is None:
                return  # deleted meanwhile: nobody to report to
        message = open(termination_log).read() if os.path.exists(termination_log) else ""
        container = pod["spec"]["containers"][0]
        if not message and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            log.seek(0)
            message = "".join(log.readlines()[-80:])[-2048:]
        log.close()
        status = {"phase": "Succeeded" if code == 0 else "Failed",
                  "conditions": [{"type": "Ready", "status": "False"}],
                  "containerStatuses": [{"name": container["name"], "ready": False, "restartCount": 0, "state": {
                      "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "message": message[:4096], "finishedAt": now()}}}]}
        if reason:
            status.update({"phase": "Failed", "reason": reason, "message": "Pod was active on the node longer "
                                                                          "than the specified deadline"})
        # A kubelet reports until the API server hears it (it may be away for a while); a pod that is
        # gone (404: None) needs no report.
        while True:
            try:
                self.api.patch_status(pod_path(meta["namespace"], meta["name"]), status, meta["uid"])
                with self.lock:
                    self.reported[meta["uid"]] = status
                return
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise
                # A namesake replaced the pod while this report waited (the API server was away and
                # came back restored, the operator made the pod again): the report is not the new one's.
                print(f"simulated kubelet: {meta['name']} was replaced: its report dropped", file=sys.stderr, flush=True)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                print(f"simulated kubelet: reporting {meta['name']}: {e}", file=sys.stderr, flush=True)
                time.sleep(self.period)

    def serve(self):
        while True:
            try:
                self.sync_pods()
                self.sync_jobs()
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                print(f"simulated kubelet: {e}", file=sys.stderr, flush=True)
            time.sleep(self.period)


def ssh(argv):
    """mpirun's rsh agent: `ssh [options] host command...` against the simulated cluster."""
    parser = argparse.ArgumentParser(prog="simulated_kubelet.py ssh")
    parser.add_argument("--api", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--ssh-dir", required=True, help="the launcher's mounted SSH Secret")
    parser.add_argument("--node-dir", help="the kubelet's work directory: the command is recorded as running on the pod")
    own, rest = parser.parse_known_args(argv)
    options_with_value = {"-F", "-o", "-l", "-p", "-i", "-E"}
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in options_with_value:
            value = rest.pop(0)
            if option == "-F" and not os.path.exists(value):
                sys.exit(f"Can't open user config file {value}: No such file or directory")
    if len(rest) < 2:
        sys.exit("usage: ssh [options] host command")
    host, command = rest[0], " ".join(rest[1:])
    api = Api(own.api)
    # Cluster DNS for a headless Service: <hostname>.<subdomain>.<namespace>.svc[.cluster.local]
    parts = host.split(".")
    if len(parts) < 4 or parts[3] != "svc" or parts[2] != own.namespace:
        print(f"ssh: Could not resolve hostname {host}: Name or service not known", file=sys.stderr)
        sys.exit(255)
    target = None
    for pod in api.list(pod_path(own.namespace)):
        spec = pod["spec"]
        if spec.get("hostname") == parts[0] and spec.get("subdomain") == parts[1]:
            target = pod
    service = api.call("GET", f"/api/v1/namespaces/{own.namespace}/services/{parts[1]}")
    if target is None or service is None or target.get("status", {}).get("phase") != "Running":
        print(f"ssh: Could not resolve hostname {host}: Name or service not known", file=sys.stderr)
        sys.exit(255)
    # The worker's sshd accepts the launcher only if its key is in the worker's authorized_keys.
    authorized = ""
    for volume in target["spec"].get("volumes", []):
        if "secret" in volume:
            secret = api.call("GET", f"/api/v1/namespaces/{own.namespace}/secrets/{volume['secret']['secretName']}")
            authorized += base64.b64decode((secret or {}).get("data", {}).get("authorized_keys", "")).decode()
    public_key = os.path.join(own.ssh_dir, "id_ecdsa.pub")
    key = open(public_key).read().strip() if os.path.exists(public_key) else None
    if not key or key not in authorized.splitlines():
        print(f"{host}: Permission denied (publickey).", file=sys.stderr)
        sys.exit(255)
    if own.node_dir:  # it runs on the target pod: it ends with that pod
        where = session_dir(own.node_dir, own.namespace, target["metadata"]["name"])
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, str(os.getpid())), "w") as f:
            f.write(process_start(os.getpid()))
    argv = ["/bin/sh", "-c", command]
    if own_host_names():  # the pod's host name, as each pod has its own (ranks count nodes by it)
        hostname = target["spec"].get("hostname") or target["metadata"]["name"]
        argv = ["unshare", "--uts", "/bin/sh", "-c", f"hostname {shlex.quote(hostname)} && exec /bin/sh -c {shlex.quote(command)}"]
    os.execvp(argv[0], argv)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ssh":
        return ssh(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", required=True, help="the test API server's URL")
    parser.add_argument("--bin-dir", action="append", default=[], help="put on PATH of the processes it runs")
    parser.add_argument("--work-dir", required=True, help="volumes, logs and termination messages, one directory per pod")
    parser.add_argument("--period", type=float, default=0.2, help="seconds between syncs")
    parser.add_argument("--claim", action="append", default=[], metavar="NAME=DIR",
                        help="a bound PersistentVolumeClaim: pods that mount claim NAME see DIR")
    parser.add_argument("--sshd-stop-seconds", type=float, default=0.0,
                        help="a deleted pod that runs sshd takes this long to stop (within its grace)")
    parser.add_argument("--capacity", action="append", default=["nvidia.com/gpu=8"], metavar="RESOURCE=N",
                        help="what the node has of an extended resource (default nvidia.com/gpu=8)")
    args = parser.parse_args()
    capacity = {k: int(v) for k, v in (c.split("=", 1) for c in args.capacity)}
    exit_with_parent()
    if os.path.exists(args.work_dir):
        shutil.rmtree(args.work_dir)
    print(f"simulated kubelet on {args.api}", flush=True)
    claims = dict(c.split("=", 1) for c in args.claim)
    Kubelet(Api(args.api), args.bin_dir, args.work_dir, args.period, capacity, claims, args.sshd_stop_seconds).serve()


if __name__ == "__main__":
    main()
