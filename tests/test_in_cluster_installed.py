"""In-cluster mode end to end, from what users install: the container command, environment, volumes
and security context of `conformance manifests` (the DaemonSet and the Job form), run from the
installed wheel inside a lab node's namespaces with the node's root read-only at /host; the pod logs
merged by `conformance merge` give the SSH audit's verdicts for those nodes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from conformance.cluster.manifests import RESULTS_END
from tests.lab.nodes import EXPECTED_ALONE
from tests.podrun import run_container
from tests.test_lab_audit import outcomes

pytestmark = pytest.mark.lab


def _pod(installed, tmp_path: Path, *args: str) -> dict:
    p = installed.conformance("manifests", *args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (workload,) = [o for o in yaml.safe_load_all(p.stdout) if o["kind"] in ("DaemonSet", "Job")]
    return workload["spec"]["template"]["spec"]


@pytest.fixture
def scratch():
    """The image's mount point: /dev/shm is this machine's, outside every node's writable layers."""
    d = Path("/dev/shm") / f"gnc-image-{os.getpid()}"
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(("form", "node"), [("daemonset", "good"), ("job", "bad-runtime"), ("job", "hostile")])
def test_the_in_cluster_command_gives_the_ssh_verdicts(installed_wheel, lab, tmp_path, scratch, form, node):
    pod = (
        _pod(installed_wheel, tmp_path, "--daemonset") if form == "daemonset" else _pod(installed_wheel, tmp_path, "--node", node)
    )
    run = run_container(
        pod, node, lab.node_pid(node), installed_wheel.venv, scratch, until=RESULTS_END if form == "daemonset" else None
    )
    if form == "job":
        assert run.returncode == 1  # a rejected node: the Job's pod fails, as `conformance run` exits 1
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / f"{node}.log").write_text(run.log)
    p = installed_wheel.conformance("merge", "logs", "--expect", node, "--output", "merged", cwd=tmp_path)
    doc = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert outcomes(doc) == {node: EXPECTED_ALONE[node]}, p.stderr[-2000:]
    (entry,) = doc["nodes"]
    assert entry["transport"] == "local" and entry["collection"]["remote_executions"] == 1
    assert p.returncode == (0 if node == "good" else 1)
