"""The GPUs' facts of one node: NVML (the probe) or nvidia-smi joined with PCI sysfs, NVLink, the GPU daemons,
and the driver's Xid events of this boot from the kernel log."""

from __future__ import annotations

import json
import re

from conformance.collection.bundle import Record
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.cdi import SPEC_DIRS, TOOLKIT_CONFIG, CdiRegistry, cdi_registry, toolkit_mode
from conformance.facts.dra_cpu import claim_cpu_sets
from conformance.facts.gpu import DaemonSeen, GpuFacts, parse_nvml_probe, parse_pci_function, parse_smi_xml, parse_topo_matrix
from conformance.facts.gpu_health import parse_smi_nvlink
from conformance.facts.node_base import FactsBase, fact
from conformance.facts.xid import CONTROL, XID_LINES_KEPT, XidLog, XidRecordError, parse_xid_record

# GPU daemons by the name the kernel keeps for them (comm: the first 15 characters of the program name)
GPU_DAEMONS = {"nvidia-fabricmanager": "nv-fabricmanage", "nvidia-persistenced": "nvidia-persiste"}
PCI_ATTRIBUTES = ("numa_node", "local_cpulist", "current_link_speed", "current_link_width", "max_link_speed", "max_link_width")


class GpuNodeFacts(FactsBase):
    """The GPUs' facts, each read on first use from the collected bundle."""

    @fact
    def gpus(self) -> GpuFacts:
        """GPUs from NVML (the probe), else nvidia-smi, joined with their PCI sysfs attributes."""
        self.require_reachable()
        b = self.bundle
        listed = b.meta_lines("gpus")
        if listed is None:
            raise FactUnavailable(f"node {self.name}: the collector did not list PCI GPUs (older snapshot?)")
        functions = sorted(listed)
        probe = b.optional_command("nvml-probe")
        notes: list[str] = []
        if probe is None and not functions:
            return GpuFacts(gpus=[], source="sysfs: no NVIDIA display-class PCI function", pci_functions=[])
        if probe is not None and probe.status == "0":
            facts = parse_nvml_probe(probe.data.decode("utf-8", "replace"))
        else:
            why = _probe_failure(probe)
            notes.append(f"NVML probe: {why}; using nvidia-smi")
            smi = b.optional_command("nvidia-smi-q")
            if smi is None or smi.status != "0":
                state = "not found on the node" if smi is None or smi.status == "127" else f"exited {smi.status}"
                raise FactUnavailable(f"node {self.name}: GPU facts unavailable: NVML probe: {why}; nvidia-smi: {state}")
            facts = parse_smi_xml(smi.data.decode("utf-8", "replace"))
            topo = b.optional_command("nvidia-smi-topo")
            if topo is not None and topo.status == "0":
                for index, (cpus, numa) in parse_topo_matrix(topo.data.decode("utf-8", "replace")).items():
                    for g in facts.gpus:
                        if g.index == index:
                            g.affinity_cpus = cpus
                            g.affinity_nodes = frozenset({numa}) if numa is not None else None
            else:
                notes.append("nvidia-smi topo -m failed: NVML affinity unknown")
            nvlink = b.optional_command("nvidia-smi-nvlink")
            if nvlink is not None and nvlink.status == "0":
                errs = b.optional_command("nvidia-smi-nvlink-errors")
                err_text = errs.data.decode("utf-8", "replace") if errs is not None and errs.status == "0" else ""
                why = (
                    "nvidia-smi nvlink -e was not run" if errs is None
                    else None if errs.status == "0"
                    else f"nvidia-smi nvlink -e failed (exit {errs.status})"
                )  # fmt: skip
                by_index = parse_smi_nvlink(nvlink.data.decode("utf-8", "replace"), err_text, why)
                for g in facts.gpus:
                    if g.index in by_index:
                        g.health.nvlinks = by_index[g.index]
                        g.health.unread.pop("nvlinks", None)
        for g in facts.gpus:
            attrs = {}
            for a in PCI_ATTRIBUTES:
                rec = b.file(f"/sys/bus/pci/devices/{g.bus_id}/{a}")
                if rec is not None and rec.status == "ok":
                    attrs[a] = rec.data.decode("utf-8", "replace")
            if attrs:
                g.pci = parse_pci_function(g.bus_id, attrs)
        facts.pci_functions = functions
        facts.notes = notes + facts.notes
        facts.nvswitches = sorted(b.meta_lines("nvswitches") or [])
        # processes verified as the node's daemons (a user can name a program nvidia-persistenced), and those in
        # containers (the GPU Operator's driver container runs both daemons), kept apart
        facts.daemons = {}
        for name, comm in GPU_DAEMONS.items():
            found = b.daemons(comm)
            facts.daemons[name] = DaemonSeen(
                host=[d.pid for d in found if d.trusted],
                contained=[d.pid for d in found if d.in_container],
                other=sum(1 for d in found if not d.trusted and not d.in_container),
            )
        return facts

    @fact
    def xid_log(self) -> XidLog:
        """The NVIDIA driver's Xid events of this boot, from the kernel log the collector could read, with
        what it could not read: a log that does not reach back to this boot's start is incomplete."""
        self.require_reachable()
        b = self.bundle
        source, lines, tried_rec = b.meta("kernel-log"), b.optional_command("xid-lines"), b.meta("kernel-log-tried")
        if source is None or lines is None:
            raise FactUnavailable(f"node {self.name}: the collector read no kernel log (no GPU listed, or an older snapshot)")
        if source.status != "ok" or lines.status != "0":
            raise FactUnavailable(
                f"node {self.name}: the collector's kernel-log record could not be read ({source.status}/{lines.status})"
            )
        where = source.data.decode("utf-8", "replace")
        tried = "" if tried_rec is None or tried_rec.status != "ok" else tried_rec.data.decode("utf-8", "replace")
        tried = CONTROL.sub("?", tried.strip().rstrip(";"))[:600]
        if where == "none" or where.endswith(" denied"):
            why = "permission denied" if where.endswith(" denied") else "none found"
            raise FactUnavailable(
                f"node {self.name}: no kernel log could be read ({where}): tried /var/log/kern.log, /var/log/messages, "
                f"journalctl -k -b 0 and dmesg ({why}; dmesg needs CAP_SYSLOG where kernel.dmesg_restrict=1, and the "
                "files are readable by root or the adm group)" + (f"; {tried}" if tried else "")
            )
        try:
            events, counts, numbers = parse_xid_record(lines.data.decode("utf-8", "replace"))
        except XidRecordError as e:
            raise ParseError(f"node {self.name}: {e}") from None
        cap = re.search(r" read-last=(\d+)", where)
        size = re.search(r" size=(\d*) ", where)  # collectors before rotations were read
        files = re.search(r" files=(\d+) ", where)
        if "bytes" in numbers and cap:
            read = "read whole" if numbers["bytes"] < int(cap.group(1)) else f"the last {int(cap.group(1)) // 2**20} MiB read"
        elif size and cap and size.group(1) and int(size.group(1)) <= int(cap.group(1)):
            read = f"{size.group(1)} bytes, read whole"
        else:
            read = f"the last {int(cap.group(1)) // 2**20} MiB read" if cap else "read whole"
        complete = numbers["boot_line"] == 1
        if where.startswith("file "):
            n = int(files.group(1)) if files else 1
            what = "the file" if n == 1 else f"the file and {n - 1} rotation(s)"
            scope = "lines after this boot's first line" if complete else "this boot's first line not found"
            detail = f"{what}, {read}; {scope}"
        else:
            detail = "this boot only" + ("" if complete else ", its first line not found")
        gaps = []
        if not complete:
            gaps.append(
                "this boot's log not fully read: " + (tried or f"{where.split(' ')[0]} does not reach back to this boot's start")
            )
        if numbers.get("dropped"):
            gaps.append(f"{numbers['dropped']} Xid line(s) not counted: more than 1000 different (GPU, Xid) pairs")
        if counts is None and numbers["total"] > XID_LINES_KEPT:
            gaps.append(
                f"only the newest {XID_LINES_KEPT} of {numbers['total']} Xid lines were kept (a collector before per-Xid "
                "counts): older Xid numbers not read"
            )
        source_name = re.split(r" (?:size|files|read-last)=", where)[0]
        return XidLog(
            source=source_name, detail=detail, events=events, total=numbers["total"], counts=counts, complete=complete, gaps=gaps
        )

    @fact
    def gpu_memory_mode(self) -> tuple[str, str] | None:
        """The Grace board's GPU memory mode and how it was read; None where no GPU reaches its CPU over NVLink-C2C
        (the mode does not apply). A GPU whose C2C mode was not read leaves it unknown."""
        gpus = self.gpus
        unread = [
            f"{g.label}: {g.errors.get('c2c', 'not read')}"
            for g in gpus.gpus
            if g.c2c is None and g.errors.get("c2c") != "not supported on this GPU"
        ]
        if not any(g.c2c for g in gpus.gpus):
            # NVLink-C2C joins GPUs to a Grace CPU (aarch64) only: on an x86_64 node an unread C2C mode is no C2C
            machine = self._machine_or_none()
            if unread and machine != "x86_64":
                raise FactUnavailable(
                    f"node {self.name} ({machine or 'machine architecture not recorded'}): whether the GPUs reach their "
                    f"CPU over NVLink-C2C was not read: {'; '.join(unread)}"
                )
            return None
        if self.bundle.file(PARAMS) is None:
            raise FactUnavailable(f"node {self.name}: {PARAMS} was not collected (an older snapshot)")
        # a file that is not there (status missing) is said as such: the driver answered NVML, so it is loaded
        return memory_mode(self.bundle.optional_text(PARAMS), gpus.driver)

    @fact
    def cdi(self) -> CdiRegistry:
        """The CDI specs in the runtimes' default spec folders, as their CDI cache reads them (conformance.facts.cdi).
        A folder that could not be listed, or a spec file that could not be read, leaves it unknown."""
        self.require_reachable()
        files: list[tuple[int, str, str]] = []
        for priority, folder in enumerate(SPEC_DIRS):
            meta = self.bundle.meta(f"cdi-dir:{folder}")
            if meta is None and not self.bundle.listed(f"{folder}/*"):
                raise FactUnavailable(f"node {self.name}: the CDI spec folders were not listed (a collector before CDI)")
            if meta is not None and (meta.status != "ok" or not meta.data.strip()):
                raise FactUnavailable(f"node {self.name}: where {folder} leads below the host root was not recorded")
            where = meta.data.decode("utf-8", "replace").strip() if meta is not None else folder
            for path in self.bundle.glob(f"{where}/*"):  # raises naming the folder when it could not be listed
                if not path.endswith((".json", ".yaml")):
                    continue
                files.append((priority, path, self.bundle.text(path, f"CDI spec {path}")))
        return cdi_registry(files)

    @fact
    def dra_cpu_sets(self) -> dict[str, tuple[frozenset[int], str]]:
        """Claim UID -> (CPUs, spec file): the exclusive CPUs a DRA CPU driver prepared (conformance.facts.dra_cpu)."""
        return claim_cpu_sets(self.cdi)

    @fact
    def container_toolkit_mode(self) -> tuple[str, str]:
        """The NVIDIA Container Runtime's mode (auto, legacy, cdi, csv) and where it was read."""
        if self.bundle.file(TOOLKIT_CONFIG) is None:
            raise FactUnavailable(f"node {self.name}: {TOOLKIT_CONFIG} was not collected (a collector before CDI)")
        try:
            return toolkit_mode(self.bundle.optional_text(TOOLKIT_CONFIG))
        except ParseError as e:
            raise FactUnavailable(str(e)) from None

    def _machine_or_none(self) -> str | None:
        try:
            return self.machine
        except FactUnavailable:
            return None

    @fact
    def machine(self) -> str:
        """The kernel's machine name (`uname -m`: x86_64, aarch64)."""
        rec = self.bundle.command("uname-m")
        text = rec.data.decode("utf-8", "replace").strip()
        if rec.status != "0" or not text:
            raise FactUnavailable(f"node {self.name}: uname -m exited {rec.status}: the machine architecture is unknown")
        return text


def _probe_failure(probe: Record | None) -> str:
    if probe is None:
        return "not run"
    if probe.status == "127":
        return "python3 not found on the node"
    text = probe.data.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and doc.get("nvml"):
            return str(doc["nvml"])[:300]
    except ValueError:
        pass
    return f"exited {probe.status}" + (f": {text[:200]}" if text else "")


# The GPU memory mode of a Grace board's driver (issues 51, 59): in NUMA mode the GPU's HBM is onlined as system memory
# (a NUMA node of its own, counted in MemTotal and so in the node's capacity); in the coherent driver-based memory
# management mode (CDMM, from R580) the driver keeps it. What the driver runs under is its EnableUserNUMAManagement
# (0: the driver manages GPU memory), which /proc/driver/nvidia/params prints. The module parameter
# NVreg_CoherentGPUMemoryMode sets it: exactly "driver" gives 0, any other value 1 (kernel-open os-registry.c,
# os_registry_init: strcmp(NVreg_CoherentGPUMemoryMode, "driver")), so "cdmm" or "Driver" run NUMA mode; unset, R615
# and later set 0 at GPU initialisation (nv_enable_cdmm_mode). EnableUserNUMAManagement=0 set directly (the older way)
# is CDMM too. NVIDIA's CDMM documentation; GKE A4X and EKS P6e-GB200 run it.
CDMM_FROM = 580
CDMM_DEFAULT_FROM = 615
PARAMS = "/proc/driver/nvidia/params"


def memory_mode(params: str | None, driver: str | None) -> tuple[str, str]:
    """("driver" | "numa", how it was decided) from the driver's parameters (None: the file is not there) and its
    version; FactUnavailable where neither decides."""
    values: dict[str, str] = {}
    for line in (params or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("CoherentGPUMemoryMode", "EnableUserNUMAManagement"):
            values[key.strip()] = value.strip().strip('"').strip()
    coherent = values.get("CoherentGPUMemoryMode")
    said = "" if coherent is None else f', CoherentGPUMemoryMode "{coherent}"'
    if coherent not in (None, "", "driver"):
        said += ' (the driver takes only the exact value "driver": any other runs NUMA mode)'
    user = values.get("EnableUserNUMAManagement")
    if user is not None:
        if user not in ("0", "1"):
            raise FactUnavailable(f"{PARAMS}: EnableUserNUMAManagement {user!r} is neither 0 nor 1")
        mode = "driver" if user == "0" else "numa"
        return mode, f"{PARAMS}: EnableUserNUMAManagement {user}{said}"
    if coherent is not None and coherent != "":  # a driver that prints no EnableUserNUMAManagement
        return ("driver" if coherent == "driver" else "numa"), f"{PARAMS}{said.replace(',', ':', 1)}"
    if driver is None:
        where = f"{PARAMS} names neither EnableUserNUMAManagement nor CoherentGPUMemoryMode" if params is not None else (
            f"{PARAMS} was not read")  # fmt: skip
        raise FactUnavailable(f"{where}, and the driver's version is unknown")
    if _major(driver) < CDMM_FROM:
        shown = f"{PARAMS} names no CoherentGPUMemoryMode" if params is not None else f"{PARAMS} is not there"
        return "numa", f"{shown}: driver {driver} runs NUMA mode (CDMM needs R{CDMM_FROM} or later)"
    if params is None:
        raise FactUnavailable(f"{PARAMS} is not there, and driver {driver} answered NVML: its memory mode is unknown")
    if _major(driver) >= CDMM_DEFAULT_FROM:
        return "driver", f"{PARAMS} names no memory mode; driver {driver} runs CDMM by default (R{CDMM_DEFAULT_FROM}+)"
    return "numa", (f"{PARAMS} names no memory mode; driver {driver} runs NUMA mode unless told (CDMM by default from "
                    f"R{CDMM_DEFAULT_FROM})")  # fmt: skip


def _major(driver: str) -> int:
    m = re.match(r"(\d+)", driver)
    return int(m.group(1)) if m else 0
