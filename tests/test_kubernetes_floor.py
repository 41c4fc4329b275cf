"""The oldest `kubernetes` client pyproject.toml allows reads the pod fields the suite reads (issue 53.9):
installed from the package registry into a folder of its own, it deserialises a pod with DRA claims as the API
server writes it, and conformance.cluster.dra reads its claims. Clients 29 and 30 modelled a pod's claim as
`source` (V1ClaimSource) and fail here: the floor is 31."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import json, sys
from kubernetes.client import ApiClient, V1Pod
from conformance.cluster.dra import pod_claims
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
       "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
       "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}]}}
obj = ApiClient()._ApiClient__deserialize(pod, V1Pod)
print(json.dumps(pod_claims(obj)))
"""


def floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("kubernetes")]
    m = re.search(r">=\s*([0-9.]+)", spec)
    assert m, f"pyproject.toml gives the kubernetes client no floor: {spec}"
    return m.group(1)


@pytest.mark.parametrize("version", [floor(), "30.1.0"], ids=["floor", "below-floor"])
def test_the_lowest_allowed_client_reads_pod_claims(tmp_path, version):
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), f"kubernetes=={version}"]
    got = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, f"could not install kubernetes=={version} from the package registry: {got.stderr[-1500:]}"
    env = {"PYTHONPATH": f"{target}:{ROOT}", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    if version == floor():
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == '[{"gpu": "p-gpu-x7k2q"}, {"c": [["gpu", null]]}]'
    else:  # the reason for the floor: this client has no resource_claim_name on a pod's claim
        assert run.returncode != 0 and "resource_claim_name" in run.stderr
