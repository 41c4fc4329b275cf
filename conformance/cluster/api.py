"""The Kubernetes API through the official `kubernetes` client: which nodes to audit (discovery) and
each kubelet's live configuration (configz; how it is read, with which grant: `kubelet_access.py`).
The suite only reads here.

Every API failure becomes a message that names what to fix: the missing RBAC permission on a 403,
the kubeconfig or context on a configuration error, the API server on a 5xx or a timeout."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.cluster.dcgm import collect_interval
from conformance.cluster.dra import nodes_publishing
from conformance.cluster.kubelet_access import KubeletEndpoint, endpoint_of, parse_configz
from conformance.config.kubernetes import MISSING_FROM_AUDIT, KubeSpec
from conformance.errors import FactUnavailable, UsageError

TIMEOUT_S = 15.0


@dataclass
class DiscoveredNode:
    name: str
    internal_ip: str | None
    labels: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    why: str = ""
    resources: dict[str, int] = field(default_factory=dict)  # every nvidia.com/* capacity
    allocatable: dict[str, int] = field(default_factory=dict)  # every nvidia.com/* allocatable
    kubelet: KubeletEndpoint | None = None  # where configz is read (configz: kubelet)


def api_client(spec: KubeSpec) -> Any:
    """An ApiClient for the kubeconfig and context (or the pod's service account)."""
    from kubernetes import client, config

    c = client.Configuration()
    try:
        if spec.in_cluster:
            config.load_incluster_config(client_configuration=c)
        else:
            config.load_kube_config(config_file=spec.kubeconfig, context=spec.context, client_configuration=c)
    except (config.ConfigException, OSError, TypeError, ValueError) as e:
        where = "in-cluster service account" if spec.in_cluster else f"kubeconfig {spec.kubeconfig or '~/.kube/config'}"
        ctx = f", context {spec.context}" if spec.context else ""
        raise UsageError(f"kubernetes: {where}{ctx}: {e}") from None
    c.retries = False
    return client.ApiClient(c)


def runtime_class_handlers(api: Any) -> dict[str, str]:
    """Every RuntimeClass (node.k8s.io/v1, cluster-scoped) and the CRI handler it names."""
    from kubernetes import client

    try:
        items = client.NodeV1Api(api).list_runtime_class(_request_timeout=15).items
    except Exception as e:
        raise FactUnavailable(explain(e, "list", "runtimeclasses.node.k8s.io")) from None
    return {rc.metadata.name: rc.handler for rc in items}


DRA_GPU_DRIVERS = ("gpu.nvidia.com",)  # the default profile's gpu.dra_drivers
NFD_NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"


def discover(api: Any, spec: KubeSpec, warnings: list[str] | None = None) -> list[DiscoveredNode]:
    """Nodes to audit: those matching the label selector, else GPU nodes: GPU capacity (nvidia.com/gpu, MIG
    slices), GPU Feature Discovery's label, GPUs the DRA drivers' ResourceSlices publish, or Node Feature
    Discovery's NVIDIA PCI label. ResourceSlices that cannot be listed do not stop the run: the other ways still
    find their nodes, and a line in `warnings` names the grant that would find the nodes only DRA serves."""
    from kubernetes import client

    try:
        kwargs: dict[str, Any] = {"_request_timeout": TIMEOUT_S}
        if spec.node_selector:
            kwargs["label_selector"] = spec.node_selector
        nodes = client.CoreV1Api(api).list_node(**kwargs).items
    except Exception as e:
        raise UsageError(explain(e, "list", "nodes")) from None
    # GPU nodes that only DRA serves: the GPU DRA drivers' ResourceSlices name them (the NVIDIA GPU DRA driver's
    # DaemonSet selects Node Feature Discovery's feature.node.kubernetes.io/pci-10de.present, its only prerequisite)
    try:
        published = {} if spec.node_selector else nodes_publishing(api, DRA_GPU_DRIVERS)
    except FactUnavailable as e:
        published = {}
        if warnings is not None:
            warnings.append(f"WARNING: GPU nodes that only DRA serves (no NFD label) {MISSING_FROM_AUDIT}: {e}")
    out = []
    for n in nodes:
        capacity = (n.status.capacity or {}) if n.status else {}
        labels = dict(n.metadata.labels or {})
        gpus = _int(capacity.get(spec.gpu_resource))
        resources = {k: _int(v) for k, v in capacity.items() if k.startswith("nvidia.com/")}
        allocatable_ = (n.status.allocatable or {}) if n.status else {}
        allocatable = {k: _int(v) for k, v in allocatable_.items() if k.startswith("nvidia.com/")}
        # Under the mixed MIG strategy a GPU node may advertise nvidia.com/gpu 0 and only nvidia.com/mig-*
        # slices; GPU Feature Discovery labels every GPU node nvidia.com/gpu.present=true.
        slices = {k: v for k, v in resources.items() if k.startswith("nvidia.com/mig-") and v > 0}
        if spec.node_selector:
            why = f"label selector {spec.node_selector}"
        elif gpus > 0:
            why = f"{spec.gpu_resource} capacity {gpus}"
        elif slices:
            why = "MIG resources " + ", ".join(f"{k} {v}" for k, v in sorted(slices.items()))
        elif labels.get("nvidia.com/gpu.present") == "true":
            why = "label nvidia.com/gpu.present=true"
        elif published.get(n.metadata.name):
            why = f"ResourceSlices of {', '.join(DRA_GPU_DRIVERS)} publish {published[n.metadata.name]} device(s)"
        elif labels.get(NFD_NVIDIA_PCI) == "true":
            why = f"label {NFD_NVIDIA_PCI}=true (Node Feature Discovery: an NVIDIA PCI device)"
        else:
            continue
        kubelet = endpoint_of(n)
        address = kubelet.address if kubelet else None
        out.append(DiscoveredNode(n.metadata.name, address, labels, gpus, why, resources, allocatable, kubelet))
    return sorted(out, key=lambda d: d.name)


def _int(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def configz(api: Any, node: str) -> dict[str, Any]:
    """The kubelet's running configuration through the API server's node proxy (`configz: proxy`, which
    needs get nodes/proxy). The generated client would stringify the body, so the raw response is read."""
    from kubernetes import client

    try:
        r = client.CoreV1Api(api).connect_get_node_proxy_with_path(
            node, "configz", _preload_content=False, _request_timeout=TIMEOUT_S
        )
        body = r.data
    except Exception as e:
        raise FactUnavailable(explain(e, "get", "nodes/proxy", node)) from None
    return parse_configz(body, node)


LEASE_NAMESPACE = "kube-node-lease"  # where each kubelet renews its node's Lease (pkg/kubelet/nodelease)


def node_status(api: Any, node: str) -> dict[str, Any]:
    """What the Node's status says of its daemons, and whether the kubelet that wrote it is alive (issue 58):
    status.nodeInfo (the kubelet's and the runtime's releases, this boot's id), the Ready condition, the node's
    Lease in kube-node-lease, and when the API server answered (its Date header: the clock the freshness is judged
    by). Read raw, as the API serves it. FactUnavailable when the Node cannot be read; an unreadable Lease is kept
    as why (the status is then not trusted)."""
    from kubernetes import client

    try:
        r = client.CoreV1Api(api).read_node(node, _preload_content=False, _request_timeout=TIMEOUT_S)
        doc = json.loads(r.data)
        read_at = r.headers.get("Date") if r.headers is not None else None
    except Exception as e:
        raise FactUnavailable(explain(e, "get", "nodes", node)) from None
    status = doc.get("status") if isinstance(doc, dict) else None
    status = status if isinstance(status, dict) else {}
    out: dict[str, Any] = {
        "nodeInfo": status.get("nodeInfo") if isinstance(status.get("nodeInfo"), dict) else {},
        "conditions": [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"],
        "read_at": read_at,
    }
    try:
        lr = client.CoordinationV1Api(api).read_namespaced_lease(
            node, LEASE_NAMESPACE, _preload_content=False, _request_timeout=TIMEOUT_S
        )
        spec = (json.loads(lr.data) or {}).get("spec") or {}
        out["lease"] = {k: spec.get(k) for k in ("holderIdentity", "renewTime", "leaseDurationSeconds")}
    except Exception as e:
        out["lease"] = None
        out["lease_error"] = explain(e, "get", f"leases in namespace {LEASE_NAMESPACE}", node)
    return out


def dcgm_metrics(api: Any, spec: KubeSpec, node: str) -> tuple[str, str, tuple[int | None, str]]:
    """(where, metrics text, (collection interval ms, its source)) of the dcgm-exporter pod on `node`, the
    metrics read through the API server's pod proxy, the interval from the pod's spec."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    try:
        pods = core.list_namespaced_pod(
            spec.dcgm_namespace,
            label_selector=spec.dcgm_selector,
            field_selector=f"spec.nodeName={node}",
            _request_timeout=TIMEOUT_S,
        ).items
    except Exception as e:
        raise FactUnavailable(explain(e, "list", f"pods in namespace {spec.dcgm_namespace}")) from None
    running = [p for p in pods if p.status and p.status.phase == "Running"]
    if not running:
        raise AssertionError(
            f"no running dcgm-exporter pod ({spec.dcgm_selector}) on node {node} in namespace {spec.dcgm_namespace}"
        )
    pod = running[0].metadata.name
    where = f"pod {spec.dcgm_namespace}/{pod}:{spec.dcgm_port}/metrics (API pod proxy)"
    containers = running[0].spec.containers or []
    exporter = next((c for c in containers if "dcgm-exporter" in " ".join([c.name, *(c.command or []), *(c.args or [])])),
                    containers[0] if containers else None)  # fmt: skip
    interval: tuple[int | None, str] = (None, "the exporter pod has no container")
    if exporter is not None:
        env = {e.name: e.value for e in exporter.env or [] if e.value is not None}
        interval = collect_interval([*(exporter.command or []), *(exporter.args or [])], env)
    try:
        r = core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{spec.dcgm_port}", spec.dcgm_namespace, "metrics", _preload_content=False, _request_timeout=TIMEOUT_S
        )
        return where, r.data.decode("utf-8", "replace"), interval
    except Exception as e:
        raise FactUnavailable(f"{where}: {explain(e, 'get', 'pods/proxy', pod)}") from None
