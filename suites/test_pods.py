"""GPU pods, per container: Guaranteed QoS, exclusive and NUMA-local CPUs, memory and GPUs, whole
cores, thread affinity, thread-pool sizing, /dev/shm and the runtime class. Facts: the pod from the
API, the container's own view from one exec, the node's NUMA map, GPUs and cpu_manager_state."""

from __future__ import annotations

import pytest

from conformance.checks import check, conclude
from conformance.checks.dra_rules import DRA_REMEDIATION, claim_gpu, describe, node_disagrees
from conformance.checks.memory_placement import mems_problem
from conformance.checks.runtime_rules import across_releases, handler_problem
from conformance.checks.sysctl_rules import port_range_problems, somaxconn_problem, tw_reuse_problem
from conformance.config.units import bytes_of, cpu_count
from conformance.errors import ConformanceError, FactUnavailable
from conformance.facts.cpulist import format_cpulist
from conformance.facts.dra_cpu import DraCpuAssignments
from conformance.facts.kernel import parse_int_sysctl, parse_port_range, parse_port_set


def _nodes_of(cpus, topology) -> set[int | None]:
    return {topology.node_of(c) for c in cpus}


def _fmt(cpus) -> str:
    return format_cpulist(cpus) if cpus else "(none)"


@check(
    "POD-QOS-GUARANTEED",
    "critical",
    title="GPU pod is Guaranteed, and its GPU container requests whole CPUs",
    rationale="""Only Guaranteed pods get exclusive CPUs from the static CPU manager and NUMA alignment from the
    topology manager, and exclusive CPUs are granted per container, to containers of such a pod whose CPU
    request is a whole number (pkg/kubelet/cm/cpumanager/policy_static.go, guaranteedCPUs). A sidecar with
    a fractional request keeps the pod Guaranteed and runs in the shared pool; the GPU container is still
    pinned.""",
    remediation="Set requests equal to limits for cpu and memory in every container of the pod, and a whole "
    "number of CPUs for the GPU container (sidecars may request fractions).",
    source="Kubernetes API: pod spec resources, status.qosClass",
)
def test_pod_qos(node, container, pod, spec_container, evidence):
    evidence.source = "pod spec and status (API)"
    evidence.add(f"status.qosClass: {pod.qos}", *gpu_sources(spec_container))
    problems = [] if pod.qos == "Guaranteed" else [f"qosClass is {pod.qos} (requests must equal limits in every container)"]
    for c in pod.containers:
        role = "judged" if c["name"] == spec_container["name"] else "other container, evidence only"
        evidence.add(f"{c['name']} ({role}): cpu {c['cpu_request']}/{c['cpu_limit']}, memory {c['mem_request']}/{c['mem_limit']}")
    c = spec_container
    level = pod.pod_resources
    if level is not None and all(c[k] is None for k in ("cpu_request", "cpu_limit", "mem_request", "mem_limit")):
        # Pod-level resources (KEP-2837): the container states none and shares the pod's budget; the API computes
        # the QoS from spec.resources (ComputePodQOS), which status.qosClass above already says.
        evidence.add(f"pod-level resources (spec.resources): cpu {level['cpu_request']}/{level['cpu_limit']}, "
                     f"memory {level['mem_request']}/{level['mem_limit']}")  # fmt: skip
        c = {**level, "name": f"pod {pod.namespace}/{pod.name} (spec.resources)"}
    req, lim = cpu_count(c["cpu_request"]), cpu_count(c["cpu_limit"])
    if req is None or lim is None or req != lim or req != int(req):
        problems.append(
            f"{c['name']}: cpu request {c['cpu_request']} / limit {c['cpu_limit']} (need equal whole CPUs for exclusive CPUs)"
        )
    if c["mem_request"] is None or bytes_of(c["mem_request"]) != bytes_of(c["mem_limit"]):
        problems.append(f"{c['name']}: memory request {c['mem_request']} != limit {c['mem_limit']}")
    assert not problems, "; ".join(problems)


@check(
    "POD-CPUS-EXCLUSIVE",
    "critical",
    title="The container's CPUs are exclusively its own, as the kubelet (or the DRA CPU driver) assigned them",
    rationale="""Time-shared CPUs are the main source of jitter: a tokenizer step on a shared core waits for
    whatever else runs there. With `pods.cpu_source: dra` the CPUs come from a DRA CPU driver's claims: the
    container must hold exactly the CPUs its claims were prepared with (the driver's CDI specs), as many as the
    claims were allocated, and no other claim's (conformance/facts/dra_cpu.py).""",
    remediation="Use the static CPU manager and Guaranteed pods; if the cpuset differs from cpu_manager_state, "
    "restart the kubelet (its reconcile loop repairs cpusets) and check for tools that rewrite cpusets. With a DRA "
    "CPU driver: give the container a CPU claim, and check the driver's NRI plugin is registered with the runtime.",
    source="exec: /proc/self/status Cpus_allowed_list; node: cpu_manager_state, or the DRA CPU driver's CDI specs; "
    "API: the container's ResourceClaims",
)
def test_pod_cpus_exclusive(node, container, pod, spec_container, inside, assignment, cpu_assignments, evidence):
    state = cpu_assignments  # the kubelet's cpu_manager_state, or the DRA CPU driver's record (pods.cpu_source)
    evidence.source = f"exec /proc/self/status; {state.record}"
    dra = spec_container.get("dra")
    from_driver = isinstance(state, DraCpuAssignments)
    own_claims = set(dra.cpu_claims) if dra is not None and from_driver else set()
    if from_driver:
        # the CPUs the container's CPU claims were allocated decide (issue 52 item 5)
        held, want = f"{dra.cpus_claimed if dra else 0} CPU(s) from claim(s) {_claims(dra)}", dra.cpus_claimed if dra else None
    else:
        # what the kubelet allocated decides (an in-place resize leaves the spec at the desired size while the
        # container still holds the allocation: a static-CPU Guaranteed pod's resize is Infeasible; KEP-1287, GA 1.35)
        held = spec_container.get("cpu_allocated") or spec_container["cpu_request"]
        want = cpu_count(held)
    evidence.add(f"container CPUs {_fmt(inside.cpus)}; request {spec_container['cpu_request']}, allocated "
                 f"{spec_container.get('cpu_allocated') or 'not reported'}; {state.record} entry "
                 f"{_fmt(assignment) if assignment is not None else 'none'}")  # fmt: skip
    if pod.resize:
        evidence.add(f"resize: {pod.resize} (judged against what was allocated)")
    problems = []
    # With the PodLevelResourceManagers gate the static policy gives a pod with spec.resources one exclusive set
    # (cpu_manager_state podEntries, V3/V4); a container stating no CPU of its own runs in it, shared only with
    # the pod's other containers (KEP-5526; pkg/kubelet/cm/cpumanager/state/checkpoint.go PodCPUAssignments).
    pod_set = state.pod_entries.get(pod.uid) if spec_container["cpu_request"] is None else None
    if pod_set is not None and assignment is None:
        evidence.add(f"pod-level exclusive CPUs {_fmt(pod_set)} (cpu_manager_state podEntries): the container has no "
                     "CPU request of its own and shares them only with its pod's containers")  # fmt: skip
        if not inside.cpus or not inside.cpus <= pod_set:
            problems.append(f"cpuset {_fmt(inside.cpus)} is not within the pod's exclusive CPUs {_fmt(pod_set)}")
    else:
        if want is None or want == 0 or len(inside.cpus) != want:
            problems.append(f"{len(inside.cpus)} CPUs ({_fmt(inside.cpus)}) for an allocation of {held}")
        if assignment is None and from_driver:
            problems.append(
                "the container holds no CPU claim of a DRA CPU driver (pods.dra_cpu_drivers): nothing pins its CPUs"
                if not own_claims
                else f"claim(s) {_claims(dra)} have no prepared spec in {state.record}: the driver has not pinned them"
            )
        elif assignment is None and pod.pod_resources is not None and spec_container["cpu_request"] is None:
            problems.append(
                "no exclusive assignment in cpu_manager_state: with pod-level resources (spec.resources) and no "
                "container CPU request the static CPU manager gives exclusive CPUs only with the "
                "PodLevelResourceManagers feature gate (pkg/kubelet/cm/cpumanager/policy_static.go); enable it on the "
                "kubelet, or state whole-CPU requests equal to limits on the container"
            )
        elif assignment is None:
            problems.append(f"no exclusive assignment in {state.record}")
        elif inside.cpus != assignment:
            problems.append(f"cpuset {_fmt(inside.cpus)} differs from {state.owner}'s assignment {_fmt(assignment)}")
    shared = inside.cpus & state.default_cpus
    if shared:
        pool = "no claim holds them" if from_driver else "defaultCpuSet"
        problems.append(f"CPUs {_fmt(shared)} are in the shared pool ({pool})")
    for uid, cpus in state.pod_entries.items():
        overlap = cpus & inside.cpus
        if overlap and uid != pod.uid:
            problems.append(f"CPUs {_fmt(overlap)} are pod {uid}'s pod-level exclusive CPUs (podEntries)")
    for uid, entries in state.entries.items():
        for name, cpus in entries.items():
            overlap = cpus & inside.cpus
            if not overlap or (uid == pod.uid and name == container.container):
                continue
            if uid.startswith("DRA claim "):
                claim = uid.removeprefix("DRA claim ")
                if claim not in own_claims:
                    problems.append(f"CPUs {_fmt(overlap)} also prepared for claim {claim} ({state.specs.get(claim)})")
            elif uid == pod.uid:
                # Within a pod, an app container may reuse the CPUs of an init container that has finished;
                # a restartable init container (sidecar) runs alongside it and keeps its own
                # (pkg/kubelet/cm/cpumanager/policy_static.go: reusable CPUs come only from
                # non-restartable init containers, see updateCPUsToReuse).
                if name in pod.init_containers and not pod.init_containers[name]:
                    continue
                kind = "restartable init container (sidecar)" if pod.init_containers.get(name) else "container"
                problems.append(f"CPUs {_fmt(overlap)} also assigned to {kind} {name} of the same pod")
            else:
                problems.append(f"CPUs {_fmt(overlap)} also assigned to pod {uid} container {name}")
    assert not problems, "; ".join(problems)


def _claims(dra) -> str:
    return ", ".join(sorted(dra.cpu_claims.values())) if dra is not None and dra.cpu_claims else "(none)"


@check(
    "POD-CPUS-SINGLE-NUMA",
    "critical",
    title="All of the container's CPUs are on one NUMA node",
    rationale="""Threads on two sockets share data across the socket link; with the GPU on one of them,
    half of the host-to-device traffic crosses it.""",
    remediation="Use topologyManagerPolicy single-numa-node (or restricted) with Guaranteed pods, and request "
    "no more CPUs than one NUMA node has.",
    source="exec: Cpus_allowed_list; node: /sys/devices/system/node",
)
def test_pod_cpus_single_numa(node, container, spec_container, inside, topology, facts, profile, evidence):
    nodes = _nodes_of(inside.cpus, topology)
    evidence.source = "exec /proc/self/status; sysfs NUMA map"
    evidence.add(f"CPUs {_fmt(inside.cpus)} on NUMA node(s) {sorted(n for n in nodes if n is not None)}")
    # The GPUs matter only under pods.numa_alignment: gpus; the default rule needs the CPUs and the NUMA map
    gpu_nodes = _gpu_nodes(inside, facts.gpus, spec_container, node) if profile.get("pods.numa_alignment") == "gpus" else set()
    if len(gpu_nodes) > 1:
        # A pod with GPUs on several NUMA nodes (8 GPUs on 2 sockets) cannot fit one node; the profile asks
        # for its CPUs to sit on its GPUs' NUMA nodes and nowhere else (topology policy restricted, pod scope).
        evidence.add(f"profile {profile.name}: pods.numa_alignment gpus; its GPUs are on NUMA nodes {sorted(gpu_nodes)}")
        assert None not in nodes and nodes == gpu_nodes, (
            f"CPUs {_fmt(inside.cpus)} on NUMA nodes {sorted(map(str, nodes))}, its GPUs on {sorted(gpu_nodes)}"
        )
        return
    assert len(nodes) == 1 and None not in nodes, f"CPUs {_fmt(inside.cpus)} span NUMA nodes {sorted(map(str, nodes))}"


def _gpu_nodes(inside, gpus, spec_container, node) -> set[int]:
    """NUMA nodes of the GPUs the container sees or holds through its ResourceClaims. A GPU whose node is
    unknown decides which rule applies, so it is an error (FactUnavailable), never left out."""
    by_minor = {g.minor: g for g in gpus.gpus}
    out = set()
    held = [claim_gpu(c, gpus, node) for c in _dra(spec_container).devices]
    for m in inside.gpu_minors:
        g = by_minor.get(m)
        if g is None:
            raise FactUnavailable(f"the container sees /dev/nvidia{m}, a GPU the node's {gpus.source} does not list")
        held.append(g)
    for g in held:
        if g.pci is None or g.pci.numa_node is None:
            raise FactUnavailable(f"{g.label}: its NUMA node is not known (sysfs numa_node; see GPU-NUMA-KNOWN)")
        out.add(g.pci.numa_node)
    return out


def _dra(spec_container):
    """The container's DRA GPUs; a claim or slice that could not be read makes its GPU checks `error`."""
    dra = spec_container["dra"]
    if dra.error:
        raise FactUnavailable(dra.error)
    return dra


def gpu_sources(spec_container) -> list[str]:
    """Where the container's GPUs come from, for the evidence: the device plugin, or which claim."""
    out = []
    if spec_container["plugin_gpus"]:
        out.append(f"GPUs from the device plugin: {spec_container['plugin_gpus']}")
    if spec_container.get("extended"):
        out.append("its GPU resource is a DRA extended resource (status.extendedResourceClaimStatus): the special "
                   "claim's devices, which the Topology Manager does not align")  # fmt: skip
    dra = spec_container["dra"]
    for c in dra.devices:
        out.append(
            f"GPU from DRA: claim {c.short_claim}, request {c.request}, driver {c.driver}, pool {c.pool}, device {c.device}"
        )
    for claim, consumers in dra.shared.items():
        out.append(f"claim {claim} is shared: reserved for {', '.join(consumers)}")
    return out


@check(
    "POD-GPU-NUMA-ALIGNED",
    "critical",
    title="Every GPU the container can use is on its CPUs' NUMA node",
    rationale="""A GPU on the other socket halves host-to-device bandwidth and adds latency to every copy. A GPU
    from a DRA ResourceClaim is not aligned by the Topology Manager at all: the kubelet admits such a pod
    with its exclusive CPUs on one socket and the GPU on the other even under single-numa-node.""",
    remediation="Enable the topology manager (single-numa-node) so the device plugin's GPU hint is aligned with "
    "the CPU and memory hints; check that the GPU's numa_node is known (GPU-NUMA-KNOWN). " + DRA_REMEDIATION,
    source="exec: /dev/nvidia<N>; API: ResourceClaim allocation, ResourceSlice device; node: NVML, sysfs numa_node",
)
def test_pod_gpu_numa_aligned(node, container, pod, spec_container, inside, topology, gpus, facts, profile, evidence):
    evidence.source = "exec /dev/nvidia<N>; ResourceClaims and ResourceSlices (API); node GPU facts"
    cpu_nodes = _nodes_of(inside.cpus, topology)
    by_minor = {g.minor: g for g in gpus.gpus}
    evidence.add(*gpu_sources(spec_container))
    evidence.add(f"container CPUs on NUMA node(s) {sorted(map(str, cpu_nodes))}; sees /dev/nvidia{inside.gpu_minors}")
    held = []  # (what to call it, the GPU)
    claimed = _dra(spec_container).devices
    unknowns: list[str] = []
    disagree: list[str] = []
    if claimed:  # the node's side: what the kubelet prepared for the pod (its DRA checkpoint)
        disagree, lines = node_disagrees(claimed, facts.dra_prepared, pod.uid)
        evidence.add(*lines)
        if disagree:  # which GPUs the claims hold is in doubt: not judged; the device nodes the container sees still are
            unknowns.append("the API and the node disagree: " + "; ".join(disagree))
    for c in claimed if not disagree else []:
        g = claim_gpu(c, gpus, node)
        held.append((describe(c, g), g))
    required = profile.get("pods.dra_cpu_coselection")
    chance = []  # GPU claims whose CPUs were not selected with them, under a profile that asks for it
    for claim, (done, how) in sorted(spec_container["dra"].coselection.items()):
        evidence.add(f"claim {claim}: CPUs {'co-selected' if done else 'not co-selected'} with its GPUs: {how}")
        if required and not done:
            chance.append(f"claim {claim}: {how}")
    judged = {id(g) for _, g in held}
    for minor in inside.gpu_minors:
        g = by_minor.get(minor)
        if g is None:
            unknowns.append(f"/dev/nvidia{minor}: no GPU with that minor number on node {node} ({gpus.source})")
            continue
        if id(g) not in judged:  # a GPU a claim already names is judged once, under the claim's name
            judged.add(id(g))
            held.append((f"GPU{g.index} (/dev/nvidia{minor})", g))
    if not held and not unknowns:
        if not spec_container["gpus"]:
            pytest.skip("the container requests no GPU and sees none (selected by the profile's pods.selector)")
        raise AssertionError(f"requests {spec_container['gpus']} GPU(s) but sees no /dev/nvidia<N> device node")
    problems = []
    for what, g in held:
        gnode = g.pci.numa_node if g.pci else None
        evidence.add(f"{what}: {g.label} on NUMA node {gnode}")
        if profile.get("pods.numa_alignment") == "gpus":
            if gnode is None or gnode not in cpu_nodes:  # multi-NUMA pods: each GPU has CPUs of the pod beside it
                problems.append(f"{what} on NUMA node {gnode}, no CPU of the container there "
                                f"(CPUs on {sorted(map(str, cpu_nodes))})")  # fmt: skip
        elif gnode is None or {gnode} != cpu_nodes:
            problems.append(f"{what} on NUMA node {gnode}, CPUs on {sorted(map(str, cpu_nodes))}")
    if chance:  # aligned or not today, nothing keeps the next pod aligned
        problems.append(
            "the profile asks DRA GPU claims to select their CPUs too (pods.dra_cpu_coselection): " + "; ".join(chance)
        )
    conclude(problems, unknowns)


@check(
    "POD-MEMS-LOCAL",
    "high",
    title="The container's memory is bound to its CPUs' NUMA node",
    rationale="""Pages on the far node make every CPU access and every pinned host buffer cross the socket link.
    A correctly placed container's Mems_allowed_list is exactly its CPUs' NUMA nodes: the Static memory manager
    writes cpuset.mems as the affinity it allocated from, and without it the container inherits every node with
    memory (N_MEMORY). On Grace nodes in the driver's NUMA mode that includes the GPUs' HBM nodes (no CPUs), so
    a container's pages may land in GPU memory; in CDMM those nodes hold no system memory and never appear
    (conformance/checks/memory_placement.py).""",
    remediation="Use memoryManagerPolicy Static with Guaranteed pods (and reservedMemory per NUMA node with CPUs); "
    "on Grace nodes run the driver in CDMM (NVreg_CoherentGPUMemoryMode=driver).",
    source="exec: /proc/self/status Mems_allowed_list; node: /sys/devices/system/node",
)
def test_pod_mems_local(node, container, inside, topology, evidence):
    cpu_nodes = _nodes_of(inside.cpus, topology)
    evidence.source = "exec /proc/self/status"
    evidence.add(f"Mems_allowed_list {_fmt(inside.mems)}; CPUs on NUMA node(s) {sorted(map(str, cpu_nodes))}")
    if topology.cpuless_nodes:
        evidence.add(f"NUMA nodes without CPUs (memory-only or empty): {format_cpulist(frozenset(topology.cpuless_nodes))}")
    problem = mems_problem(inside.mems, cpu_nodes, topology.cpuless_nodes)
    assert problem is None, problem


@check(
    "POD-FULL-CORES",
    "medium",
    title="The exclusive CPUs are whole physical cores",
    rationale="""An SMT sibling given to another container shares the core's execution units: the 'exclusive'
    CPU still has a noisy neighbour.""",
    remediation='Set cpuManagerPolicyOptions full-pcpus-only: "true" and request CPUs in multiples of the threads per core.',
    source="exec: Cpus_allowed_list; node: thread_siblings_list",
)
def test_pod_full_cores(node, container, inside, topology, evidence):
    evidence.source = "exec /proc/self/status; sysfs thread_siblings_list"
    broken = sorted({c for c in inside.cpus if not topology.siblings.get(c, frozenset({c})) <= inside.cpus})
    evidence.add(f"CPUs {_fmt(inside.cpus)}; {topology.threads_per_core} thread(s) per core")
    assert not broken, "; ".join(
        f"cpu{c}'s siblings {_fmt(topology.siblings.get(c, frozenset()))} are not all in the set" for c in broken
    )


@check(
    "POD-THREAD-AFFINITY",
    "high",
    title="Every thread stays on the kubelet's assignment",
    rationale="""A thread pinned elsewhere (by a library or a wrapper script), or a cpuset that drifted from the
    kubelet's state, runs off the exclusive cores and on someone else's.""",
    remediation="Remove explicit affinity calls (taskset, numactl, sched_setaffinity in code) that pin outside "
    "the container's CPUs; restart the pod if its cpuset drifted.",
    source="exec: /proc/<pid>/task/<tid>/status and stat (field 39); node: cpu_manager_state",
)
def test_pod_thread_affinity(node, container, inside, assignment, evidence):
    evidence.source = "exec /proc/*/task/*; cpu_manager_state"
    if assignment is None:
        raise AssertionError("the container has no exclusive CPUs in cpu_manager_state: its threads share the pool")
    bad = []
    for t in inside.tasks:
        evidence.add(f"pid {t.pid} tid {t.tid} {t.name}: allowed {_fmt(t.cpus)}, last ran on cpu{t.last_cpu}")
        if t.cpus is not None and not t.cpus <= assignment:
            bad.append(f"thread {t.tid} ({t.name}) allowed on {_fmt(t.cpus)}")
        elif t.last_cpu is not None and t.last_cpu not in assignment:
            bad.append(f"thread {t.tid} ({t.name}) last ran on cpu{t.last_cpu}")
    assert inside.tasks, "no process of the container was visible"
    assert not bad, "; ".join(bad) + f"; the kubelet assigned {_fmt(assignment)}"


@check(
    "POD-THREAD-ENV",
    "medium",
    title="Thread pools are sized to the container's CPUs",
    rationale="""Unset, OpenMP and MKL start one thread per host CPU: dozens of threads contend for a few
    exclusive cores and latency jitters.""",
    remediation="Set OMP_NUM_THREADS and MKL_NUM_THREADS in the container to at most its CPU count "
    "(torchrun's 1 per rank is fine).",
    source="exec: /proc/<pid>/environ of the container's processes (only the listed names are read)",
)
def test_pod_thread_env(node, container, inside, assignment, profile, evidence):
    names = profile.get("pods.thread_env")
    limit = len(assignment) if assignment else len(inside.cpus)
    evidence.source = "exec /proc/*/environ (listed names only)"
    main = _main_process(inside)
    if main is None:
        raise FactUnavailable("no process of the container was visible")
    env = inside.env.get(main, {})
    problems = []
    for name in names:
        value = env.get(name)
        evidence.add(f"pid {main}: {name}={value if value is not None else '(unset)'}")
        if value is None:
            problems.append(f"{name} is not set")
        elif not value.strip().isdigit() or not 1 <= int(value) <= limit:
            problems.append(f"{name}={value}, expected 1..{limit} (the container's CPUs)")
    assert not problems, "; ".join(problems)


def _main_process(inside) -> int | None:
    """The container's main process: the lowest pid that is not the pause process."""
    pids = sorted({t.pid for t in inside.tasks if t.name != "pause"})
    return pids[0] if pids else None


@check(
    "POD-SHM-SIZE",
    "high",
    title="/dev/shm is large enough for NCCL and DataLoader workers",
    rationale="""The 64 MiB container default makes NCCL and PyTorch DataLoader workers stall or crash
    under load.""",
    remediation="Mount an emptyDir with medium: Memory (and a sizeLimit) at /dev/shm.",
    source="exec: df /dev/shm",
)
def test_pod_shm_size(node, container, spec_container, inside, profile, evidence):
    _dra(spec_container)  # how many GPUs it holds decides the size: a claim not read is an error
    key = "pods.shm_min_multi_gpu" if spec_container["gpus"] >= 2 else "pods.shm_min"
    want = bytes_of(profile.get(key))
    evidence.source = "exec df -kP /dev/shm"
    if inside.shm_bytes is None:
        raise FactUnavailable("/dev/shm size not readable in the container")
    evidence.add(f"/dev/shm {inside.shm_bytes / 2**20:.0f} MiB; {key} = {profile.get(key)}")
    assert inside.shm_bytes >= want, f"/dev/shm is {inside.shm_bytes / 2**20:.0f} MiB, {profile.get(key)} required"


@check(
    "POD-RUNTIME-CLASS",
    "low",
    title="GPU pods use the profile's runtime class",
    rationale="""A GPU pod on the default runtime handler can miss the NVIDIA runtime hooks, or the handler
    whose cgroup driver was checked.""",
    remediation="Set spec.runtimeClassName to the profile's runtime class (e.g. nvidia).",
    source="Kubernetes API: pod spec runtimeClassName",
)
def test_pod_runtime_class(node, container, pod, profile, evidence):
    want = profile.get("pods.runtime_class")
    if not want:
        pytest.skip("the profile names no runtime class (pods.runtime_class)")
    evidence.source = "pod spec (API)"
    evidence.add(f"runtimeClassName: {pod.runtime_class}")
    assert pod.runtime_class == want, f"runtimeClassName is {pod.runtime_class or '(unset)'}, the profile requires {want}"


# -- what the pod's own network namespace and cgroup give it ----------------------------------------
def _pod_sysctls(pod, inside, evidence, names: list[str]) -> dict[str, str]:
    """The container's view of the network sysctls (its pod's network namespace)."""
    evidence.source = "exec: /proc/sys/net in the container (the pod's network namespace)"
    if pod.host_network:
        evidence.add("hostNetwork: the pod shares the node's network namespace, so these are the node's values")
    else:
        evidence.add("the pod has its own network namespace: values start from the kernel's defaults unless the pod sets them")
    missing = [n for n in names if n not in inside.sysctls]
    if missing:
        raise FactUnavailable(f"the container could not read /proc/sys/{', /proc/sys/'.join(missing)}")
    for n in names:
        evidence.add(f"{n.replace('/', '.')} = {inside.sysctls[n]}")
    return inside.sysctls


def _pod_int_sysctl(pod, inside, evidence, path: str) -> int:
    """One integer sysctl of the pod's network namespace, e.g. net/core/somaxconn."""
    return parse_int_sysctl(_pod_sysctls(pod, inside, evidence, [path])[path], path.replace("/", "."))


SYSCTL_REMEDIATION = (
    "Set it for the pod: securityContext.sysctls (net.ipv4.tcp_tw_reuse and net.core.somaxconn are not in the "
    "kubelet's safe set, so the node's kubelet must list them in allowedUnsafeSysctls, see "
    "KUBELET-ALLOWED-UNSAFE-SYSCTLS; net.ipv4.ip_local_port_range is safe, ip_local_reserved_ports since 1.27), or "
    "with a CNI tuning plugin in the pod network's chain; a hostNetwork pod gets the node's values (SYSCTL-*)."
)


@check(
    "POD-SYSCTL-TCP-TW-REUSE",
    "medium",
    title="The pod's network namespace reuses TIME_WAIT sockets (tcp_tw_reuse = 1)",
    rationale="""Every network namespace starts from the kernel's defaults, not the host's values (tcp_tw_reuse
    2: loopback only, net/ipv4/tcp_ipv4.c tcp_sk_init). A node that passes SYSCTL-TCP-TW-REUSE still gives
    each pod without hostNetwork the default, and a gateway pod runs out of ephemeral ports.""",
    remediation=SYSCTL_REMEDIATION,
    source="exec: /proc/sys/net/ipv4/tcp_tw_reuse in the container",
)
def test_pod_sysctl_tw_reuse(node, container, pod, inside, profile, evidence):
    problem = tw_reuse_problem(_pod_int_sysctl(pod, inside, evidence, "net/ipv4/tcp_tw_reuse"), profile)
    assert problem is None, problem


@check(
    "POD-SYSCTL-SOMAXCONN",
    "medium",
    title="The pod's network namespace has a large accept backlog (somaxconn)",
    rationale="""A pod's own network namespace starts at the kernel default somaxconn (4096 since Linux 5.4,
    net/core/net_namespace.c), whatever the node sets: a model server's listen backlog is capped there.""",
    remediation=SYSCTL_REMEDIATION,
    source="exec: /proc/sys/net/core/somaxconn in the container",
)
def test_pod_sysctl_somaxconn(node, container, pod, inside, profile, evidence):
    problem = somaxconn_problem(_pod_int_sysctl(pod, inside, evidence, "net/core/somaxconn"), profile)
    assert problem is None, problem


@check(
    "POD-SYSCTL-PORT-RANGE",
    "medium",
    title="The pod's ephemeral port range is wide (and, on the node's network, keeps off the NodePort range)",
    rationale="""A pod's own network namespace starts with ip_local_port_range 32768-60999
    (net/ipv4/af_inet.c inet_init_net), half the ports a busy client pod may need. NodePorts live in the
    node's network namespace: only a hostNetwork pod's ephemeral ports can take one, so only there must
    the NodePort range be reserved (conformance/checks/sysctl_rules.py says why).""",
    remediation=SYSCTL_REMEDIATION,
    source="exec: /proc/sys/net/ipv4/ip_local_port_range, ip_local_reserved_ports in the container",
)
def test_pod_sysctl_port_range(node, container, pod, inside, profile, evidence):
    names = ["net/ipv4/ip_local_port_range", "net/ipv4/ip_local_reserved_ports"]
    values = _pod_sysctls(pod, inside, evidence, names)
    if not pod.host_network:
        evidence.add(
            "NodePorts are served in the node's network namespace; this pod's ephemeral ports are its own namespace's "
            "and reach the node only through NAT, so they cannot take a NodePort: the reservation is not judged here"
        )
    problems = port_range_problems(
        parse_port_range(values[names[0]]), parse_port_set(values[names[1]]), profile, nodeports_here=pod.host_network
    )
    assert not problems, "; ".join(problems)


def _quota_settings(facts) -> str:
    """The kubelet settings that decide a pinned container's quota, for the evidence (not the verdict)."""
    try:
        config = facts.kubelet_config
    except ConformanceError as e:
        return f"kubelet configuration not read: {e}"
    gate = (config.get("featureGates").value or {}).get("DisableCPUQuotaWithExclusiveCPUs")
    state = "not set (on by default since 1.33)" if gate is None else str(gate)
    return f"kubelet: cpuCFSQuota {config.get('cpuCFSQuota').value}, feature gate DisableCPUQuotaWithExclusiveCPUs {state}"


@check(
    "POD-CPU-THROTTLING",
    "high",
    title="A pinned GPU container is not throttled by a CFS quota",
    rationale="""Exclusive CPUs do not lift the CFS quota: the kubelet still sets one from the CPU limit, and
    a container whose threads burst against it (more runnable threads than quota, per-CPU quota slices)
    is stopped until the next period, which shows as P99 stalls of up to a period (100 ms) with no CPU
    contention in sight (Documentation/scheduler/sched-bwc.rst).""",
    remediation="Let the kubelet drop the quota for containers with exclusive CPUs: the feature gate "
    "DisableCPUQuotaWithExclusiveCPUs (beta and on by default since Kubernetes 1.33; pkg/features/kube_features.go), "
    "or on older kubelets cpuCFSQuota: false (which removes CPU limits for every pod on the node).",
    source="exec: the container cgroup's cpu.max and cpu.stat (cgroup v2), cpu.cfs_quota_us and cpu.stat (v1)",
)
def test_pod_cpu_throttling(node, container, inside, assignment, facts, evidence):
    if not assignment:
        pytest.skip("the container has no exclusive CPUs (no cpu_manager_state entry): throttling is judged for pinned ones")
    cfs = inside.cfs
    if cfs is None:
        raise FactUnavailable("the container's cgroup shows no CPU bandwidth files (cpu.max or cpu.cfs_quota_us)")
    evidence.source = f"exec: {cfs.cgroup} (the container's cgroup)"
    quota_unread = [u for u in cfs.unread if "cpu.max" in u or "cfs_" in u]
    if quota_unread:
        raise FactUnavailable(f"the CFS quota could not be read: {'; '.join(quota_unread)}")
    cpus = f"{cfs.quota_us / cfs.period_us:g} CPUs" if cfs.quota_us is not None else ""
    counted = cfs.nr_throttled is not None and cfs.nr_periods is not None and cfs.throttled_us is not None
    evidence.add(
        f"exclusive CPUs {_fmt(assignment)}; CFS quota "
        + ("none" if cfs.quota_us is None else f"{cfs.quota_us} us per {cfs.period_us} us ({cpus})"),
        f"throttled in {cfs.nr_throttled} of {cfs.nr_periods} periods, {cfs.throttled_us / 1e6:.3f} s in all"
        if counted
        else f"throttling counters not read: {'; '.join(cfs.unread)}",
        _quota_settings(facts),
    )
    if cfs.quota_us is None:
        evidence.add("verified: no CFS quota on a container with exclusive CPUs")
        return
    # A quota below the exclusive CPUs throttles as soon as the container's threads use the CPUs it holds: a
    # pinned container may run on all of them at once, and the quota lets it run on fewer per period
    # (Documentation/scheduler/sched-bwc.rst: quota/period is the CPU bandwidth of the group).
    assert cfs.quota_us >= cfs.period_us * len(assignment), (
        f"a CFS quota of {cpus} on {len(assignment)} exclusive CPU(s) {_fmt(assignment)}: the quota throttles the "
        f"container whenever it uses more than {cpus} of the CPUs it holds"
        + (f" (throttled in {cfs.nr_throttled} of {cfs.nr_periods} periods so far)" if counted else "")
    )
    if not counted:
        raise FactUnavailable(f"whether the container was throttled is unknown: {'; '.join(cfs.unread)} not read")
    assert cfs.nr_throttled is not None and cfs.nr_periods is not None and cfs.throttled_us is not None
    share = cfs.nr_throttled / cfs.nr_periods if cfs.nr_periods else 0.0
    assert cfs.nr_throttled == 0, (
        f"throttled in {cfs.nr_throttled} of {cfs.nr_periods} CFS periods ({share:.1%}), {cfs.throttled_us / 1e6:.3f} s "
        f"stalled, under a quota of {cpus} on exclusive CPUs {_fmt(assignment)}"
    )
    evidence.add("a CFS quota is set but the container was not throttled yet: a burst above it would be")


@check(
    "RUNTIME-CLASS-HANDLER",
    "high",
    title="The GPU pod's RuntimeClass names a handler the node's runtime has, on the systemd cgroup driver",
    rationale="""A RuntimeClass only names a CRI handler; the node's containerd or CRI-O must define it. A
    pod whose handler is missing cannot start its sandbox (and one that runs was started before the
    runtime's configuration lost it); a handler on cgroupfs under a systemd kubelet gives one cgroup tree
    two owners.""",
    remediation="Define the handler in the node's runtime: containerd [plugins.<cri>.containerd.runtimes.<handler>] "
    "with options.SystemdCgroup = true (the NVIDIA Container Toolkit's `nvidia-ctk runtime configure --runtime "
    "containerd --set-as-default=false` writes the nvidia one); CRI-O [crio.runtime.runtimes.<handler>] with "
    'cgroup_manager = "systemd". Or point the RuntimeClass at a handler that exists.',
    source="Kubernetes API: pod spec runtimeClassName, RuntimeClass (node.k8s.io/v1) handler; the node's runtime configuration",
)
def test_runtime_class_handler(node, container, pod, runtime_handlers, runtime_config, evidence):
    if not pod.runtime_class:
        pytest.skip("no runtimeClassName: the runtime's default handler runs it (judged by RUNTIME-SYSTEMD-CGROUP)")
    evidence.source = f"RuntimeClass {pod.runtime_class} (API); {', '.join(runtime_config.files) or 'runtime defaults'}"
    handler = runtime_handlers.get(pod.runtime_class)
    assert handler is not None, f"RuntimeClass {pod.runtime_class!r} does not exist in the cluster"
    rc = runtime_config
    evidence.add(
        f"RuntimeClass {pod.runtime_class} -> handler {handler!r}",
        f"{rc.runtime} handlers on the node: {', '.join(sorted(rc.handlers)) or '(none)'}",
    )
    h = rc.handlers.get(handler)
    if h is not None:
        evidence.add(h.describe())
    problems, per_release = across_releases(rc, lambda c: [p] if (p := handler_problem(c, handler)) else [])
    evidence.add(*per_release)
    assert not problems, f"RuntimeClass {pod.runtime_class!r}: " + "; ".join(problems)
