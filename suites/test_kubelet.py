"""Kubelet checks: CPU, topology and memory managers, reservations, cgroup driver, CPU state.

Source of truth for now: the kubelet's command line, its --config file and --config-dir drop-ins
(flags override both; missing keys take the upstream default). Each verdict says which layer decided.
"""

from __future__ import annotations

import json

import pytest

from conformance.checks import check, conclude
from conformance.checks.memory_placement import reserved_off_cpu_nodes
from conformance.checks.numa_rules import live_kubelet_within_limit, numa_limit_problems
from conformance.checks.release_rules import known_as, kubelet_span, runtime_span
from conformance.checks.runtime_rules import FALLBACK_REMOVED, runtime_config_support
from conformance.checks.sysctl_rules import POD_SYSCTLS, allowlisted
from conformance.config.units import parse_duration
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.cpulist import format_cpulist, parse_cpulist
from conformance.facts.kubelet import CONFIGZ, go_parse_bool
from conformance.facts.releases import at_least
from conformance.facts.reservations import format_bytes, hard_eviction_memory, memory_sums, reserved_cpu_total

CONFIG_SOURCE = "kubelet command line, --config file, --config-dir drop-ins"


@check(
    "KUBELET-CPU-POLICY",
    "critical",
    title="CPU manager policy is static",
    rationale="""Only the static CPU manager gives Guaranteed pods with integer CPU requests exclusive
    CPUs; with 'none' every container shares the whole pool and a neighbour's burst becomes P99 jitter.""",
    remediation="Set cpuManagerPolicy: static in the KubeletConfiguration, drain the node, remove "
    "/var/lib/kubelet/cpu_manager_state and restart the kubelet.",
    source=CONFIG_SOURCE,
)
def test_cpu_manager_policy(node, kubelet_config, profile, evidence):
    s = kubelet_config.get("cpuManagerPolicy")
    evidence.from_setting(s)
    if profile.get("pods.cpu_source") == "dra":
        # a DRA CPU driver pins the containers (NRI); the kubelet's CPU manager must stay out of the cpusets:
        # kubernetes-sigs/dra-driver-cpu docs/user/configuration.md, "Kubelet configuration prerequisites"
        evidence.add(f"CPUs come from a DRA CPU driver ({', '.join(profile.get('pods.dra_cpu_drivers'))}; pods.cpu_source: dra)")
        assert s.value == "none", (
            f"cpuManagerPolicy is {s.value!r} ({s.source}); with CPUs from a DRA CPU driver it must be 'none': the "
            "static CPU manager and the driver would both write the containers' cpusets"
        )
        return
    expected = profile.get("kubelet.cpu_manager_policy")
    assert s.value == expected, f"cpuManagerPolicy is {s.value!r} ({s.source}); expected {expected!r}"


@check(
    "KUBELET-CPU-FULL-PCPUS",
    "high",
    title="CPU manager hands out whole physical cores (full-pcpus-only)",
    rationale="""Without full-pcpus-only a pinned container can get one SMT thread of a core whose sibling
    runs another workload, sharing caches and execution units.""",
    remediation='Set cpuManagerPolicyOptions: {"full-pcpus-only": "true"} in the KubeletConfiguration.',
    source=CONFIG_SOURCE,
)
def test_cpu_full_pcpus_only(node, kubelet_config, profile, evidence):
    if not profile.get("kubelet.require_full_pcpus_only"):
        pytest.skip(f"profile {profile.name} does not require full-pcpus-only")
    s = kubelet_config.get("cpuManagerPolicyOptions")
    evidence.from_setting(s)
    opts = s.value if isinstance(s.value, dict) else {}
    value = opts.get("full-pcpus-only")
    # cpuManagerPolicyOptions is map[string]string (staging/src/k8s.io/kubelet/config/v1beta1/types.go):
    # the kubelet's strict decoder rejects a YAML/JSON boolean there, and the file does not load at all.
    assert not (value is not None and not isinstance(value, str)), (
        f"cpuManagerPolicyOptions full-pcpus-only is the unquoted {type(value).__name__} {json.dumps(value)} ({s.source}): "
        'the option map holds strings, so the kubelet cannot decode this config and does not start; write "true" (quoted)'
    )
    # pkg/kubelet/cm/cpumanager/policy_options.go: the value goes through Go's strconv.ParseBool.
    parsed = go_parse_bool(value) if value is not None else None
    assert value is None or parsed is not None, (
        f'cpuManagerPolicyOptions full-pcpus-only is "{value}" ({s.source}): not a value Go\'s strconv.ParseBool accepts, '
        'so the kubelet refuses to start ("bad value for option"); use "true"'
    )
    assert parsed is True, f"cpuManagerPolicyOptions has no full-pcpus-only set to true (found {opts or 'none'}, {s.source})"
    evidence.add(f'full-pcpus-only "{value}" parses as true (Go strconv.ParseBool, as the kubelet reads it)')


@check(
    "KUBELET-CPU-RECONCILE",
    "low",
    title="CPU manager reconcile period is short",
    rationale="""The reconcile loop removes newly exclusive CPUs from shared-pool containers; a longer
    period is a longer window of noisy neighbours on freshly pinned cores.""",
    remediation="Set cpuManagerReconcilePeriod to 10s or less (or allow more in the profile).",
    source=CONFIG_SOURCE,
)
def test_cpu_reconcile_period(node, kubelet_config, profile, evidence):
    s = kubelet_config.get("cpuManagerReconcilePeriod")
    evidence.from_setting(s)
    limit_text = profile.get("kubelet.max_cpu_manager_reconcile_period")
    try:
        seconds = parse_duration(s.value, what="cpuManagerReconcilePeriod")
    except ParseError as e:
        raise FactUnavailable(f"{e} ({s.source})") from None
    limit = parse_duration(limit_text)
    assert seconds <= limit, f"cpuManagerReconcilePeriod is {s.value} ({s.source}); at most {limit_text} expected"


@check(
    "KUBELET-TOPOLOGY-POLICY",
    "critical",
    title="Topology manager aligns CPUs, memory and GPUs on one NUMA node",
    rationale="""Without an aligning topology policy the kubelet may give a pod CPUs on one socket and a GPU
    on the other: every host-to-device copy crosses the socket link and bandwidth roughly halves.""",
    remediation="Set topologyManagerPolicy: single-numa-node in the KubeletConfiguration and restart the kubelet. "
    "On a machine with more than 8 NUMA nodes (Grace: GH200 9, GB200 34, CPU-less HBM and empty nodes included) "
    "also set topologyManagerPolicyOptions max-allowable-numa-nodes to the node count, and run kubelet 1.36+ where "
    "it exceeds 16.",
    source=CONFIG_SOURCE,
)
def test_topology_manager_policy(node, kubelet_config, facts, profile, evidence):
    s = kubelet_config.get("topologyManagerPolicy")
    evidence.from_setting(s)
    allowed = profile.get("kubelet.topology_manager_policies")
    assert s.value in allowed, f"topologyManagerPolicy is {s.value!r} ({s.source}); expected one of {allowed}"
    # more NUMA nodes than the policy allows stop the kubelet (Grace machines: conformance.checks.numa_rules)
    if s.value == "none":
        return
    options = kubelet_config.get("topologyManagerPolicyOptions").value
    release = kubelet_span(facts, evidence)
    try:
        try:
            nodes = sorted(facts.topology.nodes)
        except FactUnavailable:
            # a kubelet that answers configz has started: past the Topology Manager's NUMA node limit (numa_rules)
            live = live_kubelet_within_limit(str(s.value), options, release) if s.source.startswith(CONFIGZ) else None
            if live is None:
                raise
            evidence.add(*live)
            return
        problems, lines = numa_limit_problems(str(s.value), options, nodes, release)
    except ParseError as e:
        raise FactUnavailable(str(e)) from None
    evidence.add(*lines)
    assert not problems, "; ".join(problems)


@check(
    "KUBELET-TOPOLOGY-SCOPE",
    "low",
    title="Topology manager scope is the profile's",
    rationale="""The scope decides whether alignment is per container or for the whole pod; a pod of several
    GPU containers needs the scope its workload was planned for.""",
    remediation="Set topologyManagerScope (container or pod) to the profile's value.",
    source=CONFIG_SOURCE,
)
def test_topology_manager_scope(node, kubelet_config, profile, evidence):
    s = kubelet_config.get("topologyManagerScope")
    evidence.from_setting(s)
    expected = profile.get("kubelet.topology_manager_scope")
    assert s.value == expected, f"topologyManagerScope is {s.value!r} ({s.source}); expected {expected!r}"


@check(
    "KUBELET-MEMORY-POLICY",
    "high",
    title="Memory manager policy is Static",
    rationale="""The Static memory manager pins a Guaranteed pod's memory to the NUMA node of its CPUs and
    GPU; otherwise pages land anywhere and copies cross the socket link.""",
    remediation="Set memoryManagerPolicy: Static (capital S) and reservedMemory for every NUMA node; "
    "remove /var/lib/kubelet/memory_manager_state and restart the kubelet.",
    source=CONFIG_SOURCE,
)
def test_memory_manager_policy(node, kubelet_config, profile, evidence):
    s = kubelet_config.get("memoryManagerPolicy")
    evidence.from_setting(s)
    expected = profile.get("kubelet.memory_manager_policy")
    assert s.value == expected, f"memoryManagerPolicy is {s.value!r} ({s.source}); expected {expected!r}"


@check(
    "KUBELET-RESERVED-MEMORY",
    "medium",
    title="reservedMemory covers every NUMA node and adds up as the kubelet requires",
    rationale="""The Static memory manager needs a memory reservation per NUMA node with CPUs; a node missing
    from reservedMemory leaves system daemons competing with pinned pods for that node's memory. With the
    Static policy the kubelet also refuses to start unless, for memory and each hugepages size, the sum
    over NUMA nodes equals kubeReserved + systemReserved + the hard eviction threshold. An entry on a node
    without CPUs (a Grace GPU's HBM, an empty node) reserves none of the memory the system's daemons use and
    takes its amount from the CPU nodes' share of that sum (conformance/checks/memory_placement.py).""",
    remediation="Add a reservedMemory entry ({numaNode: N, limits: {memory: ...}}) for every NUMA node with CPUs, "
    "and make the memory limits add up to kubeReserved.memory + systemReserved.memory + evictionHard "
    "memory.available (default 100Mi); likewise each hugepages-<size>.",
    source=CONFIG_SOURCE + "; /sys/devices/system/node",
)
def test_reserved_memory(node, kubelet_config, topology, evidence):
    s = kubelet_config.get("reservedMemory")
    evidence.from_setting(s)
    entries = s.value if isinstance(s.value, list) else []
    with_memory = {e.get("numaNode") for e in entries if isinstance(e, dict) and "memory" in (e.get("limits") or {})}
    numa = topology.cpu_nodes
    evidence.add(
        f"NUMA nodes with CPUs: {numa}"
        + (f"; without CPUs (not required): {topology.cpuless_nodes}" if topology.cpuless_nodes else "")
    )
    problems: list[str] = []
    unknowns: list[str] = []
    missing = [n for n in numa if n not in with_memory]
    if missing:
        problems.append(f"reservedMemory has no memory entry for NUMA node(s) {missing} ({s.source})")
    off_cpu = reserved_off_cpu_nodes(with_memory, topology.cpuless_nodes)
    if off_cpu:  # Grace: the HBM nodes (conformance/checks/memory_placement.py)
        problems.append(f"{off_cpu} ({s.source})")
    unknown = sorted({e.get("numaNode") for e in entries if isinstance(e, dict)} - set(topology.nodes), key=str)
    if unknown:  # memory_manager.go getTotalMemoryTypeReserved: the kubelet refuses such an entry
        problems.append(f"reservedMemory names NUMA node(s) {unknown} that this machine does not have; the kubelet refuses it")
    policy = kubelet_config.get("memoryManagerPolicy")
    if policy.value == "Static":
        kube, system = kubelet_config.get("kubeReserved"), kubelet_config.get("systemReserved")
        hard, merge = kubelet_config.get("evictionHard"), kubelet_config.get("mergeDefaultEvictionSettings")
        try:
            eviction, how = hard_eviction_memory(hard.value, merge.value)
            sums = memory_sums(entries, kube.value or {}, system.value or {}, eviction)
        except ParseError as e:  # the sum rule is unknown; the entries are still judged
            unknowns.append(f"the sum rule: {e} ({s.source})")
            sums, how = [], "not read"
        evidence.add(kube.describe(), system.describe(), f"hard eviction: {how} ({hard.source})")
        for m in sums:
            evidence.add(
                f"{m.resource}: reservedMemory sum {format_bytes(m.reserved_memory)}, kubeReserved + systemReserved"
                f"{' + eviction' if m.resource == 'memory' else ''} {format_bytes(m.node_allocatable)}"
            )
            if not m.equal:
                problems.append(
                    f"{m.resource}: reservedMemory adds up to {format_bytes(m.reserved_memory)} but kubeReserved + systemReserved"
                    f"{' + hard eviction' if m.resource == 'memory' else ''} is {format_bytes(m.node_allocatable)}; with "
                    "memoryManagerPolicy Static the kubelet refuses to start until they are equal"
                )
    else:
        evidence.add(f"sum rule not applied: {policy.describe()} (the kubelet checks it only with Static)")
    conclude(problems, unknowns)


@check(
    "KUBELET-RESERVED-CPUS",
    "medium",
    title="At least two whole physical cores kept out of exclusive allocation",
    rationale="""The static CPU manager never hands reserved CPUs to a container exclusively, so the kubelet,
    the runtime and system daemons have somewhere to run that is not a pinned pod's core. Without the
    strict-cpu-reservation option the reserved CPUs stay in the shared pool (Burstable and BestEffort pods
    run there too), and reserving CPUs does not keep daemons or interrupts off the other CPUs
    (NODE-SYSTEM-CPUS-ISOLATED judges that). Fractional kubeReserved + systemReserved CPU is rounded up to
    whole CPUs by the CPU manager.""",
    remediation="Set reservedSystemCPUs to whole cores (all SMT siblings), e.g. the first two cores and their "
    "siblings, or kubeReserved.cpu + systemReserved.cpu of at least 2 x threads per core.",
    source=CONFIG_SOURCE + "; /sys/devices/system/cpu/*/topology",
)
def test_reserved_cpus(node, kubelet_config, topology, profile, evidence):
    need = profile.get("kubelet.min_reserved_physical_cores")
    tpc = topology.threads_per_core
    explicit = kubelet_config.get("reservedSystemCPUs")
    if explicit.value:
        evidence.from_setting(explicit)
        try:
            cpus = parse_cpulist(str(explicit.value), what="reservedSystemCPUs")
        except ParseError as e:
            raise FactUnavailable(f"{e} ({explicit.source})") from None
        cores = topology.whole_cores(cpus)
        evidence.add(f"whole cores in it: {[format_cpulist(c) for c in cores]} ({tpc} threads per core)")
        offline = cpus - topology.online
        problems = []
        if offline:  # the kubelet reserves what the node does not have: nothing runs there
            problems.append(f"reservedSystemCPUs names CPU(s) {format_cpulist(offline)} that are not online "
                            f"(online: {format_cpulist(topology.online)})")  # fmt: skip
        if len(cores) < need:
            problems.append(
                f"reservedSystemCPUs {explicit.value!r} holds {len(cores)} whole physical core(s) of online CPUs; "
                f"at least {need} expected ({explicit.source})"
            )
        assert not problems, "; ".join(problems)
        return
    kube = kubelet_config.get("kubeReserved")
    system = kubelet_config.get("systemReserved")
    evidence.source = f"kubeReserved: {kube.source}; systemReserved: {system.source}"
    evidence.add(explicit.describe(), kube.describe(), system.describe())
    try:
        total, whole = reserved_cpu_total(kube.value, system.value)
    except ParseError as e:
        raise FactUnavailable(f"{e} (kubeReserved: {kube.source}; systemReserved: {system.source})") from None
    # pkg/kubelet/cm/cpumanager/cpu_manager.go NewManager: math.Ceil of the millicores / 1000.
    total_text = format(total.normalize(), "f")
    evidence.add(f"kubeReserved.cpu + systemReserved.cpu = {total_text} CPU(s), rounded up by the CPU manager to {whole}")
    want = need * tpc
    assert whole >= want, (
        f"reservedSystemCPUs is not set, and kubeReserved.cpu + systemReserved.cpu = {total_text} CPU(s) "
        f"(kubeReserved: {kube.source}; systemReserved: {system.source}), which the CPU manager rounds up to "
        f"{whole} whole CPU(s); at least {want} expected ({need} cores x {tpc} threads per core)"
    )


@check(
    "KUBELET-CGROUP-DRIVER",
    "critical",
    title="The kubelet's effective cgroup driver is systemd",
    rationale="""With cgroupfs under systemd two managers own the cgroup tree and CPU and memory limits drift
    under pressure. Since Kubernetes 1.31 the kubelet takes the driver from the runtime
    (KubeletCgroupDriverFromCRI), so the pod cgroup tree is the reliable witness.""",
    remediation="Use cgroupDriver: systemd in the kubelet and SystemdCgroup = true (containerd) or "
    'cgroup_manager = "systemd" (CRI-O) in the runtime, then restart both.',
    source="/sys/fs/cgroup/kubepods.slice or kubepods; else kubelet config cgroupDriver",
)
def test_cgroup_driver(node, kubelet_cgroup_driver, facts, evidence):
    driver, source, how = kubelet_cgroup_driver
    evidence.source = source
    evidence.add(how)
    assert driver == "systemd", f"the kubelet's effective cgroup driver is {driver} ({how}); systemd expected"
    # the runtime must answer the kubelet's RuntimeConfig call (KEP-4033) for the kubelet of now and of next
    kubelet = kubelet_span(facts, evidence)
    try:
        runtime, _ = facts.runtime_name
    except FactUnavailable as e:
        # which runtime answers the kubelet's RuntimeConfig call is unknown: only a kubelet that still falls back to
        # its own cgroupDriver, now and at its next minor release, makes that not matter
        if kubelet.at_least((FALLBACK_REMOVED[0], FALLBACK_REMOVED[1] - 1, 0)) is False:
            evidence.add(f"container runtime not known ({e}); kubelet {kubelet} falls back to its own cgroupDriver")
            return
        raise FactUnavailable(f"whether the container runtime answers the kubelet's RuntimeConfig call: {e}") from None
    problem, unknown, line = runtime_config_support(kubelet, runtime, runtime_span(facts, evidence))
    if line:
        evidence.add(line)
    assert problem is None, problem
    if unknown:
        raise FactUnavailable(unknown)


@check(
    "KUBELET-CGROUPS-PER-QOS",
    "high",
    title="QoS cgroup hierarchy is enabled",
    rationale="""Without cgroupsPerQOS the kubelet builds no Guaranteed/Burstable/BestEffort hierarchy and
    cannot enforce node allocatable, which the CPU and memory managers rely on.""",
    remediation="Remove cgroupsPerQOS: false (or --cgroups-per-qos=false); the default is true.",
    source=CONFIG_SOURCE,
)
def test_cgroups_per_qos(node, kubelet_config, evidence):
    s = kubelet_config.get("cgroupsPerQOS")
    evidence.from_setting(s)
    assert s.value is True, f"cgroupsPerQOS is {s.value!r} ({s.source}); true expected"


def _static_start_rules(st, kubelet_config, facts, evidence) -> list[str]:
    """What the static policy checks of its checkpoint when the kubelet starts, and refuses to start on
    (pkg/kubelet/cm/cpumanager/policy_static.go validateState): a default set that is empty while CPUs are
    assigned; reserved CPUs missing from the default set (with strict-cpu-reservation: present in it); and the
    default set with every assignment not being exactly the CPUs there are (the online ones; without the
    reserved ones under strict-cpu-reservation). A rule whose input is not known here is said, not judged."""
    problems: list[str] = []
    assigned = frozenset(c for entries in st.entries.values() for cpus in entries.values() for c in cpus)
    if not st.default_cpus:
        if assigned:
            problems.append("defaultCpuSet is empty while CPUs are assigned: the kubelet refuses to start on this checkpoint")
        return problems
    options = kubelet_config.get("cpuManagerPolicyOptions").value or {}
    strict = str(options.get("strict-cpu-reservation", "false")).lower() == "true"
    setting = kubelet_config.get("reservedSystemCPUs")
    reserved = None
    if setting.value:
        try:
            reserved = parse_cpulist(str(setting.value), what="reservedSystemCPUs")
        except ParseError as e:
            raise FactUnavailable(f"{e} ({setting.source})") from None
    else:
        evidence.add("reserved CPUs: picked by the kubelet from kubeReserved + systemReserved (not known here): "
                     "their place in defaultCpuSet is not judged")  # fmt: skip
    if reserved is not None:
        if strict and reserved & st.default_cpus:
            problems.append(f"strictly reserved CPUs {format_cpulist(reserved & st.default_cpus)} are in defaultCpuSet "
                            f"{format_cpulist(st.default_cpus)}: the kubelet refuses to start on this checkpoint")  # fmt: skip
        elif not strict and not reserved <= st.default_cpus:
            problems.append(f"reserved CPUs {format_cpulist(reserved - st.default_cpus)} are not in defaultCpuSet "
                            f"{format_cpulist(st.default_cpus)}: the kubelet refuses to start on this checkpoint")  # fmt: skip
    if strict and reserved is None:
        return problems
    online = facts.topology.online
    want = online - reserved if strict and reserved is not None else online
    known = st.default_cpus | assigned
    evidence.add(f"CPUs in the checkpoint {format_cpulist(known)}; CPUs the kubelet has {format_cpulist(want)} (online"
                 f"{', less the strictly reserved' if strict else ''})")  # fmt: skip
    if known != want:
        problems.append(
            f"the checkpoint's CPUs {format_cpulist(known)} are not the CPUs the node has {format_cpulist(want)}: the kubelet "
            "refuses to start on this checkpoint (CPUs went offline or online since it was written)"
        )
    return problems


@check(
    "KUBELET-CPU-STATE",
    "high",
    title="cpu_manager_state agrees with the policy and exclusive sets do not overlap",
    rationale="""The checkpoint is what the kubelet enforces. A policy that differs from the config means the
    kubelet was not restarted cleanly; overlapping exclusive sets mean two pods share 'exclusive' CPUs.""",
    remediation="Drain the node, stop the kubelet, remove /var/lib/kubelet/cpu_manager_state, start the "
    "kubelet; investigate any pod whose CPUs overlap another's.",
    source="<kubelet root dir>/cpu_manager_state; the kubelet's reservedSystemCPUs; /sys/devices/system/cpu/online",
)
def test_cpu_manager_state(node, cpu_manager_state, kubelet_config, facts, evidence):
    st = cpu_manager_state
    policy = kubelet_config.get("cpuManagerPolicy")
    evidence.source = "cpu_manager_state"
    evidence.add(
        f"policyName {st.policy!r}, defaultCpuSet {format_cpulist(st.default_cpus)!r}, "
        f"{sum(len(c) for c in st.entries.values())} exclusive assignment(s), format V{st.version}"
    )
    problems: list[str] = []
    if st.policy != policy.value:
        problems.append(f"policyName is {st.policy!r} but the effective cpuManagerPolicy is {policy.value!r} ({policy.source})")
    owner: dict[int, tuple[str, str]] = {}
    for pod, containers in sorted(st.entries.items()):
        pod_cpus: set[int] = set()
        for name, cpus in sorted(containers.items()):
            evidence.add(f"  {pod}/{name or '(V1 entry)'}: {format_cpulist(cpus)}")
            shared = cpus & st.default_cpus
            if shared:
                problems.append(f"{pod}/{name}: CPUs {format_cpulist(shared)} are also in defaultCpuSet")
            pod_cpus |= cpus
        # Within a pod, app containers may reuse CPUs of its init containers; the pod spec (not
        # visible from the node) tells which are init containers, so only pods are compared here.
        if st.version == 1:
            continue  # V1 keys entries by container id: pods cannot be told apart, so no cross-check.
        for cpu in sorted(pod_cpus):
            if cpu in owner and owner[cpu][0] != pod:
                problems.append(f"cpu{cpu} is exclusive to pod {owner[cpu][0]} and to pod {pod}")
            owner.setdefault(cpu, (pod, ""))
    if st.version == 1:
        evidence.add("V1 checkpoint: entries are keyed by container id, overlap between pods not judged")
    if st.policy == "static":
        problems += _static_start_rules(st, kubelet_config, facts, evidence)
    assert not problems, "; ".join(problems[:10]) + (f" (+{len(problems) - 10} more)" if len(problems) > 10 else "")


@check(
    "KUBELET-ALLOWED-UNSAFE-SYSCTLS",
    "low",
    title="The kubelet admits the pod sysctls the profile wants pods to set",
    rationale="""Pods get network sysctls only by setting them (their network namespace starts from kernel
    defaults). net.ipv4.tcp_tw_reuse and net.core.somaxconn are not in the kubelet's safe set
    (pkg/kubelet/sysctl/safe_sysctls.go): unless allowedUnsafeSysctls lists them (exact names or patterns
    ending in *), the kubelet rejects such a pod at admission with SysctlForbidden.""",
    remediation="Add them to the KubeletConfiguration, e.g. allowedUnsafeSysctls: [net.ipv4.tcp_tw_reuse, "
    "net.core.somaxconn] (or --allowed-unsafe-sysctls), and restart the kubelet; or set pods.sysctls_set_by: cni "
    "in the profile when a CNI tuning plugin sets them instead.",
    source=CONFIG_SOURCE,
)
def test_allowed_unsafe_sysctls(node, facts, kubelet_config, profile, evidence):
    if profile.get("pods.sysctls_set_by") != "pod":
        pytest.skip(f"the profile says pod sysctls come from {profile.get('pods.sysctls_set_by')!r}, not from the pods' specs")
    s = kubelet_config.get("allowedUnsafeSysctls")
    evidence.from_setting(s)
    allowed = [str(x) for x in (s.value or [])]
    missing, unknown = [], []
    for name, (since, kernel) in POD_SYSCTLS.items():
        entry = allowlisted(name, allowed)
        if entry:
            evidence.add(f"{name}: allowed by {entry!r}")
            continue
        if since is None:
            missing.append(name)
            continue
        if since == "1.0" and kernel is None:
            evidence.add(f"{name}: in the kubelet's safe set")
            continue
        kubelet = kubelet_span(facts, evidence)
        try:
            kern_ok = True if kernel is None else at_least(facts.kernel_release, kernel)
            kern_text = "" if kernel is None else ", kernel " + ".".join(map(str, facts.kernel_release))
        except FactUnavailable as e:
            kern_ok, kern_text = None, f", kernel unknown ({e})"
        # judged under every release the kubelet may be: unknown only where they disagree
        new_enough = kubelet.at_least(since)
        have = f"{known_as(facts)}{kern_text}"
        if new_enough is True and kern_ok is True:
            evidence.add(f"{name}: in the kubelet's safe set from Kubernetes {since} (kernel {kernel}+): {have}")
        elif new_enough is False or kern_ok is False:
            missing.append(f"{name} (safe only from Kubernetes {since} on kernel {kernel}+; {have})")
        else:
            unknown.append(f"{name} is safe only from Kubernetes {since} (kernel {kernel}+), and {have}: the release decides")
    assert not missing, f"allowedUnsafeSysctls ({s.source}) does not admit {', '.join(missing)}: pods setting them are rejected"
    if unknown:
        raise FactUnavailable("; ".join(unknown))


MANAGED_HINT = "; a write that fails with EIO marks a kernel-managed IRQ, which only isolcpus=managed_irq,<CPUs> moves"


@check(
    "NODE-SYSTEM-CPUS-ISOLATED",
    "medium",
    title="System services and device interrupts stay off the CPUs pods get exclusively",
    rationale="""Reserving CPUs keeps the CPU manager from handing them out; it does not keep systemd
    services or interrupts off the others. Without a system.slice cpuset or systemd CPUAffinity= the
    node's daemons run anywhere, and an IRQ whose affinity includes a pinned CPU interrupts the pod
    there: the jitter exclusive CPUs were meant to remove. The tuning guidance this suite follows keeps
    2-4 cores for system components and steers daemons and interrupts onto them.""",
    remediation="Confine system services to the reserved CPUs (CPUAffinity= in /etc/systemd/system.conf.d/, then "
    "systemctl daemon-reload and a restart of running services, or AllowedCPUs= on system.slice) and interrupts too "
    "(irqbalance's IRQBALANCE_BANNED_CPULIST set to the exclusive CPUs, or /proc/irq/<N>/smp_affinity_list). "
    "Kernel-managed interrupts (NVMe I/O queues) refuse those writes: the kernel parameter "
    "isolcpus=managed_irq,<exclusive CPUs> keeps them off. With cpuManagerPolicyOptions strict-cpu-reservation the "
    "kubelet also keeps pods without exclusive CPUs off the reserved ones.",
    source="/proc/1/status Cpus_allowed_list, systemd-system.conf(5) files and drop-ins, "
    "/sys/fs/cgroup/system.slice/cpuset.cpus.effective, /proc/irq/*/effective_affinity_list (else smp_affinity_list), "
    "/sys/kernel/debug/irq/irqs (managed IRQs), /proc/cmdline; the kubelet's reservedSystemCPUs and cpu_manager_state",
)
def test_system_cpus_isolated(node, facts, kubelet_config, topology, evidence):
    policy = kubelet_config.get("cpuManagerPolicy")
    if policy.value != "static":
        pytest.skip(f"no exclusive CPUs to keep free: cpuManagerPolicy is {policy.value!r} ({policy.source})")
    reserved = kubelet_config.get("reservedSystemCPUs")
    if reserved.value:
        exclusive = topology.online - parse_cpulist(str(reserved.value), what="reservedSystemCPUs")
        evidence.add(f"exclusive pool: online CPUs minus reservedSystemCPUs {reserved.value} ({reserved.source})")
    else:
        state = facts.cpu_manager_state
        exclusive = frozenset().union(*(c for e in state.entries.values() for c in e.values()))
        evidence.add("reservedSystemCPUs not set: the exclusive pool is not fixed; judged on the CPUs assigned now")
    evidence.source = "PID 1, systemd CPUAffinity=, system.slice cpuset, /proc/irq"
    options = kubelet_config.get("cpuManagerPolicyOptions").value or {}
    evidence.add(
        f"exclusive CPUs: {format_cpulist(exclusive) or '(none)'}",
        f"strict-cpu-reservation: {options.get('strict-cpu-reservation', 'not set')}",
    )
    if not exclusive:
        pytest.skip("no CPU is handed out exclusively on this node now")
    sc = facts.system_cpus
    problems, unknown = [], ""
    configured = (
        f"CPUAffinity= {format_cpulist(sc.affinity)} ({sc.affinity_source})"
        if sc.affinity is not None
        else (f"no CPUAffinity= ({sc.affinity_source})" if sc.affinity_source else "no CPUAffinity= in systemd's files")
    )
    evidence.add(f"systemd configuration: {configured}")
    if sc.pid1 is not None:
        name, mask = sc.pid1
        services, how = mask, f"PID 1 ({name}) runs on {format_cpulist(mask)} (/proc/1/status), and services inherit it"
        if sc.affinity is not None and sc.affinity != mask:
            evidence.add(
                f"PID 1 does not run with the configured CPUAffinity= {format_cpulist(sc.affinity)}: systemd applies it at "
                "boot and on daemon-reload; services started before keep their old CPUs until restarted"
            )
    else:
        services, how = sc.affinity or topology.online, "configuration only"
        unknown = "PID 1's CPUs (/proc/1/status) are not visible here, so where services really run is unknown"
    if sc.slice_cpus is not None:
        services, how = services & sc.slice_cpus, how + f"; system.slice cpuset {format_cpulist(sc.slice_cpus)}"
    evidence.add(f"system services may run on {format_cpulist(services)} ({how})")
    if services & exclusive and not unknown:
        problems.append(f"system services may run on exclusive CPUs {format_cpulist(services & exclusive)} ({how})")
    device_irqs = {n: irq for n, irq in sorted(sc.irqs.items()) if irq.handlers}  # no handler: delivers nothing
    evidence.add(
        f"{len(device_irqs)} IRQ(s) with a device handler, of {len(sc.irqs)}; judged on "
        + ("effective_affinity_list" if any(i.effective for i in device_irqs.values()) else "smp_affinity_list")
        + f"; kernel-managed IRQs told by {sc.managed_source}"
    )

    # A movable IRQ is judged on its configured mask too: the effective target is one CPU the kernel picked from
    # smp_affinity_list, and it may pick an exclusive one at the next migration or CPU hotplug event
    # (Documentation/core-api/irq/irq-affinity.rst). Kernel-managed IRQs are judged where they are delivered.
    def reach(i) -> frozenset[int]:
        return i.cpus if i.managed else i.cpus | i.configured

    on_exclusive = {n: irq for n, irq in device_irqs.items() if reach(irq) & exclusive}

    def listed(irqs: dict) -> str:
        shown = []
        for n, i in list(irqs.items())[:10]:
            where = f"{format_cpulist(i.cpus & exclusive)}" if i.cpus & exclusive else "none now"
            mask = f", smp_affinity_list {format_cpulist(i.configured)}" if not i.managed and i.configured & exclusive else ""
            shown.append(f"{n} ({', '.join(i.handlers)}) -> {where}{mask}")
        return "; ".join(shown) + (f" and {len(irqs) - 10} more" if len(irqs) > 10 else "")

    movable = {n: i for n, i in on_exclusive.items() if not i.managed}
    managed = {n: i for n, i in on_exclusive.items() if i.managed}
    if movable:
        problems.append(
            f"IRQs may be delivered to exclusive CPUs: {listed(movable)} (move them: irqbalance's IRQBALANCE_BANNED_CPULIST, "
            "or /proc/irq/<N>/smp_affinity_list"
            + (
                ""
                if any(i.managed is False for i in movable.values())
                else "; a write that fails with EIO marks a kernel-managed IRQ, which only isolcpus=managed_irq,<CPUs> moves"
            )
            + ")"
        )
    if managed:
        isolated = sc.isolated_managed
        cpus = frozenset().union(*(i.cpus & exclusive for i in managed.values()))
        if isolated is not None and cpus <= isolated:
            evidence.add(
                f"kernel-managed IRQs stay on exclusive CPUs {format_cpulist(cpus)} although isolcpus=managed_irq covers "
                f"them: their masks hold no other online CPU, which nothing outside the driver changes ({listed(managed)})"
            )
        elif isolated is None:
            unknown = (
                unknown or "the kernel command line (/proc/cmdline) was not read: whether isolcpus=managed_irq is set is unknown"
            )
            evidence.add(f"kernel-managed IRQs on exclusive CPUs: {listed(managed)}")
        else:
            problems.append(
                f"kernel-managed IRQs are delivered to exclusive CPUs: {listed(managed)}. The kernel sets their affinity and "
                f"refuses writes to /proc/irq; only the kernel parameter isolcpus=managed_irq,{format_cpulist(exclusive)} "
                "(and a reboot) keeps them off those CPUs"
            )
    assert not problems, "; ".join(problems)
    if unknown:
        raise FactUnavailable(unknown)
    evidence.add("verified: services and device interrupts stay on the reserved CPUs")
