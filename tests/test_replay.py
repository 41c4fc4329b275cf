"""Re-rendering and merging results.json through a pytest session: same verdicts, same outcomes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fakeroot import make_host_root


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=120)


def key(doc):
    return sorted((r["node"], r["check"], r["outcome"], r["message"]) for r in doc["results"])


@pytest.mark.slow  # run, report and merge end to end
def test_rerender_and_merge(tmp_path):
    h = make_host_root(tmp_path / "h", ["--config", "/k.yaml"], {"/k.yaml": "kind: KubeletConfiguration\n"})
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"nodes:\n  - {{name: n1, transport: local, host_root: {h}}}\n  - {{name: n2, transport: local, host_root: {h}}}\n"
    )
    conformance("run", "--inventory", str(inv), "--output", str(tmp_path / "live"))
    live = json.loads((tmp_path / "live" / "results.json").read_text())
    p = conformance("report", str(tmp_path / "live" / "results.json"), "--output", str(tmp_path / "again"))
    assert p.returncode == 1, p.stderr
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert key(again) == key(live)
    assert [(n["name"], n["verdict"], n["counts"]) for n in again["nodes"]] == [
        (n["name"], n["verdict"], n["counts"]) for n in live["nodes"]
    ]
    html = (tmp_path / "again" / "report.html").read_text()
    assert "Node x check matrix" in html and "replayed from" in html
    # a rerun of n2 only, with the kubelet config now good: merged, the later run wins for n2
    (h / "k.yaml").write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\n")
    inv2 = tmp_path / "inv2.yaml"
    inv2.write_text(f"nodes:\n  - {{name: n2, transport: local, host_root: {h}}}\n")
    conformance("run", "--inventory", str(inv2), "--output", str(tmp_path / "rerun"))
    m = conformance(
        "report",
        str(tmp_path / "rerun" / "results.json"),
        str(tmp_path / "live" / "results.json"),
        "--output",
        str(tmp_path / "merged"),
    )
    assert m.returncode == 1
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    outcome = {(r["node"], r["check"]): r["outcome"] for r in merged["results"]}
    assert outcome[("n1", "KUBELET-CPU-POLICY")] == "failed" and outcome[("n2", "KUBELET-CPU-POLICY")] == "passed"
    assert [n["name"] for n in merged["nodes"]] == ["n1", "n2"]
    assert conformance("report", str(tmp_path / "missing.json")).returncode == 4
