"""How nodes are grouped into pools (the fleet view and FLEET-CONSISTENT share it: `--group-by` label, else
the first known pool label most nodes carry, else the profile), and the attributes of a node's identity
record that peers in a pool should share."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

# conformance.facts.identity reads them; the profile's fleet.attributes and fleet.pin name them
IDENTITY_ATTRIBUTES = (
    "os", "kernel", "kubelet", "runtime", "driver", "cuda_driver", "gpu_count", "gpu_products", "gpu_vbios", "gpu_inforom", "mig",
    "gpu_memory_mode", "kubelet_config", "runtime_config", "sysctls",
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
    return most_carried({key: sum(key in (n.get("labels") or {}) for n in nodes) for key in GROUP_LABELS}, len(nodes))


def most_carried(carried: dict[str, int], total: int) -> str | None:
    """The first of GROUP_LABELS that more than half of `total` nodes carry (`carried`: label -> nodes)."""
    return next((key for key in GROUP_LABELS if carried.get(key, 0) * 2 > total), None)


def group_of(node: dict[str, Any], label: str | None) -> str:
    if label is None:
        return f"profile {node.get('profile', '-')}"
    return (node.get("labels") or {}).get(label) or "(no label)"


FLEET_CHECK_ID = "FLEET-CONSISTENT"  # the drift check (conformance.checks.fleet_drift) judges these attributes


@dataclass
class Pool:
    """One group of nodes and, per identity attribute, how many of them have each known value."""

    name: str
    members: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def majority(self, attr: str) -> tuple[str | None, int, int]:
        """(the value a strict majority of the nodes with a known value have, or None; its count; that total)."""
        counts = self.values.get(attr, Counter())
        total = sum(counts.values())
        top, top_count = counts.most_common(1)[0] if counts else (None, 0)
        return (top if top_count * 2 > total else None), top_count, total


def pools(nodes: list[dict[str, Any]], wanted_label: str | None = None) -> tuple[str | None, dict[str, Pool]]:
    """(the grouping label, group name -> Pool) of node summaries as results.json holds them, in one pass."""
    label = group_label(nodes, wanted_label)
    out: dict[str, Pool] = {}
    for n in nodes:
        name = group_of(n, label)
        pool = out.setdefault(name, Pool(name))
        pool.members.append(n)
        for attr, value in (n.get("identity") or {}).items():
            if value is not None:
                pool.values[attr][str(value)] += 1
    return label, out
