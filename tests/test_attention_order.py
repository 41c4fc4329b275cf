"""Issue 54 items 5 and 7: nodes not reached count once, under their cause (their errors are not so many checks'
findings), and one attention order lists nodes everywhere: rejected and unreachable before incomplete before
accepted, a node with a check that blocks failing first within its verdict. Through the real `conformance report`
over a synthetic fleet: the page's scope list, verdict table and fleet node list, summary.md and the terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from conformance.config.verdict import attention_key, cause
from tests.test_fleet_report import SPEC

N = 340  # above the matrix size (300): the fleet view


def _fleet() -> dict:
    """gpu-0000..0049 unreachable (each its own address, one cause), gpu-0050..0089 incomplete (interrupted),
    gpu-0090..0099 rejected by a medium...high failure of X-1 on 3 of them and X-2 on the others, the rest
    accepted. Every unreachable node errs on every check, as a real run's do."""
    nodes, results = [], []
    for i in range(N):
        name = f"gpu-{i:04d}"
        if i < 50:
            verdict, col = "unreachable", {"error": f"ssh to 10.1.{i // 250}.{i % 250}:22: connection timed out",
                                           "error_kind": "unreachable", "notes": []}  # fmt: skip
            outcomes = {"X-1": "error", "X-2": "error"}
        elif i < 90:
            verdict, col = "incomplete", {"error": "interrupted before collection", "error_kind": "interrupted", "notes": []}
            outcomes = {"X-1": "error", "X-2": "error"}
        elif i < 100:
            verdict, col = "rejected", {}
            outcomes = {"X-1": "failed", "X-2": "passed"} if i < 93 else {"X-1": "passed", "X-2": "failed"}
        else:
            verdict, col = "accepted", {}
            outcomes = {"X-1": "passed", "X-2": "passed"}
        mine = [{"node": name, "check": c, "subject": {}, "severity": "high", "outcome": o,
                 "message": f"{name} {c} {o}" if o != "passed" else "", "evidence": [], "source": "s", "waiver": None,
                 "duration_s": 0.0} for c, o in outcomes.items()]  # fmt: skip
        results += mine
        counts = {o: sum(r["outcome"] == o for r in mine) for o in ("passed", "failed", "error", "skipped", "waived")}
        blocking = sorted(c for c, o in outcomes.items() if o != "passed")
        nodes.append({"name": name, "verdict": verdict, "profile": "default", "transport": "ssh", "labels": {},
                      "counts": counts, "blocking": blocking, **({"collection": col} if col else {})})  # fmt: skip
    return {"schema_version": 1, "tool": {"name": "gpu-node-conformance", "version": "t"},
            "started_at": "2026-12-03T10:00:00+00:00", "finished_at": "2026-12-03T10:01:00+00:00", "complete": True,
            "inventory": "synthetic", "nodes": nodes,
            "checks": {c: dict(SPEC, id=c) for c in ("X-1", "X-2")}, "results": results}  # fmt: skip


def test_the_rule():
    doc = _fleet()
    order = [n["name"] for n in sorted(doc["nodes"], key=attention_key)]
    assert order[:10] == [f"gpu-{i:04d}" for i in range(90, 100)]  # rejected first
    assert order[10] == "gpu-0000" and order[60] == "gpu-0050" and order[-1] == f"gpu-{N - 1:04d}"
    assert {cause(n) for n in doc["nodes"][:50]} == {"ssh to <address>: connection timed out"}


def test_not_reached_nodes_count_once_and_attention_order_holds_everywhere(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(_fleet()))
    p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    out = p.stdout
    # the terminal: the fleet line in attention order, the checks counted on judged nodes, one line per cause
    assert f"{N} nodes: 10 rejected, 50 unreachable, 40 incomplete, {N - 100} accepted" in out, out[-3000:]
    assert f"  {'X-2':<34} 7 node(s)" in out and f"  {'X-1':<34} 3 node(s)" in out
    assert "      50 node(s): ssh to <address>: connection timed out" in out
    assert "      40 node(s): interrupted before collection" in out
    listed = re.findall(r"^(gpu-\d{4}) ", out, re.M)
    assert listed[:10] == [f"gpu-{i:04d}" for i in range(90, 100)] and listed[10] == "gpu-0000"
    # summary.md: rejected nodes head the list, the checks count judged nodes, causes once
    md = (tmp_path / "out" / "summary.md").read_text()
    rows = re.findall(r"^\| (gpu-\d{4}) \| (\w+) \|", md, re.M)
    assert rows[:10] == [(f"gpu-{i:04d}", "rejected") for i in range(90, 100)] and len(rows) == 30
    assert "| X-1 | high | 3 |" in md and "| X-2 | high | 7 |" in md
    assert "| 50 | ssh to &lt;address&gt;: connection timed out |" in md and "| 40 | interrupted before collection |" in md
    written = json.loads((tmp_path / "out" / "results.json").read_text())["results"]  # FLEET-CONSISTENT's too
    tally = {o: sum(r["outcome"] == o for r in written) for o in ("passed", "failed", "error", "skipped", "waived")}
    assert "Results: {passed} passed, {failed} failed, {error} errors, {skipped} skipped, {waived} waived.".format(**tally) in md
    # the page: scope list and fleet node list in the same order; the per-check row counts judged nodes
    html = (tmp_path / "out" / "report.html").read_text()
    scope = re.search(r"id='gnc-scope'>(.*?)</section>", html, re.S).group(1)
    assert re.findall(r"href='#node-(gpu-\d{4})'", scope)[:11] == [*(f"gpu-{i:04d}" for i in range(90, 100)), "gpu-0000"]
    every = re.search(r"<table class='fleet' id='gnc-nodes'>(.*?)</table>", html, re.S).group(1)
    assert re.findall(r"<tr id='node-(gpu-\d{4})'>", every)[:11] == [*(f"gpu-{i:04d}" for i in range(90, 100)), "gpu-0000"]
    assert re.search(r"<tr><td>X-1</td>.*?<summary>3 node\(s\)</summary>", html)
    assert "<td class='n'>50</td><td>ssh to &lt;address&gt;: connection timed out</td>" in html


def test_nodes_discovery_could_not_find_are_said_first(tmp_path):
    """A run whose discovery could not list ResourceSlices (tests/test_kube_api.py) may lack the GPU nodes only DRA
    serves: the page's scope and summary.md say so before the verdicts, not only the API access lines."""
    doc = _fleet()
    doc["nodes"], doc["results"] = doc["nodes"][90:100], [r for r in doc["results"] if r["node"] in
                                                          {n["name"] for n in doc["nodes"][90:100]}]  # fmt: skip
    line = ("WARNING: GPU nodes that only DRA serves (no NFD label) may be missing from the audit: the suite's identity "
            "lacks the RBAC permission list on resourceslices.resource.k8s.io")  # fmt: skip
    doc["api_access"] = [line]
    (tmp_path / "results.json").write_text(json.dumps(doc))
    subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                    str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    html = (tmp_path / "out" / "report.html").read_text()
    scope = re.search(r"id='gnc-scope'>(.*?)</section>", html, re.S).group(1)
    assert scope.index("may be missing from the audit") < scope.index("gnc-totals")
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "**WARNING: GPU nodes that only DRA serves (no NFD label) may be missing from the audit" in md


def test_a_fleet_whose_gpu_nodes_may_be_missing_is_never_a_clean_exit(tmp_path):
    """Every node audited accepted, but the discovery could not list ResourceSlices: the nodes only DRA serves are
    unknown, and an unknown is never a pass. The command exits 1 and says why; without that line, 0."""
    doc = _fleet()
    keep = {n["name"] for n in doc["nodes"] if n["verdict"] == "accepted"}
    assert keep
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] in keep]
    doc["results"] = [r for r in doc["results"] if r["node"] in keep]
    line = ("WARNING: GPU nodes that only DRA serves (no NFD label) may be missing from the audit: the suite's identity "
            "lacks the RBAC permission list on resourceslices.resource.k8s.io")  # fmt: skip
    codes = {}
    for case, access in (("clear", []), ("in doubt", [line])):
        doc["api_access"] = access
        (tmp_path / f"{case}.json").write_text(json.dumps(doc))
        p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / f"{case}.json"), "--output",
                            str(tmp_path / case)], capture_output=True, text=True, timeout=300)  # fmt: skip
        codes[case] = (p.returncode, p.stderr)
    assert codes["clear"][0] == 0, codes["clear"][1][-2000:]
    assert codes["in doubt"][0] == 1, codes["in doubt"][1][-2000:]
    assert "may be missing from the audit" in codes["in doubt"][1]
