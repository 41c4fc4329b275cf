"""How nodes are grouped into pools (the fleet view and FLEET-CONSISTENT share it: `--group-by` label, else
the first known pool label most nodes carry, else the profile), and the attributes of a node's identity
record that peers in a pool should share."""

from __future__ import annotations

from typing import Any

# conformance.facts.identity reads them; the profile's fleet.attributes and fleet.pin name them
IDENTITY_ATTRIBUTES = (
    "os", "kernel", "kubelet", "runtime", "driver", "cuda_driver", "gpu_count", "gpu_products", "gpu_vbios", "gpu_inforom", "mig",
    "kubelet_config", "runtime_config", "sysctls",
)  # fmt: skip
GROUP_LABELS = (
    "pool",
    "node-pool",
    "nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "node.kubernetes.io/instance-type",
    "nvidia.com/gpu.product",
)


def group_label(nodes: list[dict[str, Any]], wanted: str | None) -> str | None:
    """The label that groups the nodes: `wanted`, else the first known pool label on most nodes."""
    if wanted:
        return wanted
    for key in GROUP_LABELS:
        if sum(key in (n.get("labels") or {}) for n in nodes) * 2 > len(nodes):
            return key
    return None


def group_of(node: dict[str, Any], label: str | None) -> str:
    if label is None:
        return f"profile {node.get('profile', '-')}"
    return (node.get("labels") or {}).get(label) or "(no label)"
