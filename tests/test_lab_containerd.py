"""The collector asks the running containerd for its release, bounded in time: a binary that never
answers `--version` costs its bound, not the collection, and the files are then merged by the rules
their config version implies (the result says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.facts.node_facts import NodeFacts
from tests.conftest import require_or_skip
from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import specs

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def hung_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("hunglab")), first_subnet=238)
    spec = next(s for s in specs() if s.name == "containerd2")
    spec.name, spec.containerd = "hung-containerd", "hang"
    lab.add(spec)
    with lab.running():
        yield lab


def test_a_containerd_that_never_answers_does_not_hang_the_collection(hung_lab):
    node = hung_lab.nodes[0]
    ssh = {"user": "root", "identity_file": str(hung_lab.client_key), "known_hosts": str(hung_lab.known_hosts)}
    b = collect_node(NodeSpec(name="hung-containerd", address=node.address, ssh=ssh), timeout=120, retries=0)
    assert b.error is None and b.complete, b.error
    asked = b.optional_command("containerd-version")
    assert asked is not None and asked.status == "137"  # killed at its bound (timeout -s KILL)
    facts = NodeFacts(b)
    assert facts.containerd_release is None
    rc = facts.runtime_config
    assert rc.rules == "containerd's version unknown: modelled as 1.x from the main file's config version 2"


def test_the_release_is_read_from_the_running_binary(lab):
    node = next(n for n in lab.nodes if n.spec.name == "containerd2")
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    b = collect_node(NodeSpec(name="containerd2", address=node.address, ssh=ssh), retries=0)
    facts = NodeFacts(b)
    assert str(facts.containerd_release) == "2.0.0"
    assert facts.runtime_config.rules == "containerd 2.0.0: 2.0-2.2 merge rules"
    assert facts.runtime_config.handlers["runc"].systemd_cgroup is True
