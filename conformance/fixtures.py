"""Fixtures the checks ask for. A fact that cannot be obtained fails the fixture, so the check's
outcome is `error` (never `passed`), with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.checks import Evidence
from conformance.errors import FactUnavailable
from conformance.latency import Endpoint, LatencyResult
from conformance.node_facts import NodeFacts
from conformance.profile import Profile
from conformance.session import RUN_KEY


@pytest.fixture(scope="session")
def fleet(request: pytest.FixtureRequest) -> dict[str, NodeFacts]:
    """Every node's facts, collected once for the whole session (concurrently)."""
    return request.config.stash[RUN_KEY].facts()


@pytest.fixture
def facts(fleet: dict[str, NodeFacts], node: str) -> NodeFacts:
    return fleet[node]


@pytest.fixture
def profile(request: pytest.FixtureRequest, node: str) -> Profile:
    return request.config.stash[RUN_KEY].profile_for(node)


@pytest.fixture
def evidence() -> Evidence:
    return Evidence()


@pytest.fixture
def latency(request: pytest.FixtureRequest, node: str, endpoint: Endpoint | None) -> LatencyResult:
    """The endpoint's latency measurement (taken once per node and endpoint)."""
    if endpoint is None:
        pytest.skip("no endpoint configured for this node in the inventory")
    run = request.config.stash[RUN_KEY]
    if run.snapshot_dir:
        pytest.skip("latency is measured live against the endpoint; a snapshot replay does not measure it")
    try:
        return run.latency_for(node, endpoint)
    except (LookupError, OSError) as e:
        raise FactUnavailable(f"endpoint {endpoint.name} of node {node}: a header value could not be read: {e}") from None


def _fact(name: str) -> Any:
    def fixture(facts: NodeFacts) -> Any:
        return getattr(facts, name)

    fixture.__name__ = name
    fixture.__doc__ = f"NodeFacts.{name} of the node under test."
    return pytest.fixture(name=name)(fixture)


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
