"""What the kubelet reserves, computed as the kubelet computes it. Pure functions over config values.

Sources (kubernetes/kubernetes, release-1.33):
- pkg/kubelet/cm/node_container_manager_linux.go, GetNodeAllocatableReservation: for each resource,
  systemReserved + kubeReserved + the hard eviction reservation (hardEvictionReservation: only the
  memory.available threshold, absolute or a percentage of capacity).
- pkg/kubelet/cm/memorymanager/memory_manager.go, validateReservedMemory (Static policy only): for
  memory and every hugepages-<size> named on either side, the sum of reservedMemory over NUMA nodes
  must equal that reservation, else the kubelet does not start; getTotalMemoryTypeReserved rejects a
  reservedMemory entry for a NUMA node the machine does not have.
- pkg/kubelet/cm/cpumanager/cpu_manager.go, NewManager: with the static policy and no
  reservedSystemCPUs, kubeReserved.cpu + systemReserved.cpu must be > 0 and is rounded UP to whole
  CPUs ("fractional CPUs cannot be exclusively allocated").
- staging/src/k8s.io/kubelet/config/v1beta1/defaults.go: evictionHard defaults to
  memory.available 100Mi when unset; a set map replaces the defaults unless
  mergeDefaultEvictionSettings is true.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from conformance.config.units import parse_quantity
from conformance.errors import ParseError

DEFAULT_MEMORY_AVAILABLE = "100Mi"


def _is_memory_type(name: str) -> bool:
    return name == "memory" or name.startswith("hugepages-")


def hard_eviction_memory(eviction_hard: Any, merge_defaults: Any) -> tuple[Decimal, str]:
    """The memory.available hard eviction threshold in bytes, and where it came from."""
    if eviction_hard is None:
        return parse_quantity(
            DEFAULT_MEMORY_AVAILABLE
        ), f"evictionHard unset: default memory.available {DEFAULT_MEMORY_AVAILABLE}"
    if not isinstance(eviction_hard, dict):
        raise ParseError(f"evictionHard: expected a map of signal to threshold, got {eviction_hard!r}")
    value = eviction_hard.get("memory.available")
    if value is None:
        if merge_defaults is True:
            return parse_quantity(DEFAULT_MEMORY_AVAILABLE), (
                f"evictionHard has no memory.available; mergeDefaultEvictionSettings adds {DEFAULT_MEMORY_AVAILABLE}"
            )
        return Decimal(0), "evictionHard is set without memory.available (the defaults are replaced): 0"
    text = str(value).strip()
    if text.endswith("%"):
        raise ParseError(
            f"evictionHard memory.available is {text}, a percentage of the node's memory capacity, which this "
            "check does not read; set an absolute threshold to have the sum rule judged"
        )
    return parse_quantity(text, what="evictionHard memory.available"), f"evictionHard memory.available {text}"


@dataclass
class MemoryTypeSum:
    resource: str
    reserved_memory: Decimal  # the sum of reservedMemory limits over NUMA nodes
    node_allocatable: Decimal  # kubeReserved + systemReserved (+ eviction, memory only)

    @property
    def equal(self) -> bool:
        return self.reserved_memory == self.node_allocatable


def memory_sums(
    reserved_memory: list[Any], kube_reserved: dict[str, Any], system_reserved: dict[str, Any], eviction: Decimal
) -> list[MemoryTypeSum]:
    """Both sides of the memory manager's start-up rule, per memory type, for every type named."""
    reserved: dict[str, Decimal] = {}
    for i, entry in enumerate(reserved_memory):
        if not isinstance(entry, dict) or not isinstance(entry.get("limits"), dict):
            raise ParseError(f"reservedMemory[{i}]: expected {{numaNode: N, limits: {{memory: ...}}}}, got {entry!r}")
        for name, q in entry["limits"].items():
            reserved[name] = reserved.get(name, Decimal(0)) + parse_quantity(q, what=f"reservedMemory[{i}].limits.{name}")
    allocatable: dict[str, Decimal] = {}
    for label, source in (("kubeReserved", kube_reserved), ("systemReserved", system_reserved)):
        for name, q in (source or {}).items():
            if _is_memory_type(name):
                allocatable[name] = allocatable.get(name, Decimal(0)) + parse_quantity(q, what=f"{label}.{name}")
    allocatable["memory"] = allocatable.get("memory", Decimal(0)) + eviction
    names = sorted(set(reserved) | {n for n, v in allocatable.items() if v or n == "memory"})
    return [MemoryTypeSum(n, reserved.get(n, Decimal(0)), allocatable.get(n, Decimal(0))) for n in names]


def reserved_cpu_total(kube_reserved: Any, system_reserved: Any) -> tuple[Decimal, int]:
    """kubeReserved.cpu + systemReserved.cpu, and the whole CPUs the CPU manager reserves for it."""
    total = Decimal(0)
    for label, source in (("kubeReserved", kube_reserved), ("systemReserved", system_reserved)):
        if isinstance(source, dict) and source.get("cpu") is not None:
            total += parse_quantity(source["cpu"], what=f"{label}.cpu")
    return total, math.ceil(total)


def format_bytes(n: Decimal) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % size == 0:
            return f"{n / size:.0f}{unit}"
    return f"{n:.0f} bytes"
