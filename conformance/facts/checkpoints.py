"""The kubelet's checkpoint files: `cpu_manager_state`, `memory_manager_state` and the device manager's."""

from __future__ import annotations

import json
import zlib
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


def _authoritative(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], bool]:
    """The payload a kubelet reads. From Kubernetes 1.37 the CPU manager's V4 and the memory manager's V3
    checkpoints carry it as a JSON string in `data` (checksummed by `dataChecksum`) and repeat the older
    layout beside it, with `checksum` 0, only so that a downgraded kubelet can still read the file
    (pkg/kubelet/cm/cpumanager/state/checkpoint.go and memorymanager/state/checkpoint.go: MarshalCheckpoint,
    kubernetes/kubernetes PRs 139102 and 139626). A 1.37 kubelet restores `data` alone: so does this
    reader. True when the payload came from `data`."""
    if "data" not in doc:
        return doc, False
    data = doc["data"]
    if not isinstance(data, str):
        raise ParseError(f"{path}: field data is not a string (the 1.37 layout keeps the checkpoint as JSON text there)")
    return _lower_keys(_load_json(data, f"{path} (field data)")), True


@dataclass
class CpuManagerState:
    """`cpu_manager_state`: policy, shared pool and exclusive assignments.

    `entries` is keyed by pod UID then container name (V2 on). V1 files key entries by container
    id alone; then each container id stands as its own pod with one unnamed container. `pod_entries`
    are the pod-level CPU sets (V3/V4 `podEntries` {pod UID: {"cpuSet": cpulist}}, written with the
    PodLevelResourceManagers gate: the CPUs a pod with spec.resources holds as a whole)."""

    policy: str
    default_cpus: frozenset[int]
    entries: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    version: int = 2
    pod_entries: dict[str, frozenset[int]] = field(default_factory=dict)
    owner: str = "the kubelet"  # who assigns the CPUs, and where it records them (as DraCpuAssignments says)
    record: str = "cpu_manager_state"


def parse_cpu_manager_state(text: str, path: str = "cpu_manager_state") -> CpuManagerState:
    doc, from_data = _authoritative(_lower_keys(_load_json(text, path)), path)
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
    raw_pods = doc.get("podentries") or {}
    if not isinstance(raw_pods, dict):
        raise ParseError(f"{path}: field podEntries is not an object")
    pod_entries: dict[str, frozenset[int]] = {}
    for pod, value in raw_pods.items():
        cpus = _lower_keys(value).get("cpuset", "") if isinstance(value, dict) else None
        if not isinstance(cpus, str):
            raise ParseError(f"{path}: podEntries[{pod}].cpuSet is not a cpulist string")
        pod_entries[str(pod)] = parse_cpulist(cpus, what=f"{path}: podEntries[{pod}].cpuSet")
    if from_data:
        version = 4
    elif raw_pods:
        version = 3
    return CpuManagerState(policy=policy, default_cpus=default_cpus, entries=entries, version=version, pod_entries=pod_entries)


@dataclass
class MemoryManagerState:
    policy: str
    numa_cells: dict[int, list[int]]
    entries: dict[str, dict[str, list[dict[str, Any]]]]


def parse_memory_manager_state(text: str, path: str = "memory_manager_state") -> MemoryManagerState:
    doc, _ = _authoritative(_lower_keys(_load_json(text, path)), path)
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


@dataclass(frozen=True)
class DeviceGrant:
    """One device the kubelet's device manager gave to a pod's container."""

    device: str  # the device plugin's id ("::<replica>" of time-slicing removed)
    resource: str  # the extended resource, e.g. nvidia.com/gpu
    holder: str  # "pod <uid> container <name>"

    @property
    def gpu_resource(self) -> bool:
        """A resource that hands out NVIDIA GPUs or GPU slices (nvidia.com/gpu, nvidia.com/mig-1g.10gb,
        nvidia.com/gpu.shared) or names itself a GPU (other vendors' and sharing plugins)."""
        return self.resource.startswith("nvidia.com/") or "gpu" in self.resource.lower()


def parse_device_grants(text: str, path: str) -> list[DeviceGrant]:
    """The kubelet's device manager checkpoint (`device-plugins/kubelet_internal_checkpoint`). Layout:
    pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go, {"Data": {"PodDeviceEntries": [{"PodUID",
    "ContainerName", "ResourceName", "DeviceIDs"}], ...}, "Checksum"}; DeviceIDs is {"<numa>": [ids]} since
    Kubernetes 1.20, a plain list before. The NVIDIA device plugin's ids are GPU UUIDs (time-slicing adds
    "::<replica>"; its DEVICE_ID_STRATEGY=index changes only what the container is told,
    internal/plugin/server.go deviceIDsFromAnnotatedDeviceIDs) or MIG device UUIDs; other plugins use their
    own ids. A document that is not this layout is a ParseError, never "nothing assigned"."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError(f"{path}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Data"), dict):
        raise ParseError(f"{path}: no Data object (not a device manager checkpoint)")
    entries = doc["Data"].get("PodDeviceEntries")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ParseError(f"{path}: Data.PodDeviceEntries is not a list")
    out: list[DeviceGrant] = []
    for n, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ParseError(f"{path}: Data.PodDeviceEntries[{n}] is not an object")
        ids = e.get("DeviceIDs") or []
        if isinstance(ids, dict):
            flat = [i for v in ids.values() for i in (v if isinstance(v, list) else [v])]
        elif isinstance(ids, list):
            flat = ids
        else:
            raise ParseError(f"{path}: Data.PodDeviceEntries[{n}].DeviceIDs is neither a list nor an object")
        who = f"pod {e.get('PodUID')} container {e.get('ContainerName')}"
        for device in flat:
            if not isinstance(device, str):
                raise ParseError(f"{path}: Data.PodDeviceEntries[{n}].DeviceIDs holds {device!r}, not a string")
            out.append(DeviceGrant(device.split("::")[0], str(e.get("ResourceName")), who))
    return out


def parse_device_checkpoint(text: str, path: str) -> dict[str, str]:
    """Device id -> "pod <uid> container <name> (<resource>)", from parse_device_grants."""
    return {g.device: f"{g.holder} ({g.resource})" for g in parse_device_grants(text, path)}


@dataclass(frozen=True)
class KubeletAssignments:
    """What the kubelet gave to pods on a node, as far as the H2D probe must stay off it: CPUs assigned
    exclusively (cpu_manager_state), devices (the device checkpoint), and the DRA drivers of GPUs
    registered with the kubelet (their claims are not mapped to GPUs here: every GPU counts as taken)."""

    exclusive: frozenset[int]
    grants: tuple[DeviceGrant, ...]
    dra_drivers: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class DraPrepared:
    """One ResourceClaim the kubelet prepared on the node, as its DRA checkpoint records it."""

    claim_uid: str
    claim: str  # namespace/name
    pod_uids: frozenset[str]
    devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_dra_checkpoint(text: str, path: str) -> list[DraPrepared]:
    """The kubelet's DRA manager checkpoint (`dra_manager_state`). Layout since Kubernetes 1.31
    (pkg/kubelet/cm/dra/state/checkpoint.go and state.go): {"Data": "<JSON text>", "Checksum": N}, the
    checksum the CRC-32 (IEEE) of Data's bytes, Data {"kind": "DRACheckpoint", "apiVersion":
    "checkpoint.dra.kubelet.k8s.io/v1", "Entries": [{"ClaimUID", "ClaimName", "Namespace", "PodUIDs": {uid: {}},
    "DriverState": {driver: {"Devices": [{"PoolName", "DeviceName", "RequestNames", "CDIDeviceIDs"}]}}}]}.
    A checksum that does not match is what the kubelet itself refuses ("checkpoint is corrupted"): a ParseError,
    never "nothing prepared". The alpha layout of 1.26-1.30 ({"version", "entries", "checksum"}, no device
    names) is named, not guessed at."""
    doc = _load_json(text, path)
    if "Data" not in doc:
        if "entries" in doc and "version" in doc:
            raise ParseError(f"{path}: the alpha DRA checkpoint layout of Kubernetes 1.26-1.30, which names no devices")
        raise ParseError(f"{path}: no Data field (not a DRA manager checkpoint)")
    data, checksum = doc.get("Data"), doc.get("Checksum")
    if not isinstance(data, str) or not isinstance(checksum, int):
        raise ParseError(f"{path}: Data is not a string or Checksum not a number")
    if zlib.crc32(data.encode()) != checksum:
        raise ParseError(f"{path}: checksum {checksum} does not match its Data (the kubelet calls it corrupted)")
    inner = _load_json(data, f"{path} Data")
    if inner.get("kind") != "DRACheckpoint":
        raise ParseError(f"{path}: Data is a {inner.get('kind')!r}, not a DRACheckpoint")
    entries = inner.get("Entries") or []
    if not isinstance(entries, list):
        raise ParseError(f"{path}: Data.Entries is not a list")
    out = []
    for n, e in enumerate(entries):
        where = f"{path}: Data.Entries[{n}]"
        if not isinstance(e, dict) or not isinstance(e.get("DriverState") or {}, dict):
            raise ParseError(f"{where} is not an object with a DriverState object")
        devices = []
        for driver, state in (e.get("DriverState") or {}).items():
            if not isinstance(state or {}, dict):
                raise ParseError(f"{where}.DriverState[{driver}] is {_short(state)}, not an object with Devices")
            listed = (state or {}).get("Devices") or []
            if not isinstance(listed, list):
                raise ParseError(f"{where}.DriverState[{driver}].Devices is {_short(listed)}, not a list")
            for d in listed:
                if not isinstance(d, dict):
                    raise ParseError(f"{where}.DriverState[{driver}].Devices holds {_short(d)}, not an object")
                devices.append((str(driver), str(d.get("PoolName")), str(d.get("DeviceName"))))
        pods = e.get("PodUIDs") or {}
        uids = frozenset(pods if isinstance(pods, (dict, list)) else [])
        out.append(DraPrepared(str(e.get("ClaimUID")), f"{e.get('Namespace')}/{e.get('ClaimName')}", uids, tuple(devices)))
    return out
