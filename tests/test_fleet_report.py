"""The report at fleet scale: above MATRIX_MAX_NODES nodes the fleet view replaces the node x check
matrix (verdict counts per profile and per node pool, failing checks by pool expanding to the failing
nodes, every node listed and searchable); Prometheus series stay bounded above PROM_RESULT_SERIES_MAX
results. Synthetic results, rendered by the real `conformance report`."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from conformance.config.fleet import group_label
from conformance.outputs import PROM_RESULT_SERIES_MAX, prometheus_text
from conformance.outputs.fleet_view import MATRIX_MAX_NODES

POOLS = ("h100-a", "h200-b")
SPEC = {"id": "", "severity": "high", "title": "t", "rationale": "r", "remediation": "fix", "source": "s", "family": "kubelet"}


def fleet(nodes: int, checks: int = 2) -> dict:
    """Node i fails check X-1 when i % 7 == 0 (on both pools); node 3 is unreachable."""
    results, rows = [], []
    for i in range(nodes):
        name = f"gpu-{i:04d}"
        mine = []
        for c in range(checks):
            outcome = "error" if i == 3 else "failed" if (c == 1 and i % 7 == 0) else "passed"
            mine.append({"node": name, "check": f"X-{c}", "subject": {}, "severity": "high", "outcome": outcome,
                         "message": f"<b>{name}</b> X-{c} {outcome}" if outcome != "passed" else "", "evidence": [],
                         "source": "s", "waiver": None, "duration_s": 0.0})  # fmt: skip
        results += mine
        counts = {o: sum(r["outcome"] == o for r in mine) for o in ("passed", "failed", "error", "skipped", "waived")}
        verdict = "unreachable" if i == 3 else "rejected" if i % 7 == 0 else "accepted"
        down = {"collection": {"error": "ssh: timed out", "error_kind": "unreachable", "notes": []}} if i == 3 else {}
        rows.append({"name": name, "verdict": verdict, "profile": "default", "transport": "ssh",
                     "labels": {"pool": POOLS[i % 2]}, "counts": counts, "blocking": ["X-1"] if verdict == "rejected" else [],
                     **down})  # fmt: skip
    return {"schema_version": 1, "tool": {"name": "gpu-node-conformance", "version": "t"},
            "started_at": "2026-12-03T10:00:00+00:00", "finished_at": "2026-12-03T10:01:00+00:00", "complete": True,
            "inventory": "synthetic", "nodes": rows,
            "checks": {f"X-{c}": dict(SPEC, id=f"X-{c}") for c in range(checks)}, "results": results}  # fmt: skip


def test_a_large_run_gets_the_fleet_view(tmp_path):
    n = MATRIX_MAX_NODES + 1
    (tmp_path / "results.json").write_text(json.dumps(fleet(n)))
    p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Fleet overview" in html, p.stderr[-2000:]
    assert "<table class='m'>" not in html  # no node x check matrix at this size
    failing = [i for i in range(n) if i % 7 == 0 and i != 3]
    assert f"{n} nodes: <span class='verdict v-accepted'>{n - len(failing) - 1} accepted</span>" in html
    assert "Nodes grouped by label <code>pool</code>" in html
    # X-1 failed on nodes of both pools: the row counts per pool and expands to each node and its message, escaped
    row = re.search(r"<tr><td>X-1</td><td><b>high: blocks</b></td>(.*?)</tr>", html).group(1)
    x1 = failing  # the unreachable node errs on every check: it counts once, under its cause, not here
    per_pool = [sum(1 for i in x1 if i % 2 == k) for k in (0, 1)]
    assert re.findall(r"<td class='n hot'>(\d+)</td>", row) == [str(c) for c in per_pool]
    assert f"<summary>{len(x1)} node(s)</summary>" in row and "&lt;b&gt;gpu-0007&lt;/b&gt; X-1 failed" in row
    # every node is in the searchable list; the verdict table keeps only those that need attention
    listed = re.search(r"<table class='fleet' id='gnc-nodes'>(.*?)</table>", html).group(1)
    assert all(f">gpu-{i:04d}</a></td>" in listed for i in range(n))
    assert "Showing the" in html and "ssh: timed out" in listed
    assert "<h3>Not reached, by cause</h3>" in html and "<td class='n'>1</td><td>ssh: timed out</td>" in html


def test_the_group_label_is_found_or_named():
    nodes = fleet(4)["nodes"]
    assert group_label(nodes, None) == "pool"
    assert group_label(nodes, "topology.kubernetes.io/zone") == "topology.kubernetes.io/zone"
    assert group_label([dict(x, labels={}) for x in nodes], None) is None  # then the profile groups them


def test_prometheus_series_stay_bounded():
    doc = fleet(PROM_RESULT_SERIES_MAX // 2 + 1)  # two results per node: just above the bound
    text = prometheus_text(doc)
    per_result = [line for line in text.splitlines() if line.startswith("gpu_node_conformance_check_result{")]
    not_passed = [r for r in doc["results"] if r["outcome"] != "passed"]
    assert len(per_result) == len(not_passed) and all('outcome="passed"' not in line for line in per_result)
    counts = {line.split("{")[1].split("}")[0]: int(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("gpu_node_conformance_check_outcomes{")}  # fmt: skip
    assert sum(counts.values()) == len(doc["results"])
    assert counts['check="X-0",severity="high",outcome="passed"'] == len(doc["nodes"]) - 1
    small = prometheus_text(fleet(10))
    assert sum(line.startswith("gpu_node_conformance_check_result{") for line in small.splitlines()) == 20  # all, below the bound


def test_the_fleet_view_ranks_what_blocks_before_what_is_widespread(tmp_path):
    """A low-severity check failing on every node is listed after the high one that rejects a seventh of
    them; each check's remediation is shown once, on its row."""
    n = MATRIX_MAX_NODES + 1
    doc = fleet(n)
    doc["checks"]["X-0"] = dict(SPEC, id="X-0", severity="low", remediation="tune the low thing")
    for r in doc["results"]:
        if r["check"] == "X-0":
            r.update(severity="low", outcome="failed", message="low")
    (tmp_path / "results.json").write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    html = (tmp_path / "out" / "report.html").read_text()
    table = html[html.index("Failed or errored checks by group") :]
    high, low = table.index("<tr><td>X-1</td>"), table.index("<tr><td>X-0</td>")
    assert high < low, p.stderr[-2000:]
    assert table[low : table.index("</tr>", low)].count("tune the low thing") == 1
    assert "<b>high: blocks</b>" in table[high : table.index("</tr>", high)]


def test_a_checks_folded_lines_count_results_not_nodes():
    """A check failing with one message on two GPUs of each of 30 nodes: its one line holds all 60 results (30
    nodes), and nothing is said to be left out; a second message on 5 nodes is its own line."""
    from conformance.outputs.fleet_view import _Failing

    f = _Failing("high")
    for i in range(30):
        node = f"gpu-{i:03d}"
        for gpu in (0, 1):
            f.add(node, "pool-a", {"outcome": "failed", "message": "link trained at x8", "subject": {"gpu": gpu}})
        if i < 5:
            f.add(node, "pool-a", {"outcome": "error", "message": "replay counter not readable"})
    html = f.lines("GPU-PCIE-LINK")
    assert "<b>30 node(s)</b> failed: link trained at x8" in html
    assert "<b>5 node(s)</b> error: replay counter not readable" in html
    assert "more failing result(s)" not in html, html
