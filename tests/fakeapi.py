"""A fake Kubernetes API server at the wire level: the official `kubernetes` client talks to it
unchanged over HTTP. It serves complete Node objects (list with label selectors, get), and the
kubelet's configz through the node proxy; it authenticates bearer tokens and authorises every request
with RBAC rules taken from Role/ClusterRole/binding documents (the repository's deploy/rbac.yaml),
answering 401/403/404/400 with Status objects worded as the real API server words them.

It also lists pods (with `status.qosClass` computed as the API server computes it) and runs pod exec
over a websocket with the upstream channel protocol (v5.channel.k8s.io or v4.channel.k8s.io: stdout,
stderr and the status channel with the exit code), handing the command to a callback that runs it in
a lab "pod". Limits, stated: no watch, no pod create/delete (the acceptance pod is not built), no
aggregated APIs."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, unquote, urlparse

from tests.httpservers import quiet_handler, reply


@dataclass
class Subject:
    user: str  # e.g. system:serviceaccount:<ns>:<name>
    groups: list[str] = field(default_factory=list)


@dataclass
class Rbac:
    """RBAC as the API server evaluates it: bindings name roles; roles hold rules; no rule, no access."""

    documents: list[dict[str, Any]]

    def allowed(self, who: Subject, verb: str, resource: str, namespace: str | None, group: str = "") -> bool:
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
                if group not in rule.get("apiGroups", []) and "*" not in rule.get("apiGroups", []):
                    continue  # a rule grants only in the API groups it names
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


def node_object(
    name: str,
    *,
    gpus: int = 0,
    internal_ip: str | None = None,
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    kubelet_port: int = 10250,
) -> dict:
    """A complete v1 Node as the API server returns it; `extra`: more capacity (e.g. nvidia.com/mig-1g.10gb)."""
    capacity = {"cpu": "16", "memory": "131072Mi", "pods": "110", "ephemeral-storage": "1Ti", **(extra or {})}
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
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
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


def node_lease(name: str, renew_time: str, duration: int = 40) -> dict:
    """The node's Lease as the kubelet keeps it (pkg/kubelet/nodelease: holderIdentity the node, leaseDurationSeconds
    nodeLeaseDurationSeconds, renewTime a MicroTime), with the Node as its owner."""
    return {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "uid": f"00000000-0000-4000-9000-{abs(hash(name)) % 10**12:012d}",
            "resourceVersion": "2002",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "0" * 8}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renew_time},
    }


def _qos(containers: list[dict], pod_resources: dict | None = None) -> str:
    """status.qosClass as the API server computes it (pkg/apis/core/helper/qos ComputePodQOS): Guaranteed when
    every container has cpu and memory limits equal to its requests (requests default to limits), BestEffort
    when none sets any; with pod-level resources (spec.resources, KEP-2837) the pod's own requests and limits
    decide in the same way."""
    if pod_resources:
        containers = [{"resources": pod_resources}]
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, {**(res.get("limits") or {}), **(res.get("requests") or {})}
        if lim or res.get("requests"):
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r) != lim.get(r):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_object(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    containers: list[dict],
    *,
    init_containers: list[dict] | None = None,
    runtime_class: str | None = None,
    share_pid: bool = False,
    labels: dict[str, str] | None = None,
    host_network: bool = False,
    resource_claims: list[dict] | None = None,
    claim_statuses: list[dict] | None = None,
    pod_resources: dict | None = None,
    allocated: dict[str, dict] | None = None,
    conditions: list[dict] | None = None,
    extended_claim: dict | None = None,
    resource_health: dict[str, list[dict]] | None = None,
) -> dict:
    """A complete running v1 Pod; `containers` are {name, resources: {requests, limits, claims}};
    `resource_health`: container -> containerStatuses[].allocatedResourcesStatus (KEP-4680: [{name, resources:
    [{resourceID, health}]}], health Healthy | Unhealthy | Unknown), as the kubelet writes it;
    `extended_claim`: status.extendedResourceClaimStatus (DRA extended resources, KEP-5004) as the scheduler writes it,
    {resourceClaimName, requestMappings: [{containerName, resourceName, requestName}]};
    `resource_claims`: spec.resourceClaims ({name, resourceClaimName | resourceClaimTemplateName});
    `claim_statuses`: status.resourceClaimStatuses ({name, resourceClaimName}) for claims made from templates."""
    spec_containers = [{"name": c["name"], "image": c.get("image", "registry.example/app:1"), "resources": c.get("resources", {})}
                       for c in containers]  # fmt: skip
    inits = [
        {"name": c["name"], "image": "registry.example/init:1", "resources": c.get("resources", {}),
         **({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {})}
        for c in init_containers or []
    ]  # fmt: skip
    spec: dict[str, Any] = {"nodeName": node, "containers": spec_containers, "restartPolicy": "Always"}
    if inits:
        spec["initContainers"] = inits
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if share_pid:
        spec["shareProcessNamespace"] = True
    if host_network:
        spec["hostNetwork"] = True
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    if pod_resources:  # pod-level resources (KEP-2837): requests and limits for cpu and memory only
        bad = sorted((set(pod_resources.get("requests", {})) | set(pod_resources.get("limits", {}))) - {"cpu", "memory"})
        if bad:  # the API server's validation: "supported pod-level resources are cpu, memory and hugepages"
            raise ValueError(f"spec.resources: unsupported pod-level resources {bad}")
        spec["resources"] = pod_resources
    if extended_claim is not None:
        # the API's rules (k8s.io/api core/v1 PodExtendedResourceClaimStatus: resourceClaimName and every mapping's
        # three names are required; KEP-5004: a mapping names an init or regular container, never an ephemeral one)
        if not extended_claim.get("resourceClaimName"):
            raise ValueError("status.extendedResourceClaimStatus.resourceClaimName: Required value")
        known = {c["name"] for c in spec_containers + inits}
        for i, m in enumerate(extended_claim.get("requestMappings") or []):
            for key in ("containerName", "resourceName", "requestName"):
                if not m.get(key):
                    raise ValueError(f"status.extendedResourceClaimStatus.requestMappings[{i}].{key}: Required value")
            if m["containerName"] not in known:
                raise ValueError(f"status.extendedResourceClaimStatus.requestMappings[{i}].containerName: Not found")
    for statuses_of in (resource_health or {}).values():
        for rs in statuses_of:  # core/v1 ResourceStatus: name required; health one of three values
            if not rs.get("name"):
                raise ValueError("allocatedResourcesStatus[].name: Required value")
            for h in rs.get("resources") or []:
                if h.get("health") not in ("Healthy", "Unhealthy", "Unknown"):
                    raise ValueError(f"allocatedResourcesStatus[].resources[].health: Unsupported value: {h.get('health')!r}")
    statuses = [
        {"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"], "imageID": f"{c['image']}@sha256:{'0' * 64}",
         "containerID": f"containerd://{hashlib.sha256((uid + c['name']).encode()).hexdigest()}",
         "state": {"running": {"startedAt": "2026-12-03T00:00:00Z"}},
         # what the kubelet allocated (KEP-1287): its own record of the resources the container holds
         **({"allocatedResources": allocated[c["name"]], "resources": {"requests": allocated[c["name"]]}}
            if allocated and c["name"] in allocated else {}),
         **({"allocatedResourcesStatus": resource_health[c["name"]]} if resource_health and c["name"] in resource_health
            else {})}
        for c in spec_containers
    ]  # fmt: skip
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "2002",
            "creationTimestamp": "2026-12-03T00:00:00Z",
            "labels": labels or {},
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "qosClass": _qos(spec_containers + inits, pod_resources),
            **({"conditions": conditions} if conditions else {}),
            "containerStatuses": statuses,
            "hostIP": "10.0.0.1",
            "podIP": "10.244.0.10",
            "startTime": "2026-12-03T00:00:00Z",
            **({"resourceClaimStatuses": claim_statuses} if claim_statuses else {}),
            **({"extendedResourceClaimStatus": extended_claim} if extended_claim else {}),
        },
    }


def resource_claim(
    namespace: str, name: str, results: list[tuple[str, str, str, str]], reserved_for: list[tuple[str, str]]
) -> dict:
    """A complete allocated resource.k8s.io/v1 ResourceClaim: `results` are (request, driver, pool, device),
    `reserved_for` the pods (name, uid) it is reserved for; no results: a claim not allocated yet."""
    requests = sorted({r[0].split("/")[0] for r in results}) or ["gpu"]
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {
            "devices": {"results": [{"request": r, "driver": d, "pool": p, "device": dev} for r, d, p, dev in results]},
        }
        status["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for]
    return {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "uid": hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32],
                     "resourceVersion": "4004", "creationTimestamp": "2026-12-03T00:00:00Z"},
        "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": "gpu.nvidia.com"}} for r in requests]}},
        "status": status,
    }  # fmt: skip


def resource_slice(name: str, node: str, driver: str, pool: str, devices: list[dict], generation: int = 1) -> dict:
    """A complete resource.k8s.io/v1 ResourceSlice of one node; `devices` are {name, attributes}."""
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "resourceVersion": "4004", "creationTimestamp": "2026-12-03T00:00:00Z"},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }  # fmt: skip


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
        self.pods: dict[tuple[str, str], dict] = {}
        self.runtime_classes: dict[str, str] = {}  # RuntimeClass name -> handler (node.k8s.io/v1)
        self.vanish_on_exec: set[tuple[str, str]] = set()  # pods deleted when an exec reaches them
        # (namespace, pod, container, argv, stdin or None) -> (exit code, stdout, stderr), or None: no such executable
        self.exec_handler: Callable[[str, str, str, list[str], BinaryIO | None], tuple[int, bytes, bytes] | None] | None = None
        self.exec_protocols = ["v5.channel.k8s.io", "v4.channel.k8s.io"]  # the server's preference
        self.exec_requests: list[str] = []  # the request line of every exec, as a proxy in front would see it
        # the kubelet's part, emulated by the test: called (in a thread) for a created pod, and on delete
        self.on_create: Callable[[dict], None] | None = None
        self.on_delete: Callable[[dict], None] | None = None
        # (namespace, pod, port, path) -> (HTTP status, body) through the pod proxy, or None: nothing listens
        self.proxy_handler: Callable[[str, str, int, str], tuple[int, bytes] | None] | None = None
        # node -> how many times another writer changes the node between the gate's read and its patch
        self.concurrent_writes: dict[str, int] = {}
        # resource.k8s.io (DRA): the versions served (none: a cluster without DRA, the group answers 404),
        # ResourceClaims by (namespace, name) and ResourceSlices by name, as plain v1 documents
        self.dra_versions: list[str] = ["v1"]
        self.claims: dict[tuple[str, str], dict] = {}
        self.slices: dict[str, dict] = {}
        # DeviceTaintRules by name, served in one version only (v1alpha3 from 1.33; later releases serve it in beta)
        self.taint_rules: dict[str, dict] = {}
        self.taint_rule_version = "v1beta2"
        # coordination.k8s.io/v1 Leases in kube-node-lease, by node name, as the kubelet renews them (nodelease); a
        # node in `renewing` has a live kubelet: its renewTime is the last 10-second tick (renewInterval, 25 % of 40 s)
        self.leases: dict[str, dict] = {}
        self.renewing: set[str] = set()
        self.lock = threading.Lock()

    def add_pod(self, obj: dict) -> None:
        self.pods[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def add_node(self, obj: dict, configz: Any = None) -> None:
        self.nodes[obj["metadata"]["name"]] = obj
        if configz is not None:
            self.configz[obj["metadata"]["name"]] = configz

    # -- wire ----------------------------------------------------------------------------------
    def handler(self) -> type[BaseHTTPRequestHandler]:
        return quiet_handler(self.serve, ("GET", "POST", "DELETE", "PATCH"))

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: Any, kind: str = "application/json") -> None:
        reply(h, code, body if isinstance(body, bytes) else json.dumps(body).encode(), kind)

    def _status(self, h: BaseHTTPRequestHandler, code: int, reason: str, message: str, details: dict | None = None) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "code": code}  # fmt: skip
        if details:
            body["details"] = details
        self._send(h, code, body)

    def serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        auth = h.headers.get("Authorization", "")
        who = self.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if who is None:
            self._status(h, 401, "Unauthorized", "Unauthorized")
            return
        url = urlparse(h.path)
        query = parse_qs(url.query)
        parts = [unquote(p) for p in url.path.split("/") if p]
        with self.lock:
            self.requests.append((who.user, method, url.path))
        if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
            self._access_review(h, who, body)
            return
        if parts[:2] == ["apis", "resource.k8s.io"]:
            self._dra(h, who, method, parts[2:], query)
            return
        if parts[:3] == ["apis", "node.k8s.io", "v1"] and len(parts) in (4, 5) and parts[3] == "runtimeclasses":
            self._runtime_classes(h, who, method, parts[4] if len(parts) == 5 else None)
            return
        if parts[:3] == ["apis", "coordination.k8s.io", "v1"]:
            self._lease(h, who, method, parts[3:])
            return
        if parts[:3] == ["api", "v1", "pods"] and method == "GET":
            self._list_pods(h, who, query)
            return
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 7 and parts[4] == "pods" and parts[6] == "proxy":
            self._pod_proxy(h, who, parts[3], parts[5], "/".join(parts[7:]))
            return
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) in (5, 6) and parts[4] == "pods":
            self._pod_rw(h, who, method, parts[3], parts[5] if len(parts) == 6 else None, body, query)
            return
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and parts[4] == "pods" and parts[6] == "exec":
            self._exec(h, who, parts[3], parts[5], query)
            return
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and method == "PATCH":
            self._patch_node(h, who, parts[3], body)
            return
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

    def _lease(self, h: BaseHTTPRequestHandler, who: Subject, method: str, rest: list[str]) -> None:
        """GET /apis/coordination.k8s.io/v1/namespaces/NS/leases/NAME: `get` on leases in that namespace and API group
        (a RoleBinding there, or a ClusterRoleBinding), 404 worded as the API server words it."""
        if method != "GET" or len(rest) != 4 or rest[0] != "namespaces" or rest[2] != "leases":
            self._status(h, 404, "NotFound", "the server could not find the requested resource")
            return
        ns, name = rest[1], rest[3]
        if not self.rbac.allowed(who, "get", "leases", ns, group="coordination.k8s.io"):
            message = (f'leases.coordination.k8s.io "{name}" is forbidden: User "{who.user}" cannot get resource "leases" '
                       f'in API group "coordination.k8s.io" in the namespace "{ns}"')  # fmt: skip
            self._status(h, 403, "Forbidden", message, {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
            return
        lease = self.leases.get(name) if ns == "kube-node-lease" else None
        if lease is None:
            self._status(h, 404, "NotFound", f'leases.coordination.k8s.io "{name}" not found',
                         {"name": name, "group": "coordination.k8s.io", "kind": "leases"})  # fmt: skip
            return
        if name in self.renewing:
            renewed = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(int(time.time()) // 10 * 10))
            lease = {**lease, "spec": {**lease["spec"], "renewTime": renewed}}
        self._send(h, 200, lease)

    def _patch_node(self, h: BaseHTTPRequestHandler, who: Subject, name: str, body: bytes) -> None:
        """PATCH a Node with a JSON merge patch (RFC 7386), as the API server does: `patch` on nodes, 404 for
        no such node, 409 Conflict when the patch names a resourceVersion that is no longer current, and a
        new resourceVersion after each change. The other patch types the real server takes (JSON patch,
        strategic merge, apply) are answered 415 here: a stated limit of this fake."""
        if not self.rbac.allowed(who, "patch", "nodes", None):
            message = f'nodes "{name}" is forbidden: User "{who.user}" cannot patch resource "nodes" in API group ""'
            self._status(h, 403, "Forbidden", message + " at the cluster scope", {"name": name, "kind": "nodes"})
            return
        kind = h.headers.get("Content-Type", "").split(";")[0].strip()
        if kind != "application/merge-patch+json":
            self._status(h, 415, "UnsupportedMediaType", f"the fake API server takes merge patches only, not {kind!r}")
            return
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                self._status(h, 404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
                return
            if self.concurrent_writes.get(name):
                self.concurrent_writes[name] -= 1  # another writer got there first
                node["metadata"]["labels"][f"other.example/write-{self.concurrent_writes[name]}"] = "x"
                node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            try:
                patch = json.loads(body)
            except ValueError as e:
                self._status(h, 400, "BadRequest", f"error decoding patch: {e}")
                return
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
                self._status(
                    h, 409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again", {"name": name, "kind": "nodes"},
                )  # fmt: skip
                return
            merged = _merge_patch(node, patch)
            merged["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            self.nodes[name] = merged
        self._send(h, 200, merged)

    def _access_review(self, h: BaseHTTPRequestHandler, who: Subject, body: bytes) -> None:
        """SelfSubjectAccessReview: any authenticated user may ask (system:basic-user); the answer is the
        same RBAC evaluation every request gets. A namespace-less question asks about all namespaces, which
        only cluster-wide bindings answer."""
        try:
            review = json.loads(body)
            attrs = review["spec"]["resourceAttributes"]
            verb, resource = attrs["verb"], attrs["resource"]
        except (ValueError, KeyError, TypeError):
            self._status(h, 400, "BadRequest", "the body of the request was in an unknown format")
            return
        # the API server defaults a missing kind/apiVersion from the URL, and refuses a different one
        if (
            review.get("kind", "SelfSubjectAccessReview") != "SelfSubjectAccessReview"
            or review.get("apiVersion", "authorization.k8s.io/v1") != "authorization.k8s.io/v1"
        ):
            self._status(h, 400, "BadRequest", "expected a SelfSubjectAccessReview of authorization.k8s.io/v1")
            return
        full = f"{resource}/{attrs['subresource']}" if attrs.get("subresource") else resource
        allowed = self.rbac.allowed(who, verb, full, attrs.get("namespace") or None, group=attrs.get("group") or "")
        review.update(kind="SelfSubjectAccessReview", apiVersion="authorization.k8s.io/v1")
        review["status"] = {"allowed": allowed, **({} if allowed else {"reason": "no RBAC policy matched"})}
        review["metadata"] = {"creationTimestamp": None}
        self._send(h, 201, review)

    def _dra(self, h: BaseHTTPRequestHandler, who: Subject, method: str, rest: list[str], query: dict) -> None:
        """resource.k8s.io as the API server serves it: the group's discovery document, namespaced
        ResourceClaims (get, list) and cluster-scoped ResourceSlices (list with the field selectors the real
        server supports: metadata.name, spec.nodeName, spec.driver; pkg/apis/resource/v1/conversion.go), each
        authorised by RBAC in the resource.k8s.io group. Read-only here: other methods are 405."""
        group = "resource.k8s.io"
        if not self.dra_versions or (rest and rest[0] not in self.dra_versions):
            self._status(h, 404, "NotFound", "the server could not find the requested resource")
            return
        if method != "GET":
            self._status(h, 405, "MethodNotAllowed", f"the fake API server serves {group} read-only, not {method}")
            return
        if not rest:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.dra_versions]
            self._send(h, 200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
                                "preferredVersion": versions[0]})  # fmt: skip
            return
        version, path = rest[0], rest[1:]
        if len(path) in (3, 4) and path[0] == "namespaces" and path[2] == "resourceclaims":
            ns, name = path[1], path[3] if len(path) == 4 else None
            verb = "get" if name else "list"
            if not self.rbac.allowed(who, verb, "resourceclaims", ns, group=group):
                target = f'resourceclaims.{group} "{name}"' if name else f"resourceclaims.{group}"
                message = (f'{target} is forbidden: User "{who.user}" cannot {verb} resource "resourceclaims" in API group '
                           f'"{group}" in the namespace "{ns}"')  # fmt: skip
                self._status(h, 403, "Forbidden", message, {"name": name or "", "group": group, "kind": "resourceclaims"})
                return
            if name is None:
                items = [self._versioned(c, version) for (cns, _), c in sorted(self.claims.items()) if cns == ns]
                self._send(h, 200, {"kind": "ResourceClaimList", "apiVersion": f"{group}/{version}",
                                    "metadata": {"resourceVersion": "4004"}, "items": items})  # fmt: skip
                return
            claim = self.claims.get((ns, name))
            if claim is None:
                self._status(h, 404, "NotFound", f'resourceclaims.{group} "{name}" not found',
                             {"name": name, "group": group, "kind": "resourceclaims"})  # fmt: skip
                return
            self._send(h, 200, self._versioned(claim, version))
            return
        if path == ["resourceslices"]:
            if not self.rbac.allowed(who, "list", "resourceslices", None, group=group):
                message = (f'resourceslices.{group} is forbidden: User "{who.user}" cannot list resource "resourceslices" '
                           f'in API group "{group}" at the cluster scope')  # fmt: skip
                self._status(h, 403, "Forbidden", message, {"group": group, "kind": "resourceslices"})
                return
            wanted = {}
            for term in filter(None, query.get("fieldSelector", [""])[0].split(",")):
                key, _, value = term.partition("=")
                if key not in ("metadata.name", "spec.nodeName", "spec.driver"):
                    self._status(h, 400, "BadRequest",
                                 f"field label not supported for {group}/{version}, Kind=ResourceSlice: {key}")  # fmt: skip
                    return
                wanted[key] = value
            items = []
            for name, sl in sorted(self.slices.items()):
                have = {"metadata.name": name, "spec.nodeName": sl["spec"].get("nodeName"), "spec.driver": sl["spec"]["driver"]}
                if all(have[k] == v for k, v in wanted.items()):
                    items.append(self._versioned(sl, version))
            self._send(h, 200, {"kind": "ResourceSliceList", "apiVersion": f"{group}/{version}",
                                "metadata": {"resourceVersion": "4004"}, "items": items})  # fmt: skip
            return
        if path == ["devicetaintrules"] and version == self.taint_rule_version:
            if not self.rbac.allowed(who, "list", "devicetaintrules", None, group=group):
                message = (f'devicetaintrules.{group} is forbidden: User "{who.user}" cannot list resource '
                           f'"devicetaintrules" in API group "{group}" at the cluster scope')  # fmt: skip
                self._status(h, 403, "Forbidden", message, {"group": group, "kind": "devicetaintrules"})
                return
            kind = {"apiVersion": f"{group}/{version}", "kind": "DeviceTaintRule"}
            items = [{**kind, **r} for _, r in sorted(self.taint_rules.items())]
            self._send(h, 200, {"kind": "DeviceTaintRuleList", "apiVersion": f"{group}/{version}",
                                "metadata": {"resourceVersion": "4005"}, "items": items})  # fmt: skip
            return
        self._status(h, 404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _versioned(obj: dict, version: str) -> dict:
        """A stored v1 object as `version` serves it: v1beta1 wraps each device's attributes and capacity in
        `basic` (k8s.io/api/resource/v1beta1 BasicDevice); v1beta2 has v1's shape."""
        out = json.loads(json.dumps(obj))
        out["apiVersion"] = f"resource.k8s.io/{version}"
        if version == "v1beta1" and out.get("kind") == "ResourceSlice":
            out["spec"]["devices"] = [
                {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}} for d in out["spec"].get("devices", [])
            ]
        return out

    def _runtime_classes(self, h: BaseHTTPRequestHandler, who: Subject, method: str, name: str | None) -> None:
        """node.k8s.io/v1 RuntimeClass: cluster-scoped, read-only here; RBAC in the node.k8s.io group."""
        if method != "GET":
            self._status(h, 405, "MethodNotAllowed", f"the server does not allow this method on runtimeclasses: {method}")
            return
        verb = "get" if name else "list"
        if not self.rbac.allowed(who, verb, "runtimeclasses", None, group="node.k8s.io"):
            target = f'runtimeclasses.node.k8s.io "{name}"' if name else "runtimeclasses.node.k8s.io"
            message = (
                f'{target} is forbidden: User "{who.user}" cannot {verb} resource "runtimeclasses" in API group "node.k8s.io"'
            )
            self._status(h, 403, "Forbidden", message + " at the cluster scope", {"kind": "runtimeclasses"})
            return
        objects = {
            n: {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": n, "resourceVersion": "7"},
                "handler": hd,
            }
            for n, hd in sorted(self.runtime_classes.items())
        }
        if name is None:
            self._send(h, 200, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClassList", "metadata": {"resourceVersion": "7"},
                                "items": list(objects.values())})  # fmt: skip
        elif name in objects:
            self._send(h, 200, objects[name])
        else:
            self._status(
                h, 404, "NotFound", f'runtimeclasses.node.k8s.io "{name}" not found', {"name": name, "kind": "runtimeclasses"}
            )

    def _forbidden(
        self, h: BaseHTTPRequestHandler, who: Subject, verb: str, resource: str, ns: str | None, name: str | None
    ) -> None:
        target = f'{resource.split("/")[0]} "{name}"' if name else resource
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        message = f'{target} is forbidden: User "{who.user}" cannot {verb} resource "{resource}" in API group "" {scope}'
        self._status(h, 403, "Forbidden", message, {"name": name or "", "kind": resource.split("/")[0]})

    def _pod_proxy(self, h: BaseHTTPRequestHandler, who: Subject, ns: str, target: str, path: str) -> None:
        name, _, port = target.partition(":")
        if not self.rbac.allowed(who, "get", "pods/proxy", ns):
            self._forbidden(h, who, "get", "pods/proxy", ns, name)
            return
        if (ns, name) not in self.pods:
            self._status(h, 404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return
        answer = self.proxy_handler(ns, name, int(port or 80), path) if self.proxy_handler else None
        if answer is None:
            self._status(
                h,
                503,
                "ServiceUnavailable",
                f"error trying to reach service: dial tcp {name}:{port}: connect: connection refused",
            )
            return
        self._send(h, answer[0], answer[1], "text/plain; version=0.0.4")

    def _pod_rw(
        self, h: BaseHTTPRequestHandler, who: Subject, method: str, ns: str, name: str | None, body: bytes, query: dict
    ) -> None:
        verb = {"POST": "create", "GET": "get" if name else "list", "DELETE": "delete"}[method]
        if not self.rbac.allowed(who, verb, "pods", ns):
            self._forbidden(h, who, verb, "pods", ns, name)
            return
        if method == "POST":
            try:
                obj = json.loads(body)
            except ValueError:
                self._status(h, 400, "BadRequest", "the body of the request was in an unknown format")
                return
            pname = (obj.get("metadata") or {}).get("name")
            containers = (obj.get("spec") or {}).get("containers") or []
            if not pname or not containers or not all(c.get("name") and c.get("image") for c in containers):
                self._status(h, 422, "Invalid", f'Pod "{pname}" is invalid: spec.containers: Required value')
                return
            if (ns, pname) in self.pods:
                self._status(h, 409, "AlreadyExists", f'pods "{pname}" already exists', {"name": pname, "kind": "pods"})
                return
            obj["metadata"].update(namespace=ns, uid=hashlib.sha256(f"{ns}/{pname}".encode()).hexdigest()[:32],
                                   resourceVersion="3003", creationTimestamp="2026-12-03T00:00:00Z")  # fmt: skip
            obj["apiVersion"], obj["kind"] = "v1", "Pod"
            obj["status"] = {"phase": "Pending", "qosClass": _qos(containers + (obj["spec"].get("initContainers") or []))}
            self.pods[(ns, pname)] = obj
            if self.on_create:
                threading.Thread(target=self.on_create, args=(obj,), daemon=True).start()
            self._send(h, 201, obj)
            return
        if name is None:
            terms = _selector(query.get("labelSelector", [""])[0]) or []
            node = next(
                (t.split("=", 1)[1] for t in query.get("fieldSelector", [""])[0].split(",") if t.startswith("spec.nodeName=")),
                None,
            )
            items = [
                p for (pns, _), p in self.pods.items()
                if pns == ns and _matches(p["metadata"].get("labels") or {}, terms) and node in (None, p["spec"]["nodeName"])
            ]  # fmt: skip
            self._send(h, 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "3003"}, "items": items})
            return
        pod = self.pods.get((ns, name))
        if pod is None:
            self._status(h, 404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return
        if method == "DELETE":
            del self.pods[(ns, name)]
            if self.on_delete:
                self.on_delete(pod)
        self._send(h, 200, pod)

    def _list_pods(self, h: BaseHTTPRequestHandler, who: Subject, query: dict[str, list[str]]) -> None:
        if not self.rbac.allowed(who, "list", "pods", None):
            self._forbidden(h, who, "list", "pods", None, None)
            return
        node = None
        for term in filter(None, query.get("fieldSelector", [""])[0].split(",")):
            key, _, value = term.partition("=")
            if key != "spec.nodeName":
                self._status(
                    h,
                    400,
                    "BadRequest",
                    f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace", "spec.nodeName"',
                )
                return
            node = value
        items = [p for p in self.pods.values() if node is None or p["spec"]["nodeName"] == node]
        self._send(h, 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "2002"}, "items": items})

    def _exec(self, h: BaseHTTPRequestHandler, who: Subject, ns: str, name: str, query: dict[str, list[str]]) -> None:
        # Newer API servers authorise a websocket exec as `create`, older ones as `get`: require both.
        for verb in ("create", "get"):
            if not self.rbac.allowed(who, verb, "pods/exec", ns):
                self._forbidden(h, who, verb, "pods/exec", ns, name)
                return
        key = (ns, name)
        if key in self.vanish_on_exec:
            self.pods.pop(key, None)
        pod = self.pods.get(key)
        if pod is None:
            self._status(h, 404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return
        container = query.get("container", [pod["spec"]["containers"][0]["name"]])[0]
        # pkg/registry/core/pod/strategy.go streamLocation: podHasContainerWithName visits every container, init and
        # ephemeral ones too (a sidecar can be exec'd into); any other name is a 400
        every = [*pod["spec"]["containers"], *pod["spec"].get("initContainers", []), *pod["spec"].get("ephemeralContainers", [])]
        if container not in [c["name"] for c in every]:
            self._status(h, 400, "BadRequest", f"container {container} is not valid for pod {name}")
            return
        offered = [p.strip() for p in h.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in self.exec_protocols if p in offered), None)
        if h.headers.get("Upgrade", "").lower() != "websocket" or protocol is None:
            self._status(h, 400, "BadRequest", "Upgrade request required (websocket with a channel.k8s.io protocol)")
            return
        accept = base64.b64encode(hashlib.sha1((h.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest()).decode()
        h.send_response(101, "Switching Protocols")
        h.send_header("Upgrade", "websocket")
        h.send_header("Connection", "Upgrade")
        h.send_header("Sec-WebSocket-Accept", accept)
        h.send_header("Sec-WebSocket-Protocol", protocol)
        h.end_headers()
        argv = query.get("command", [])
        self.exec_requests.append(h.requestline)
        # stdin=true: the client's channel-0 frames reach the process while it runs (a pipe fed from the socket);
        # without it the kubelet attaches no stdin, and what the client sends is dropped
        stdin = self._stdin_pipe(h) if query.get("stdin", ["false"])[0] in ("true", "1") else None
        try:
            result = self.exec_handler(ns, name, container, argv, stdin) if self.exec_handler else None
        finally:
            if stdin is not None:
                stdin.close()
        if result is None:
            program = argv[0] if argv else ""
            message = f'OCI runtime exec failed: exec failed: unable to start container process: exec: "{program}": '
            message += "executable file not found in $PATH: unknown"
            status = {"metadata": {}, "status": "Failure", "reason": "InternalError", "message": message}
            out = err = b""
        else:
            code, out, err = result
            status = {"metadata": {}, "status": "Success"} if code == 0 else {
                "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}  # fmt: skip
        for channel, data in ((1, out), (2, err)):
            for i in range(0, len(data), 16384):
                h.wfile.write(_frame(bytes([channel]) + data[i : i + 16384]))
        h.wfile.write(_frame(bytes([3]) + json.dumps(status).encode()))
        h.wfile.write(_frame(struct.pack("!H", 1000), opcode=8))
        h.wfile.flush()
        h.close_connection = True

    @staticmethod
    def _stdin_pipe(h: BaseHTTPRequestHandler) -> BinaryIO:
        """A pipe the process reads as its stdin, fed by a thread with the payloads of the client's channel-0
        frames (RFC 6455 client frames are masked; an unmasked one ends the stream, as a server must refuse it)
        until the client closes stdin (v5: channel 255, stream 0), closes, or the connection ends."""
        r, w = os.pipe()

        def pump() -> None:
            try:
                with os.fdopen(w, "wb") as sink:
                    while (frame := _client_frame(h.rfile)) is not None:
                        opcode, data = frame
                        if opcode == 8 or data[:2] == b"\xff\x00":
                            return
                        if data[:1] == b"\x00":
                            sink.write(data[1:])
                            sink.flush()
            except (OSError, ValueError):
                return

        threading.Thread(target=pump, daemon=True).start()
        return os.fdopen(r, "rb")


def _client_frame(f: Any) -> tuple[int, bytes] | None:
    """One client-to-server websocket frame (opcode, unmasked payload); None at the end of the stream or for an
    unmasked frame."""
    head = f.read(2)
    if len(head) < 2:
        return None
    opcode, masked, n = head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
    if not masked:
        return None
    if n == 126:
        n = struct.unpack("!H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", f.read(8))[0]
    mask = f.read(4)
    data = f.read(n)
    if len(mask) < 4 or len(data) < n:
        return None
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a mapping merges key by key, null removes a key, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _frame(payload: bytes, opcode: int = 2) -> bytes:
    """One unmasked server-to-client websocket frame (RFC 6455), FIN set."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


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
