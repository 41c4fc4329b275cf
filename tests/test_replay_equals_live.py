"""A merged or re-rendered report writes, result for result, what the live run wrote: the same results
and node verdicts in results.json, the same JUnit, the same Prometheus series of check results. Only
the run's own metadata (when it finished, what it was read from) may differ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_cli_local import sample_host_root


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


def check_series(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("gpu_node_conformance_check_result")]


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
        assert set(a) == set(b) and {k for k in a if a[k] != b[k]} <= {"finished_at", "inventory", "started_at"}
