"""The H2D bandwidth probe end to end against the libcuda.so.1 stand-in: real copies, real CPU affinity
and memory policy, CUDA events; and a failure injected at every driver call it makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conformance.collection.probes import payload
from conformance.errors import FactUnavailable
from conformance.measurements.gpu_measure import assemble_probe_lines, parse_probe_output
from tests.gpu_standins import CONFIG, build_standins, driver_files, gpu_line, standins_available, write_root

UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
TWO_CPUS = {0, 1} <= os.sched_getaffinity(0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    why = standins_available()
    if why:
        pytest.skip(why)
    return build_standins(tmp_path_factory.mktemp("standins"))


def make_root(tmp_path, built, extra: str = "", nvml: str | None = "libnvidia-ml.so.1", **gpu0: object) -> tuple:
    """A host root with two stand-in GPUs; `gpu0`: more stand-in fields for GPU0 (computemode, memfree, procs...)."""
    root = tmp_path / "host"
    leaks = tmp_path / "leaks"
    config = "\n".join(
        [
            gpu_line(
                uuid=UUID0,
                name="Stand-in H100",
                bus="00000000:18:00.0",
                gen=5,
                gpumaxgen=5,
                maxgen=5,
                replay=7,
                replay_step=2,
                **gpu0,
            ),
            gpu_line(uuid=UUID1, name="Stand-in H100", bus="00000000:9A:00.0", gen=5, gpumaxgen=5, maxgen=5),
            "bw\t0\t0\t2.0",
            "bw\t0\t1\t0.5",
            "bw\t1\t0\t0.5",
            "bw\t1\t1\t2.0",
            "cpu\t0\t0",
            "cpu\t1\t1",
            f"leaks\t{leaks}",
            extra,
        ]
    )
    write_root(root, driver_files(built, config + "\n", nvml=nvml))
    return root, leaks


def run_probe(root, numa=None, **spec):
    doc = {"root": str(root), "numa": numa or ({"0": [0], "1": [1]} if TWO_CPUS else {"0": [0]}), "bytes": 2 << 20}
    doc.update({"copies": 4, "samples": 3, "warmup": 1, "warmup_s": 0.05, "budget_s": 10}, **spec)
    env = {**os.environ, "GNC_FAKE_GPU_CONFIG": str(root / CONFIG.lstrip("/"))}
    p = subprocess.run(
        [sys.executable, "-", json.dumps(doc)], input=payload.program("h2d_bandwidth"), capture_output=True, env=env, timeout=120
    )
    return p.returncode, assemble_probe_lines(p.stdout.decode())


def as_lines(doc: dict) -> str:
    """An assembled probe document back into the probe's JSON lines."""
    head = {k: v for k, v in doc.items() if k not in ("gpus", "complete", "end", "truncated")}
    lines = [head, *({"gpu": g} for g in doc["gpus"]), doc.get("end", {"end": "done"})]
    return "".join(json.dumps(x) + "\n" for x in lines)


def leaks(path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def test_measures_each_gpu_from_each_numa_node(tmp_path, built):
    root, leak_file = make_root(tmp_path, built)
    rc, doc = run_probe(root)
    assert rc == 0, doc
    m = parse_probe_output("n", as_lines(doc))
    assert list(m.gpus) == [UUID0, UUID1]
    g0 = m.gpus[UUID0]
    assert g0.bus_id == "0000:18:00.0"
    row0 = g0.row(0)
    assert row0 is not None and row0.error is None
    # paced at 2.0 GB/s: the figure cannot beat the configured rate, and copies of 2 MiB leave it close
    assert 0.5 < row0.gbps <= 2.0 * 1.05
    assert len(row0.samples) == 3
    assert row0.binding["cpus"] == [0] and row0.binding["mem_policy"] == "bind"
    assert row0.pages_node == 0 and row0.placement_problem() is None
    if TWO_CPUS:
        row1 = g0.row(1)
        assert row1.binding["cpus"] == [1]
        assert row1.gbps < row0.gbps  # the stand-in's rate for the remote node is a quarter
        assert m.gpus[UUID1].row(1).gbps > m.gpus[UUID1].row(0).gbps
    # NVML read before and after (the stand-in's replay counter grows by replay_step per read), and the link
    # alone once while each NUMA node's copies run (the link busy)
    assert g0.nvml_before["replay"] == 7 and g0.nvml_after["replay"] == 9 and "replay" not in g0.nvml_busy
    assert g0.nvml_busy["gen"] == 5 and g0.nvml_busy["width"] == 16
    assert leaks(leak_file) == {"contexts": 0, "streams": 0, "events": 0, "device_allocs": 0, "host_allocs": 0}


def test_only_the_requested_gpus(tmp_path, built):
    root, _ = make_root(tmp_path, built)
    rc, doc = run_probe(root, gpus=[UUID1])
    assert rc == 0 and [g["uuid"] for g in doc["gpus"]] == [UUID1]


def test_time_budget_bounds_a_gpu(tmp_path, built):
    root, _ = make_root(tmp_path, built)
    rc, doc = run_probe(root, gpus=[UUID0], numa={"0": [0]}, bytes=8 << 20, copies=16, samples=50, budget_s=0.3)
    g = doc["gpus"][0]
    assert rc == 0 and "time budget reached" in g["results"][0]["note"]
    assert len(g["results"][0]["samples_gbps"]) < 50 and g["duration_s"] < 5


def test_no_driver_library(tmp_path):
    rc, doc = run_probe(tmp_path)
    assert rc == 3 and "libcuda.so.1 not found" in doc["error"]


SETUP = ["cuInit", "cuDeviceGetCount"]
PER_GPU = ["cuDeviceGet", "cuDeviceGetUuid", "cuDeviceGetPCIBusId"]
MEASURE = [
    "cuDevicePrimaryCtxSetFlags_v2",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuMemAlloc_v2",
    "cuMemHostAlloc",
    "cuStreamCreate",
    "cuEventCreate",
    "cuMemcpyHtoDAsync_v2",
    "cuStreamSynchronize",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime",
]
CLEANUP = {
    "cuEventDestroy_v2": "events",
    "cuStreamDestroy_v2": "streams",
    "cuMemFreeHost": "host_allocs",
    "cuMemFree_v2": "device_allocs",
    "cuDevicePrimaryCtxRelease_v2": "contexts",
}


@pytest.mark.parametrize("symbol", SETUP + PER_GPU + MEASURE + list(CLEANUP))
def test_failure_at_each_driver_call_is_reported_and_cleaned_up(tmp_path, built, symbol):
    root, leak_file = make_root(tmp_path, built, extra=f"fail\t{symbol}\t999")
    rc, doc = run_probe(root, numa={"0": [0]})
    text = json.dumps(doc)
    assert f"{symbol} failed: CUDA_ERROR_UNKNOWN (999)" in text
    alive = leaks(leak_file)
    if symbol in SETUP:
        assert rc == 3 and symbol in doc["error"]
    elif symbol in PER_GPU:
        assert rc == 0 and doc["gpus"][0]["failed_call"] == symbol
        assert doc["gpus"][1]["results"][0]["gbps"] > 0  # the next GPU is still measured
    elif symbol in MEASURE:
        row = doc["gpus"][0]["results"][0]
        assert rc == 0 and row["failed_call"] == symbol and row.get("gbps") is None
        assert doc["gpus"][1]["results"][0]["gbps"] > 0
    else:
        row = doc["gpus"][0]["results"][0]
        assert rc == 0 and any(symbol in e for e in row["cleanup_errors"])
        assert row["gbps"] > 0  # the figure was taken before the failing release
    leaked = {k: v for k, v in alive.items() if v}
    # Everything is released, except what the failing release call itself could not free.
    assert leaked == ({CLEANUP[symbol]: 1} if symbol in CLEANUP else {}), leaked


def test_an_inherited_device_mask_is_ignored(tmp_path, built, monkeypatch):
    """CUDA_VISIBLE_DEVICES in the probe's environment would hide GPU0 from it: the probe drops the mask
    (and says so), so every planned GPU is measured."""
    root, _ = make_root(tmp_path, built)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    rc, doc = run_probe(root)
    assert rc == 0 and doc["ignored_device_mask"] == "1"
    assert [g["uuid"] for g in doc["gpus"]] == [UUID0, UUID1]


def test_a_planned_gpu_the_probe_did_not_report_is_an_error_not_a_pass(tmp_path, built, monkeypatch):
    """A failed UUID read leaves the planned GPUs unnamed in the probe's output: the runner records them
    as missing (GPU-H2D-LOCAL-BW then reports an error), never as silently not measured."""
    from conformance.config.inventory import NodeSpec
    from conformance.config.profile import load_profile
    from conformance.facts.checkpoints import KubeletAssignments
    from conformance.facts.gpu import Gpu, GpuFacts
    from conformance.facts.topology import Topology
    from conformance.measurements.gpu_measure import measure_node

    root, _ = make_root(tmp_path, built, "fail\tcuDeviceGetUuid\t999")
    monkeypatch.setenv("GNC_FAKE_GPU_CONFIG", str(root / CONFIG.lstrip("/")))
    gpus = GpuFacts(gpus=[Gpu(0, UUID0, "0000:18:00.0"), Gpu(1, UUID1, "0000:9a:00.0")], source="NVML")
    topo = Topology(online=frozenset({0}), nodes={0: frozenset({0})}, siblings={0: frozenset({0})})
    gp = {**load_profile("default").get("gpu"), "h2d_buffer_mib": 2, "h2d_samples": 1, "h2d_copies": 1}
    m = measure_node(
        NodeSpec(name="n", transport="local", host_root=str(root)), gpus, topo, gp, KubeletAssignments(frozenset(), ())
    )
    # the stand-in fails the first UUID read: GPU0 comes back as "ordinal 0", GPU1 is measured
    assert m.error is None and set(m.missing) == {UUID0} and UUID1 in m.gpus
    assert "planned but not reported by the probe (it reported: " in m.missing[UUID0]


def test_placement_is_verified_or_said_to_be_unverified():
    from conformance.measurements.gpu_measure import H2DRow

    ok = H2DRow(node=0, gbps=20.0, binding={"mem_policy": "bind"}, pages_on={"0": 62, "1": 2})
    assert ok.placement_problem() is None  # 62 of 64 = 97% >= 95%
    spread = H2DRow(node=0, gbps=20.0, binding={"mem_policy": "bind"}, pages_on={"0": 40, "1": 24})
    assert "only partly on NUMA node 0: 40 of 64 sampled pages there" in spread.placement_problem()
    failed = H2DRow(
        node=0, gbps=20.0, binding={"mem_policy": "bind"}, pages_on={"error": "move_pages failed: Operation not permitted"}
    )
    assert failed.placement_problem().startswith("placement unverified: move_pages failed")
    assert H2DRow(node=0, gbps=20.0, pages_on=None).placement_problem().startswith("placement unverified")


def test_the_probe_stays_off_cpus_pods_hold_exclusively():
    from conformance.config.profile import load_profile
    from conformance.facts.topology import Topology
    from conformance.measurements.gpu_measure import probe_spec

    topo = Topology(
        online=frozenset(range(4)),
        nodes={0: frozenset({0, 1}), 1: frozenset({2, 3})},
        siblings={c: frozenset({c}) for c in range(4)},
    )
    gp = load_profile("default").get("gpu")
    # cpu1 and both CPUs of node 1 are pinned to pods: node 0 keeps cpu0, node 1 has nothing left to run on
    assert probe_spec([UUID0], topo, gp, "", frozenset({1, 2, 3}))["numa"] == {"0": [0]}


def test_a_copy_that_never_completes_ends_the_probe_at_its_bound_and_keeps_what_was_measured(tmp_path, built):
    """GPU1's first timed copy never completes (the driver call does not return, as when a GPU falls off
    the bus): the probe ends by itself at budget x GPUs + grace, GPU0's figures arrived before, and the
    runner reports the cut instead of losing everything."""
    root, _ = make_root(tmp_path, built, "fail\tcuEventSynchronize\t-1\t4")  # GPU0 makes 3 (3 samples)
    rc, doc = run_probe(root, gpus=[UUID0, UUID1], numa={"0": [0]}, budget_s=0.5, grace_s=1)
    assert rc == 124 and doc["end"]["end"] == "timeout" and doc["complete"] is False
    assert [g["uuid"] for g in doc["gpus"]] == [UUID0] and doc["gpus"][0]["results"][0]["gbps"] > 0
    m = parse_probe_output("n", as_lines(doc))
    assert UUID0 in m.gpus and m.error.startswith("the probe stopped itself at its bound of 2.0 s")


@pytest.mark.parametrize("name", ["h2d_bandwidth", "nvml_facts", "driver_library"])
def test_node_programs_parse_as_the_oldest_python_nodes_may_have(name):
    """The programs that run on nodes keep to the grammar of python3.6 (the README's floor for nodes):
    no walrus, no positional-only parameters, no match, no `X | Y` in evaluated annotations. Python
    releases that no longer check 3.6 grammar check their own oldest (3.7 since 3.13)."""
    import ast
    import warnings
    from importlib import resources

    source = resources.files("conformance.collection.probes").joinpath(f"{name}.py").read_text()
    for floor in ((3, 6), (3, 7)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ast.parse(source, feature_version=floor)
            break
        except ValueError:  # this Python cannot check that old a grammar
            continue
    assert "from __future__ import annotations" not in source and ":=" not in source


# -- the busy gate, asked right before each GPU's context is made ---------------------------------


@pytest.mark.parametrize(
    ("gpu0", "why"),
    [
        ({"computemode": 3}, "not measured: compute mode Exclusive-Process (only Default is measured)"),
        ({"computemode": 2}, "not measured: compute mode Prohibited (only Default is measured)"),
        ({"memfree": 10}, "not measured: 10 MiB of device memory free, 66 MiB needed"),
        ({"procs": "4242"}, "busy: 1 compute process(es) running now (pids 4242)"),
    ],
)
def test_a_gpu_that_is_not_idle_now_is_skipped_with_the_reason(tmp_path, built, gpu0, why):
    root, leak_file = make_root(tmp_path, built, **gpu0)
    rc, doc = run_probe(root, numa={"0": [0]})
    assert rc == 0 and doc["gpus"][0] == {"ordinal": 0, "uuid": UUID0, "bus_id": "0000:18:00.0", "skipped": why}
    assert doc["gpus"][1]["results"][0]["gbps"] > 0  # the other GPU is measured
    assert not {k: v for k, v in leaks(leak_file).items() if v}  # no context was made for the skipped one


def test_without_nvml_no_gpu_counts_as_idle(tmp_path, built):
    root, _ = make_root(tmp_path, built, nvml=None)
    rc, doc = run_probe(root, numa={"0": [0]})
    assert rc == 0 and all(g["skipped"].startswith("treated as busy: NVML cannot be used here") for g in doc["gpus"])


def test_a_process_that_appears_after_collection_stops_the_measurement(tmp_path, built, monkeypatch):
    """The facts say GPU0 is idle (collected earlier); a job starts on it before the probe runs."""
    from conformance.config.inventory import NodeSpec
    from conformance.config.profile import load_profile
    from conformance.facts.checkpoints import KubeletAssignments
    from conformance.facts.gpu import Gpu, GpuFacts
    from conformance.facts.topology import Topology
    from conformance.measurements.gpu_measure import measure_node

    started = tmp_path / "job-started"
    root, _ = make_root(tmp_path, built, procs="777", procs_if=started)
    monkeypatch.setenv("GNC_FAKE_GPU_CONFIG", str(root / CONFIG.lstrip("/")))
    gpus = GpuFacts(gpus=[Gpu(0, UUID0, "0000:18:00.0"), Gpu(1, UUID1, "0000:9a:00.0")], source="NVML")  # no processes
    topo = Topology(online=frozenset({0}), nodes={0: frozenset({0})}, siblings={0: frozenset({0})})
    gp = {**load_profile("default").get("gpu"), "h2d_buffer_mib": 2, "h2d_samples": 1, "h2d_copies": 1, "h2d_warmup_s": 0}
    started.write_text("")  # the job starts between collection and measurement
    m = measure_node(
        NodeSpec(name="n", transport="local", host_root=str(root)), gpus, topo, gp, KubeletAssignments(frozenset(), ())
    )
    assert m.skipped == {UUID0: "busy: 1 compute process(es) running now (pids 777)"} and UUID1 in m.gpus
    assert not m.missing and m.error is None


@pytest.mark.parametrize("check", ["test_gpu_h2d_local_bandwidth", "test_gpu_pcie_replay", "test_gpu_h2d_numa_matrix"])
def test_every_check_of_the_probe_errs_on_a_gpu_it_planned_and_did_not_report(check):
    """GPU0 measured and clean, GPU1 planned and not reported by the probe: GPU-H2D-LOCAL-BW, GPU-PCIE-REPLAY and
    GPU-H2D-NUMA-MATRIX each say error naming GPU1 (the last two passed it over in silence); a GPU left alone on
    purpose (busy) is said in the evidence and decides nothing."""
    import suites.test_gpu as checks
    from conformance.checks import Evidence
    from conformance.config.profile import load_profile
    from conformance.facts.gpu import Gpu, GpuFacts, PciFunction
    from conformance.measurements.gpu_measure import H2DGpu, H2DMeasurement, H2DRow

    pci = PciFunction(bus_id="0000:18:00.0", numa_node=0, link_gen=4, link_width=16, max_link_gen=4, max_link_width=16)
    gpus = [Gpu(i, u, f"00000000:{b}:00.0", pcie_gen=4, pcie_width=16, pcie_max_gen=4, pcie_max_width=16, pci=pci)
            for i, (u, b) in enumerate(((UUID0, "18"), (UUID1, "9a")))]  # fmt: skip
    rows = [H2DRow(node=n, gbps=g, samples=[g], binding={"mem_policy": "bind"}, pages_on={str(n): 64})
            for n, g in ((0, 25.0), (1, 24.0))]  # fmt: skip
    measured = H2DGpu(uuid=UUID0, bus_id=gpus[0].bus_id, rows=rows, nvml_before={"replay": 0}, nvml_after={"replay": 0})
    fn = getattr(checks, check)
    for missing, skipped, outcome in (({UUID1: "planned but not reported"}, {}, "error"), ({}, {UUID1: "busy"}, "passed")):
        h2d = H2DMeasurement(node="n", gpus={UUID0: measured}, missing=missing, skipped=skipped)
        ev = Evidence()
        args = ("n", GpuFacts(gpus=gpus, source="NVML"), h2d, load_profile("default"), ev)
        if outcome == "error":
            with pytest.raises(FactUnavailable, match=r"GPU1 .*not measured: planned but not reported"):
                fn(*args)
        else:
            fn(*args)
            assert any("not measured: busy" in line for line in ev.lines), ev.lines
