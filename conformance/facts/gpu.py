"""GPU facts: the NVML probe's JSON, `nvidia-smi -q -x`, `nvidia-smi topo -m` and PCI sysfs attributes,
joined per GPU by PCI bus id (NVML writes `00000000:18:00.0`, sysfs `0000:18:00.0`)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_cpulist
from conformance.facts.gpu_health import GpuHealth, health_from_nvml, health_from_smi

# PCIe transfer rate per lane (sysfs current_link_speed, "16.0 GT/s PCIe") -> generation
GT_PER_S = {"2.5": 1, "5.0": 2, "5": 2, "8.0": 3, "8": 3, "16.0": 4, "16": 4, "32.0": 5, "32": 5, "64.0": 6, "64": 6}


def normalise_bus_id(bus_id: str) -> str:
    """`00000000:18:00.0` / `0000:18:00.0` / `18:00.0` -> `0000:18:00.0` (lower case, as sysfs)."""
    s = bus_id.strip().lower()
    m = re.fullmatch(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", s)
    if not m:
        raise ParseError(f"PCI bus id {bus_id!r} is not of the form [domain:]bus:device.function")
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def link_generation(speed: str) -> int | None:
    """sysfs `current_link_speed` ("16.0 GT/s PCIe", "8 GT/s") -> PCIe generation."""
    m = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
    return GT_PER_S.get(m.group(1)) if m else None


@dataclass
class PciFunction:
    """What sysfs says about one GPU's PCI function."""

    bus_id: str
    numa_node: int | None = None  # -1 in sysfs: the firmware did not say
    local_cpus: frozenset[int] | None = None
    link_gen: int | None = None
    link_width: int | None = None
    max_link_gen: int | None = None
    max_link_width: int | None = None


@dataclass
class Gpu:
    index: int
    uuid: str
    bus_id: str
    name: str | None = None
    minor: int | None = None
    pcie_gen: int | None = None  # current (idle links downshift)
    pcie_width: int | None = None
    pcie_max_gen: int | None = None  # device and slot maximum
    pcie_max_width: int | None = None
    pcie_gpu_max_gen: int | None = None  # what the GPU itself supports
    replay: int | None = None
    mig: bool | None = None  # the current MIG mode
    mig_pending: bool | None = None  # the mode after the next GPU reset (nvmlDeviceGetMigMode's second value)
    processes: list[int] = field(default_factory=list)
    affinity_cpus: frozenset[int] | None = None  # NVML (node scope) or topo -m
    affinity_nodes: frozenset[int] | None = None
    errors: dict[str, str] = field(default_factory=dict)
    vbios: str | None = None
    inforom: str | None = None  # the InfoROM image version
    pci: PciFunction | None = None
    health: GpuHealth = field(default_factory=GpuHealth)
    # NVLink-C2C to a Grace CPU (GH200, GB200, GB300): NVML nvmlDeviceGetC2cModeInfoV isC2cEnabled, nvidia-smi
    # <c2c_mode> Enabled/Disabled; None: not read (errors["c2c"] says why, "not supported" on a PCIe-only GPU)
    c2c: bool | None = None

    @property
    def label(self) -> str:
        return f"GPU{self.index} {self.uuid} ({self.bus_id})"


@dataclass
class DaemonSeen:
    """Where a GPU daemon (nv-fabricmanager, nvidia-persistenced) was found: verified on the host (its pids), in a
    container (the GPU Operator's driver container runs both: a presence, not verified), or not at all. A
    container's process is never evidence that the daemon is absent; no process of that name anywhere is."""

    host: list[int] = field(default_factory=list)
    contained: list[int] = field(default_factory=list)
    other: int = 0  # processes of that name that are neither (a user's, or not examined)

    @classmethod
    def of(cls, seen: DaemonSeen | list[int]) -> DaemonSeen:
        return seen if isinstance(seen, DaemonSeen) else cls(host=list(seen))

    @property
    def nowhere(self) -> bool:
        return not self.host and not self.contained and not self.other

    def describe(self) -> str:
        if self.host:
            return f"running on the host (pid {', '.join(map(str, self.host))})"
        if self.contained:
            return (f"running in a container (pid {', '.join(map(str, self.contained))}; the GPU Operator's driver "
                    "container runs it there): present, not verified")  # fmt: skip
        if self.other:
            return f"no verified process; {self.other} process(es) of that name that are not the daemon"
        return "no process of that name on the node, on the host or in a container"


@dataclass
class GpuFacts:
    gpus: list[Gpu]
    source: str  # "NVML", "nvidia-smi", or why there is none
    pci_functions: list[str] = field(default_factory=list)  # NVIDIA display-class functions in sysfs
    driver: str | None = None
    missing_functions: list[str] = field(default_factory=list)
    cuda_driver: str | None = None  # the CUDA version the driver supports, e.g. "12.4"
    notes: list[str] = field(default_factory=list)
    nvswitches: list[str] = field(default_factory=list)  # NVIDIA bridge-class PCI functions (NVSwitch)
    daemons: dict[str, DaemonSeen] = field(default_factory=dict)  # nv-fabricmanager, nvidia-persistenced


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_nvml_probe(text: str) -> GpuFacts:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ParseError(f"NVML probe output is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("probe") != 1:
        raise ParseError("NVML probe output: not a version-1 probe document")
    if doc.get("nvml") != "ok":
        raise ParseError(f"NVML could not be used: {doc.get('nvml')}")
    gpus = []
    for i, g in enumerate(doc.get("gpus") or []):
        if not isinstance(g, dict) or not isinstance(g.get("uuid"), str) or not isinstance(g.get("bus_id"), str):
            raise ParseError(f"NVML probe output: GPU entry {i} lacks a uuid or bus_id")
        mig = g.get("mig")
        procs = g.get("processes") if isinstance(g.get("processes"), list) else []
        errors = {str(k): str(v) for k, v in (g.get("errors") or {}).items()}
        if not isinstance(g.get("processes"), list):  # unread is not "no processes": checks read errors
            errors.setdefault("processes", "not in the NVML probe's output")
        gpus.append(
            Gpu(
                index=_int(g.get("index")) if _int(g.get("index")) is not None else i,
                uuid=g["uuid"],
                bus_id=normalise_bus_id(g["bus_id"]),
                name=g.get("name") if isinstance(g.get("name"), str) else None,
                minor=_int(g.get("minor")),
                pcie_gen=_int(g.get("pcie_gen")),
                pcie_width=_int(g.get("pcie_width")),
                pcie_max_gen=_int(g.get("pcie_max_gen")),
                pcie_max_width=_int(g.get("pcie_max_width")),
                pcie_gpu_max_gen=_int(g.get("pcie_gpu_max_gen")),
                replay=_int(g.get("pcie_replay")),
                mig=bool(mig[0]) if isinstance(mig, list) and mig and _int(mig[0]) is not None else None,
                mig_pending=bool(mig[1]) if isinstance(mig, list) and len(mig) > 1 and _int(mig[1]) is not None else None,
                processes=[int(p["pid"]) for p in procs if isinstance(p, dict) and _int(p.get("pid")) is not None],
                affinity_cpus=_set(g.get("cpu_affinity")),
                affinity_nodes=_set(g.get("mem_affinity")),
                errors=errors,
                health=health_from_nvml(g, errors),
                vbios=g.get("vbios") if isinstance(g.get("vbios"), str) else None,
                inforom=g.get("inforom") if isinstance(g.get("inforom"), str) else None,
                c2c=g["c2c"] if isinstance(g.get("c2c"), bool) else None,
            )
        )
    return GpuFacts(
        gpus=gpus,
        source="NVML",
        driver=doc.get("driver") if isinstance(doc.get("driver"), str) else None,
        missing_functions=[str(f) for f in doc.get("missing_functions") or []],
        cuda_driver=doc.get("cuda_driver") if isinstance(doc.get("cuda_driver"), str) else None,
    )


def _set(v: Any) -> frozenset[int] | None:
    if not isinstance(v, list) or not all(_int(x) is not None for x in v):
        return None
    return frozenset(v)


def _find_int(el: ET.Element, path: str) -> int | None:
    t = el.findtext(path)
    if t is None:
        return None
    m = re.match(r"\s*(\d+)", t)
    return int(m.group(1)) if m else None


def parse_smi_xml(text: str) -> GpuFacts:
    """`nvidia-smi -q -x` (nvsmi_device_v1x.dtd)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ParseError(f"nvidia-smi -q -x output is not XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi -q -x output: root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        bus = g.findtext("pci/pci_bus_id") or g.get("id")
        uuid = g.findtext("uuid")
        if not bus or not uuid:
            raise ParseError(f"nvidia-smi -q -x: <gpu> {i} lacks <uuid> or a PCI bus id")
        link = "pci/pci_gpu_link_info/"
        mig = (g.findtext("mig_mode/current_mig") or "").strip().lower()
        pending = (g.findtext("mig_mode/pending_mig") or "").strip().lower()
        procs = [
            int(p.findtext("pid") or "0")
            for p in g.findall("processes/process_info")
            if (p.findtext("type") or "C").strip() in ("C", "C+G") and (p.findtext("pid") or "").strip().isdigit()
        ]
        errors = {} if g.find("processes") is not None else {"processes": "not in nvidia-smi's output"}
        if mig == "n/a":  # a GPU without MIG (T4, L4, L40S, A10G) prints N/A: known, and the same on its peers
            errors["mig"] = "not supported on this GPU"
        c2c = (g.findtext("c2c_mode") or "").strip().lower()  # "GPU C2C Mode" (R550+): Enabled on Grace boards
        if c2c in ("n/a", ""):
            errors["c2c"] = "not supported on this GPU" if c2c == "n/a" else "not in nvidia-smi's output (a driver before R550)"
        gpus.append(
            Gpu(
                index=i,
                uuid=uuid.strip(),
                bus_id=normalise_bus_id(bus),
                name=(g.findtext("product_name") or "").strip() or None,
                minor=_find_int(g, "minor_number"),
                pcie_gen=_find_int(g, link + "pcie_gen/current_link_gen"),
                pcie_width=_find_int(g, link + "link_widths/current_link_width"),
                pcie_max_gen=_find_int(g, link + "pcie_gen/max_link_gen"),
                pcie_max_width=_find_int(g, link + "link_widths/max_link_width"),
                pcie_gpu_max_gen=_find_int(g, link + "pcie_gen/max_device_link_gen"),
                replay=_find_int(g, "pci/replay_counter"),
                mig={"enabled": True, "disabled": False}.get(mig),
                mig_pending={"enabled": True, "disabled": False}.get(pending),
                processes=procs,
                errors=errors,
                health=health_from_smi(g, (root.findtext("driver_version") or "").strip() or None),
                vbios=(g.findtext("vbios_version") or "").strip() or None,
                inforom=(g.findtext("inforom_version/img_version") or "").strip() or None,
                c2c={"enabled": True, "disabled": False}.get(c2c),
            )
        )
    return GpuFacts(
        gpus=gpus,
        source="nvidia-smi",
        driver=(root.findtext("driver_version") or "").strip() or None,
        cuda_driver=(root.findtext("cuda_version") or "").strip() or None,
    )


def parse_topo_matrix(text: str) -> dict[int, tuple[frozenset[int] | None, int | None]]:
    """`nvidia-smi topo -m`: {GPU index: (CPU affinity, NUMA affinity)}. Cells are separated by tabs
    or runs of spaces; the device columns come first, then CPU Affinity, NUMA Affinity, GPU NUMA ID."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header_i = next((i for i, ln in enumerate(lines) if re.match(r"\s+GPU0\b", ln)), None)
    if header_i is None:
        raise ParseError("nvidia-smi topo -m: no header row starting with GPU0")
    header = lines[header_i].split()
    if "CPU" not in header:
        raise ParseError("nvidia-smi topo -m: no 'CPU Affinity' column")
    devices = header[: header.index("CPU")]
    has_numa = "NUMA" in header[header.index("CPU") :]
    out: dict[int, tuple[frozenset[int] | None, int | None]] = {}
    for ln in lines[header_i + 1 :]:
        cells = ln.split()
        m = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not m:
            if cells and cells[0] == "Legend:":
                break
            continue
        rest = cells[1 + len(devices) :]
        if not rest:
            raise ParseError(f"nvidia-smi topo -m: row {cells[0]} has no affinity columns")
        cpus = None if rest[0] == "N/A" else parse_cpulist(rest[0], what=f"topo -m {cells[0]} CPU Affinity")
        numa = int(rest[1]) if has_numa and len(rest) > 1 and rest[1].lstrip("-").isdigit() else None
        out[int(m.group(1))] = (cpus, numa)
    return out


def parse_pci_function(bus_id: str, attrs: dict[str, str]) -> PciFunction:
    """A GPU's PCI attributes from sysfs (`numa_node`, `local_cpulist`, `current_link_speed`, ...)."""
    f = PciFunction(bus_id=bus_id)
    if "numa_node" in attrs:
        v = attrs["numa_node"].strip()
        if not v.lstrip("-").isdigit():
            raise ParseError(f"/sys/bus/pci/devices/{bus_id}/numa_node: {v!r} is not a number")
        f.numa_node = None if int(v) < 0 else int(v)
    if "local_cpulist" in attrs:
        f.local_cpus = parse_cpulist(attrs["local_cpulist"], what=f"/sys/bus/pci/devices/{bus_id}/local_cpulist")
    if "current_link_speed" in attrs:
        f.link_gen = link_generation(attrs["current_link_speed"])
    if "max_link_speed" in attrs:
        f.max_link_gen = link_generation(attrs["max_link_speed"])
    for key, name in (("current_link_width", "link_width"), ("max_link_width", "max_link_width")):
        v = attrs.get(key, "").strip()
        if v.isdigit():
            setattr(f, name, int(v))
    return f
