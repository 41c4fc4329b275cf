"""`--select`: the same selection of checks (globs over ids and family names) in a live run and in a
re-render (report, merge), the drift check included; a pattern that selects nothing is a usage error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.test_cli_local import sample_host_root


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


def checks_in(out) -> set[str]:
    return {r["check"] for r in json.loads((out / "results.json").read_text())["results"]}


@pytest.mark.slow  # runs and re-renders end to end
def test_select_picks_the_same_checks_live_and_in_a_rerender(tmp_path):
    root = sample_host_root(tmp_path / "root")
    live = tmp_path / "live"
    p = conformance("run", "--host-root", str(root), "--select", "KUBELET-CPU-*", "--select", "sysctl", "--output", str(live))
    assert p.returncode in (0, 1), p.stderr
    got = checks_in(live)
    assert got and all(c.startswith(("KUBELET-CPU-", "SYSCTL-")) for c in got), got
    assert {"KUBELET-CPU-POLICY", "SYSCTL-SOMAXCONN"} <= got and "FLEET-CONSISTENT" not in got
    # a full run, re-rendered with a selection: the same rule picks from the recorded results
    full = tmp_path / "full"
    conformance("run", "--host-root", str(root), "--output", str(full))
    assert "FLEET-CONSISTENT" in checks_in(full)
    conformance("report", str(full / "results.json"), "--select", "sysctl", "--output", str(tmp_path / "rep"))
    assert checks_in(tmp_path / "rep") == {c for c in checks_in(full) if c.startswith("SYSCTL-")}
    conformance("report", str(full / "results.json"), "--select", "fleet", "--output", str(tmp_path / "fleet"))
    assert checks_in(tmp_path / "fleet") == {"FLEET-CONSISTENT"}  # judged again over the replayed nodes


def test_a_pattern_that_selects_nothing_is_a_usage_error(tmp_path):
    p = conformance("run", "--host-root", str(sample_host_root(tmp_path / "root")), "--select", "KUBLET-*")
    assert p.returncode == 4 and "--select KUBLET-*: matches no check id or family" in p.stderr


def test_a_pattern_that_selects_nothing_in_the_documents_is_a_usage_error(tmp_path):
    live = tmp_path / "live"
    conformance("run", "--host-root", str(sample_host_root(tmp_path / "root")), "--output", str(live))
    for command in ("report", "merge"):
        source = live / "results.json" if command == "report" else live
        p = conformance(command, str(source), "--select", "KUBLET-*", "--output", str(tmp_path / command))
        assert p.returncode == 4 and "KUBLET-*: matches no check id or family" in p.stderr, p.stderr
