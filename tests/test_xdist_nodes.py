"""The node of each test id, as the xdist controller reads it to keep a node's checks on one worker
(conformance.run.xdist_nodes): every id form plugin.pytest_generate_tests makes, and ids that name no audited node."""

from __future__ import annotations

from conformance.run.xdist_nodes import node_scope

NAMES = frozenset({"gpu-1", "gpu-2.example"})


def test_each_parameter_form_names_its_node():
    assert node_scope("suites/test_kubelet.py::test_cpu_manager[gpu-1]", NAMES) == "gpu-1"
    assert node_scope("suites/test_latency.py::test_latency_jitter[gpu-1/vllm]", NAMES) == "gpu-1"
    assert node_scope("suites/test_site.py::test_site_rule[gpu-2.example/SITE-NTP]", NAMES) == "gpu-2.example"
    assert node_scope("suites/test_pods.py::test_pod_qos[gpu-2.example/ml/trainer-0/main]", NAMES) == "gpu-2.example"


def test_an_id_without_an_audited_node_is_its_own_unit():
    for nodeid in ("suites/test_x.py::test_plain", "suites/test_x.py::test_p[other-node]", "tests/test_a.py::test_b[gpu-1"):
        assert node_scope(nodeid, NAMES) == nodeid
