#!/usr/bin/env python3
"""A small Kubernetes API server for dlbench's tests (plain HTTP on loopback, no auth).

Enough of the real API for kubectl 1.32 and the operator: discovery (/api, /apis and their
resource lists, CRDs included once created), create/get/list/update/merge-patch/delete of
namespaced objects, equality label selectors, watch streams with resourceVersion and
bookmarks, 409 Conflict on a stale resourceVersion, 410 Gone for a watch older than the kept
history, the status subresource (status only through it), Secrets' stringData folded into
data, owner-reference garbage collection (cascading), graceful deletion of pods (a pod on a node
stays, Terminating with a deletionTimestamp, until its kubelet deletes it with a grace of 0; a
DeleteOptions' uid precondition is honoured), the pods/eviction subresource (`kubectl drain`'s
request: the DisruptionTarget condition, then a graceful delete), refused with 429 where a
PodDisruptionBudget (policy/v1, matchLabels selectors, an integer minAvailable, its
unhealthyPodEvictionPolicy) does not allow it, as the real eviction subresource judges (its
status is not kept: the budget is judged from the pods at each request), and
Table output with a CRD's
additionalPrinterColumns so that `kubectl get br` shows its real columns.

Also, for fault tests, behaviour the real API server has too: the pods/binding subresource (how a
scheduler sets spec.nodeName); watch events delivered late (--watch-delay: the watch cache lags
behind writes, so a client's cache can be stale); state kept across a restart (--state FILE:
etcd outlives the API server process; written on SIGTERM, read at start); and open watches ended
with an ERROR event 410 Expired after S seconds each (--expire-watches-every S: what the real
server sends a watcher when its watch cache's window has moved past the watcher's version, after
an etcd compaction, say; the client must list again). And a restore from a backup: --snapshot FILE
is written on SIGUSR1 while serving (`etcdctl snapshot save`); started with that file as its --state
and --bump-revision N, the server moves its resourceVersion on by N and serves no watch from before
(`etcdutl snapshot restore --bump-revision N --mark-compacted`, the restore Kubernetes' docs ask
for), so every client lists again and finds the world as the snapshot held it. --max-object-bytes N
refuses an update that makes an object larger than N as an API server over etcd refuses one past
etcd's request limit (500, "etcdserver: request is too large").

    test_apiserver.py --port 8001 [--history 1000] [--watch-delay S] [--expire-watches-every S] [--state FILE]
                      [--snapshot FILE] [--bump-revision N] [--max-object-bytes N]
"""
import argparse
import base64
import bisect
import copy
import datetime
import json
import os
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

BUILTIN = {
    # (group, version, plural): (kind, namespaced)
    ("", "v1", "pods"): ("Pod", True),
    ("", "v1", "services"): ("Service", True),
    ("", "v1", "configmaps"): ("ConfigMap", True),
    ("", "v1", "secrets"): ("Secret", True),
    ("", "v1", "events"): ("Event", True),
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "serviceaccounts"): ("ServiceAccount", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("rbac.authorization.k8s.io", "v1", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): ("RoleBinding", True),
    ("rbac.authorization.k8s.io", "v1", "clusterroles"): ("ClusterRole", False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"): ("ClusterRoleBinding", False),
    ("batch", "v1", "jobs"): ("Job", True),
    ("policy", "v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
    ("coordination.k8s.io", "v1", "leases"): ("Lease", True),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): ("CustomResourceDefinition", False),
}


class UnsupportedMediaType(Exception):
    pass


SHORT_NAMES = {"pods": ["po"], "services": ["svc"], "configmaps": ["cm"], "events": ["ev"], "namespaces": ["ns"],
               "serviceaccounts": ["sa"], "deployments": ["deploy"],
               "customresourcedefinitions": ["crd", "crds"], "poddisruptionbudgets": ["pdb"]}


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """Every object, a global resourceVersion counter and the recent watch events."""

    def __init__(self, history):
        self.lock = threading.Condition()
        self.objects = {}  # (group, plural, namespace, name) -> object
        self.rv = 1
        self.events = []  # (rv, group, plural, namespace, type, object)
        self.history = history
        self.compacted = 0  # no watch from before this version (a restore's --bump-revision)
        self.resources = dict(BUILTIN)
        self.crds = {}  # (group, plural) -> CRD object
        self.objects[("", "namespaces", "", "default")] = self._meta(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})

    def _meta(self, obj):
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        meta.setdefault("generation", 1)
        return obj

    def record(self, group, plural, namespace, kind, obj):
        self.events.append((self.rv, group, plural, namespace, kind, copy.deepcopy(obj), time.time()))
        del self.events[:-self.history]
        self.lock.notify_all()

    def events_after(self, rv):
        """Events newer than rv; the list is in resourceVersion order, so a binary search finds them."""
        return self.events[bisect.bisect_right(self.events, rv, key=lambda e: e[0]):]

    def oldest_watchable(self):
        return max(self.compacted, self.events[0][0] - 1 if len(self.events) >= self.history else 0)

    def register_crd(self, crd):
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                self.resources[(spec["group"], version["name"], spec["names"]["plural"])] = (
                    spec["names"]["kind"], spec.get("scope", "Namespaced") == "Namespaced")
        self.crds[(spec["group"], spec["names"]["plural"])] = crd

    def delete(self, key, grace=None):
        """Deletes an object (the lock held); True where it is a pod left terminating instead.

        A pod on a node is deleted gracefully, as the pod strategy's CheckGracefulDelete decides:
        its deletionTimestamp is set `grace` seconds ahead (DeleteOptions', else the pod's
        terminationGracePeriodSeconds, 30 by default) and it stays, Terminating, until its kubelet
        has stopped its containers and deletes it with a grace of 0. A pod no node runs, or one
        that has ended, goes at once; so does every other kind. Owner references: the garbage
        collector deletes what the object owned, and so on down, the same way."""
        obj = self.objects[key]
        if key[:2] == ("", "pods"):
            spec, phase = obj.get("spec", {}), obj.get("status", {}).get("phase")
            period = spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                period = 0
            meta = obj["metadata"]
            if period > 0:
                if "deletionTimestamp" in meta and meta.get("deletionGracePeriodSeconds", 0) <= period:
                    return True  # already terminating, no sooner
                at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=period)
                meta["deletionTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
                meta["deletionGracePeriodSeconds"] = period
                self._meta(obj)
                self.record(key[0], key[1], key[2], "MODIFIED", obj)
                return True
        self.objects.pop(key)
        self._meta(obj)
        self.record(key[0], key[1], key[2], "DELETED", obj)
        uid = obj["metadata"]["uid"]
        for child_key, child in list(self.objects.items()):
            if child_key in self.objects and any(ref.get("uid") == uid for ref in child["metadata"].get("ownerReferences", [])):
                self.delete(child_key)
        return False


def selector_matches(selector, labels):
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif labels.get(term.strip()) is None:
            return False
    return True


def age(timestamp):
    """kubectl's short duration: 42s, 5m, 3h, 2d."""
    created = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def json_path(obj, path):
    value = obj
    for part in filter(None, path.split(".")):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store = None
    watch_delay = 0.0
    expire_watches_every = 0.0
    max_object_bytes = 0  # 0: no limit

    def log_message(self, *args):
        pass

    # ---- plumbing ------------------------------------------------------------------------
    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.send_json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": message, "reason": reason, "code": code})

    def body(self):
        length = int(self.headers.get("Content-Length", 0))
        data = self.rfile.read(length)
        if "json" not in self.headers.get("Content-Type", "application/json"):
            raise UnsupportedMediaType(self.headers.get("Content-Type"))
        return json.loads(data or b"{}")

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except UnsupportedMediaType as e:
            self.status(415, "UnsupportedMediaType", f"only JSON bodies are supported, not {e}")

    def route(self):
        """-> (group, version, plural, namespace, name, subresource) or None for discovery."""
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        self.query = parse_qs(url.query)
        if not parts or parts[0] not in ("api", "apis"):
            return None
        if parts[0] == "api":
            group, rest = "", parts[1:]
        else:
            if len(parts) < 2:
                return None
            group, rest = parts[1], parts[2:]
        if not rest:
            return None
        version, rest = rest[0], rest[1:]
        if not rest:
            return (group, version, None, None, None, None)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return (group, version, plural, namespace, name, sub)

    # ---- discovery -----------------------------------------------------------------------
    def discovery(self):
        path = urlparse(self.path).path.rstrip("/")
        s = self.store
        with s.lock:
            resources = dict(s.resources)
        if path == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                        "serverAddress": "127.0.0.1"}]})
        if path == "/apis":
            groups = {}
            for (group, version, _plural) in resources:
                if group:
                    groups.setdefault(group, set()).add(version)
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(vs)],
                 "preferredVersion": {"groupVersion": f"{g}/{sorted(vs)[0]}", "version": sorted(vs)[0]}}
                for g, vs in sorted(groups.items())]})
        if path == "/openapi/v3":
            # One document per group version; kubectl reads it to learn that the server validates
            # fields itself (fieldValidation), so `kubectl apply` works without --validate=false.
            gvs = sorted({(g, v) for (g, v, _p) in resources})
            return self.send_json(200, {"paths": {
                (f"apis/{g}/{v}" if g else f"api/{v}"): {"serverRelativeURL": f"/openapi/v3/{'apis/' + g if g else 'api'}/{v}"}
                for g, v in gvs}})
        if path.startswith("/openapi/v3/"):
            return self.openapi_v3(path[len("/openapi/v3/"):], resources)
        if path == "/version":
            return self.send_json(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-dlbench-test"})
        return self.status(404, "NotFound", f"{path} not found")

    def openapi_v3(self, gv_path, resources):
        parts = gv_path.split("/")
        group, version = (parts[1], parts[2]) if parts[0] == "apis" and len(parts) == 3 else ("", parts[-1])
        paths = {}
        for (g, v, plural), (kind, namespaced) in resources.items():
            if (g, v) != (group, version):
                continue
            prefix = f"/apis/{g}/{v}" if g else f"/api/{v}"
            item = f"{prefix}/namespaces/{{namespace}}/{plural}/{{name}}" if namespaced else f"{prefix}/{plural}/{{name}}"
            operation = {"x-kubernetes-group-version-kind": {"group": g, "version": v, "kind": kind},
                         "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                         "responses": {"200": {"description": "OK"}}}
            paths[item] = {"patch": operation, "put": operation}
        if not paths:
            return self.status(404, "NotFound", f"/openapi/v3/{gv_path} not found")
        self.send_json(200, {"openapi": "3.0.0", "info": {"title": "dlbench test apiserver", "version": "v1.32.0"},
                             "paths": paths, "components": {"schemas": {}}})

    def resource_list(self, group, version):
        s = self.store
        with s.lock:
            items = [(p, k, ns) for (g, v, p), (k, ns) in s.resources.items() if g == group and v == version]
            crds = dict(s.crds)
        if not items:
            return self.status(404, "NotFound", "no such group version")
        out = []
        for plural, kind, namespaced in items:
            names = crds.get((group, plural), {}).get("spec", {}).get("names", {})
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            out.append({"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                        "verbs": verbs, "shortNames": names.get("shortNames", SHORT_NAMES.get(plural, [])),
                        "categories": names.get("categories", [])})
            if (group, plural) in crds or kind in ("Pod", "Job"):
                out.append({"name": plural + "/status", "singularName": "", "namespaced": namespaced, "kind": kind,
                            "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})

    # ---- verbs ---------------------------------------------------------------------------
    def known(self, group, version, plural):
        with self.store.lock:
            return self.store.resources.get((group, version, plural))

    def do_GET(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        r = self.route()
        if r is None:
            return self.discovery()
        group, version, plural, namespace, name, sub = r
        if plural is None:
            return self.resource_list(group, version)
        if not self.known(group, version, plural):
            return self.status(404, "NotFound", f"the server could not find the requested resource ({plural})")
        s = self.store
        if name:
            with s.lock:
                obj = s.objects.get((group, plural, namespace or "", name))
            if obj is None:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            return self.send_json(200, self.maybe_table(group, plural, [obj], single=True) or obj)
        if self.query.get("watch", ["false"])[0] in ("1", "true"):
            return self.watch(group, version, plural, namespace)
        selector = self.query.get("labelSelector", [""])[0]
        with s.lock:
            items = [copy.deepcopy(o) for (g, p, ns, _n), o in sorted(s.objects.items())
                     if g == group and p == plural and (namespace is None or ns == namespace)
                     and selector_matches(selector, o["metadata"].get("labels", {}))]
            rv = str(s.rv)
        table = self.maybe_table(group, plural, items)
        if table:
            return self.send_json(200, table)
        kind, _ = self.known(group, version, plural)
        self.send_json(200, {"apiVersion": f"{group}/{version}" if group else version, "kind": kind + "List",
                             "metadata": {"resourceVersion": rv}, "items": items})

    def maybe_table(self, group, plural, items, single=False):
        if "as=Table" not in self.headers.get("Accept", ""):
            return None
        crd = self.store.crds.get((group, plural))
        columns = [{"name": "Name", "type": "string", "format": "name"}]
        paths = []
        if crd:
            for c in crd["spec"]["versions"][0].get("additionalPrinterColumns", []):
                if c["jsonPath"] == ".metadata.creationTimestamp":
                    continue
                columns.append({"name": c["name"], "type": c["type"], "priority": c.get("priority", 0)})
                paths.append(c["jsonPath"])
        columns.append({"name": "Age", "type": "date"})
        rows = []
        for o in items:
            cells = [o["metadata"]["name"]] + [json_path(o, p) for p in paths] + [age(o["metadata"]["creationTimestamp"])]
            rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                    "metadata": o["metadata"]}})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(self.store.rv)},
                "columnDefinitions": columns, "rows": rows}

    def watch(self, group, version, plural, namespace):
        s = self.store
        selector = self.query.get("labelSelector", [""])[0]
        since = int(self.query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(self.query.get("timeoutSeconds", ["30"])[0])
        bookmarks = self.query.get("allowWatchBookmarks", ["false"])[0] == "true"
        with s.lock:
            if since and since < s.oldest_watchable():
                return self.status(410, "Expired", f"too old resource version: {since} ({s.oldest_watchable()})")
            if not since:
                since = s.rv
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = datetime.datetime.now().timestamp() + timeout
        expire_at = time.time() + self.expire_watches_every if self.expire_watches_every else None
        sent = since
        columns_sent = False
        try:
            while True:
                if expire_at is not None and time.time() >= expire_at:
                    event = {"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410,
                        "reason": "Expired", "message": f"The resourceVersion for the provided watch is too old: {sent}"}}
                    line = (json.dumps(event) + "\n").encode()
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    break
                with s.lock:
                    pending = s.events_after(sent)
                    if self.watch_delay:  # the watch cache lags: only events older than the delay
                        due = time.time() - self.watch_delay
                        pending = pending[:next((i for i, e in enumerate(pending) if e[6] > due), len(pending))]
                        if not pending and s.events_after(sent):
                            s.lock.wait(0.05)
                            continue
                    if not pending:
                        left = deadline - datetime.datetime.now().timestamp()
                        if left <= 0:
                            break
                        s.lock.wait(min(left, 1.0, max(0.01, expire_at - time.time()) if expire_at else 1.0))
                        if bookmarks and not s.events_after(sent):
                            pending = [("bookmark", s.rv)]
                        else:
                            continue
                for e in pending:
                    if e[0] == "bookmark":
                        kind, _ = self.known(group, version, plural)
                        event = {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": f"{group}/{version}" if group else version,
                                                                "metadata": {"resourceVersion": str(e[1])}}}
                        sent = max(sent, e[1])
                    else:
                        rv, g, p, ns, kind, obj, _at = e
                        sent = rv
                        if g != group or p != plural or (namespace is not None and ns != namespace):
                            continue
                        if not selector_matches(selector, obj["metadata"].get("labels", {})):
                            continue
                        # `kubectl get -w` asks for Tables: one row per event, columns on the first only.
                        table = self.maybe_table(group, plural, [obj])
                        if table is not None:
                            if columns_sent:
                                table["columnDefinitions"] = []
                            columns_sent = True
                        event = {"type": kind, "object": table or obj}
                    line = (json.dumps(event) + "\n").encode()
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self):
        r = self.route()
        if r is None or r[2] is None or not self.known(r[0], r[1], r[2]):
            return self.status(404, "NotFound", "unknown resource")
        group, version, plural, namespace, _name, _sub = r
        obj = self.body()
        if plural == "pods" and _sub == "binding":
            return self.bind(namespace, _name, obj)
        if plural == "pods" and _sub == "eviction":
            return self.evict(namespace, _name, obj)
        name = obj.get("metadata", {}).get("name")
        if not name:
            return self.status(422, "Invalid", "metadata.name: Required value")
        if plural == "secrets":
            fold_string_data(obj)
        s = self.store
        with s.lock:
            key = (group, plural, namespace or "", name)
            if key in s.objects:
                return self.status(409, "AlreadyExists", f'{plural} "{name}" already exists')
            if namespace:
                obj["metadata"]["namespace"] = namespace
            obj.pop("status", None) if (group, plural) in s.crds else None
            s._meta(obj)
            s.objects[key] = obj
            if plural == "customresourcedefinitions":
                s.register_crd(obj)
                # Served at once: Established, as clients (helm, kubectl wait) expect before using it.
                obj["status"] = {"acceptedNames": obj["spec"]["names"], "storedVersions": [
                    v["name"] for v in obj["spec"]["versions"] if v.get("storage")], "conditions": [
                    {"type": t, "status": "True", "reason": r, "lastTransitionTime": now()}
                    for t, r in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))]}
            s.record(group, plural, namespace or "", "ADDED", obj)
        self.send_json(201, obj)

    def bind(self, namespace, name, binding):
        """POST pods/NAME/binding: the scheduler's way to set spec.nodeName, once."""
        s = self.store
        with s.lock:
            pod = s.objects.get(("", "pods", namespace or "", name))
            if pod is None:
                return self.status(404, "NotFound", f'pods "{name}" not found')
            if pod["spec"].get("nodeName"):
                return self.status(409, "Conflict", f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
            pod["spec"]["nodeName"] = binding.get("target", {}).get("name", "")
            s._meta(pod)
            s.record("", "pods", namespace or "", "MODIFIED", pod)
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def evict(self, namespace, name, eviction):
        """POST pods/NAME/eviction (policy/v1 Eviction), what `kubectl drain` asks for each pod (and
        retries every 5 s while refused). Granted unless a PodDisruptionBudget forbids it: the pod
        gets the DisruptionTarget condition (EvictionByEvictionAPI) and is deleted as a DELETE
        deletes it, gracefully on a node."""
        s = self.store
        with s.lock:
            key = ("", "pods", namespace or "", name)
            pod = s.objects.get(key)
            if pod is None:
                return self.status(404, "NotFound", f'pods "{name}" not found')
            refusal = self.disruption_refused(namespace or "", pod)
            if refusal:
                return self.status(*refusal)
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"] + [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "message": "Eviction API: evicting", "lastTransitionTime": now()}]
            s._meta(pod)
            s.record("", "pods", namespace or "", "MODIFIED", pod)
            s.delete(key, (eviction.get("deleteOptions") or {}).get("gracePeriodSeconds"))
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def disruption_refused(self, namespace, pod):
        """Why the budgets over `pod` forbid its eviction, as (code, reason, message), or None. As the
        real subresource: a pod that has ended, is Pending or is being deleted goes whatever its
        budgets; two budgets over one pod are an error; otherwise its budget must keep minAvailable
        of its pods Ready (those not being deleted) without it, unless the pod is not Ready itself
        and the budget's unhealthyPodEvictionPolicy is AlwaysAllow."""
        s = self.store
        phase = pod.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed", "Pending") or "deletionTimestamp" in pod["metadata"]:
            return None
        def selects(budget, p):
            wanted = budget.get("spec", {}).get("selector", {}).get("matchLabels", {})
            labels = p["metadata"].get("labels", {})
            return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())

        budgets = [o for (g, plural, ns, _), o in s.objects.items()
                   if plural == "poddisruptionbudgets" and ns == namespace and selects(o, pod)]
        if not budgets:
            return None
        if len(budgets) > 1:
            return 500, "InternalError", ("This pod has more than one PodDisruptionBudget, which the eviction "
                                          "subresource does not support.")
        budget = budgets[0]

        def ready(p):
            return "deletionTimestamp" not in p["metadata"] and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", []))

        if not ready(pod) and budget["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return None
        healthy = sum(1 for (g, plural, ns, _), p in s.objects.items()
                      if plural == "pods" and ns == namespace and selects(budget, p) and ready(p))
        needed = budget["spec"].get("minAvailable", 0)
        if not isinstance(needed, int):
            return 500, "InternalError", "this test server judges only an integer minAvailable"
        if healthy - (1 if ready(pod) else 0) >= needed:
            return None
        return 429, "TooManyRequests", (
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget "
            f"{budget['metadata']['name']} needs {needed} healthy pods and has {healthy} currently")

    def uid_precondition_failed(self, plural, name, wanted_uid, current):
        """409 for a write or delete meant for another object of this name (a uid precondition)."""
        return self.status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": Precondition '
                                            f'failed: UID in precondition: {wanted_uid}, UID in object meta: '
                                            f'{current["metadata"]["uid"]}')

    def write(self, merge):
        r = self.route()
        if r is None or r[4] is None or not self.known(r[0], r[1], r[2]):
            return self.status(404, "NotFound", "unknown resource")
        group, version, plural, namespace, name, sub = r
        patch = self.body()
        s = self.store
        with s.lock:
            key = (group, plural, namespace or "", name)
            current = s.objects.get(key)
            if current is None:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            wanted_rv = patch.get("metadata", {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                return self.status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object '
                                                    "has been modified; please apply your changes to the latest version")
            wanted_uid = patch.get("metadata", {}).get("uid")
            if wanted_uid and wanted_uid != current["metadata"]["uid"]:  # a namesake made since the writer's read
                return self.uid_precondition_failed(plural, name, wanted_uid, current)
            updated = copy.deepcopy(current)
            if merge:
                merge_patch(updated, patch)
                if plural == "secrets":
                    fold_string_data(updated)
            else:
                updated = patch
                if plural == "secrets":
                    fold_string_data(updated)
                updated.setdefault("metadata", {})
                for k in ("uid", "creationTimestamp", "namespace", "generation"):
                    if k in current["metadata"]:
                        updated["metadata"][k] = current["metadata"][k]
            has_status_subresource = (group, plural) in s.crds or plural in ("pods", "jobs")
            if has_status_subresource:
                if sub == "status":  # only status changes
                    updated = {**copy.deepcopy(current), "status": updated.get("status", {})}
                else:  # status is ignored outside the subresource
                    if "status" in current:
                        updated["status"] = current["status"]
                    else:
                        updated.pop("status", None)
                    if updated.get("spec") != current.get("spec"):
                        updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            if self.max_object_bytes and len(json.dumps(updated)) > self.max_object_bytes:
                # What an API server over etcd answers for an object past etcd's request limit.
                return self.status(500, "InternalError", "etcdserver: request is too large")
            s._meta(updated)
            s.objects[key] = updated
            s.record(group, plural, namespace or "", "MODIFIED", updated)
        self.send_json(200, updated)

    def do_PUT(self):
        self.write(merge=False)

    def do_PATCH(self):
        self.write(merge=True)

    def do_DELETE(self):
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)  # DeleteOptions: read, or the next request breaks
        r = self.route()
        if r is None or r[4] is None or not self.known(r[0], r[1], r[2]):
            return self.status(404, "NotFound", "unknown resource")
        group, _version, plural, namespace, name, _sub = r
        options = json.loads(raw or b"{}") if raw.strip() else {}
        grace = options.get("gracePeriodSeconds", self.query.get("gracePeriodSeconds", [None])[0])
        s = self.store
        with s.lock:
            key = (group, plural, namespace or "", name)
            obj = s.objects.get(key)
            if obj is None:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            wanted_uid = (options.get("preconditions") or {}).get("uid")
            if wanted_uid and wanted_uid != obj["metadata"]["uid"]:  # the kubelet's last word on a namesake
                return self.uid_precondition_failed(plural, name, wanted_uid, obj)
            if s.delete(key, None if grace is None else int(grace)):
                return self.send_json(200, obj)  # graceful: the pod, now terminating, as the real server answers
        self.send_json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


def fold_string_data(secret):
    """Secrets: stringData is write-only, stored base64-encoded under data, like the real API server."""
    for key, value in (secret.pop("stringData", None) or {}).items():
        secret.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def save_state(store, path):
    with store.lock:
        state = {"rv": store.rv, "objects": [[list(k), o] for k, o in store.objects.items()]}
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def load_state(store, path):
    if not os.path.exists(path):
        return
    with open(path) as f:
        state = json.load(f)
    store.rv = state["rv"]
    for key, obj in state["objects"]:
        store.objects[tuple(key)] = obj
        if key[1] == "customresourcedefinitions":
            store.register_crd(obj)


def exit_with_parent():
    """Tests start this as a child; if the test dies without stopping it (a sanitizer abort), an
    orphan would hold the test runner's output pipe open until its timeout. Go with the parent."""
    import os
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--history", type=int, default=1000, help="watch events kept (older: 410 Gone)")
    parser.add_argument("--watch-delay", type=float, default=0.0, help="deliver watch events this many seconds late")
    parser.add_argument("--expire-watches-every", type=float, default=0.0,
                        help="end every watch after this many seconds with an ERROR event 410 Expired")
    parser.add_argument("--state", help="keep objects here across restarts: read at start, written on SIGTERM")
    parser.add_argument("--snapshot", help="write the objects here on SIGUSR1, while serving (a backup)")
    parser.add_argument("--bump-revision", type=int, default=0,
                        help="after reading --state, move the resourceVersion on by N and end every watch "
                             "from before with 410 (a restored backup, as etcdutl --mark-compacted)")
    parser.add_argument("--max-object-bytes", type=int, default=0,
                        help="refuse an update that makes an object larger than this (etcd's request limit, "
                             "1.5 MiB by default) with 500 'etcdserver: request is too large'")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="and this key (PEM)")
    args = parser.parse_args()
    exit_with_parent()
    Handler.store = Store(args.history)
    Handler.watch_delay = args.watch_delay
    Handler.expire_watches_every = args.expire_watches_every
    Handler.max_object_bytes = args.max_object_bytes
    import signal
    if args.snapshot:
        def save_snapshot(*_):
            with Handler.store.lock:
                save_state(Handler.store, args.snapshot)
        signal.signal(signal.SIGUSR1, save_snapshot)
    if args.state:
        load_state(Handler.store, args.state)
        if args.bump_revision:
            Handler.store.rv += args.bump_revision
            Handler.store.compacted = Handler.store.rv

        def save_and_exit(*_):
            # The store's lock is held to the exit: a write committed after the snapshot would be
            # answered 201/200 and then lost on restart, which no API server does (etcd has what
            # it acknowledged). A write still waiting for the lock dies unanswered instead.
            with Handler.store.lock:
                save_state(Handler.store, args.state)
                os._exit(0)
        signal.signal(signal.SIGTERM, save_and_exit)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    scheme = "http"
    if args.tls_cert:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    print(f"test apiserver on {scheme}://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
