"""A live run's two item modes (conformance.run.check_items): one pytest item per check, or one per node
judging all of the node's checks. Both must write the same results and reports, select the same checks
(-k, -m, --select), stop alike (-x), honour a check's skip and xfail marks, and `auto` must pick the node
mode from NODE_ITEMS_FROM nodes on, not below and not for a listing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.run.check_items import NODE_ITEMS_FROM
from tests.check_fleet import fleet_snapshots

ROOT = Path(__file__).resolve().parent.parent


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


def results(out: Path) -> list[dict]:
    """results.json's results without their durations (the one thing two runs may not share)."""
    doc = json.loads((out / "results.json").read_text())
    return [{k: v for k, v in r.items() if k != "duration_s"} for r in doc["results"]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return fleet_snapshots(tmp_path_factory.mktemp("fleet"), 3)


def both(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    runs = []
    for mode in ("check", "node"):
        runs.append(conformance("run", f"--items={mode}", "--output", str(tmp_path / mode), *args))
        assert (tmp_path / mode / "results.json").is_file(), runs[-1].stdout + runs[-1].stderr
    return runs[0], runs[1]


def summary_line(p: subprocess.CompletedProcess) -> str:
    """The run's one count ("3 node(s): 3 rejected; results: 9 passed, 9 failed, ..."): pytest's own line is
    not printed (its items are not the results in the node mode)."""
    (line,) = [x for x in p.stdout.splitlines() if re.match(r"[0-9]+ node\(s\): ", x)]
    return line


@pytest.mark.slow  # runs in both item modes end to end
def test_k_and_select_pick_the_same_checks_in_both_modes(fleet, tmp_path):
    for n, extra in enumerate([["--select", "KUBELET-CPU-*"], ["--", "-k", "sysctl and not somaxconn"]]):
        a, b = both(tmp_path / str(n), "--snapshot", str(fleet), *extra)
        assert results(tmp_path / str(n) / "check") == results(tmp_path / str(n) / "node"), extra
        assert summary_line(a) == summary_line(b) and a.returncode == b.returncode, extra
    picked = {r["check"] for r in results(tmp_path / "1" / "node")}
    # -k matches the checks' test names (test_sysctl_somaxconn, ...), in both modes
    assert "SYSCTL-TCP-TW-REUSE" in picked and "SYSCTL-SOMAXCONN" not in picked and "KUBELET-CPU-POLICY" not in picked, picked


def test_a_run_stopped_by_x_stops_at_the_same_check(fleet, tmp_path):
    a, b = both(tmp_path, "--snapshot", str(fleet), "--", "-x")
    got = results(tmp_path / "node")
    assert got == results(tmp_path / "check") and summary_line(a) == summary_line(b)
    checked = [r for r in got if r["check"] != "FLEET-CONSISTENT"]  # the drift check is judged at the end, as ever
    assert checked[-1]["outcome"] in ("failed", "error") and {r["node"] for r in checked} == {"node-000"}  # -x ends it


def test_marks_and_imperative_outcomes_are_honoured_in_the_node_mode(fleet, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "test_marked.py").write_text(
        textwrap.dedent("""
        import pytest
        from conformance.checks import check

        def spec(id):
            return check(id, "low", title=id, rationale="a test", remediation="none", source="a test")

        @pytest.mark.skipif(True, reason="marked to skip")
        @spec("SITE-MARKED-SKIP")
        def test_skipped_by_mark(node, facts):
            raise AssertionError("must not run")

        @pytest.mark.xfail(reason="known to fail", strict=False)
        @spec("SITE-MARKED-XFAIL")
        def test_xfail_by_mark(node, facts):
            assert False, "fails as marked"

        @spec("SITE-IMPERATIVE-SKIP")
        def test_skips_itself(node, facts):
            pytest.skip("not on this node")

        @spec("SITE-FAILS-BY-DEFECT")
        def test_defect(node, facts):
            raise KeyError("no such thing")

        @pytest.mark.slowcheck
        @spec("SITE-DESELECTED-BY-MARKER")
        def test_deselected(node, facts):
            raise AssertionError("must not run: -m deselects it")
    """)
    )
    a, b = both(tmp_path, "--snapshot", str(fleet), "--checks", str(site), "--select", "SITE-*", "--", "-m", "not slowcheck")
    got = results(tmp_path / "node")
    assert got == results(tmp_path / "check") and summary_line(a) == summary_line(b)
    outcome = {r["check"]: (r["outcome"], r["message"]) for r in got if r["node"] == "node-000"}
    assert outcome["SITE-MARKED-SKIP"] == ("skipped", "marked to skip")
    assert outcome["SITE-MARKED-XFAIL"][0] == "skipped"
    assert outcome["SITE-IMPERATIVE-SKIP"] == ("skipped", "not on this node")
    assert outcome["SITE-FAILS-BY-DEFECT"][0] == "error" and "a defect in the check" in outcome["SITE-FAILS-BY-DEFECT"][1]
    assert "SITE-DESELECTED-BY-MARKER" not in outcome


PROBE = """
import json, os
from conformance.run.check_items import NodeChecksItem

def pytest_collection_finish(session):
    kinds = sorted({type(i).__name__ for i in session.items})
    with open(os.environ["GNC_ITEMS_PROBE"], "w") as f:
        json.dump({"kinds": kinds, "items": len(session.items)}, f)
"""


def item_kinds(tmp_path: Path, snapshots: Path, *args: str) -> dict:
    (tmp_path / "gnc_items_probe.py").write_text(PROBE)
    probe = tmp_path / "probe.json"
    env = {"GNC_ITEMS_PROBE": str(probe), "PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    # a pytest user's own run: this project's pytest settings (its tests' workers) are not theirs
    argv = [sys.executable, "-m", "pytest", str(ROOT / "suites"), "--rootdir", str(ROOT), "-c", "/dev/null",
            "-p", "gnc_items_probe", "-q", "-p", "no:cacheprovider", "--snapshot", str(snapshots), *args]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert probe.is_file(), p.stdout + p.stderr
    return json.loads(probe.read_text())


@pytest.mark.slow  # fleets of 9 and 10 snapshots, each run by pytest
def test_auto_uses_node_items_from_the_measured_node_count_on(tmp_path):
    small = fleet_snapshots(tmp_path / "small", NODE_ITEMS_FROM - 1)
    large = fleet_snapshots(tmp_path / "large", NODE_ITEMS_FROM)
    assert item_kinds(tmp_path, small, "--check-items=auto")["kinds"] == ["Function"]
    got = item_kinds(tmp_path, large, "--check-items=auto")
    assert got == {"kinds": ["NodeChecksItem"], "items": NODE_ITEMS_FROM}
    # pytest users keep one item per check unless they ask; a listing lists checks
    assert item_kinds(tmp_path, large)["kinds"] == ["Function"]
    assert item_kinds(tmp_path, large, "--check-items=node", "--collect-only")["kinds"] == ["Function"]
    assert item_kinds(tmp_path, small, "--check-items=node")["items"] == NODE_ITEMS_FROM - 1
