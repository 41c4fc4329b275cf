"""GPU pods, per container: Guaranteed QoS, exclusive and NUMA-local CPUs, memory and GPUs, whole
cores, thread affinity, thread-pool sizing, /dev/shm and the runtime class. Facts: the pod from the
API, the container's own view from one exec, the node's NUMA map, GPUs and cpu_manager_state."""

from __future__ import annotations

import pytest

from conformance.checks import check
from conformance.errors import FactUnavailable
from conformance.facts.cpulist import format_cpulist
from conformance.facts.units import bytes_of, cpu_count


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
    evidence.add(f"status.qosClass: {pod.qos}")
    problems = [] if pod.qos == "Guaranteed" else [f"qosClass is {pod.qos} (requests must equal limits in every container)"]
    for c in pod.containers:
        role = "judged" if c["name"] == spec_container["name"] else "other container, evidence only"
        evidence.add(f"{c['name']} ({role}): cpu {c['cpu_request']}/{c['cpu_limit']}, memory {c['mem_request']}/{c['mem_limit']}")
    c = spec_container
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
    title="The container's CPUs are exclusively its own, as the kubelet assigned them",
    rationale="""Time-shared CPUs are the main source of jitter: a tokenizer step on a shared core waits for
    whatever else runs there.""",
    remediation="Use the static CPU manager and Guaranteed pods; if the cpuset differs from cpu_manager_state, "
    "restart the kubelet (its reconcile loop repairs cpusets) and check for tools that rewrite cpusets.",
    source="exec: /proc/self/status Cpus_allowed_list; node: cpu_manager_state",
)
def test_pod_cpus_exclusive(node, container, pod, spec_container, inside, assignment, cpu_manager_state, evidence):
    evidence.source = "exec /proc/self/status; cpu_manager_state"
    want = cpu_count(spec_container["cpu_request"])
    evidence.add(f"container CPUs {_fmt(inside.cpus)}; request {spec_container['cpu_request']}; "
                 f"cpu_manager_state entry {_fmt(assignment) if assignment is not None else 'none'}")  # fmt: skip
    problems = []
    if want is None or len(inside.cpus) != want:
        problems.append(f"{len(inside.cpus)} CPUs ({_fmt(inside.cpus)}) for a request of {spec_container['cpu_request']}")
    if assignment is None:
        problems.append("no exclusive assignment in cpu_manager_state")
    elif inside.cpus != assignment:
        problems.append(f"cpuset {_fmt(inside.cpus)} differs from the kubelet's assignment {_fmt(assignment)}")
    shared = inside.cpus & cpu_manager_state.default_cpus
    if shared:
        problems.append(f"CPUs {_fmt(shared)} are in the shared pool (defaultCpuSet)")
    for uid, entries in cpu_manager_state.entries.items():
        for name, cpus in entries.items():
            overlap = cpus & inside.cpus
            if not overlap or (uid == pod.uid and name == container.container):
                continue
            if uid == pod.uid:
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
def test_pod_cpus_single_numa(node, container, inside, topology, gpus, profile, evidence):
    nodes = _nodes_of(inside.cpus, topology)
    evidence.source = "exec /proc/self/status; sysfs NUMA map"
    evidence.add(f"CPUs {_fmt(inside.cpus)} on NUMA node(s) {sorted(n for n in nodes if n is not None)}")
    gpu_nodes = _gpu_nodes(inside, gpus)
    if profile.get("pods.numa_alignment") == "gpus" and len(gpu_nodes) > 1:
        # A pod with GPUs on several NUMA nodes (8 GPUs on 2 sockets) cannot fit one node; the profile asks
        # for its CPUs to sit on its GPUs' NUMA nodes and nowhere else (topology policy restricted, pod scope).
        evidence.add(f"profile {profile.name}: pods.numa_alignment gpus; its GPUs are on NUMA nodes {sorted(gpu_nodes)}")
        assert None not in nodes and nodes == gpu_nodes, (
            f"CPUs {_fmt(inside.cpus)} on NUMA nodes {sorted(map(str, nodes))}, its GPUs on {sorted(gpu_nodes)}"
        )
        return
    assert len(nodes) == 1 and None not in nodes, f"CPUs {_fmt(inside.cpus)} span NUMA nodes {sorted(map(str, nodes))}"


def _gpu_nodes(inside, gpus) -> set[int]:
    """NUMA nodes of the GPUs the container sees (those known)."""
    try:
        by_minor = {g.minor: g for g in gpus.gpus}
    except FactUnavailable:
        return set()
    return {
        by_minor[m].pci.numa_node
        for m in inside.gpu_minors
        if m in by_minor and by_minor[m].pci and by_minor[m].pci.numa_node is not None
    }


@check(
    "POD-GPU-NUMA-ALIGNED",
    "critical",
    title="Every GPU the container can use is on its CPUs' NUMA node",
    rationale="""A GPU on the other socket halves host-to-device bandwidth and adds latency to every copy.""",
    remediation="Enable the topology manager (single-numa-node) so the device plugin's GPU hint is aligned with "
    "the CPU and memory hints; check that the GPU's numa_node is known (GPU-NUMA-KNOWN).",
    source="exec: /dev/nvidia<N>; node: NVML minor numbers, sysfs numa_node",
)
def test_pod_gpu_numa_aligned(node, container, spec_container, inside, topology, gpus, profile, evidence):
    evidence.source = "exec /dev/nvidia<N>; node GPU facts"
    cpu_nodes = _nodes_of(inside.cpus, topology)
    by_minor = {g.minor: g for g in gpus.gpus}
    evidence.add(f"container CPUs on NUMA node(s) {sorted(map(str, cpu_nodes))}; sees /dev/nvidia{inside.gpu_minors}")
    if not inside.gpu_minors:
        if not spec_container["gpus"]:
            pytest.skip("the container requests no GPU and sees none (selected by the profile's pods.selector)")
        raise AssertionError(f"requests {spec_container['gpus']} GPU(s) but sees no /dev/nvidia<N> device node")
    problems = []
    for minor in inside.gpu_minors:
        g = by_minor.get(minor)
        if g is None:
            raise FactUnavailable(f"/dev/nvidia{minor}: no GPU with that minor number on node {node} ({gpus.source})")
        gnode = g.pci.numa_node if g.pci else None
        evidence.add(f"/dev/nvidia{minor}: {g.label} on NUMA node {gnode}")
        if profile.get("pods.numa_alignment") == "gpus":
            if gnode is None or gnode not in cpu_nodes:  # multi-NUMA pods: each GPU has CPUs of the pod beside it
                problems.append(f"GPU{g.index} (/dev/nvidia{minor}) on NUMA node {gnode}, no CPU of the container there "
                                f"(CPUs on {sorted(map(str, cpu_nodes))})")  # fmt: skip
        elif gnode is None or {gnode} != cpu_nodes:
            problems.append(f"GPU{g.index} (/dev/nvidia{minor}) on NUMA node {gnode}, CPUs on {sorted(map(str, cpu_nodes))}")
    assert not problems, "; ".join(problems)


@check(
    "POD-MEMS-LOCAL",
    "high",
    title="The container's memory is bound to its CPUs' NUMA node",
    rationale="""Pages on the far node make every CPU access and every pinned host buffer cross the socket link.""",
    remediation="Use memoryManagerPolicy Static with Guaranteed pods (and reservedMemory per NUMA node).",
    source="exec: /proc/self/status Mems_allowed_list",
)
def test_pod_mems_local(node, container, inside, topology, evidence):
    cpu_nodes = _nodes_of(inside.cpus, topology)
    evidence.source = "exec /proc/self/status"
    evidence.add(f"Mems_allowed_list {_fmt(inside.mems)}; CPUs on NUMA node(s) {sorted(map(str, cpu_nodes))}")
    assert set(inside.mems) == cpu_nodes, (
        f"memory allowed on NUMA node(s) {_fmt(inside.mems)}, CPUs on {sorted(map(str, cpu_nodes))}"
    )


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
