"""The collector on every node shell and awk: the lab's nodes (good, bad, hostile and GPU) built once per
userland of tests/lab/builder.py USERLANDS, each userland made the node's own sh and awk (and BusyBox's
small tools), collected in one run and judged offline. Every record and every verdict must be the same
as on dash and mawk (Debian and Ubuntu)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conformance.collection.bundle import Bundle
from conformance.facts import kernel
from tests.conftest import require_or_skip
from tests.lab.builder import DEBIAN, USERLANDS, Userland, lab_available, userland_available
from tests.lab.every_node import LONG_XID, NO_BASE64, NO_TIMEOUT, node_name
from tests.lab.nodes import MARKERS

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def matrix(every_node_collected):
    c = every_node_collected
    return {"collect": c.collect, "run": c.run, "doc": c.doc, "snaps": c.snaps, "bases": c.bases}


@pytest.fixture(scope="module")
def shell_lab(every_node_lab):
    return every_node_lab


# Records that hold when this very node's processes started and its files changed (issue 58): each lab node's are
# its own, so their numbers are compared as numbers of the same shape, the rest byte for byte
TIMES = re.compile(r"^(daemon-start:|exe-stat:|record-stat:|daemon-recheck$|[a-z]+-package-proof$)")


def records(snap: dict) -> list[tuple]:
    keys = ("kind", "name", "status", "text", "base64", "truncated")
    out = []
    for r in snap["records"]:
        rec = [r.get(k) for k in keys]
        if r["kind"] == "M" and TIMES.match(r["name"]) and isinstance(rec[3], str):
            rec[3] = re.sub(r"[0-9]+", "N", rec[3])
        out.append(tuple(rec))
    return out


def verdicts(doc: dict, node: str, base: str) -> dict[tuple, tuple[str, str]]:
    """(check, subject) -> (outcome, message) of one node, its name in messages read as the base node's."""
    return {
        (r["check"], json.dumps(r.get("subject") or {}, sort_keys=True)): (r["outcome"], r["message"].replace(node, base))
        for r in doc["results"]
        if r["node"] == node
    }


def test_every_userland_collects_every_node(matrix):
    c, snaps = matrix["collect"], matrix["snaps"]
    assert c.returncode == 1, c.stderr  # the node without base64, alone
    for userland in USERLANDS:
        for base in matrix["bases"]:
            snap = snaps[node_name(base, userland)]
            assert snap["error"] is None and snap["records"][-1]["name"] == "end", (base, userland.name, snap["error"])


@pytest.mark.parametrize("userland", USERLANDS[1:], ids=lambda u: u.name)
def test_same_records_as_dash_and_mawk(matrix, userland):
    """Byte for byte: every record (kind, name, status, data) is the one dash and mawk give."""
    for base in matrix["bases"]:
        want = records(matrix["snaps"][node_name(base, DEBIAN)])
        got = records(matrix["snaps"][node_name(base, userland)])
        diff = [(w, g) for w, g in zip(want, got, strict=False) if w != g]
        assert len(got) == len(want) and not diff, f"{base} on {userland.name}: {len(got)} vs {len(want)} records; {diff[:3]}"


@pytest.mark.parametrize("userland", USERLANDS[1:], ids=lambda u: u.name)
def test_same_outcomes_and_messages_as_dash_and_mawk(matrix, userland):
    doc = matrix["doc"]
    for base in matrix["bases"]:
        want = verdicts(doc, node_name(base, DEBIAN), base)
        got = verdicts(doc, node_name(base, userland), base)
        assert want, base
        assert got == want, f"{base} on {userland.name}: " + str(
            {k: (want.get(k), got.get(k)) for k in set(want) | set(got) if want.get(k) != got.get(k)}
        )
    verdict = {n["name"]: n["verdict"] for n in doc["nodes"]}
    for base in matrix["bases"]:
        assert verdict[node_name(base, userland)] == verdict[node_name(base, DEBIAN)], base


def test_the_reference_userland_judges_the_lab_as_expected(matrix):
    """The matrix compares against dash and mawk; those give the lab's known verdicts (tests/lab/nodes.py)."""
    from tests.lab.nodes import EXPECTED

    doc = matrix["doc"]
    for base, expected in EXPECTED.items():
        if base == "down":
            continue
        got = {c: o for (c, _), (o, _) in verdicts(doc, node_name(base, DEBIAN), base).items() if c in expected}
        assert got == expected, base


def test_the_k3s_kubelet_config_is_found(matrix):
    """Without the awk scan of k3s's config file the kubelet's config would not be found at all."""
    by = {r["check"]: r for r in matrix["doc"]["results"] if r["node"] == node_name("k3s", DEBIAN)}
    assert by["KUBELET-CPU-POLICY"]["outcome"] == "passed", by["KUBELET-CPU-POLICY"]["message"]
    assert "/etc/rancher/k3s/kubelet.yaml" in by["KUBELET-CPU-POLICY"]["source"]
    assert "/etc/rancher/k3s/kubelet.conf.d/10-topology.conf" in by["KUBELET-TOPOLOGY-POLICY"]["source"]


def test_the_long_xid_line_is_cut_at_512_bytes(matrix):
    xid = Bundle.from_json(matrix["snaps"][node_name("gpu-good", DEBIAN)]).command("xid-lines").data
    line = next(x for x in xid.split(b"\n") if b"Graphics Exception" in x)
    assert len(line) == 512 and LONG_XID.encode().startswith(line)


def test_hostile_node_guarantees_hold_on_every_userland(shell_lab, matrix):
    lab, _ = shell_lab
    for node in lab.nodes:  # no planted command ran, whatever shell read the names
        for marker in MARKERS:
            assert not list((node.dir / "upper").rglob(marker)), f"{marker} appeared on {node.spec.name}"
    for marker in MARKERS:
        assert not (Path("/tmp") / marker).exists() and not (Path.home() / marker).exists()
    doc = matrix["doc"]
    for userland in USERLANDS:
        node = node_name("hostile", userland)
        state = next(r for r in matrix["snaps"][node]["records"] if r["name"] == "/var/lib/kubelet/cpu_manager_state")
        assert state["truncated"] and len(state["text"]) == 4194304, userland.name  # the 2 GiB file, read to the bound
        by = {r["check"]: r for r in doc["results"] if r["node"] == node}
        assert by["KUBELET-CPU-STATE"]["outcome"] == "error" and "read bound" in by["KUBELET-CPU-STATE"]["message"]
        assert by["KUBELET-CPU-POLICY"]["outcome"] == "passed", userland.name  # read through the hostile file name


def test_a_missing_program_is_named(matrix):
    snap = matrix["snaps"][node_name("good", NO_BASE64)]
    assert snap["error_kind"] == "error" and "missing: base64" in snap["error"], snap["error"]
    results = [r for r in matrix["doc"]["results"] if r["node"] == node_name("good", NO_BASE64)]
    assert results and all(r["outcome"] in ("error", "skipped") for r in results)
    assert all("base64" in r["message"] for r in results if r["outcome"] == "error")


def test_without_timeout_the_package_database_is_not_asked(matrix):
    """A BusyBox built without `timeout`: the collector never starts a program it cannot bound in time (here
    the package database's dpkg-query, which says which release the running containerd is), and says so in
    the record (127) instead of risking a hang."""
    snap = matrix["snaps"][node_name("containerd1", NO_TIMEOUT)]
    assert snap["error"] is None
    rec = next(r for r in snap["records"] if r["kind"] == "C" and r["name"] == "containerd-package")
    assert rec["status"] == "notool" and rec["text"] == "timeout (to bound dpkg-query in time)", rec


@pytest.mark.parametrize("stat", [["stat"], ["busybox", "stat"]], ids=["coreutils", "busybox"])
def test_cgroup_version_from_the_real_stat_programs(stat):
    """What GNU and BusyBox stat print for a real cgroup2 and a real tmpfs decides the version the same way
    (BusyBox names cgroup2fs UNKNOWN: the magic decides)."""
    require_or_skip(lab_available())
    if stat[0] == "busybox":
        require_or_skip(userland_available(Userland("busybox", "busybox", "busybox")))
    cgroup2 = next(line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if line.split()[2] == "cgroup2")
    for path, version in ((cgroup2, 2), ("/dev/shm" if os.path.ismount("/dev/shm") else "/run", 1)):
        out = subprocess.run([*stat, "-fc", "%t", path], capture_output=True, text=True, check=True).stdout
        if version == 1 and out.strip() != "1021994":
            pytest.fail(f"{path} is not a tmpfs here: {out!r}")
        assert kernel.cgroup_version(out) == version, (path, out)
