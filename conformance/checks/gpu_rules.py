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


# Node labels of NVIDIA GPU Feature Discovery (NVIDIA/k8s-device-plugin, docs "GPU Feature Discovery",
# generated labels): the device plugin's MIG strategy and its sharing replicas per GPU.
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # none | single | mixed
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # time-slicing or MPS replicas per GPU (1: not shared)
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"  # none | time-slicing | mps


def reconcile_advertised(
    gpus: list[Gpu], gpu_capacity: int, resources: dict[str, int], labels: dict[str, str]
) -> tuple[str | None, list[str]]:
    """Physical GPUs (NVML) against what the node advertises to Kubernetes, as the NVIDIA device plugin
    configures it: with MIG under the single strategy `nvidia.com/gpu` counts MIG devices, under the
    mixed strategy MIG devices are `nvidia.com/mig-<profile>` and `nvidia.com/gpu` counts the GPUs
    without MIG; time-slicing and MPS advertise each GPU `replicas` times. Returns (problem or None,
    evidence lines). Where the count cannot be reconciled, the evidence says why and nothing fails."""
    physical = len(gpus)
    mig_gpus = [g for g in gpus if g.mig]
    slices = {k: v for k, v in sorted(resources.items()) if k.startswith("nvidia.com/mig-")}
    strategy = labels.get(MIG_STRATEGY_LABEL)
    replicas_text = labels.get(REPLICAS_LABEL, "1")
    lines = [
        f"advertised: nvidia.com/gpu {gpu_capacity}"
        + (f", {', '.join(f'{k} {v}' for k, v in slices.items())}" if slices else "")
        + f"; labels {MIG_STRATEGY_LABEL}={strategy or '(none)'}, {REPLICAS_LABEL}={labels.get(REPLICAS_LABEL, '(none)')}, "
        f"{SHARING_LABEL}={labels.get(SHARING_LABEL, '(none)')}; NVML: {physical} GPU(s), {len(mig_gpus)} with MIG enabled"
    ]
    try:
        replicas = max(1, int(replicas_text))
    except ValueError:
        return None, [*lines, f"not compared: {REPLICAS_LABEL}={replicas_text!r} is not a number"]
    if mig_gpus:
        if strategy == "single":
            return None, [*lines, "not compared: under the single MIG strategy nvidia.com/gpu counts MIG devices, not GPUs"]
        if strategy == "mixed":
            whole = (physical - len(mig_gpus)) * replicas
            lines.append(
                f"mixed MIG strategy: nvidia.com/gpu counts the {physical - len(mig_gpus)} GPU(s) without MIG x {replicas}"
            )
            if gpu_capacity != whole:
                return (
                    f"nvidia.com/gpu is {gpu_capacity}, expected {whole} (GPUs without MIG x replicas) under the mixed strategy",
                    lines,
                )
            if not slices:
                return f"{len(mig_gpus)} GPU(s) have MIG enabled but the node advertises no nvidia.com/mig-* resource", lines
            return None, lines
        return None, [
            *lines,
            f"not compared: MIG is enabled and the node has no {MIG_STRATEGY_LABEL} label to say how it is advertised",
        ]
    expected = physical * replicas
    if gpu_capacity == expected:
        return None, [*lines, f"nvidia.com/gpu {gpu_capacity} = {physical} GPU(s) x {replicas} replica(s)"]
    if replicas == 1 and physical and gpu_capacity % physical == 0 and gpu_capacity > physical:
        return None, [
            *lines,
            f"not compared: nvidia.com/gpu {gpu_capacity} is {gpu_capacity // physical} x the {physical} GPU(s), as GPU "
            f"sharing advertises, but the node has no {REPLICAS_LABEL} label to confirm it",
        ]
    problem = f"{physical} GPU(s) visible to NVML x {replicas} replica(s) = {expected}, "
    return problem + f"the node advertises nvidia.com/gpu {gpu_capacity}", lines


def plugin_units(gpus: list[Gpu], labels: dict[str, str]) -> tuple[list[Gpu], int] | str:
    """Which GPUs `nvidia.com/gpu` counts, and how many units each is, as the NVIDIA device plugin advertises them
    (the same reading as reconcile_advertised): without MIG every GPU, `replicas` units each under time-slicing or MPS;
    under the mixed MIG strategy the GPUs without MIG (a broken MIG GPU leaves nvidia.com/gpu alone); under the single
    strategy the units are MIG devices, whose number per GPU is not known here. A str: why it cannot be said."""
    replicas_text = labels.get(REPLICAS_LABEL, "1")
    try:
        replicas = max(1, int(replicas_text))
    except ValueError:
        return f"{REPLICAS_LABEL}={replicas_text!r} is not a number: how many units a GPU is, is unknown"
    mig = [g for g in gpus if g.mig]
    unread = [g for g in gpus if g.mig is None and g.errors.get("mig") not in ("not supported on this GPU", None)]
    if unread:
        return f"the MIG mode of {', '.join(g.label for g in unread)} was not read: which GPUs nvidia.com/gpu counts is unknown"
    if not mig:
        return list(gpus), replicas
    strategy = labels.get(MIG_STRATEGY_LABEL)
    if strategy == "mixed":
        return [g for g in gpus if not g.mig], replicas
    if strategy == "single":
        return "under the single MIG strategy nvidia.com/gpu counts MIG devices, whose number per GPU is not known here"
    return f"MIG is enabled and the node has no {MIG_STRATEGY_LABEL} label to say how nvidia.com/gpu counts it"


# Metrics dcgm-exporter serves under another name from some release on: dcgm-exporter 4.10 serves the PCIe
# throughput fields as DCGM_FI_PROF_PCIE_{TX,RX}_BYTES_PER_SECOND (issue 51's reading of the release notes); a
# profile's name is served when the exporter serves it under any of its names.
METRIC_NAMES = (
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND"),
)


def served_as(metric: str, series: dict[str, int]) -> tuple[str, int]:
    """(the name the exporter serves `metric` under, its series count); the profile's own name with 0 if none."""
    names = next((group for group in METRIC_NAMES if metric in group), (metric,))
    for name in (metric, *(n for n in names if n != metric)):
        if series.get(name):
            return name, series[name]
    return metric, 0
