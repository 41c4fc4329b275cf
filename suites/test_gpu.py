"""GPUs: count, NUMA locality, PCIe link, MIG, the metrics exporter, and measured H2D bandwidth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conformance.checks import check, conclude
from conformance.checks.dra_rules import device_plugin_gpu_resources, dra_advertised
from conformance.checks.gpu_rules import expected_generation, floor_for, local_node, reconcile_advertised, served_as
from conformance.checks.release_rules import runtime_span
from conformance.checks.runtime_rules import cdi_enabled
from conformance.errors import FactUnavailable
from conformance.facts.cdi import NVIDIA_GPU_KIND
from conformance.facts.cpulist import format_cpulist


def gpu_machine(facts) -> str | None:
    """The node's machine (`uname -m`), None where it was not read."""
    try:
        return facts.machine
    except FactUnavailable:
        return None


def _fail_or_error(failures: list[str], errors: list[str]) -> None:
    """Failures decide; with only errors (facts missing), the outcome is error."""
    conclude(failures, errors)


def _measured(visible_gpus: Any, h2d: Any, evidence: Any, errors: list[str]) -> Iterator[tuple[Any, Any]]:
    """Each visible GPU the bandwidth probe measured, with its figures. One left alone on purpose (busy, MIG) is
    said in the evidence; one planned and not reported (a device mask, a failed UUID read) is an error: never a
    silent pass of the checks that read the probe."""
    for g in visible_gpus.gpus:
        m = h2d.gpus.get(g.uuid)
        if m is not None:
            yield g, m
        elif g.uuid in h2d.skipped:
            evidence.add(f"{g.label}: not measured: {h2d.skipped[g.uuid]}")
        else:
            errors.append(f"{g.label}: not measured: {h2d.missing.get(g.uuid, 'not reported by the probe')}")


@check(
    "GPU-COUNT",
    "critical",
    title="NVML sees every GPU the node should have, and the node advertises each once",
    rationale="""A GPU that fell off the bus or failed to initialise leaves the node advertising capacity it
    cannot serve, or a pool smaller than planned; pods then wait or land on a half-working node.""",
    remediation="Compare `nvidia-smi -L` with `lspci -d 10de:`; check `dmesg` for Xid/NVRM errors, reseat or "
    "replace the GPU, and make the profile's gpu.expected_count match the hardware. Advertise a node's GPUs "
    "through one path: the device plugin (nvidia.com/gpu) or a DRA driver's ResourceSlices, not both (disable "
    "the device plugin on nodes where the GPU DRA driver runs, e.g. with a node label both DaemonSets select on).",
    source="NVML (device count), /sys/bus/pci/devices (vendor 0x10de, display class)",
)
def test_gpu_count(node, node_gpus, node_spec, dra_slices, profile, evidence):
    g = node_gpus
    evidence.source = f"{g.source}; sysfs PCI; node capacity and ResourceSlices (API)"
    evidence.add(f"{g.source}: {len(g.gpus)} GPU(s); PCI bus: {len(g.pci_functions)} NVIDIA display function(s)")
    evidence.add(*(f"{x.label} {x.name or ''}".rstrip() for x in g.gpus), *g.notes)
    problems = []
    want = profile.get("gpu.expected_count")
    if want is not None and len(g.gpus) != want:
        problems.append(f"{len(g.gpus)} GPU(s) visible to {g.source}, profile expects {want}")
    seen = {x.bus_id for x in g.gpus}
    lost = [b for b in g.pci_functions if b not in seen]
    if lost:
        problems.append(f"on the PCI bus but not in {g.source}: {', '.join(lost)} (driver did not bring them up)")
    through_dra = False
    if dra_slices is not None:
        plugin = device_plugin_gpu_resources(node_spec.gpu_capacity, node_spec.gpu_resources)
        found, lines, through_dra = dra_advertised(dra_slices, g, plugin)
        evidence.add(*lines)
        problems += found
    if through_dra:
        pass  # the GPUs are advertised through DRA; nvidia.com/gpu beside them was judged above
    elif node_spec.gpu_capacity is None:
        evidence.add("advertised GPU resources not compared: the Kubernetes API did not report them for this node")
    else:
        verdict, lines = reconcile_advertised(g.gpus, node_spec.gpu_capacity, node_spec.gpu_resources, node_spec.labels)
        evidence.add(*lines)
        if verdict:
            problems.append(verdict)
    assert not problems, "; ".join(problems)
    evidence.add(f"verified: {len(g.gpus)} GPU(s) in {g.source}, every NVIDIA display function on the PCI bus among them")


@check(
    "GPU-NUMA-KNOWN",
    "high",
    title="Each GPU's PCI NUMA node is known on a multi-NUMA host",
    rationale="""With numa_node -1 the kubelet's topology manager and every NUMA-aware library treat the GPU
    as local to nothing, so CPUs and memory cannot be aligned with it.""",
    remediation="Enable ACPI SRAT/_PXM reporting (BIOS: NUMA / ACPI SRAT L3 cache as NUMA, or update firmware); "
    "the value is /sys/bus/pci/devices/<bdf>/numa_node.",
    source="/sys/bus/pci/devices/<bdf>/numa_node, local_cpulist",
)
def test_gpu_numa_known(node, visible_gpus, topology, evidence):
    if len(topology.cpu_nodes) < 2:  # memory-only NUMA nodes (CXL, a Grace Hopper's HBM) hold no CPUs to align
        pytest.skip(f"one NUMA node on this host: locality does not apply ({len(visible_gpus.gpus)} GPU(s))")
    evidence.source = "/sys/bus/pci/devices/<bdf>/numa_node"
    unknown = []
    for g in visible_gpus.gpus:
        n = g.pci.numa_node if g.pci else None
        cpus = format_cpulist(g.pci.local_cpus) if g.pci and g.pci.local_cpus is not None else "?"
        evidence.add(f"{g.label}: numa_node {n if n is not None else -1}, local_cpulist {cpus}")
        if g.pci is None:
            unknown.append(f"{g.label}: no sysfs attributes collected")
        elif n is None:
            unknown.append(f"{g.label}: numa_node is -1")
    assert not unknown, "; ".join(unknown) + f" on a host with {len(topology.cpu_nodes)} NUMA nodes with CPUs"


@check(
    "GPU-NUMA-CONSISTENT",
    "medium",
    title="NVML's CPU and memory affinity agree with sysfs",
    rationale="""Device plugins and NCCL take locality from NVML, the kubelet from sysfs; if they disagree,
    one of them aligns pods with the wrong socket.""",
    remediation="Update the NVIDIA driver and firmware; check `nvidia-smi topo -m` against "
    "/sys/bus/pci/devices/<bdf>/local_cpulist.",
    source="NVML nvmlDeviceGetCpuAffinityWithinScope / nvmlDeviceGetMemoryAffinity (node scope), sysfs",
)
def test_gpu_numa_consistent(node, visible_gpus, topology, evidence):
    evidence.source = f"{visible_gpus.source} affinity vs sysfs"
    failures, errors = [], []
    for g in visible_gpus.gpus:
        pci = g.pci
        if pci is None or g.affinity_cpus is None:
            errors.append(f"{g.label}: affinity not available ({'no sysfs attributes' if pci is None else g.errors})")
            continue
        nv_cpus = g.affinity_cpus & topology.online
        sys_cpus = (pci.local_cpus or frozenset()) & topology.online
        evidence.add(
            f"{g.label}: NVML CPUs {format_cpulist(nv_cpus)} nodes {sorted(g.affinity_nodes or [])}; "
            f"sysfs CPUs {format_cpulist(sys_cpus)} node {pci.numa_node if pci.numa_node is not None else -1}"
        )
        if nv_cpus != sys_cpus:
            failures.append(
                f"{g.label}: NVML CPU affinity {format_cpulist(nv_cpus)} != sysfs local_cpulist {format_cpulist(sys_cpus)}"
            )
        if pci.numa_node is not None and g.affinity_nodes is not None and g.affinity_nodes != {pci.numa_node}:
            failures.append(f"{g.label}: NVML memory affinity {sorted(g.affinity_nodes)} != sysfs numa_node {pci.numa_node}")
    _fail_or_error(failures, errors)


@check(
    "GPU-PCIE-LINK",
    "critical",
    title="PCIe link trained at the expected width, and generation under load",
    rationale="""A GPU trained at x8 or one generation down has half the host-to-device bandwidth: model loads,
    KV-cache offload and input copies slow down with no error anywhere. The trained width is the current
    width (nvmlDeviceGetCurrPcieLinkWidth). The generation is judged only from a reading taken while the
    link is busy: idle GPUs lower the link speed to save power (nvidia-smi's documentation of "GPU Link
    Info": the current generation may be reduced when the GPU is not in use), and
    nvmlDeviceGetMaxPcieLinkGeneration is what device and slot could do, never what the link trained at.""",
    remediation="Reseat the GPU or riser, check the BIOS PCIe speed setting for the slot, and compare "
    "`nvidia-smi -q | grep -A3 'Link'` under load; a gap between device-and-slot and GPU maximum is a slot/BIOS "
    "limit. For a generation verdict run with --measure (or a profile with gpu.measure_bandwidth).",
    source="NVML nvmlDeviceGetCurrPcieLinkWidth/Generation (during the bandwidth run for the generation), "
    "nvmlDeviceGetMaxPcieLinkGeneration/Width, nvmlDeviceGetGpuMaxPcieLinkGeneration",
)
def test_gpu_pcie_link(node, visible_gpus, facts, profile, link_after, evidence):
    gp = profile.get("gpu")
    want_width = gp["pcie_width"]
    busy_all = link_after.readings
    evidence.source = visible_gpus.source + (" (generation read under load)" if busy_all else "")
    failures, errors, unjudged, verified = [], [], [], []
    for g in visible_gpus.gpus:
        if g.c2c is None and g.errors.get("c2c") != "not supported on this GPU" and gpu_machine(facts) != "x86_64":
            # NVLink-C2C joins Grace (aarch64) CPUs to their GPUs: where it could not be read there (drivers before
            # R550 have no <c2c_mode>), the PCIe link may or may not be the GPU's host path (issue 59)
            errors.append(
                f"{g.label}: whether it reaches its CPU over NVLink-C2C was not read ({g.errors.get('c2c', 'not read')}) "
                f"on a {gpu_machine(facts) or 'machine of unrecorded architecture'}: its PCIe link (Gen{g.pcie_gen} "
                f"x{g.pcie_width}) may not be its host path, so it is not judged"
            )
            continue
        if g.c2c:
            # A Grace board's GPU reaches its CPU and memory over NVLink-C2C (GH200, GB200, GB300: NVIDIA's Grace
            # Hopper and Grace Blackwell tuning guides); the PCIe link it reports (Gen4 x1 or Gen5 x1 on a GH200)
            # carries none of its host traffic: neither width nor generation is judged.
            evidence.add(
                f"{g.label}: NVLink-C2C enabled ({visible_gpus.source}): its host path; its PCIe link "
                f"(Gen{g.pcie_gen} x{g.pcie_width}, max Gen{g.pcie_max_gen} x{g.pcie_max_width}) is not, and is not judged"
            )
            verified.append(f"{g.label} over NVLink-C2C")
            continue
        want_gen, why = expected_generation(g, gp)
        busy = busy_all.get(g.uuid, {})
        if busy:
            evidence.add(f"{g.label}: link under load: {busy.get('source')}")
        gen = busy.get("gen")
        width = busy.get("width") if busy.get("width") is not None else g.pcie_width
        line = (
            f"{g.label}: width x{width} ({'under load' if busy.get('width') is not None else 'current'}); "
            f"generation {f'Gen{gen} under load' if gen is not None else 'not read under load'}; "
            f"current (possibly idle) Gen{g.pcie_gen} x{g.pcie_width}; device-and-slot max Gen{g.pcie_max_gen} "
            f"x{g.pcie_max_width}; GPU max Gen{g.pcie_gpu_max_gen}; expected Gen{want_gen} x{want_width} ({why})"
        )
        if g.pci is not None:  # the kernel's view of the same link, for whoever compares with lspci
            p = g.pci
            line += f"; sysfs Gen{p.link_gen} x{p.link_width} of Gen{p.max_link_gen} x{p.max_link_width}"
        evidence.add(line)
        if "pcie_gpu_max_gen" in g.errors:
            evidence.add(f"{g.label}: GPU maximum generation: {g.errors['pcie_gpu_max_gen']}")
        if width is None or want_gen is None:
            errors.append(f"{g.label}: link width or expected generation not reported ({g.errors})")
            continue
        if width < want_width:
            failures.append(f"{g.label}: trained at x{width}, expected x{want_width}")
        if gen is None:
            unjudged.append(g.label)
        elif gen < want_gen:
            slot = ""
            if g.pcie_gpu_max_gen and g.pcie_max_gen and g.pcie_max_gen < g.pcie_gpu_max_gen:
                slot = f" (the slot or BIOS caps it: device-and-slot max Gen{g.pcie_max_gen}, GPU max Gen{g.pcie_gpu_max_gen})"
            failures.append(f"{g.label}: Gen{gen} under load, expected Gen{want_gen}{slot}")
        else:
            verified.append(f"{g.label} Gen{gen} x{width}")
    if unjudged and link_after.measuring and not failures:
        errors.append(
            f"generation not judged for {', '.join(unjudged)}: the bandwidth run gave no busy-link reading"
            + (f" ({link_after.why_none})" if link_after.why_none else "")
        )
    _fail_or_error(failures, errors)
    if unjudged:
        pytest.skip(
            f"width x{want_width} verified on {len(visible_gpus.gpus)} GPU(s); generation NOT judged for "
            f"{', '.join(unjudged)}: idle links downshift, so only a reading under load counts "
            f"({link_after.why_none or 'no busy reading'}). Run `conformance run --measure` or use a profile with "
            "gpu.measure_bandwidth (the acceptance profiles) for a generation verdict"
        )
    evidence.add(f"verified under load: {', '.join(verified)}")


@check(
    "GPU-PCIE-REPLAY",
    "medium",
    title="PCIe replay counter stays flat across the bandwidth run",
    rationale="""Replays are link-level retransmissions: a marginal riser, cable or slot shows up as replays
    under load long before it fails, costing bandwidth on every copy.""",
    remediation="Reseat or replace the riser/cable, check slot signal integrity and BIOS PCIe settings; DCGM's "
    "diagnostic uses the same limit.",
    source="NVML nvmlDeviceGetPcieReplayCounter before and after the H2D run",
)
def test_gpu_pcie_replay(node, visible_gpus, h2d, profile, evidence):
    limit = profile.get("gpu.pcie_replay_limit")
    evidence.source = "NVML replay counter around the H2D probe"
    failures: list[str] = []
    errors: list[str] = []
    for g, m in _measured(visible_gpus, h2d, evidence, errors):
        before, after = m.nvml_before.get("replay"), m.nvml_after.get("replay")
        if before is None or after is None:
            errors.append(f"{g.label}: replay counter not readable ({m.nvml_before.get('error') or m.nvml_before})")
            continue
        grew = after - before
        evidence.add(f"{g.label}: replay counter {before} -> {after} (+{grew}; limit {limit}; cumulative since driver load)")
        if grew >= limit:
            failures.append(f"{g.label}: {grew} PCIe replays during the bandwidth run (limit {limit})")
    _fail_or_error(failures, errors)


@check(
    "GPU-MIG-MODE",
    "low",
    title="MIG mode is what the profile asks for",
    rationale="""MIG splits a GPU into slices: right for some inference pools, wrong for training nodes
    that expect whole GPUs.""",
    remediation="Set MIG mode with `nvidia-smi -i <gpu> -mig 0|1` (GPU reset needed), or through the GPU "
    "Operator's MIG manager; or change the profile's gpu.mig.",
    source="NVML nvmlDeviceGetMigMode",
)
def test_gpu_mig_mode(node, visible_gpus, profile, evidence):
    want = profile.get("gpu.mig")
    evidence.source = visible_gpus.source
    wrong = []
    words = {True: "enabled", False: "disabled", None: "not supported"}
    for g in visible_gpus.gpus:
        state = words[g.mig]
        # nvmlDeviceGetMigMode returns (current, pending): a change takes effect only after a GPU reset, so
        # the current mode is what runs now and the pending one is reported as pending
        pending = (
            f" (change to {words[g.mig_pending]} pending: takes effect after a GPU reset)"
            if (g.mig_pending is not None and g.mig is not None and g.mig_pending != g.mig)
            else ""
        )
        evidence.add(f"{g.label}: MIG {state}{pending}")
        if (want == "off" and g.mig) or (want == "on" and not g.mig):
            wrong.append(f"{g.label}: MIG {state} now{pending}")
    assert not wrong, "; ".join(wrong) + f"; the profile requires MIG {want}"


@check(
    "GPU-DCGM-EXPORTER",
    "medium",
    title="dcgm-exporter serves the profile's GPU metrics for this node",
    rationale="""Without utilisation, copy-engine and PCIe throughput metrics, a slow or stuck GPU is
    invisible to alerting and capacity planning.""",
    remediation="Deploy dcgm-exporter (GPU Operator) on the node and enable the profiling (PROF) fields in its "
    "metrics CSV, e.g. DCGM_FI_PROF_PCIE_TX_BYTES; set its collection interval (-c, or DCGM_EXPORTER_INTERVAL, in "
    "ms; the GPU Operator's ClusterPolicy dcgmExporter.env) at or below the profile's gpu.dcgm_max_interval_ms.",
    source="dcgm-exporter /metrics through the Kubernetes API's pod proxy (or the inventory's dcgm_exporter URL)",
)
def test_gpu_dcgm_exporter(node, visible_gpus, dcgm_series, profile, evidence):
    where, series, (interval, interval_source) = dcgm_series
    assert series is not None, where  # no exporter runs on the node
    limit = profile.get("gpu.dcgm_max_interval_ms")
    evidence.add(f"collection interval: {f'{interval} ms' if interval is not None else 'unknown'} ({interval_source})")
    want = profile.get("gpu.dcgm_metrics")
    if any(x.mig for x in visible_gpus.gpus):
        # DCGM's device-level utilisation fields are not reported for MIG instances; dcgm-exporter's
        # documentation points to the profiling field DCGM_FI_PROF_GR_ENGINE_ACTIVE for MIG devices
        want = profile.get("gpu.dcgm_metrics_mig")
        evidence.add("MIG enabled on this node: the profile's gpu.dcgm_metrics_mig apply")
    evidence.source = where
    served = {m: served_as(m, series) for m in want}  # a metric renamed by the exporter's release counts
    evidence.add(*(f"{m}: {n} series" + (f" (served as {name})" if name != m else "") for m, (name, n) in served.items()))
    missing = [m for m, (_, n) in served.items() if not n]
    problems = [f"{where} does not serve {', '.join(missing)}"] if missing else []
    if limit is not None and interval is not None and interval > limit:
        problems.append(f"it collects every {interval} ms ({interval_source}), slower than gpu.dcgm_max_interval_ms {limit}")
    assert not problems, "; ".join(problems)


@check(
    "GPU-H2D-LOCAL-BW",
    "critical",
    title="Pinned host-to-device bandwidth from the GPU's own NUMA node meets the floor",
    rationale="""This is the number the whole NUMA-alignment chain exists for: below the floor, every model
    load, input copy and KV-cache transfer is slower than the hardware allows.""",
    remediation="Check GPU-PCIE-LINK first (generation and width), then BIOS settings (PCIe ASPM, IOMMU "
    "passthrough, relaxed ordering), and compare with nvbandwidth host_to_device_memcpy_ce.",
    source="measured: CUDA driver API copies from a pinned buffer bound to the GPU's NUMA node",
)
def test_gpu_h2d_local_bandwidth(node, visible_gpus, h2d, profile, evidence):
    gp = profile.get("gpu")
    margin = float(gp["h2d_margin"])
    evidence.source = "H2D probe (CUDA events, median of samples, decimal GB/s)"
    failures: list[str] = []
    errors: list[str] = []
    metrics: dict[str, Any] = {}
    for g, m in _measured(visible_gpus, h2d, evidence, errors):
        gen, why = expected_generation(g, gp)
        floor = floor_for(gen, gp)
        link = f"Gen{gen}"
        if g.c2c:  # a Grace board's GPU: its host path is NVLink-C2C, not the PCIe link it reports (issue 51)
            floor, link, why = gp.get("h2d_floor_c2c_gbps"), "NVLink-C2C", "the GPU reaches its CPU over NVLink-C2C"
        try:
            local = local_node(g)
        except FactUnavailable as e:
            errors.append(str(e))
            continue
        row = m.row(local)
        if m.error or row is None or row.error or row.gbps is None:
            errors.append(f"{g.label}: no figure from NUMA node {local}: {m.error or (row.error if row else 'not measured')}")
            continue
        placement = row.placement_problem()
        if placement:
            errors.append(f"{g.label}: {placement}")
            continue
        metrics[g.uuid] = {"local_node": local, "gbps": row.gbps, "floor_gbps": floor, "generation": gen}
        line = f"{g.label}: {row.gbps:.2f} GB/s from NUMA node {local} (samples {row.samples}); "
        line += f"floor {floor} GB/s for {link} ({why})"
        if floor is None:
            key = "gpu.h2d_floor_c2c_gbps" if g.c2c else "gpu.h2d_floor_gbps"
            errors.append(f"{g.label}: no floor in the profile for {link} ({key})")
        elif row.gbps < floor:
            failures.append(f"{g.label}: {row.gbps:.2f} GB/s < floor {floor} GB/s ({link if g.c2c else link + ' x16'})")
        elif row.gbps < floor * (1 + margin):
            line += f"; within {margin:.0%} above the floor"
        evidence.add(line)
    evidence.metrics = {"h2d_local": metrics}
    _fail_or_error(failures, errors)


@check(
    "GPU-H2D-NUMA-MATRIX",
    "low",
    title="H2D bandwidth from every NUMA node: the local node is the fastest",
    rationale="""The matrix shows what a misaligned pod pays: copies from the far socket cross the
    inter-socket link. On many Gen4 hosts the penalty is small; on others it halves bandwidth.""",
    remediation="If a remote node is faster, the firmware's numa_node for the GPU is probably wrong: compare "
    "`nvidia-smi topo -m` with the board's slot-to-socket map.",
    source="measured: the H2D probe bound to each NUMA node in turn",
)
def test_gpu_h2d_numa_matrix(node, visible_gpus, h2d, profile, evidence):
    tol = float(profile.get("gpu.h2d_matrix_tolerance"))
    evidence.source = "H2D probe, one binding per NUMA node"
    nodes = sorted({r.node for m in h2d.gpus.values() for r in m.rows})
    matrix: dict[str, object] = {"nodes": nodes, "gpus": [], "gbps": [], "local": [], "notes": []}
    failures: list[str] = []
    errors: list[str] = []
    for g, m in _measured(visible_gpus, h2d, evidence, errors):
        figures = {r.node: r.gbps for r in m.rows if r.gbps is not None and not r.error}
        try:
            local: int | None = local_node(g)
        except FactUnavailable as e:
            errors.append(str(e))  # which node is local decides which figure must be the best: unjudged
            local = None
        matrix["gpus"].append(f"GPU{g.index}")  # type: ignore[attr-defined]
        matrix["gbps"].append([figures.get(n) for n in nodes])  # type: ignore[attr-defined]
        matrix["local"].append(local)  # type: ignore[attr-defined]
        cells = ", ".join(f"node{n} {figures[n]:.2f}" if n in figures else f"node{n} -" for n in nodes)
        evidence.add(f"{g.label} (local node {'unknown' if local is None else local}): {cells} GB/s")
        for r in m.rows:
            problem = r.error or r.placement_problem()
            if problem:
                evidence.add(f"{g.label} from node {r.node}: {problem}")
                matrix["notes"].append(f"GPU{g.index} node{r.node}: {problem}")  # type: ignore[attr-defined]
        if local is None or local not in figures:
            if local is not None:
                errors.append(f"{g.label}: no figure from its local node {local}")
            continue
        best_remote = max(((v, n) for n, v in figures.items() if n != local), default=None)
        if best_remote and best_remote[0] > figures[local] * (1 + tol):
            failures.append(
                f"{g.label}: node{best_remote[1]} {best_remote[0]:.2f} GB/s beats its local node{local} "
                f"{figures[local]:.2f} GB/s by more than {tol:.0%}"
            )
    evidence.metrics = {"h2d_matrix": matrix}
    _fail_or_error(failures, errors)


@check(
    "GPU-MEMORY-MODE",
    "high",
    title="A Grace board's GPU memory is the driver's, not system memory (CDMM)",
    rationale="""On GH200, GB200 and GB300 the driver's NUMA mode onlines each GPU's HBM as a NUMA node of system
    memory: MemTotal and the node's memory capacity include it (a GB200 tray shows 1.65 TiB for 957 GiB of CPU
    memory), so pod memory limits, the scheduler and eviction work on the wrong total. NVIDIA recommends the
    coherent driver-based memory management mode (CDMM) for Kubernetes, as GKE (A4X) and EKS (P6e-GB200) run it;
    it is the driver's default from R615.""",
    remediation="Load the NVIDIA driver with NVreg_CoherentGPUMemoryMode=driver (a modprobe.d options line, or the "
    "GPU Operator's driver kernelModuleConfig), or run driver R615 or later; reboot. A profile can accept NUMA "
    "mode with gpu.memory_mode: any.",
    source="/proc/driver/nvidia/params (EnableUserNUMAManagement, CoherentGPUMemoryMode), NVML nvmlDeviceGetC2cModeInfoV "
    "/ nvidia-smi -q -x <c2c_mode>",
)
def test_gpu_memory_mode(node, visible_gpus, facts, profile, evidence):
    evidence.source = f"{visible_gpus.source}; /proc/driver/nvidia/params"
    for g in visible_gpus.gpus:
        state = "enabled" if g.c2c else "disabled" if g.c2c is False else g.errors.get("c2c", "not read")
        evidence.add(f"{g.label}: NVLink-C2C {state}")
    mode = facts.gpu_memory_mode
    if mode is None:
        pytest.skip("no GPU reaches its CPU over NVLink-C2C: the GPU memory mode is a Grace board's")
    value, how = mode
    evidence.add(f"GPU memory mode: {value} ({how})")
    want = profile.get("gpu.memory_mode")
    assert want == "any" or value == "driver", (
        f"the driver runs in NUMA mode ({how}): every GPU's HBM is system memory of its own NUMA node, counted in "
        "the node's memory capacity; load it with NVreg_CoherentGPUMemoryMode=driver (CDMM)"
    )


@check(
    "GPU-CDI",
    "high",
    title="Where GPUs reach containers through CDI, the specs exist, resolve, match the driver, and the runtime reads them",
    rationale="""With CDI (the NVIDIA Container Toolkit's cdi mode, its default refresh service from 1.18, the GPU
    Operator's CDI option, and every DRA GPU driver) a container gets its GPU from a spec file: a spec missing after a
    reboot (/var/run is empty until it is generated again), one generated for the previous driver (its mounts name
    libraries that are gone), a GPU defined twice at one priority (the runtime drops it) or a runtime that does not
    read CDI all leave GPU pods failing to start.""",
    remediation="Generate the spec for this driver (nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml, or "
    "enable the toolkit's nvidia-cdi-refresh service), remove duplicate specs, and enable CDI in the runtime "
    "(containerd 1.7: enable_cdi = true in the CRI plugin; on by default from 2.0; CRI-O: always on).",
    source="/etc/cdi, /var/run/cdi; /etc/nvidia-container-runtime/config.toml; the runtime's enable_cdi; the kubelet's "
    "plugin registry (DRA drivers)",
)
def test_gpu_cdi(node, visible_gpus, facts, profile, evidence):
    evidence.source = "CDI spec folders (/etc/cdi, /var/run/cdi), the toolkit's config, the runtime's configuration"
    reg = facts.cdi
    mode, how = facts.container_toolkit_mode
    evidence.add(f"NVIDIA Container Toolkit: {how}")
    for spec in reg.specs:
        evidence.add(f"{spec.path}: {spec.kind}, {len(spec.devices)} device(s), driver {spec.driver or 'not named'}")
    for path, why in reg.errors.items():
        evidence.add(f"{path}: left out by the runtime ({why})")
    dra = facts.kubelet_assignments.dra_drivers  # unknown: the check errors, it cannot tell whether CDI is in use
    nvidia = reg.of_kind(NVIDIA_GPU_KIND)
    users = [text for used, text in (
        (mode == "cdi", "the NVIDIA Container Runtime runs in cdi mode"),
        (bool(dra), f"GPU DRA driver(s) {', '.join(dra)} registered with the kubelet (their devices are CDI devices)"),
        (bool(nvidia), f"{NVIDIA_GPU_KIND} specs exist"),
        (profile.get("gpu.cdi") == "required", f"profile {profile.name} requires CDI (gpu.cdi: required)"),
    ) if used]  # fmt: skip
    if not users:
        pytest.skip(f"CDI is not in use: toolkit mode {mode}, no GPU DRA driver registered, no {NVIDIA_GPU_KIND} spec "
                    f"in {', '.join(reg.looked_in)}")  # fmt: skip
    evidence.add("CDI in use: " + "; ".join(users))
    problems: list[str] = []
    unknown: list[str] = []
    if dra or profile.get("gpu.cdi") == "required":
        # the kubelet hands DRA devices (and CDI-mode device plugins' devices) to the runtime as CDI names over the CRI
        rc = facts.runtime_config
        release = runtime_span(facts, evidence) if rc.runtime == "containerd" else None  # every release it may be
        enabled, why = cdi_enabled(rc.runtime, rc.cdi_enable, release)
        evidence.add(f"runtime {rc.runtime}: {why}")
        if enabled is False:
            problems.append(f"the runtime does not read CDI specs ({why}): the kubelet's CDI devices fail every GPU pod")
        elif enabled is None:
            unknown.append(f"whether {rc.runtime} reads CDI specs: {why}")
        if rc.cdi_dirs is not None and list(rc.cdi_dirs) != list(reg.looked_in):
            unknown.append(f"the runtime reads CDI specs from {', '.join(rc.cdi_dirs)}; {', '.join(reg.looked_in)} were read")
    if mode == "cdi" or nvidia or profile.get("gpu.cdi") == "required":
        if not nvidia:
            problems.append(
                f"no {NVIDIA_GPU_KIND} CDI spec in {', '.join(reg.looked_in)}: containers asking for a GPU fail to start "
                "(after a reboot /var/run/cdi is empty until nvidia-ctk cdi generate, or the toolkit's nvidia-cdi-refresh "
                "service, writes it again)"
            )
        driver = visible_gpus.driver
        for spec in nvidia:
            if driver and spec.driver and spec.driver != driver:
                problems.append(f"{spec.path} was generated for driver {spec.driver}, the node runs {driver}: it mounts "
                                "libraries by a release that is gone; generate it again")  # fmt: skip
        for qualified, paths in reg.conflicts.items():
            if qualified.startswith(NVIDIA_GPU_KIND + "="):
                problems.append(f"{qualified} is defined at one priority in {' and '.join(paths)}: the runtime drops it")
        if nvidia:
            missing = [g.label for g in visible_gpus.gpus if f"{NVIDIA_GPU_KIND}={g.uuid}" not in reg.devices]
            if missing:
                problems.append(f"no resolvable {NVIDIA_GPU_KIND} device for {', '.join(missing)}: a spec for other GPUs "
                                "(another node's, or before a GPU was replaced)")  # fmt: skip
    assert not problems, "; ".join(problems)
    if unknown:
        raise FactUnavailable("; ".join(unknown))
