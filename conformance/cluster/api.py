"""The Kubernetes API through the official `kubernetes` client: which nodes to audit (discovery) and
each kubelet's live configuration (configz; how it is read, with which grant: `kubelet_access.py`).
The suite only reads here.

Every API failure becomes a message that names what to fix: the missing RBAC permission on a 403,
the kubeconfig or context on a configuration error, the API server on a 5xx or a timeout."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from conformance.cluster.dcgm import collect_interval
from conformance.cluster.kubelet_access import CONFIGZ_MODES, KubeletEndpoint, endpoint_of, parse_configz
from conformance.config.validation import typed_fields
from conformance.errors import FactUnavailable, UsageError

GPU_RESOURCE = "nvidia.com/gpu"
TIMEOUT_S = 15.0


@dataclass
class KubeSpec:
    """The inventory's `kubernetes:` section."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    discover: bool = True
    node_selector: str | None = None  # a label selector; default: nodes with nvidia.com/gpu capacity
    gpu_resource: str = GPU_RESOURCE
    configz: str = "kubelet"  # kubelet (get nodes/configz), proxy (get nodes/proxy, broad) or off
    kubelet_ca: str | None = None  # the CA of the kubelets' serving certificates (default: the cluster CA)
    namespace: str = "gpu-node-conformance"  # where the acceptance pod is created
    dcgm_namespace: str = "gpu-operator"  # where dcgm-exporter runs (GPU Operator default)
    dcgm_selector: str = "app=nvidia-dcgm-exporter"
    dcgm_port: int = 9400


SPEC_TYPES = {
    "kubeconfig": str,
    "context": str,
    "in_cluster": bool,
    "discover": bool,
    "node_selector": str,
    "gpu_resource": str,
    "configz": str,  # a mode, or a boolean from earlier inventories (read in parse_spec)
    "kubelet_ca": str,
    "namespace": str,
    "dcgm_namespace": str,
    "dcgm_selector": str,
    "dcgm_port": int,
}


@dataclass
class DiscoveredNode:
    name: str
    internal_ip: str | None
    labels: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    why: str = ""
    resources: dict[str, int] = field(default_factory=dict)  # every nvidia.com/* capacity
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


def explain(e: Exception, verb: str, resource: str, name: str | None = None) -> str:
    """One line naming what failed and what to fix; for a 403, the RBAC rule that is missing."""
    from kubernetes.client.exceptions import ApiException

    target = f"{resource} {name}" if name else resource
    if isinstance(e, ApiException):
        reason = ""
        try:
            reason = json.loads(e.body or "{}").get("message", "")
        except ValueError:
            reason = (e.body or "")[:200] if isinstance(e.body, str) else ""
        if e.status == 403:
            return (
                f"Kubernetes API refused '{verb} {resource}' (403 Forbidden): the suite's identity lacks the RBAC "
                f"permission {verb} on {resource} (see deploy/rbac.yaml){': ' + reason if reason else ''}"
            )
        if e.status == 401:
            return "Kubernetes API: 401 Unauthorized: the kubeconfig's credentials were not accepted"
        if e.status == 404:
            return f"Kubernetes API: {target} not found (404)"
        return f"Kubernetes API: {verb} {target} failed with HTTP {e.status} {e.reason}{': ' + reason if reason else ''}"
    return f"Kubernetes API: {verb} {target}: {type(e).__name__}: {e}"


def runtime_class_handlers(api: Any) -> dict[str, str]:
    """Every RuntimeClass (node.k8s.io/v1, cluster-scoped) and the CRI handler it names."""
    from kubernetes import client

    try:
        items = client.NodeV1Api(api).list_runtime_class(_request_timeout=15).items
    except Exception as e:
        raise FactUnavailable(explain(e, "list", "runtimeclasses.node.k8s.io")) from None
    return {rc.metadata.name: rc.handler for rc in items}


def discover(api: Any, spec: KubeSpec) -> list[DiscoveredNode]:
    """Nodes to audit: those matching the label selector, else those with GPU capacity."""
    from kubernetes import client

    try:
        kwargs: dict[str, Any] = {"_request_timeout": TIMEOUT_S}
        if spec.node_selector:
            kwargs["label_selector"] = spec.node_selector
        nodes = client.CoreV1Api(api).list_node(**kwargs).items
    except Exception as e:
        raise UsageError(explain(e, "list", "nodes")) from None
    out = []
    for n in nodes:
        capacity = (n.status.capacity or {}) if n.status else {}
        labels = dict(n.metadata.labels or {})
        gpus = _int(capacity.get(spec.gpu_resource))
        resources = {k: _int(v) for k, v in capacity.items() if k.startswith("nvidia.com/")}
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
        else:
            continue
        kubelet = endpoint_of(n)
        out.append(DiscoveredNode(n.metadata.name, kubelet.address if kubelet else None, labels, gpus, why, resources, kubelet))
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


def parse_spec(block: Any, errors: list[str]) -> KubeSpec | None:
    """Validate the inventory's `kubernetes:` section; problems go to `errors` as `kubernetes.<field>: ...`."""
    if block is None:
        return None
    if not isinstance(block, dict):
        errors.append("kubernetes: must be a mapping (kubeconfig, context, in_cluster, node_selector, ...)")
        return None
    spec = KubeSpec()
    for k, v in typed_fields({k: v for k, v in block.items() if k != "configz"}, SPEC_TYPES, "kubernetes", errors).items():
        setattr(spec, k, v)
    mode = block.get("configz", "kubelet")
    if isinstance(mode, bool):  # earlier inventories: true read configz (now from the kubelet), false did not
        mode = "kubelet" if mode else "off"
    if mode in CONFIGZ_MODES:
        spec.configz = mode
    else:
        errors.append(f"kubernetes.configz: {mode!r} is not one of {', '.join(CONFIGZ_MODES)}")
        spec.configz = "off"
    if spec.in_cluster and spec.kubeconfig:
        errors.append("kubernetes: give kubeconfig or in_cluster, not both")
    return spec


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
