"""cgroup version and the container runtime's cgroup driver."""

from __future__ import annotations

from conformance.checks import check
from conformance.checks.runtime_rules import across_releases, handler_problems, judged_handlers
from conformance.errors import FactUnavailable
from conformance.facts.kernel import cgroup_fs_name


@check(
    "NODE-CGROUP-V2",
    "critical",
    title="/sys/fs/cgroup is cgroup v2",
    rationale="""cgroup v2 gives one unified hierarchy for CPU, memory and I/O, which the memory manager,
    memory QoS and current kubelets expect; Kubernetes 1.31+ puts cgroup v1 in maintenance mode.""",
    remediation="Boot with systemd.unified_cgroup_hierarchy=1 (or a distribution that defaults to cgroup v2).",
    source="stat -fc %t /sys/fs/cgroup (the filesystem magic)",
)
def test_cgroup_v2(node, cgroup_version, facts, evidence):
    evidence.source = "stat -fc %t /sys/fs/cgroup (the filesystem magic, as runc's IsCgroup2UnifiedMode reads it)"
    evidence.add(f"/sys/fs/cgroup: {cgroup_fs_name(facts.bundle.command('stat-cgroup').data.decode(errors='replace'))}")
    assert cgroup_version == 2, "/sys/fs/cgroup is cgroup v1 (tmpfs); cgroup v2 (cgroup2fs, magic 0x63677270) expected"


@check(
    "RUNTIME-SYSTEMD-CGROUP",
    "critical",
    title="Container runtime uses the systemd cgroup driver, consistent with the kubelet",
    rationale="""Every runtime handler that GPU pods use must create cgroups through systemd, as the kubelet
    does; a runtime on cgroupfs under a systemd kubelet makes two owners of one cgroup tree.""",
    remediation="containerd: SystemdCgroup = true under runtimes.<handler>.options for the default handler and "
    "nvidia (check files pulled in by imports, e.g. /etc/containerd/conf.d/); CRI-O: cgroup_manager = "
    '"systemd" in [crio.runtime]. Restart the runtime.',
    source="containerd config (with imports) or CRI-O crio.conf + crio.conf.d",
)
def test_runtime_systemd_cgroup(node, runtime_config, facts, profile, evidence):
    rc = runtime_config
    runtime, why = facts.runtime_name
    evidence.source = ", ".join(rc.files) or "runtime defaults"
    evidence.add(f"runtime {runtime} ({why}); files: {', '.join(rc.files) or 'none'}; default handler {rc.default_handler!r}")
    if rc.rules:
        evidence.add(f"files merged as the running release does: {rc.rules}")
    gpu_handlers = profile.get("runtime.gpu_handlers")
    evidence.add(*(rc.handlers[n].describe() for n in judged_handlers(rc, gpu_handlers) if n in rc.handlers))
    problems: list[str] = []
    unknown: FactUnavailable | None = None
    try:
        kubelet, _, how = facts.kubelet_cgroup_driver
        evidence.add(f"kubelet effective driver: {kubelet} ({how})")
        if kubelet != "systemd":
            problems.append(f"the kubelet's effective cgroup driver is {kubelet} ({how}), not systemd")
    except FactUnavailable as e:
        unknown = FactUnavailable(f"the kubelet's effective cgroup driver is not known: {e}")
        evidence.add(f"kubelet driver not known: {e}")
    try:
        runtime_problems, per_release = across_releases(rc, lambda c: handler_problems(c, gpu_handlers))
        evidence.add(*per_release)
        problems = runtime_problems + problems
    except FactUnavailable as e:
        unknown = e if unknown is None else FactUnavailable(f"{e}; and {unknown}")
    assert not problems, "; ".join(problems)
    if unknown is not None:  # nothing failed, but part of the verdict is unknown: never a pass
        raise unknown
