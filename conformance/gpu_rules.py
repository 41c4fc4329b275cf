"""Judging helpers shared by the GPU checks: expected link, local NUMA node, bandwidth floor."""

from __future__ import annotations

from typing import Any

from conformance.errors import FactUnavailable
from conformance.facts.gpu import Gpu


def expected_generation(g: Gpu, gpu_profile: dict[str, Any]) -> tuple[int | None, str]:
    """The PCIe generation the GPU should run at, and where that expectation comes from."""
    if gpu_profile.get("pcie_generation"):
        return int(gpu_profile["pcie_generation"]), "profile gpu.pcie_generation"
    if g.pcie_gpu_max_gen:
        return g.pcie_gpu_max_gen, "the GPU's own maximum (nvmlDeviceGetGpuMaxPcieLinkGeneration)"
    if g.pcie_max_gen:
        return g.pcie_max_gen, "device-and-slot maximum (the GPU's own maximum is not reported by this driver)"
    return None, "unknown"


def local_node(g: Gpu) -> int:
    """The GPU's NUMA node: sysfs numa_node, else NVML's memory affinity when it names one node."""
    if g.pci is not None and g.pci.numa_node is not None:
        return g.pci.numa_node
    if g.affinity_nodes and len(g.affinity_nodes) == 1:
        return next(iter(g.affinity_nodes))
    raise FactUnavailable(f"{g.label}: its NUMA node is unknown (sysfs numa_node is -1 or missing and NVML names none)")


def floor_for(generation: int | None, gpu_profile: dict[str, Any]) -> float | None:
    floors = {int(k): float(v) for k, v in (gpu_profile.get("h2d_floor_gbps") or {}).items()}
    return floors.get(generation) if generation is not None else None
