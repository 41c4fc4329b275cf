"""Under pytest-xdist: each node's checks stay in one worker (one collection per node), the controller
gathers every result and every node's collection summary, and the outputs match a serial run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.nodes import EXPECTED, VERDICTS

pytestmark = pytest.mark.lab
SUITES = Path(__file__).resolve().parent.parent / "suites"


def test_xdist_run_gives_the_serial_verdicts(lab, tmp_path):
    (tmp_path / "inv.yaml").write_text(lab.inventory())
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITES), "-c", "/dev/null", "--rootdir", str(SUITES.parent),
         "-p", "no:cacheprovider", "-n", "2", "-v",
         f"--inventory={tmp_path / 'inv.yaml'}", f"--results-json={out / 'results.json'}", f"--html={out / 'report.html'}",
         "--self-contained-html", f"--junit={out / 'junit.xml'}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    doc = json.loads((out / "results.json").read_text())
    got: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        got.setdefault(r["node"], {})[r["check"]] = r["outcome"]
    assert got == EXPECTED, p.stdout[-3000:]
    assert {n["name"]: n["verdict"] for n in doc["nodes"]} == VERDICTS
    # one collection per node although two workers ran: the node's checks never split across them
    runs = {n["name"]: n["collection"]["remote_executions"] for n in doc["nodes"]}
    assert runs == {name: (0 if name == "down" else 1) for name in EXPECTED}
    # and by where each check ran (-v names the worker of each): a node whose checks two workers shared was collected
    # twice, which the summaries above cannot show (the controller keeps one of them); pytest 9.2 did that to
    # pytest-xdist's loadgroup
    workers: dict[str, set[str]] = {}
    for m in re.finditer(r"^\[(gw\d+)\] .*?suites/\S+?\[([^]/]+)[]/]", p.stdout, re.M):
        workers.setdefault(m.group(2), set()).add(m.group(1))
    assert set(workers) == set(EXPECTED) and all(len(w) == 1 for w in workers.values()), workers
    assert "gnc_result" not in (out / "junit.xml").read_text()
    assert "good" in (out / "report.html").read_text()
