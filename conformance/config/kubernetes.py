"""The inventory's `kubernetes:` section: how the suite reaches the Kubernetes API (kubeconfig, context or
in-cluster), which nodes it discovers, how it reads each kubelet's configuration, where it creates the
acceptance pod and finds dcgm-exporter. Read and validated here; cluster/ uses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.config.validation import typed_fields

GPU_RESOURCE = "nvidia.com/gpu"

# how the kubelet's live configuration is read: from the kubelet (get nodes/configz), the API proxy (nodes/proxy), or not
CONFIGZ_MODES = ("kubelet", "proxy", "off")


# Said in a run's API access lines (results.json api_access) when discovery could not ask all it needed: nodes the
# run should have audited may be absent; the report's scope shows such lines first.
MISSING_FROM_AUDIT = "may be missing from the audit"


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
