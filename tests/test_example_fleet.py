"""Issue 54 item 11: the example fleet a newcomer renders without a cluster (README), with its typical faults, its
waivers (one applying, one expired) and FLEET-CONSISTENT judged from the snapshots' identity records."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_example_fleet_renders_its_faults(tmp_path):
    (line,) = [x for x in (ROOT / "README.md").read_text().splitlines() if "--snapshot examples/fleet" in x]
    args = shlex.split(line)
    assert args[:2] == [".venv/bin/conformance", "run"]
    args[args.index("--output") + 1] = str(tmp_path / "out")
    p = subprocess.run([sys.executable, "-m", "conformance", *args[1:]], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]  # nodes are rejected: the faults show
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    assert verdicts == {
        "good": "accepted", "good-2": "accepted", "good-3": "accepted", "containerd2": "accepted",
        "bad-kubelet": "rejected", "bad-runtime": "rejected", "bad-state": "rejected", "containerd1": "rejected",
        "no-reserve": "rejected", "down": "unreachable",
    }  # fmt: skip
    by = {(r["node"], r["check"]): r for r in doc["results"]}
    assert by[("bad-kubelet", "KUBELET-CPU-POLICY")]["outcome"] == "failed"
    assert by[("bad-runtime", "RUNTIME-SYSTEMD-CGROUP")]["outcome"] == "failed"
    assert by[("no-reserve", "KUBELET-RESERVED-CPUS")]["outcome"] == "failed"
    assert by[("bad-state", "NODE-NUMA-TOPOLOGY")]["outcome"] == "waived"  # the waiver that applies
    expired = by[("bad-runtime", "SYSCTL-SOMAXCONN")]
    assert expired["outcome"] == "failed" and re.search(r"waiver #\d+ expired on 2026-01-31", expired["message"])
    # FLEET-CONSISTENT is judged from the identity records: the odd node of each pool is named
    drift = by[("containerd1", "FLEET-CONSISTENT")]
    assert drift["outcome"] == "failed" and "runtime containerd 1.7.27, while 4 of 5 nodes in pool gpu-a100" in drift["message"]
    assert by[("good", "FLEET-CONSISTENT")]["outcome"] == "passed"
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Not accepted (6 of 10)" in html and "owner platform-gpu@example.com" in html
