"""Fixtures the checks ask for. A fact that cannot be obtained fails the fixture, so the check's
outcome is `error` (never `passed`), with the reason."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import pytest
import testinfra.host

from conformance.checks import Evidence
from conformance.cluster import dcgm
from conformance.cluster.api import dcgm_metrics
from conformance.cluster.dra import NodeSlices
from conformance.cluster.pods import ContainerRef, InsideFacts, PodInfo
from conformance.config.endpoints import Endpoint
from conformance.config.inventory import NodeSpec
from conformance.config.profile import Profile
from conformance.config.site_rules import SiteRule
from conformance.errors import FactUnavailable
from conformance.facts.dra_cpu import DraCpuAssignments
from conformance.facts.gpu import GpuFacts
from conformance.facts.node_facts import NodeFacts
from conformance.measurements.gpu_measure import H2DMeasurement
from conformance.measurements.latency import LatencyResult
from conformance.session import Run

# `node` (and the container, endpoint or site rule beside it) is a session-scoped parameter (see
# plugin.pytest_generate_tests), so pytest groups each node's checks together and the fixtures below are
# computed once per node (or per node and container), not once per check: pytest keeps the value while
# the parameter stays the same and recomputes it when the next check is of another node.
NODE = "session"


def run_plugin(run: Run) -> types.ModuleType:
    """The plugin that holds `gnc_run`, the run as a session fixture, which every fixture here takes.
    It takes no `request`: pytest builds a `request` fixture definition (with an inspect.signature) each
    time it resolves a fixture that takes one, and it resolves the run's fixture once for every check."""
    plugin = types.ModuleType("conformance.fixtures.run")

    @pytest.fixture(scope="session", name="gnc_run")
    def gnc_run() -> Run:
        return run

    plugin.gnc_run = gnc_run  # type: ignore[attr-defined]
    return plugin


@pytest.fixture(scope=NODE)
def facts(gnc_run: Run, node: str) -> NodeFacts:
    """The node's facts: its one collection, started in the background as the run began, or now."""
    return gnc_run.store.facts_for(node)


@pytest.fixture(scope=NODE)
def node_spec(gnc_run: Run, node: str) -> NodeSpec:
    """The node's inventory entry: address, labels, and what the Kubernetes API said of it."""
    return gnc_run.spec(node)


@pytest.fixture(scope=NODE)
def profile(gnc_run: Run, node: str) -> Profile:
    return gnc_run.profile_for(node)


@pytest.fixture  # function scope: each check its own
def evidence() -> Evidence:
    return Evidence()


@pytest.fixture(scope=NODE)
def latency(gnc_run: Run, node: str, endpoint: Endpoint | None) -> LatencyResult:
    """The endpoint's latency measurement (taken once per node and endpoint)."""
    if endpoint is None:
        pytest.skip("no endpoint configured for this node in the inventory")
    run = gnc_run
    if run.snapshot_dir:
        pytest.skip("latency is measured live against the endpoint; a snapshot replay does not measure it")
    try:
        return run.measurements.latency_for(node, endpoint)
    except (LookupError, OSError) as e:
        raise FactUnavailable(f"endpoint {endpoint.name} of node {node}: a header value could not be read: {e}") from None


@pytest.fixture(scope=NODE)
def node_gpus(facts: NodeFacts, node_spec: NodeSpec) -> GpuFacts:
    """The node's GPUs; skips a node that has none (neither NVML, the PCI bus nor the API shows one)."""
    g = facts.gpus
    if not g.gpus and not g.pci_functions and not node_spec.gpu_capacity and not any(node_spec.gpu_resources.values()):
        pytest.skip(f"no NVIDIA GPU on this node ({g.source})")
    return g


@pytest.fixture(scope=NODE)
def visible_gpus(node_gpus: GpuFacts) -> GpuFacts:
    """The GPUs the driver shows; the checks of a GPU's properties skip when it shows none (GPU-COUNT
    is the check that says so)."""
    if not node_gpus.gpus:
        pytest.skip(f"no GPU visible to {node_gpus.source}: see GPU-COUNT")
    return node_gpus


@pytest.fixture(scope=NODE)
def h2d(gnc_run: Run, node: str, node_gpus: GpuFacts) -> H2DMeasurement:
    """The node's H2D bandwidth measurement (opt-in; taken once per node, all nodes concurrently)."""
    run = gnc_run
    if run.snapshot_dir:
        pytest.skip("bandwidth is measured live on the node; a snapshot replay does not measure it")
    if not run.measurements.measuring(node):
        pytest.skip("bandwidth not measured: opt in with `conformance run --measure` or a profile with gpu.measure_bandwidth")
    m = run.measurements.h2d(node)
    if m.error:
        raise FactUnavailable(f"node {node}: {m.error}")
    if not m.gpus:
        reasons = "; ".join(f"{u}: {why}" for u, why in sorted(m.skipped.items()))
        pytest.skip(f"no GPU could be measured: {reasons}")
    return m


@dataclass
class BusyLink:
    """Link readings taken while the link was busy (during the bandwidth probe's copies), per GPU uuid.
    `measuring`: the node was to be measured, so every GPU should have one."""

    measuring: bool
    readings: dict[str, dict[str, Any]]
    why_none: str = ""


@pytest.fixture(scope=NODE)
def link_after(gnc_run: Run, node: str, visible_gpus: Any) -> BusyLink:
    """Link readings under load, per GPU uuid: what the bandwidth probe read while its copies ran, and
    for a GPU that had compute processes at collection time, its current state then. Idle links
    downshift their generation, so only these readings judge a generation."""
    loaded = {
        g.uuid: {"gen": g.pcie_gen, "width": g.pcie_width, "source": f"{len(g.processes)} compute process(es) at collection"}
        for g in visible_gpus.gpus
        if g.processes and g.pcie_gen is not None
    }
    run = gnc_run
    if run.snapshot_dir:
        return BusyLink(False, loaded, "a snapshot replay has no bandwidth run")
    if not run.measurements.measuring(node):
        return BusyLink(False, loaded, "bandwidth not measured on this node")
    try:
        m = run.measurements.h2d(node)
    except FactUnavailable as e:
        return BusyLink(True, loaded, str(e))
    probed = {
        u: {**g.nvml_busy, "source": "read while the bandwidth probe's copies ran"}
        for u, g in m.gpus.items()
        if g.nvml_busy.get("gen") is not None
    }
    return BusyLink(True, {**loaded, **probed}, "")


@pytest.fixture(scope=NODE)
def dcgm_series(gnc_run: Run, node: str, node_spec: NodeSpec) -> tuple[str, dict[str, int] | None, tuple[int | None, str]]:
    """(where, {metric: series}, (collection interval ms, its source)) of the node's dcgm-exporter: the
    inventory's URL, else the API's pod proxy; (why, None, ...) when no exporter pod runs on the node."""
    run = gnc_run
    if run.snapshot_dir:
        pytest.skip("the exporter is read live; a snapshot replay does not read it")
    if node_spec.dcgm_exporter:
        where, text = node_spec.dcgm_exporter, dcgm.fetch(node_spec.dcgm_exporter)
        interval: tuple[int | None, str] = (None, "not known: the inventory gives a metrics URL, not the exporter's pod")
    elif run.kube_api is not None and run.inventory.kubernetes is not None:
        try:
            where, text, interval = dcgm_metrics(run.kube_api, run.inventory.kubernetes, node)
        except AssertionError as e:  # no exporter pod on the node: a finding, which the check reports
            return str(e), None, (None, "no exporter pod")
    else:
        pytest.skip("no dcgm-exporter to ask: configure the Kubernetes API, or the node's dcgm_exporter URL in the inventory")
    return where, dcgm.metric_series(text), interval


@pytest.fixture(scope=NODE)
def pod(gnc_run: Run, node: str, container: ContainerRef | str | None) -> PodInfo:
    """The GPU pod under test (from the API). Skips a node with none; errors when pods could not be listed."""
    run = gnc_run
    if container is None:
        if run.snapshot_dir:
            pytest.skip("pods are read live through the Kubernetes API; a snapshot replay has none")
        if run.kube_api is None:
            pytest.skip("no Kubernetes API configured (inventory 'kubernetes:'), so no pods to check")
        pytest.skip("no GPU pods on this node")
    if isinstance(container, str):
        raise FactUnavailable(container)
    return run.pods.pod(container)


@pytest.fixture(scope=NODE)
def dra_slices(gnc_run: Run, node: str) -> NodeSlices | None:
    """The GPU devices the node's DRA ResourceSlices publish (the profile's gpu.dra_drivers); None without a
    live API (no `kubernetes:`, or a snapshot replay). Slices that could not be read make the check `error`."""
    return gnc_run.pods.slices_on(node)


@pytest.fixture(scope=NODE)
def node_gpu_pods(gnc_run: Run, node: str) -> list[PodInfo] | None:
    """The node's GPU pods as the API lists them (the pod checks' pods); None without a live API (no
    `kubernetes:`, or a snapshot replay). Pods that cannot be listed make the check `error`."""
    if gnc_run.kube_api is None or gnc_run.snapshot_dir:
        return None
    return gnc_run.pods.pods_on(node)


@pytest.fixture(scope=NODE)
def runtime_handlers(gnc_run: Run) -> dict[str, str]:
    """Every RuntimeClass of the cluster and its handler (Kubernetes API, node.k8s.io/v1)."""
    return gnc_run.pods.runtime_handlers()


@pytest.fixture(scope=NODE)
def spec_container(pod: PodInfo, container: ContainerRef) -> dict[str, Any]:
    """The container's resources as the pod spec declares them."""
    return next(c for c in pod.containers if c["name"] == container.container)


@pytest.fixture(scope=NODE)
def inside(gnc_run: Run, pod: PodInfo, container: ContainerRef) -> InsideFacts:
    """What the container sees, from one exec into it."""
    return gnc_run.pods.inside(container)


@pytest.fixture(scope=NODE)
def cpu_assignments(facts: NodeFacts, profile: Any) -> Any:
    """Who hands out the node's exclusive CPUs, and their record: the kubelet's cpu_manager_state, or with
    `pods.cpu_source: dra` the DRA CPU driver's CDI specs (conformance.facts.dra_cpu)."""
    if profile.get("pods.cpu_source") == "dra":
        return DraCpuAssignments.of(facts.dra_cpu_sets, facts.topology.online)
    return facts.cpu_manager_state


@pytest.fixture(scope=NODE)
def assignment(
    pod: PodInfo, container: ContainerRef, spec_container: dict[str, Any], cpu_assignments: Any
) -> frozenset[int] | None:
    """The container's exclusive CPUs as recorded (None: it has none): its cpu_manager_state entry, or the CPUs of
    its DRA CPU claims (None when one of them has no prepared spec)."""
    if isinstance(cpu_assignments, DraCpuAssignments):
        dra = spec_container.get("dra")
        if dra is not None and dra.error:  # a claim that could not be read may be a CPU claim: unknown, not "none"
            raise FactUnavailable(f"the container's CPU claims are unknown: {dra.error}")
        uids = list(dra.cpu_claims) if dra is not None else []
        sets = [cpu_assignments.claims.get(uid) for uid in uids]
        if not sets or any(s is None for s in sets):
            return None
        return frozenset().union(*(s for s in sets if s is not None))
    return (cpu_assignments.entries.get(pod.uid) or {}).get(container.container)


def _fact(name: str) -> Any:
    def fixture(facts: NodeFacts) -> Any:
        return getattr(facts, name)

    fixture.__name__ = name
    fixture.__doc__ = f"NodeFacts.{name} of the node under test."
    return pytest.fixture(name=name, scope=NODE)(fixture)


kubelet_args = _fact("kubelet_args")
kubelet_config = _fact("kubelet_config")
cpu_manager_state = _fact("cpu_manager_state")
memory_manager_state = _fact("memory_manager_state")
runtime_config = _fact("runtime_config")
cgroup_version = _fact("cgroup_version")
kubepods_driver = _fact("kubepods_driver")
kubelet_cgroup_driver = _fact("kubelet_cgroup_driver")
sysctls = _fact("sysctls")
topology = _fact("topology")
nvme_schedulers = _fact("nvme_schedulers")
gpus = _fact("gpus")


@pytest.fixture(scope=NODE)
def site_params(gnc_run: Run, node: str, site_rule: SiteRule) -> dict[str, Any]:
    """A declarative site rule's matcher fields, with the node's profile's thresholds laid over them."""
    return gnc_run.site.params(site_rule, node)


@pytest.fixture(scope=NODE)
def host(gnc_run: Run, node: str) -> testinfra.host.Host:
    """testinfra's host, bound to the node through the suite's own transport (SSH, OpenSSH or local) and
    credentials, for Python site checks that need a command. Each command is one more remote execution,
    counted in the node's collection record."""
    run = gnc_run
    if run.snapshot_dir:
        pytest.skip("this site check runs commands on the node; a snapshot replay cannot")
    return run.site.host_for(node)
