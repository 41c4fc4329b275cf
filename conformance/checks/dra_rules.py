"""GPUs that reach pods through DRA, mapped to the node's GPUs: a claim's allocated device, as the node's
ResourceSlices publish it, is the GPU whose UUID (a MIG device: its parent's UUID) or PCI address NVML and
sysfs report. A device that maps to no GPU, or to two different ones, is an error, never skipped."""

from __future__ import annotations

from conformance.cluster.dra import ClaimDevice, NodeSlices, SliceDevice
from conformance.errors import FactUnavailable
from conformance.facts.checkpoints import DraPrepared
from conformance.facts.gpu import Gpu, GpuFacts

# What cures a DRA GPU on the other NUMA node than the container's CPUs: nothing in the kubelet aligns them.
DRA_REMEDIATION = (
    "For GPUs from DRA ResourceClaims the Topology Manager aligns nothing (DRA devices give it no hints): select the "
    "CPUs through DRA too, with a DRA CPU driver (kubernetes-sigs/dra-driver-cpu) in the same claim and a "
    "`constraints: [{matchAttribute: resource.kubernetes.io/pcieRoot}]` (or a NUMA attribute both drivers publish) "
    "across the GPU and CPU requests; or request the GPU through the device plugin (nvidia.com/gpu), which the "
    "Topology Manager aligns with the CPU and memory managers under single-numa-node."
)


def published_gpu(d: SliceDevice, gpus: GpuFacts) -> Gpu | None:
    """The node's GPU a published device lives on (None: none of them). UUID first; a PCI address that
    names another GPU than the UUID is a contradiction, raised as FactUnavailable."""
    by_uuid = next((g for g in gpus.gpus if d.gpu_uuid and g.uuid == d.gpu_uuid), None)
    by_pci = next((g for g in gpus.gpus if d.pci and g.bus_id == d.pci), None)
    if by_uuid is not None and by_pci is not None and by_uuid is not by_pci:
        raise FactUnavailable(
            f"DRA device {d.name} (driver {d.driver}): UUID {d.gpu_uuid} is {by_uuid.label} but PCI {d.pci} is {by_pci.label}"
        )
    if by_uuid is not None and d.pci and by_uuid.bus_id != d.pci:
        raise FactUnavailable(f"DRA device {d.name} (driver {d.driver}): UUID {d.gpu_uuid} is {by_uuid.label}, "
                              f"but the slice gives PCI {d.pci}")  # fmt: skip
    return by_uuid or by_pci


def published_gpus(slices: NodeSlices | None, gpus: GpuFacts) -> tuple[list[tuple[SliceDevice, Gpu | None]], list[str]]:
    """Each published device with the node's GPU it lives on (None: none of them), and the devices whose UUID and
    PCI address name two GPUs (published_gpu), as problems."""
    pairs, problems = [], []
    for d in slices.devices if slices is not None else []:
        try:
            pairs.append((d, published_gpu(d, gpus)))
        except FactUnavailable as e:
            problems.append(str(e))
    return pairs, problems


def claim_gpu(c: ClaimDevice, gpus: GpuFacts, node: str) -> Gpu:
    """The node's GPU behind one allocated device; FactUnavailable names what could not be mapped."""
    d = c.published
    if d is None:
        raise FactUnavailable(
            f"claim {c.claim}: allocated device {c.device} of pool {c.pool} (driver {c.driver}) is in no ResourceSlice "
            f"of node {node}"
        )
    g = published_gpu(d, gpus)
    if g is None:
        raise FactUnavailable(
            f"claim {c.claim}: device {c.device} (driver {c.driver}, UUID {d.gpu_uuid or '?'}, PCI {d.pci or '?'}) maps "
            f"to no GPU of node {node} ({gpus.source})"
        )
    return g


def describe(c: ClaimDevice, g: Gpu) -> str:
    """`claim vllm-gpu (driver gpu.nvidia.com, device gpu-3, PCI 0000:c1:00.0, NUMA 1)`; a MIG device names
    its GPU, whose NUMA node is the one that counts."""
    numa = g.pci.numa_node if g.pci else None
    mig = f", MIG device of GPU{g.index}" if c.published is not None and c.published.parent_uuid else ""
    return f"claim {c.short_claim} (driver {c.driver}, device {c.device}{mig}, PCI {g.bus_id}, NUMA {numa})"


def device_plugin_gpu_resources(gpu_capacity: int | None, resources: dict[str, int]) -> dict[str, int]:
    """Every extended resource through which the NVIDIA device plugin advertises GPUs, with its capacity above 0:
    `nvidia.com/gpu`, its renamed shared forms (time-slicing and MPS with `renameByDefault`:
    `nvidia.com/gpu.shared`, k8s-device-plugin docs "Shared Access to GPUs"), and the mixed MIG strategy's
    `nvidia.com/mig-<profile>` (each a slice of a GPU). Other nvidia.com/ resources (the Network Operator's
    RDMA and SR-IOV devices) are not GPUs. A DRA extended resource (KEP-5004) is no node capacity at all."""
    out = {
        k: v
        for k, v in resources.items()
        if v and (k == "nvidia.com/gpu" or k.startswith(("nvidia.com/gpu.", "nvidia.com/mig-")))
    }
    if gpu_capacity and "nvidia.com/gpu" not in out:
        out["nvidia.com/gpu"] = gpu_capacity
    return dict(sorted(out.items()))


def dra_advertised(slices: NodeSlices, gpus: GpuFacts, plugin: dict[str, int]) -> tuple[list[str], list[str], bool]:
    """(problems, evidence, whether DRA publishes GPUs here). Every GPU NVML lists is published, every published
    device is one of them (UUID and PCI address agreeing), and no GPU is also advertised by the device plugin
    under any of its resources (`plugin`, device_plugin_gpu_resources): the scheduler counts extended resources
    and ResourceSlices apart, so one GPU could go to two pods."""
    lines = [f"{slices.source}: {len(slices.devices)} device(s)" if slices.version else slices.source]
    if not slices.devices:
        return [], lines, False
    pairs, problems = published_gpus(slices, gpus)
    on: dict[int, list[str]] = {}  # GPU index -> the DRA devices on it (a GPU, or its MIG devices)
    for d, g in pairs:
        if g is None:
            problems.append(f"DRA device {d.name} (UUID {d.gpu_uuid or '?'}, PCI {d.pci or '?'}) is no GPU {gpus.source} lists")
            continue
        on.setdefault(g.index, []).append(d.name)
        lines.append(f"DRA device {d.name} ({d.kind or 'type not published'}) of pool {d.pool}: {g.label}")
    missing = [g.label for g in gpus.gpus if g.index not in on]
    if missing:
        problems.append(f"not published through DRA ({slices.source}): {', '.join(missing)}")
    if plugin:
        both = [f"{g.label} as {', '.join(on[g.index])}" for g in gpus.gpus if g.index in on]
        advertised = ", ".join(f"{k} {v}" for k, v in plugin.items())
        problems.append(
            f"GPUs advertised twice: the device plugin advertises {advertised} and DRA publishes "
            f"{'; '.join(both)}: a device-plugin pod and a DRA pod can be given the same GPU"
        )
    return problems, lines, True


def node_disagrees(devices: list[ClaimDevice], prepared: list[DraPrepared], pod_uid: str) -> tuple[list[str], list[str]]:
    """(where the kubelet's DRA checkpoint contradicts the API, evidence): every claim the API allocated to the
    pod is prepared on the node for that pod, with the same devices. The API says what the scheduler chose;
    the checkpoint what the kubelet handed the driver to prepare: a difference leaves unknown which GPU the
    container really has."""
    problems, lines = [], []
    for claim in sorted({c.claim for c in devices}):
        want = {(c.driver, c.pool, c.device) for c in devices if c.claim == claim}
        entry = next((e for e in prepared if e.claim == claim), None)
        if entry is None:
            problems.append(f"claim {claim}: allocated in the API, but the kubelet's dra_manager_state has not prepared it")
            continue
        have = {d for d in entry.devices if d[0] in {w[0] for w in want}}
        if not want <= have:
            show = ", ".join(sorted(f"{d[2]} (pool {d[1]})" for d in have)) or "none"
            problems.append(f"claim {claim}: the API allocated {', '.join(sorted(w[2] for w in want))}, the node prepared {show}")
        elif pod_uid not in entry.pod_uids:
            problems.append(f"claim {claim}: prepared on the node, but not for this pod (uid {pod_uid})")
        else:
            lines.append(
                f"dra_manager_state: the kubelet prepared claim {claim} for this pod: {', '.join(sorted(w[2] for w in want))}"
            )
    return problems, lines


def cluster_health_view(
    gpus: GpuFacts,
    node_broken: dict[int, list[str]],
    node_unknown: dict[int, list[str]],
    slices: NodeSlices | None,
    plugin: tuple[int, int] | tuple[int, int, tuple[list[Gpu], int] | str] | None,
    pod_health: list[tuple[str, str, str, str]],
) -> tuple[list[str], list[str], list[str]]:
    """(problems, unknowns, evidence) of whether the cluster's view of each GPU's health is the node's.

    The cluster keeps work off a GPU through a ResourceSlice taint with effect NoSchedule or NoExecute (KEP-5055),
    or, for the device plugin, by leaving it out of the node's allocatable (`plugin`: (capacity, allocatable) of
    nvidia.com/gpu, and which GPUs it counts with how many units each: checks.gpu_rules.plugin_units); a pod's
    containerStatuses[].allocatedResourcesStatus (KEP-4680; `pod_health`: pod, resource name, resource ID, health)
    says what the kubelet last heard of each device it holds. `node_broken` are the GPUs the node's own health
    checks fail (index -> why), `node_unknown` those whose health could not be read."""
    problems: list[str] = []
    lines: list[str] = []
    cluster_off: dict[int, list[str]] = {}
    published: set[int] = set()
    by_device: dict[str, Gpu] = {}
    pairs, unknowns = published_gpus(slices, gpus)
    for d, g in pairs:
        if g is None:
            continue
        published.add(g.index)
        by_device[f"{d.driver}/{d.pool}/{d.name}"] = g
        for t in d.keeps_work_off():
            cluster_off.setdefault(g.index, []).append(f"DRA device {d.name} tainted {t}")
    by_uuid = {g.uuid: g for g in gpus.gpus}
    for pod, resource, rid, health in pod_health:
        g = by_device.get(rid) or by_uuid.get(rid)
        lines.append(f"pod {pod}: {resource} {rid} {health}" + (f" ({g.label})" if g else ""))
        if g is not None and health == "Unhealthy":
            cluster_off.setdefault(g.index, []).append(f"the kubelet reports {rid} Unhealthy to pod {pod}")
    for g in gpus.gpus:
        broken, unread, off = node_broken.get(g.index), node_unknown.get(g.index), cluster_off.get(g.index)
        state = "broken: " + "; ".join(broken) if broken else "health unknown: " + "; ".join(unread) if unread else "healthy"
        lines.append(f"{g.label}: the node reads it {state}; the cluster: {'; '.join(off) if off else 'schedules on it'}")
        rules_unread = slices is not None and slices.rules_error and g.index in published
        tainted = any("tainted" in x for x in off or [])
        if broken and g.index in published and not tainted:
            if rules_unread:  # a DeviceTaintRule may keep work off it: unknown, never a pass or a failure
                unknowns.append(f"{g.label} is broken on the node and its DRA device carries no taint of its own; the "
                                f"cluster's DeviceTaintRules could not be read ({slices.rules_error})")  # fmt: skip
            else:
                problems.append(f"{g.label} is broken on the node ({'; '.join(broken)}) but its DRA device carries no "
                                "NoSchedule or NoExecute taint: the scheduler still hands it to claims")  # fmt: skip
        if off and not broken and not unread:
            problems.append(f"the cluster keeps work off {g.label} ({'; '.join(off)}), yet the node reads it healthy: a "
                            "stale taint or health report, or a failure the node's records do not show")  # fmt: skip
        elif rules_unread and not broken and not unread and not off:
            unknowns.append(f"{g.label}: the node reads it healthy; whether a DeviceTaintRule keeps work off it is unknown "
                            f"({slices.rules_error})")  # fmt: skip
        if unread and not broken:  # whether node and cluster agree rests on what was not read: never a pass
            view = "keeps work off it" if off else "schedules on it"
            unknowns.append(f"{g.label}: the cluster {view}, and the node's own health of it was not read ({'; '.join(unread)})")
    if plugin is not None:
        capacity, allocatable = plugin[:2]
        units = plugin[2] if len(plugin) > 2 else (list(gpus.gpus), 1)
        lines.append(f"device plugin: nvidia.com/gpu capacity {capacity}, allocatable {allocatable}")
        if isinstance(units, str):  # time-slicing, MPS and MIG decide what a unit is (issue 59)
            unknowns.append(f"the device plugin reports {capacity - allocatable} nvidia.com/gpu unit(s) unhealthy, and {units}")
            return problems, unknowns, lines
        counted, per_gpu = units
        ids = {g.index for g in counted}
        plugin_broken = [g.label for g in gpus.gpus if node_broken.get(g.index) and g.index not in published and g.index in ids]
        unread_counted = [g for g in counted if node_unknown.get(g.index)]
        off_units, broken_units = capacity - allocatable, len(plugin_broken) * per_gpu
        each = f" ({per_gpu} unit(s) per GPU)" if per_gpu > 1 else ""
        if broken_units > off_units:
            problems.append(f"{', '.join(plugin_broken)} broken on the node, yet the device plugin reports only "
                            f"{off_units} of {capacity} nvidia.com/gpu unit(s) unhealthy (allocatable {allocatable}{each}): "
                            "the scheduler still places pods on them")  # fmt: skip
        elif off_units > broken_units and not unread_counted:
            problems.append(f"the device plugin reports {off_units} nvidia.com/gpu unit(s) unhealthy (allocatable "
                            f"{allocatable} of {capacity}{each}) but the node reads {len(plugin_broken)} GPU(s) "
                            "broken")  # fmt: skip
        elif off_units > broken_units:  # the GPUs whose health was not read may be the ones
            unknowns.append(f"the device plugin reports {off_units} nvidia.com/gpu unit(s) unhealthy, the node reads "
                            f"{len(plugin_broken)} GPU(s) broken{each}, and the health of others was not read")  # fmt: skip
    return problems, unknowns, lines
