"""A merged or re-rendered report writes, result for result, what the live run wrote: the same results
and node verdicts in results.json, the same JUnit, the same Prometheus series of check results. Only
the run's own metadata (when it finished, what it was read from) may differ. And a live run with one pytest
item per node writes what the same run with one item per check writes (but for the checks' durations)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.check_fleet import fleet_snapshots
from tests.test_cli_local import sample_host_root


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


def check_series(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("gpu_node_conformance_check_result")]


@pytest.mark.slow  # run, report and merge end to end
def test_report_and_merge_write_what_the_live_run_wrote(tmp_path):
    host = sample_host_root(tmp_path / "host")
    live = tmp_path / "live"
    conformance("run", "--host-root", str(host), "--output", str(live))
    commands = [["report", str(live / "results.json")], ["merge", str(live)]]
    # one pytest item per node instead of per result (the fleet-scale path): the same outputs
    commands += [["report", str(live / "results.json"), "--items", "node"], ["merge", str(live), "--items", "node"]]
    for command in commands:
        out = tmp_path / "-".join(command[:1] + command[2:]).replace("--", "")
        p = conformance(*command, "--output", str(out))
        assert (out / "results.json").is_file(), p.stdout + p.stderr
        a, b = json.loads((live / "results.json").read_text()), json.loads((out / "results.json").read_text())
        assert b["results"] == a["results"] and b["nodes"] == a["nodes"] and b["checks"] == a["checks"], command
        assert (out / "junit.xml").read_bytes() == (live / "junit.xml").read_bytes(), command
        assert check_series(out / "results.prom") == check_series(live / "results.prom"), command
        # a replay adds when the audits it holds ran and when it began (issue 54 item 9)
        assert set(b) - set(a) == {"audits", "replayed_at"} and b["audits"]["started_at"] == a["started_at"]
        assert {k for k in a if a[k] != b[k]} <= {"finished_at", "inventory", "started_at"}


def html_rows(path: Path) -> dict[str, list[dict]]:
    """pytest-html's table as its page carries it (one JSON blob), each row without its duration."""
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', path.read_text()).group(1)))
    rows = {}
    for test_id, entries in blob["tests"].items():
        rows[test_id] = [
            dict(e, duration="", resultsTableRow=[c for c in e["resultsTableRow"] if 'class="col-duration"' not in c])
            for e in entries
        ]
    return rows


def untimed_junit(path: Path) -> str:
    return re.sub(r' (time|timestamp)="[^"]*"', "", path.read_text())


@pytest.mark.slow  # runs in both item modes end to end
def test_a_live_run_with_one_item_per_node_writes_what_one_item_per_check_writes(tmp_path):
    fleet = fleet_snapshots(tmp_path, 3)
    outs = {}
    for mode in ("check", "node"):
        outs[mode] = tmp_path / mode
        p = conformance("run", "--snapshot", str(fleet), f"--items={mode}", "--output", str(outs[mode]))
        assert (outs[mode] / "results.json").is_file(), p.stdout + p.stderr
    a, b = (json.loads((outs[m] / "results.json").read_text()) for m in ("check", "node"))
    untimed = [[{k: v for k, v in r.items() if k != "duration_s"} for r in d["results"]] for d in (a, b)]
    assert untimed[0] == untimed[1] and len(untimed[0]) > 100
    assert a["nodes"] == b["nodes"] and a["checks"] == b["checks"]
    assert untimed_junit(outs["check"] / "junit.xml") == untimed_junit(outs["node"] / "junit.xml")
    assert check_series(outs["check"] / "results.prom") == check_series(outs["node"] / "results.prom")
    rows = html_rows(outs["check"] / "report.html")
    assert rows == html_rows(outs["node"] / "report.html") and len(rows) > 100
