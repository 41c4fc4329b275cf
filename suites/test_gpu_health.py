"""GPU health for node acceptance: memory errors, row remapping, Xid events, NVLink and the fabric,
persistence, clock events. Read in the node's single collection (the NVML probe, else nvidia-smi -q -x;
the kernel log for Xid events)."""

from __future__ import annotations

import pytest

from conformance.checks import check, conclude
from conformance.checks.dra_rules import cluster_health_view
from conformance.checks.gpu_health import (
    Verdict,
    judge_clock_events,
    judge_ecc,
    judge_fabric,
    judge_nvlink,
    judge_persistence,
    judge_row_remap,
    judge_xids,
)
from conformance.checks.gpu_rules import plugin_units
from conformance.errors import FactUnavailable
from conformance.facts.gpu import DaemonSeen


def settle(v: Verdict, evidence) -> None:
    """Failures decide; with only unread facts the outcome is error; where nothing applied, skip."""
    evidence.add(*v.lines)
    conclude(v.failures, v.unknowns)
    if not v.applied:
        pytest.skip(v.why_not)
    evidence.add(f"verified on {v.applied} GPU(s)" if v.applied > 1 else "verified")


@check(
    "GPU-ECC-ERRORS",
    "high",
    title="ECC is on and the GPU memory has no uncorrected errors",
    rationale="""An uncorrected ECC error means data in GPU memory was wrong and could not be repaired: the
    process that touched it was killed (Xid 94/95) or, worse, computed on bad data. Without ECC the same
    fault goes unnoticed. Volatile counts cover the time since the driver loaded, aggregate counts the
    GPU's lifetime (nvmlDeviceGetTotalEccErrors).""",
    remediation="Turn ECC on with `nvidia-smi -e 1` and reboot; a GPU with uncorrected errors needs a reset "
    "(`nvidia-smi -r`) and, if they recur or the aggregate count grows, replacement. Corrected counts are shown "
    "and judged against gpu.ecc_corrected_limit when the profile sets one.",
    source="NVML nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors, nvmlDeviceGetMemoryErrorCounter; "
    "nvidia-smi -q -x <ecc_mode>, <ecc_errors>",
)
def test_gpu_ecc_errors(node, visible_gpus, profile, evidence):
    evidence.source = visible_gpus.source
    settle(judge_ecc(visible_gpus.gpus, profile.get("gpu")), evidence)


@check(
    "GPU-ROW-REMAP",
    "critical",
    title="No row remap pending or failed, no page retirement pending",
    rationale="""GPUs since Ampere repair uncorrectable memory faults by remapping rows; the remap takes effect
    only after a GPU reset, and until then the faulty row is still in use. A failed remap means the memory
    cannot be repaired. Older GPUs retire pages instead, with the same pending state (NVML
    nvmlDeviceGetRemappedRows: isPending, failureOccurred; nvmlDeviceGetRetiredPagesPendingStatus).""",
    remediation="Drain the node and reset the GPU (`nvidia-smi -r -i <index>`, or reboot) to apply a pending "
    "remap or retirement; replace a GPU whose remapping failed or whose retired pages exceed "
    "gpu.retired_pages_limit.",
    source="NVML nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages, nvmlDeviceGetRetiredPagesPendingStatus; "
    "nvidia-smi -q -x <remapped_rows>, <retired_pages>",
)
def test_gpu_row_remap(node, visible_gpus, profile, evidence):
    evidence.source = visible_gpus.source
    settle(judge_row_remap(visible_gpus.gpus, profile.get("gpu")), evidence)


@check(
    "GPU-XID-EVENTS",
    "high",
    title="No Xid event since boot of a failing class, and no recovery action the driver still asks for",
    rationale="""The NVIDIA driver logs every GPU fault as an Xid in the kernel log. Each Xid is classed by the
    "Resolution Bucket" of NVIDIA's Xid catalogue: fatal (restart the node: 79 fallen off the bus), reset
    (reset the GPU: 48, 64, 74, 95, 109, 119, 120...), service (a person must look), application (restart the
    application: 8, 13, 31, 32...), informational (no action: 43, 63, 92...), unknown (not in the catalogue).
    Every Xid number of this boot is counted on the node, so a fatal Xid is never lost behind many later
    application ones, and a log that does not reach back to this boot's start (rotated, vacuumed, wrapped)
    is an error, not a pass. Where the driver reports a GPU recovery action (NVML field 230, nvidia-smi's
    gpu_recovery_action), anything but "none" fails.""",
    remediation="Read the node's kernel log around the listed times (`journalctl -k -b | grep Xid`), look each "
    "Xid up in NVIDIA's Xid catalogue, reset the GPU or reboot the node as it says, and replace hardware that "
    "repeats. gpu.xid_fail sets the failing classes (fatal, reset, service, application, informational, "
    "unknown). If the log was not fully read, keep this boot's kernel log (rsyslog's kern.log rotations or a "
    "persistent journal) and give the collector read access to it (root or the adm group).",
    source="kernel log: /var/log/kern.log or /var/log/messages with their rotations of this boot, else "
    "journalctl -k -b 0, else dmesg; NVML GPU recovery action; NVIDIA Xid catalogue "
    "(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)",
)
def test_gpu_xid_events(node, facts, visible_gpus, profile, evidence):
    log = facts.xid_log
    evidence.source = log.source
    settle(judge_xids(log, visible_gpus.gpus, profile.get("gpu")), evidence)


@check(
    "GPU-NVLINK",
    "critical",
    title="Every NVLink link is up, with error counters within limits",
    rationale="""A GPU with a link down falls back to fewer links or to PCIe for peer traffic: collective
    operations slow down or hang. Recovery errors mean a link went down and retrained; growing replay and
    CRC counts point to a bad cable, connector or switch port (nvmlDeviceGetNvLinkErrorCounter).""",
    remediation="Check `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e`; reseat the GPU baseboard or bridge, "
    "reset the GPU, and escalate to the vendor when errors return. gpu.nvlink_error_limits sets the limits.",
    source="NVML nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter (DL replay, recovery, CRC flit, CRC data)",
)
def test_gpu_nvlink(node, visible_gpus, profile, evidence):
    evidence.source = visible_gpus.source
    settle(judge_nvlink(visible_gpus.gpus, profile.get("gpu")), evidence)


@check(
    "GPU-FABRIC",
    "critical",
    title="On NVSwitch systems, every GPU joined the NVLink fabric",
    rationale="""On NVSwitch systems (HGX A100/H100/H200, GB200) GPUs reach each other only through the
    fabric the fabric manager sets up; until a GPU's fabric registration completes, CUDA fails to start on it
    (nvmlDeviceGetGpuFabricInfo: state completed, status SUCCESS).""",
    remediation="Start and enable nvidia-fabricmanager (`systemctl enable --now nvidia-fabricmanager`, or the GPU "
    "Operator's driver container, which runs it) at the driver's exact version; check its log "
    "(/var/log/fabricmanager.log) and `nvidia-smi -q | grep -A3 Fabric`.",
    source="NVML nvmlDeviceGetGpuFabricInfo; nvidia-smi -q -x <fabric>; /sys/bus/pci/devices (NVIDIA bridge class "
    "0x0680: NVSwitch); /proc/<pid>/comm nv-fabricmanage",
)
def test_gpu_fabric(node, visible_gpus, evidence):
    evidence.source = f"{visible_gpus.source}; sysfs PCI; processes"
    fm = visible_gpus.daemons.get("nvidia-fabricmanager", DaemonSeen())
    settle(judge_fabric(visible_gpus.gpus, visible_gpus.nvswitches, fm), evidence)


@check(
    "GPU-PERSISTENCE",
    "low",
    title="GPUs stay initialised: persistence mode on, or nvidia-persistenced running",
    rationale="""Without persistence the driver tears a GPU down when its last client exits and initialises
    it again for the next: seconds of start-up latency per pod, and NVML queries that wake idle GPUs. NVIDIA
    recommends the persistence daemon on Linux (Driver Persistence, docs.nvidia.com/deploy/driver-persistence).""",
    remediation="Enable the daemon (`systemctl enable --now nvidia-persistenced`) or set persistence mode "
    "(`nvidia-smi -pm 1`). gpu.persistence: mode_or_daemon, mode, daemon or any.",
    source="NVML nvmlDeviceGetPersistenceMode; nvidia-smi -q -x <persistence_mode>; /proc/<pid>/comm nvidia-persiste",
)
def test_gpu_persistence(node, visible_gpus, profile, evidence):
    evidence.source = f"{visible_gpus.source}; processes"
    daemon = visible_gpus.daemons.get("nvidia-persistenced", DaemonSeen())
    settle(judge_persistence(visible_gpus.gpus, profile.get("gpu"), daemon), evidence)


@check(
    "GPU-CLOCK-EVENTS",
    "medium",
    title="No hardware slowdown, thermal or power-brake clock event on an idle GPU",
    rationale="""An idle GPU has no reason to slow its clocks for heat or power: hardware slowdown, thermal
    slowdown or power brake active at idle points to failing cooling, a power-supply fault or the external
    power-brake signal, and the GPU will run slow under load (nvmlClocksEventReason*).""",
    remediation="Check `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`; inspect fans, airflow and the chassis "
    "power supplies; ask the vendor about an asserted power-brake signal. gpu.clock_events_fail lists the "
    "reasons that fail.",
    source="NVML nvmlDeviceGetCurrentClocksEventReasons (older drivers: ...ClocksThrottleReasons); "
    "nvidia-smi -q -x <clocks_event_reasons>",
)
def test_gpu_clock_events(node, visible_gpus, profile, evidence):
    evidence.source = visible_gpus.source
    settle(judge_clock_events(visible_gpus.gpus, profile.get("gpu")), evidence)


@check(
    "GPU-CLUSTER-HEALTH",
    "high",
    title="The cluster sees each GPU's health as the node does",
    rationale="""A GPU the node shows broken (uncorrected ECC errors, a pending row remap, a fatal Xid) while the
    cluster still schedules on it takes the next job down; a GPU the cluster keeps work off while the node reads it
    healthy is capacity lost to a stale taint or report. The cluster's view: DRA ResourceSlice device taints
    (KEP-5055; NVIDIA's GPU DRA driver taints gpu.nvidia.com/xid, gpu-lost, unmonitored), the device plugin's
    allocatable count, and the health the kubelet reports to each pod (KEP-4680, allocatedResourcesStatus).""",
    remediation="For a broken GPU: drain the node or let the driver taint the device (NoSchedule, NoExecute), and "
    "reset or replace the GPU. For a stale taint or report: find what set it (the DRA driver's health monitor, a "
    "DeviceTaintRule, the device plugin), fix its cause or remove it.",
    source="NVML / nvidia-smi and the kernel log (the node); ResourceSlices, node allocatable, pods' "
    "allocatedResourcesStatus (Kubernetes API)",
)
def test_gpu_cluster_health(node, visible_gpus, facts, node_spec, dra_slices, node_gpu_pods, profile, evidence):
    if dra_slices is None or node_gpu_pods is None:
        pytest.skip("no Kubernetes API in this run: the cluster's view of the GPUs is not read")
    gp = profile.get("gpu")
    broken: dict[int, list[str]] = {}
    unknown: dict[int, list[str]] = {}
    try:
        log = facts.xid_log
    except FactUnavailable as e:
        log, xid_unread = None, str(e)
    for g in visible_gpus.gpus:
        verdicts = [("ECC", judge_ecc([g], gp)), ("row remap", judge_row_remap([g], gp))]
        if log is not None:
            verdicts.append(("Xid", judge_xids(log, [g], gp)))
        else:
            unknown.setdefault(g.index, []).append(f"Xid: {xid_unread}")
        for what, v in verdicts:
            if v.failures:
                broken.setdefault(g.index, []).append(f"{what}: {'; '.join(v.failures)}")
            if v.unknowns:
                unknown.setdefault(g.index, []).append(f"{what}: {'; '.join(v.unknowns)}")
    capacity = node_spec.gpu_resources.get("nvidia.com/gpu", 0)
    units = plugin_units(visible_gpus.gpus, node_spec.labels or {})
    plugin = (capacity, node_spec.gpu_allocatable.get("nvidia.com/gpu", 0), units) if capacity else None
    pod_health = [(f"{p.namespace}/{p.name}", name, rid, health) for p in node_gpu_pods
                  for c in p.containers for name, rid, health in c.get("health", [])]  # fmt: skip
    problems, unknowns, lines = cluster_health_view(visible_gpus, broken, unknown, dra_slices, plugin, pod_health)
    evidence.add(*lines)
    conclude(problems, unknowns)
