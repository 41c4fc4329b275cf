"""The kubelet's checkpoint files: `cpu_manager_state` and `memory_manager_state`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_cpulist


def _load_json(text: str, path: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ParseError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _lower_keys(doc: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in doc.items()}


@dataclass
class CpuManagerState:
    """`cpu_manager_state`: policy, shared pool and exclusive assignments.

    `entries` is keyed by pod UID then container name (V2). V1 files key entries by container
    id alone; then each container id stands as its own pod with one unnamed container."""

    policy: str
    default_cpus: frozenset[int]
    entries: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    version: int = 2


def parse_cpu_manager_state(text: str, path: str = "cpu_manager_state") -> CpuManagerState:
    doc = _lower_keys(_load_json(text, path))
    policy = doc.get("policyname")
    if not isinstance(policy, str) or not policy:
        raise ParseError(f"{path}: field policyName is missing or not a string")
    default = doc.get("defaultcpuset", "")
    if not isinstance(default, str):
        raise ParseError(f"{path}: field defaultCpuSet is not a string")
    default_cpus = parse_cpulist(default, what=f"{path}: defaultCpuSet")
    raw_entries = doc.get("entries") or {}
    if not isinstance(raw_entries, dict):
        raise ParseError(f"{path}: field entries is not an object")
    entries: dict[str, dict[str, frozenset[int]]] = {}
    version = 2
    for pod, value in raw_entries.items():
        if isinstance(value, str):
            version = 1
            entries[str(pod)] = {"": parse_cpulist(value, what=f"{path}: entries[{pod}]")}
        elif isinstance(value, dict):
            containers: dict[str, frozenset[int]] = {}
            for name, cpus in value.items():
                if not isinstance(cpus, str):
                    raise ParseError(f"{path}: entries[{pod}][{name}] is not a cpulist string")
                containers[str(name)] = parse_cpulist(cpus, what=f"{path}: entries[{pod}][{name}]")
            entries[str(pod)] = containers
        else:
            raise ParseError(f"{path}: entries[{pod}] is neither a cpulist nor an object")
    return CpuManagerState(policy=policy, default_cpus=default_cpus, entries=entries, version=version)


@dataclass
class MemoryManagerState:
    policy: str
    numa_cells: dict[int, list[int]]
    entries: dict[str, dict[str, list[dict[str, Any]]]]


def parse_memory_manager_state(text: str, path: str = "memory_manager_state") -> MemoryManagerState:
    doc = _lower_keys(_load_json(text, path))
    policy = doc.get("policyname")
    if not isinstance(policy, str) or not policy:
        raise ParseError(f"{path}: field policyName is missing or not a string")
    machine = doc.get("machinestate") or {}
    if not isinstance(machine, dict):
        raise ParseError(f"{path}: field machineState is not an object")
    cells: dict[int, list[int]] = {}
    for numa, state in machine.items():
        if not str(numa).isdigit() or not isinstance(state, dict):
            raise ParseError(f"{path}: machineState[{numa}] is not a NUMA node entry")
        # The code writes "cells"; older documentation shows "nodes". Accept both.
        group = state.get("cells", state.get("nodes", [int(numa)]))
        if not isinstance(group, list) or not all(isinstance(n, int) for n in group):
            raise ParseError(f"{path}: machineState[{numa}].cells is not a list of NUMA ids")
        cells[int(numa)] = list(group)
    entries = doc.get("entries") or {}
    if not isinstance(entries, dict):
        raise ParseError(f"{path}: field entries is not an object")
    return MemoryManagerState(policy=policy, numa_cells=cells, entries=entries)


def parse_device_checkpoint(text: str, path: str) -> dict[str, str]:
    """The kubelet's device manager checkpoint (`device-plugins/kubelet_internal_checkpoint`): device id ->
    "pod <uid> container <name> (<resource>)". Layout: pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go,
    {"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName", "DeviceIDs"}], ...},
    "Checksum"}; DeviceIDs is {"<numa>": [ids]} since Kubernetes 1.20, a plain list before. The NVIDIA
    device plugin's ids are GPU UUIDs (time-slicing adds a "::<replica>" suffix) or MIG device UUIDs."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ParseError(f"{path}: not JSON: {e}") from None
    entries = (doc.get("Data") or {}).get("PodDeviceEntries") if isinstance(doc, dict) else None
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ParseError(f"{path}: Data.PodDeviceEntries is not a list")
    out: dict[str, str] = {}
    for e in entries:
        if not isinstance(e, dict):
            continue
        ids = e.get("DeviceIDs") or []
        flat = [i for v in ids.values() for i in (v or [])] if isinstance(ids, dict) else list(ids)
        who = f"pod {e.get('PodUID')} container {e.get('ContainerName')} ({e.get('ResourceName')})"
        for device in flat:
            if isinstance(device, str):
                out[device.split("::")[0]] = who
    return out
