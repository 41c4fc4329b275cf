"""Several nodes' snapshots from one real collection (the sample host root, collected by the real
collector through the local transport), renamed: a fleet to run checks on without SSH or root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_cli_local import sample_host_root


def fleet_snapshots(tmp: Path, nodes: int) -> Path:
    """A folder of `nodes` snapshots (node-000, node-001, ...) of the sample host root."""
    one = tmp / "one-snapshot"
    host = sample_host_root(tmp / "host")
    argv = [sys.executable, "-m", "conformance", "collect", "--host-root", str(host), "--output", str(one)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    (snapshot,) = one.glob("*.json")
    doc = json.loads(snapshot.read_text())
    folder = tmp / f"fleet-{nodes}"
    folder.mkdir()
    for i in range(nodes):
        doc["node"] = f"node-{i:03d}"
        (folder / f"node-{i:03d}.json").write_text(json.dumps(doc))
    return folder
