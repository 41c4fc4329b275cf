"""Unknown is never a pass, enforced over every check: for every lab node (the every-node lab on dash and
mawk: the main lab, the GPU lab, k3s and the witness) and the local host-root sample, each record the
collector returned is made unreadable in turn, all variants are judged offline (each base with its variants in one
run), and no check may go from failed or error to anything else, nor a node's verdict improve
(tests/unknown_variants.py).
New checks and new lab nodes are covered without a change here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.lab.builder import DEBIAN
from tests.lab.every_node import node_name
from tests.test_cli_local import sample_host_root
from tests.unknown_variants import judge_in_parts, violations

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def replayed(every_node_collected, tmp_path_factory):
    c = every_node_collected
    tmp = tmp_path_factory.mktemp("unknown")
    bases = tmp / "bases"
    bases.mkdir()
    for base in c.bases:  # the dash and mawk collection of each base node, under the base node's name
        doc = dict(c.snaps[node_name(base, DEBIAN)], node=base)
        (bases / f"{base}.json").write_text(json.dumps(doc))
    # bases that fail GPU health through one record each, so that losing that record would show: NVLink error
    # counters over the limit on the nvidia-smi path (every link up), and a fabric registration that completed
    # with an error status
    for name, derive in (("gpu-nvlink-counters", _counters_only), ("gpu-fabric-status", _fabric_status_only),
                         ("gpu-grace", _grace_numa_mode)):  # fmt: skip
        (bases / f"{name}.json").write_text(json.dumps(derive(dict(c.snaps[node_name(derive.base, DEBIAN)], node=name))))
    # the local transport's sample host root (tests/test_cli_local.py), collected as users collect it
    local = subprocess.run(
        [sys.executable, "-m", "conformance", "collect", "--host-root", str(sample_host_root(tmp / "host")),
         "--output", str(tmp / "local")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    for p in (tmp / "local").glob("*.json"):
        doc = json.loads(p.read_text())
        (bases / "host-root.json").write_text(json.dumps(dict(doc, node="host-root")))
    made, runs, doc = judge_in_parts(sorted(bases.glob("*.json")), tmp, c.profile)
    return made, runs, doc


def test_every_record_of_every_node_was_taken_away(replayed, every_node_collected):
    made, runs, doc = replayed
    for run in runs:
        assert run.returncode in (0, 1), run.stderr
    bases = {b for b, _ in made.values()}
    assert bases == {*every_node_collected.bases, "host-root", "gpu-nvlink-counters", "gpu-fabric-status", "gpu-grace"}
    assert {what.rsplit(" ", 1)[-1] for _, what in made.values()} >= {"denied", "absent", "empty", "truncated"}
    assert len(made) > 600  # one variant per record: some 60 records on each of 15 nodes
    judged = {r["node"] for r in doc["results"]}
    assert set(made) <= judged and bases <= judged


def _record(doc: dict, kind: str, name: str) -> dict:
    (rec,) = [r for r in doc["records"] if r["kind"] == kind and r["name"] == name]
    return rec


def _counters_only(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    status = _record(doc, "C", "nvidia-smi-nvlink")
    status["text"] = status["text"].replace("<inactive>", "26.562 GB/s")
    errors = _record(doc, "C", "nvidia-smi-nvlink-errors")
    errors["text"] = errors["text"].replace("Link 1: Replay Errors: 7", "Link 1: Replay Errors: 500")
    return doc


_counters_only.base = "gpu-smi"  # type: ignore[attr-defined]


def _fabric_status_only(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    probe = _record(doc, "C", "nvml-probe")
    data = json.loads(probe["text"])
    for g in data.get("gpus") or []:
        if isinstance(g.get("fabric"), dict):
            g["fabric"].update(state=3, status=15)  # completed, NVML_ERROR_GPU_IS_LOST
    probe["text"] = json.dumps(data)
    return doc


_fabric_status_only.base = "gpu-good"  # type: ignore[attr-defined]


def _grace_numa_mode(doc: dict) -> dict:
    """gpu-good as a Grace board: its GPUs on NVLink-C2C (NVML's C2C mode), the driver (550, before CDMM was the
    default) loaded without NVreg_CoherentGPUMemoryMode: NUMA mode, which GPU-MEMORY-MODE fails."""
    doc = json.loads(json.dumps(doc))
    probe = _record(doc, "C", "nvml-probe")
    data = json.loads(probe["text"])
    for g in data.get("gpus") or []:
        g["c2c"] = True
    probe["text"] = json.dumps(data)
    params = _record(doc, "F", "/proc/driver/nvidia/params")
    params.update(status="ok", text="ResmanDebugLevel: 4294967295\nRmLogonRC: 1\n")
    return doc


_grace_numa_mode.base = "gpu-good"  # type: ignore[attr-defined]


# Checks a snapshot replay cannot fail or error, so the offline invariant cannot show them flip: pods are read
# live through the API (pod specs, one exec per container), bandwidth and the replay counter are measured,
# the endpoint is sent requests, and dcgm-exporter and the cluster's view of GPU health are asked over the API.
NOT_IN_SNAPSHOTS = {
    "POD-QOS-GUARANTEED", "POD-CPUS-EXCLUSIVE", "POD-CPUS-SINGLE-NUMA", "POD-GPU-NUMA-ALIGNED", "POD-MEMS-LOCAL",
    "POD-FULL-CORES", "POD-THREAD-AFFINITY", "POD-THREAD-ENV", "POD-SHM-SIZE", "POD-RUNTIME-CLASS", "POD-CPU-THROTTLING",
    "POD-SYSCTL-TCP-TW-REUSE", "POD-SYSCTL-SOMAXCONN", "POD-SYSCTL-PORT-RANGE", "RUNTIME-CLASS-HANDLER",
    "GPU-H2D-LOCAL-BW", "GPU-H2D-NUMA-MATRIX", "GPU-PCIE-REPLAY", "LATENCY-JITTER", "GPU-DCGM-EXPORTER",
    "GPU-CLUSTER-HEALTH",
}  # fmt: skip


def test_every_node_check_fails_or_errors_on_some_base(replayed):
    """The invariant can only show a check going from failed or error to a pass where some base node fails
    or errors it: every check that a snapshot can decide has such a base (a new check without one fails here)."""
    _, _, doc = replayed
    bases = {r["node"] for r in doc["results"] if "--r" not in r["node"]}
    checks = {r["check"] for r in doc["results"]}
    bad = {r["check"] for r in doc["results"] if r["node"] in bases and r["outcome"] in ("failed", "error")}
    assert checks - bad == NOT_IN_SNAPSHOTS


def test_less_information_never_makes_a_pass(replayed):
    made, _, doc = replayed
    found = violations(doc, made)
    summary = Counter(f"{v.check} {v.before}->{v.after}" for v in found)
    assert not found, f"{len(found)} flips ({dict(summary)}):\n" + "\n".join(str(v) for v in found[:40])


def test_the_derived_gpu_bases_fail_through_their_one_record(replayed):
    _, _, doc = replayed
    got = {(r["node"], r["check"]): r for r in doc["results"]}
    assert got[("gpu-nvlink-counters", "GPU-NVLINK")]["outcome"] == "failed"
    assert "replay 500 > 100" in got[("gpu-nvlink-counters", "GPU-NVLINK")]["message"]
    assert got[("gpu-fabric-status", "GPU-FABRIC")]["outcome"] == "failed"
    assert "completed with status GPU_IS_LOST" in got[("gpu-fabric-status", "GPU-FABRIC")]["message"]
    assert got[("gpu-grace", "GPU-MEMORY-MODE")]["outcome"] == "failed"
    assert "NUMA mode" in got[("gpu-grace", "GPU-MEMORY-MODE")]["message"]


def test_the_witness_fails_where_unknown_used_to_pass(replayed):
    """The cases found by this procedure before it was enforced: each fails on the witness node."""
    _, _, doc = replayed
    by = {r["check"]: r for r in doc["results"] if r["node"] == "witness"}
    for check in ("RUNTIME-SYSTEMD-CGROUP", "KUBELET-RESERVED-CPUS", "KUBELET-TOPOLOGY-SCOPE", "KUBELET-CGROUP-DRIVER"):
        assert by[check]["outcome"] == "failed", (check, by[check]["message"])
