"""A fake Kubernetes API server at the wire level: the official `kubernetes` client talks to it
unchanged over HTTP. It serves complete Node objects (list with label selectors, get), and the
kubelet's configz through the node proxy; it authenticates bearer tokens and authorises every request
with RBAC rules taken from Role/ClusterRole/binding documents (the repository's deploy/rbac.yaml),
answering 401/403/404/400 with Status objects worded as the real API server words them.

Limits, stated: no watch, no pods or exec yet (the pod checks are not built), no aggregated APIs."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class Subject:
    user: str  # e.g. system:serviceaccount:<ns>:<name>
    groups: list[str] = field(default_factory=list)


@dataclass
class Rbac:
    """RBAC as the API server evaluates it: bindings name roles; roles hold rules; no rule, no access."""

    documents: list[dict[str, Any]]

    def allowed(self, who: Subject, verb: str, resource: str, namespace: str | None) -> bool:
        roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in self.documents}
        for b in self.documents:
            if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if not any(self._names(s, who) for s in b.get("subjects") or []):
                continue
            bns = b["metadata"].get("namespace")
            if b["kind"] == "RoleBinding" and bns != namespace:
                continue  # a RoleBinding grants only inside its namespace
            ref = b["roleRef"]
            role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else None, ref["name"]))
            if role is None:
                continue
            for rule in role.get("rules") or []:
                if "" not in rule.get("apiGroups", []) and "*" not in rule.get("apiGroups", []):
                    continue
                resources, verbs = rule.get("resources", []), rule.get("verbs", [])
                if (resource in resources or "*" in resources) and (verb in verbs or "*" in verbs):
                    return True
        return False

    @staticmethod
    def _names(s: dict[str, Any], who: Subject) -> bool:
        if s["kind"] == "ServiceAccount":
            return who.user == f"system:serviceaccount:{s['namespace']}:{s['name']}"
        if s["kind"] == "User":
            return who.user == s["name"]
        return s["kind"] == "Group" and s["name"] in who.groups


def node_object(name: str, *, gpus: int = 0, internal_ip: str | None = None, labels: dict[str, str] | None = None) -> dict:
    """A complete v1 Node as the API server returns it."""
    capacity = {"cpu": "16", "memory": "131072Mi", "pods": "110", "ephemeral-storage": "1Ti"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    addresses = [{"type": "Hostname", "address": name}]
    if internal_ip:
        addresses.insert(0, {"type": "InternalIP", "address": internal_ip})
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
            "resourceVersion": "1001",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        },
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": addresses,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-12-03T00:00:00Z",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
            ],
            "nodeInfo": {
                "machineID": "0" * 32,
                "systemUUID": "0" * 32,
                "bootID": "0" * 32,
                "kernelVersion": "6.1.0",
                "osImage": "Debian GNU/Linux 12",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "v1.31.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


_SELECTOR_TERM = re.compile(r"^([A-Za-z0-9./_-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*))?$")


def _selector(text: str) -> list[tuple[str, str | None, str | None]] | None:
    terms = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _SELECTOR_TERM.match(part)
        if not m:
            return None
        terms.append((m.group(1), m.group(2), m.group(3)))
    return terms


def _matches(labels: dict[str, str], terms: list[tuple[str, str | None, str | None]]) -> bool:
    for key, op, value in terms:
        if op is None and key not in labels:
            return False
        if op in ("=", "==") and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    return True


class FakeApiServer:
    def __init__(self, rbac_documents: list[dict[str, Any]], tokens: dict[str, Subject]) -> None:
        self.rbac = Rbac(rbac_documents)
        self.tokens = tokens
        self.nodes: dict[str, dict] = {}
        self.configz: dict[str, Any] = {}  # node -> kubeletconfig dict, or an int HTTP status, or "hang"
        self.requests: list[tuple[str, str, str]] = []  # (user, verb, path)
        self.lock = threading.Lock()

    def add_node(self, obj: dict, configz: Any = None) -> None:
        self.nodes[obj["metadata"]["name"]] = obj
        if configz is not None:
            self.configz[obj["metadata"]["name"]] = configz

    # -- wire ----------------------------------------------------------------------------------
    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                """No access log: the test output stays readable."""

            def do_GET(self) -> None:
                api.serve(self, "GET")

            def do_POST(self) -> None:
                api.serve(self, "POST")

            def do_DELETE(self) -> None:
                api.serve(self, "DELETE")

        return Handler

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: Any, kind: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _status(self, h: BaseHTTPRequestHandler, code: int, reason: str, message: str, details: dict | None = None) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "code": code}  # fmt: skip
        if details:
            body["details"] = details
        self._send(h, code, body)

    def serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        auth = h.headers.get("Authorization", "")
        who = self.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if who is None:
            self._status(h, 401, "Unauthorized", "Unauthorized")
            return
        url = urlparse(h.path)
        query = parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        with self.lock:
            self.requests.append((who.user, method, url.path))
        if parts[:2] != ["api", "v1"] or len(parts) < 3 or parts[2] != "nodes" or method != "GET":
            self._status(h, 404, "NotFound", "the server could not find the requested resource")
            return
        name = parts[3] if len(parts) > 3 else None
        sub = "/".join(parts[4:5]) if len(parts) > 4 else None
        resource = f"nodes/{sub}" if sub else "nodes"
        verb = "get" if name else "list"
        if not self.rbac.allowed(who, verb, resource, None):
            target = f'nodes "{name}"' if name else "nodes"
            message = f'{target} is forbidden: User "{who.user}" cannot {verb} resource "{resource}" in API group ""'
            details = {"name": name, "kind": "nodes"} if name else {"kind": "nodes"}
            self._status(h, 403, "Forbidden", message + " at the cluster scope", details)
            return
        if name is None:
            terms = _selector(query.get("labelSelector", [""])[0])
            if terms is None:
                self._status(h, 400, "BadRequest", f"unable to parse requirement: {query.get('labelSelector')[0]!r}")
                return
            items = [n for n in self.nodes.values() if _matches(n["metadata"]["labels"], terms)]
            node_list = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1001"}, "items": items}
            self._send(h, 200, node_list)
            return
        node = self.nodes.get(name)
        if node is None:
            self._status(h, 404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
            return
        if sub is None:
            self._send(h, 200, node)
            return
        if sub == "proxy" and parts[5:] == ["configz"]:
            conf = self.configz.get(name)
            if conf == "hang":
                time.sleep(30)
            if isinstance(conf, int):
                self._status(h, conf, "InternalError", f"error trying to reach service: kubelet on {name} answered {conf}")
                return
            if conf is None:
                self._status(h, 503, "ServiceUnavailable", f"no kubelet answers for node {name}")
                return
            self._send(h, 200, {"kubeletconfig": conf})
            return
        self._status(h, 404, "NotFound", "the server could not find the requested resource")


@contextmanager
def serve(api: FakeApiServer) -> Iterator[str]:
    """Run the fake on 127.0.0.1; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), api.handler())
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(url: str, token: str, context: str = "fake") -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "auditor", "user": {"token": token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "auditor"}}],
            "current-context": context,
        }
    )
