"""The oldest `kubernetes` client pyproject.toml allows reads the pod fields the suite reads (issues 53.9, 52.3):
installed from the package registry into a folder of its own, it deserialises a pod with DRA claims and a DRA
extended resource as the API server writes them, and conformance.cluster.dra reads its claims. Clients 29 and 30
modelled a pod's claim as `source` (V1ClaimSource); clients before 34 have no status.extendedResourceClaimStatus
and drop it while deserialising (the special claim's GPU would pass for a device plugin's): the floor is 34.1."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # old kubernetes client releases, each installed in a venv of its own

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import json, sys
from kubernetes.client import ApiClient, V1Pod
from conformance.cluster.dra import pod_claims
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
       "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
       "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}],
                  "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-q8w4n", "requestMappings":
                      [{"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]}}}
obj = ApiClient()._ApiClient__deserialize(pod, V1Pod)
print(json.dumps(pod_claims(obj)))
"""


def floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("kubernetes")]
    m = re.search(r">=\s*([0-9.]+)", spec)
    assert m, f"pyproject.toml gives the kubernetes client no floor: {spec}"
    return m.group(1)


@pytest.mark.parametrize("version", [floor(), "33.1.0", "30.1.0"], ids=["floor", "below-floor", "before-claim-names"])
def test_the_lowest_allowed_client_reads_pod_claims(tmp_path, version):
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), f"kubernetes=={version}"]
    got = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, f"could not install kubernetes=={version} from the package registry: {got.stderr[-1500:]}"
    env = {"PYTHONPATH": f"{target}:{ROOT}", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    whole = (
        '[{"gpu": "p-gpu-x7k2q", "(extended resources)": "p-extended-resources-q8w4n"}, '
        '{"c": [["gpu", null], ["(extended resources)", "container-0-request-0"]]}]'
    )
    if version == floor():
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == whole
    elif version == "33.1.0":  # the reason for the floor: the extended resource's claim is lost without a word
        assert run.returncode == 0 and run.stdout.strip() == '[{"gpu": "p-gpu-x7k2q"}, {"c": [["gpu", null]]}]'
    else:  # and before 31 no resource_claim_name on a pod's claim
        assert run.returncode != 0 and "resource_claim_name" in run.stderr
