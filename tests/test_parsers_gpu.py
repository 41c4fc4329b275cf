"""GPU fact parsers on real `nvidia-smi topo -m` samples, an `nvidia-smi -q -x` document, NVML probe
output and sysfs attribute values; and the judging helpers."""

from __future__ import annotations

import json

import pytest

from conformance.checks.gpu_rules import expected_generation, floor_for, local_node
from conformance.config.profile import load_profile
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.checkpoints import KubeletAssignments
from conformance.facts.gpu import (
    Gpu,
    PciFunction,
    link_generation,
    normalise_bus_id,
    parse_nvml_probe,
    parse_pci_function,
    parse_smi_xml,
    parse_topo_matrix,
)
from conformance.measurements.gpu_measure import H2DRow, plan
from tests.lab.nodes import SAMPLES

GPU_PROFILE = load_profile(None).get("gpu")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("0000:9A:00.0", "0000:9a:00.0"),
        ("18:00.0", "0000:18:00.0"),
        ("1:2:3.1", "0001:02:03.1"),
    ],
)
def test_bus_ids_normalise_to_the_sysfs_form(raw, want):
    assert normalise_bus_id(raw) == want


def test_bad_bus_id():
    with pytest.raises(ParseError, match="not of the form"):
        normalise_bus_id("18:00")


@pytest.mark.parametrize(
    ("speed", "gen"), [("16.0 GT/s PCIe", 4), ("32.0 GT/s PCIe", 5), ("8 GT/s", 3), ("2.5 GT/s PCIe", 1), ("Unknown", None)]
)
def test_link_generation(speed, gen):
    assert link_generation(speed) == gen


def test_topo_matrix_with_spaces_and_legend():
    got = parse_topo_matrix((SAMPLES / "nvidia-smi_topo_m.4gpu-2socket-4nic-with-legend.spaces.stelline.txt").read_text())
    assert got[0] == (frozenset(range(32)), 0)
    assert got[3] == (frozenset(range(32, 64)), 1)
    assert sorted(got) == [0, 1, 2, 3]


def test_topo_matrix_with_tabs_partial_sample():
    got = parse_topo_matrix(
        (SAMPLES / "nvidia-smi_topo_m.8gpu-h100-nv18-2socket-10nic.tabs.nccl-issue1264.PARTIAL.txt").read_text()
    )
    assert sorted(got) == list(range(8))
    assert got[0] == (frozenset([*range(56), *range(112, 168)]), 0)
    assert got[7] == (frozenset([*range(56, 112), *range(168, 224)]), 1)


def test_topo_matrix_without_header():
    with pytest.raises(ParseError, match="no header row"):
        parse_topo_matrix("GPU0\tX\n")


def test_smi_xml():
    f = parse_smi_xml((SAMPLES / "nvidia-smi_q_x.2gpu.constructed.xml").read_text())
    assert f.source == "nvidia-smi" and f.driver == "550.90.07"
    g0, g1 = f.gpus
    assert (g0.bus_id, g0.minor, g0.pcie_gen, g0.pcie_max_gen, g0.pcie_gpu_max_gen, g0.pcie_width) == (
        "0000:18:00.0",
        0,
        1,
        5,
        5,
        16,
    )
    assert (g0.mig, g0.processes, g0.replay) == (False, [], 0)
    assert (g1.bus_id, g1.pcie_max_gen, g1.pcie_gpu_max_gen, g1.pcie_width, g1.mig, g1.processes) == (
        "0000:9a:00.0",
        4,
        5,
        8,
        True,
        [31337],
    )


def test_smi_xml_rejects_other_documents():
    with pytest.raises(ParseError, match="root element"):
        parse_smi_xml("<html/>")
    with pytest.raises(ParseError, match="not XML"):
        parse_smi_xml("<nvidia_smi_log>")


def probe_doc(**gpu):
    g = {"index": 0, "uuid": "GPU-1", "bus_id": "00000000:18:00.0", "pcie_gen": 5, "mig": [0, 0], "processes": [], **gpu}
    return json.dumps({"probe": 1, "nvml": "ok", "driver": "550", "gpus": [g], "missing_functions": []})


def test_nvml_probe_document():
    f = parse_nvml_probe(probe_doc(cpu_affinity=[0, 1], mem_affinity=[0], processes=[{"pid": 9, "used_bytes": 1}]))
    g = f.gpus[0]
    assert (g.bus_id, g.affinity_cpus, g.affinity_nodes, g.processes, g.mig) == ("0000:18:00.0", {0, 1}, {0}, [9], False)


def test_nvml_probe_failure_and_garbage():
    with pytest.raises(ParseError, match="NVML could not be used: Driver Not Loaded"):
        parse_nvml_probe(json.dumps({"probe": 1, "nvml": "Driver Not Loaded"}))
    with pytest.raises(ParseError, match="not JSON"):
        parse_nvml_probe("Traceback")
    with pytest.raises(ParseError, match="lacks a uuid"):
        parse_nvml_probe(json.dumps({"probe": 1, "nvml": "ok", "gpus": [{"index": 0}]}))


def test_pci_function_from_real_sysfs_samples():
    numa = (SAMPLES / "sysfs.pci.0000-a2-00.0.numa_node.prometheus-procfs.txt").read_text()
    cpus = (SAMPLES / "sysfs.pci.0000-a2-00.0.local_cpulist.prometheus-procfs.txt").read_text()
    f = parse_pci_function("0000:a2:00.0", {"numa_node": numa, "local_cpulist": cpus, "current_link_speed": "32.0 GT/s PCIe"})
    assert (f.numa_node, f.local_cpus, f.link_gen) == (1, frozenset(range(64, 128)), 5)
    unknown = (SAMPLES / "sysfs.pci.0000-01-00.0.numa_node.unknown-minus1.prometheus-procfs.txt").read_text()
    assert parse_pci_function("0000:01:00.0", {"numa_node": unknown}).numa_node is None


def test_expected_generation_and_floor():
    g = Gpu(0, "GPU-1", "0000:18:00.0", pcie_max_gen=4, pcie_gpu_max_gen=5)
    assert expected_generation(g, GPU_PROFILE)[0] == 5
    assert expected_generation(g, {**GPU_PROFILE, "pcie_generation": 4}) == (4, "profile gpu.pcie_generation")
    old = Gpu(0, "GPU-1", "0000:18:00.0", pcie_max_gen=4)
    assert "not reported by this driver" in expected_generation(old, GPU_PROFILE)[1]
    assert [floor_for(n, GPU_PROFILE) for n in (3, 4, 5, 2)] == [10, 21, 48, None]


def test_local_node_prefers_sysfs_then_nvml():
    g = Gpu(0, "GPU-1", "0000:18:00.0", affinity_nodes=frozenset({1}), pci=PciFunction("0000:18:00.0", numa_node=0))
    assert local_node(g) == 0
    g.pci = PciFunction("0000:18:00.0", numa_node=None)
    assert local_node(g) == 1
    g.affinity_nodes = None
    with pytest.raises(FactUnavailable, match="NUMA node is unknown"):
        local_node(g)


def test_busy_and_mig_gpus_are_not_measured():
    f = parse_nvml_probe(probe_doc(processes=[{"pid": 4242}]))
    f.gpus.append(Gpu(1, "GPU-2", "0000:9a:00.0", mig=True))
    f.gpus.append(Gpu(2, "GPU-3", "0000:9b:00.0", mig=False))
    todo, skipped = plan(f, KubeletAssignments(frozenset(), ()))
    assert todo == ["GPU-3"]
    assert "pids 4242" in skipped["GPU-1"] and "MIG" in skipped["GPU-2"]


def test_placement_of_a_measurement():
    assert H2DRow(node=1, gbps=20, pages_on={"1": 62, "0": 2}).placement_problem() is None  # 97% >= 95%
    # a majority is not enough: 60 of 64 (94%) leaves the figure unattributed
    assert (
        "only partly on NUMA node 1: 60 of 64 sampled pages"
        in H2DRow(node=1, gbps=20, pages_on={"1": 60, "0": 4}).placement_problem()
    )
    row = H2DRow(node=1, gbps=20, binding={"mem_policy": "not set: EINVAL"}, pages_on={"0": 64})
    assert row.placement_problem() == (
        "pinned buffer landed on NUMA node 0, not 1 (0 of 64 sampled pages on node 1; memory policy: not set: EINVAL)"
    )


def test_a_gpu_without_mig_has_a_known_mig_mode_peers_share():
    """Issue 53.11: nvidia-smi prints N/A for the MIG mode of a GPU without MIG (a real Tesla T4 document): not
    supported, a known value that FLEET-CONSISTENT compares, never "not read"."""
    from types import SimpleNamespace

    from conformance.facts.gpu import parse_smi_xml
    from conformance.facts.identity import identity

    facts = parse_smi_xml((SAMPLES / "nvidia-smi_q_x.tesla-t4.telegraf-testdata.xml").read_text())
    (t4,) = facts.gpus
    assert t4.mig is None and t4.errors["mig"] == "not supported on this GPU"
    from conformance.collection.bundle import Bundle

    class OnlyGpus(SimpleNamespace):  # every other fact of the node is unknown here
        def __getattr__(self, name: str):
            raise FactUnavailable(f"{name} not read")

    values, errors = identity(OnlyGpus(gpus=facts, name="n", bundle=Bundle("n", [])))
    assert values["mig"] == "n/a (not supported on this GPU)", errors.get("mig")
