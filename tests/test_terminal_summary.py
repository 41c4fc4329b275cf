"""What the command line prints for CI logs: plain progress lines (no carriage returns or escape codes) when
stderr is not a terminal, and a roll-up per blocking check and per unreachable reason for many nodes failing
alike, from the real `conformance report` over a synthetic fleet."""

from __future__ import annotations

import json
import subprocess
import sys

from conformance.collection import collect
from conformance.collection.bundle import Bundle
from conformance.commands.summary import rollup
from tests.test_fleet_report import fleet


def test_a_ci_log_gets_plain_progress_lines(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(collect, "CI_PROGRESS_EVERY_S", 0.0)
    show = collect.stderr_progress(False, lines.append, tty=False)
    assert show is not None
    for i in range(3):
        show(i + 1, 3, Bundle(node=f"n{i}", error="ssh: timed out" if i == 1 else None, duration_s=0.1))
    assert lines and all("\r" not in x and "\033" not in x and x.endswith("\n") for x in lines)
    assert lines[-1] == "collecting 3/3 nodes (1 not collected so far)\n"
    verbose: list[str] = []
    show = collect.stderr_progress(True, verbose.append, tty=False)
    show(1, 1, Bundle(node="n0", duration_s=0.1))
    assert len(verbose) == 1 and verbose[0].startswith("collecting 1/1 nodes  n0: ok in") and "\r" not in verbose[0]


def test_many_nodes_failing_alike_are_rolled_up_per_check_and_reason(tmp_path):
    doc = fleet(120)
    (tmp_path / "results.json").write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    rejected = sum(1 for n in doc["nodes"] if n["verdict"] == "rejected")
    assert "blocking checks by nodes affected:" in p.stdout, p.stdout[-3000:]
    assert f"  {'X-1':<34} {rejected} node(s)" in p.stdout  # the unreachable node errs on X-1 too: counted under its cause
    assert "not reached, by cause:\n       1 node(s): ssh: timed out" in p.stdout
    # nodes failing alike share one line: their own names and addresses are left out of the cause
    refused = "ssh to 10.0.0.{}:22: Connection refused (after 3 attempts)"
    nodes = [{"name": f"n{i}", "verdict": "unreachable", "blocking": ["X-1"], "collection": {"error": refused.format(i)}}
             for i in range(3)]  # fmt: skip
    assert rollup(nodes, 10) == [
        "not reached, by cause (of the first 3 nodes not accepted):",
        "       3 node(s): ssh to <address>: Connection refused (after 3 attempts)",
    ]


def test_the_markdown_summary_counts_nodes_per_pool(tmp_path):
    doc = fleet(60)
    (tmp_path / "results.json").write_text(json.dumps(doc))
    subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                    str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| pool (`pool`) | rejected | unreachable | incomplete | accepted |" in md
    for pool in ("h100-a", "h200-b"):
        mine = [n for n in doc["nodes"] if n["labels"]["pool"] == pool]
        row = [sum(n["verdict"] == v for n in mine) for v in ("rejected", "unreachable", "incomplete", "accepted")]
        assert f"| {pool} | " + " | ".join(map(str, row)) + " |" in md
