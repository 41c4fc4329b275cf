"""Issue 52 item 5: exclusive CPUs from a DRA CPU driver (kubernetes-sigs/dra-driver-cpu) instead of the kubelet's
CPU manager, with the profile's `pods.cpu_source: dra`. The pods themselves are judged on real lab processes in
tests/test_lab_dra.py; here the driver's record (its CDI specs) and the kubelet rule, through the real collector
and checks over a host root."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.errors import FactUnavailable, ParseError
from conformance.facts.cdi import cdi_registry
from conformance.facts.dra_cpu import DraCpuAssignments, claim_cpu_sets
from tests.test_cli_local import sample_host_root

SAMPLE = Path(__file__).parent / "samples" / "cdi.dra-driver-cpu.claim.constructed.json"
UID = "3f9c2d51-8a7e-4b1c-9d20-6e5f4a3b2c10"
PATH = f"/var/run/cdi/dra.k8s.io-cpu_claim-{UID}.json"


def test_the_drivers_cdi_spec_is_its_record_of_a_claims_cpus():
    """pkg/driver/cdi.go AddDevice: kind dra.k8s.io/cpu, device claim-<UID>, env DRA_CPUSET_<UID>=<cpulist>."""
    reg = cdi_registry([(1, PATH, SAMPLE.read_text())])
    sets = claim_cpu_sets(reg)
    assert sets == {UID: (frozenset(range(8, 16)), PATH)}
    state = DraCpuAssignments.of(sets, frozenset(range(32)))
    assert state.default_cpus == frozenset(range(8)) | frozenset(range(16, 32))
    assert state.entries == {f"DRA claim {UID}": {"": frozenset(range(8, 16))}}


def test_a_spec_of_the_driver_that_does_not_parse_leaves_the_allocations_unknown():
    reg = cdi_registry([(1, PATH, "{not yaml: [")])
    with pytest.raises(FactUnavailable, match=f"the DRA CPU driver's CDI spec {PATH} could not be read"):
        claim_cpu_sets(reg)


def test_a_claim_device_without_its_cpuset_is_a_parse_error():
    spec = json.loads(SAMPLE.read_text())
    spec["devices"][0]["containerEdits"]["env"] = ["OTHER=1"]
    with pytest.raises(ParseError, match=f"sets DRA_CPUSET_{UID} 0 times"):
        claim_cpu_sets(cdi_registry([(1, PATH, json.dumps(spec))]))


def _policy(tmp_path: Path, policy: str) -> dict:
    root = sample_host_root(tmp_path / f"host-{policy}")
    conf = root / "kubelet-cwd" / "kubelet.yaml"
    conf.write_text(re.sub(r"(?m)^cpuManagerPolicy: .*$", f"cpuManagerPolicy: {policy}", conf.read_text()))
    (tmp_path / "profile.yaml").write_text("extends: default\npods:\n  cpu_source: dra\n")
    out = tmp_path / f"out-{policy}"
    subprocess.run([sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--profile",
                    str(tmp_path / "profile.yaml"), "--output", str(out), "--", "-k", "test_cpu_manager_policy"],
                   capture_output=True, text=True, timeout=300)  # fmt: skip
    return next(r for r in json.loads((out / "results.json").read_text())["results"] if r["check"] == "KUBELET-CPU-POLICY")


@pytest.mark.parametrize(("policy", "outcome"), [("static", "failed"), ("none", "passed")])
def test_with_cpus_from_a_dra_driver_the_kubelet_runs_policy_none(tmp_path, policy, outcome):
    """dra-driver-cpu docs/user/configuration.md: the CPU manager and the driver are mutually incompatible."""
    r = _policy(tmp_path, policy)
    assert r["outcome"] == outcome, r["message"]
    if outcome == "failed":
        assert "must be 'none'" in r["message"] and "both write the containers' cpusets" in r["message"]


def test_how_many_cpus_a_claim_was_allocated_in_either_mode():
    """dra-driver-cpu's individual mode allocates one device per CPU; its grouped mode one NUMA-node device with
    the consumed capacity dra.cpu/cpu (DeviceRequestAllocationResult.consumedCapacity, KEP-5075). Results of other
    drivers and admin access are no CPUs of the container."""
    from conformance.cluster.dra import claimed_cpus
    from tests.fakeapi import resource_claim

    individual = resource_claim("ml", "cpus-4", [("cpus", "dra.cpu", "n1", f"cpu{i:03d}") for i in range(4)], [])
    assert claimed_cpus(individual, None, ("dra.cpu",)) == 4
    grouped = resource_claim(
        "ml", "cpus-10", [("cpus", "dra.cpu", "n1", "cpudevnuma000"), ("gpu", "gpu.nvidia.com", "n1", "gpu-0")], []
    )
    grouped["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"dra.cpu/cpu": "10"}
    assert claimed_cpus(grouped, None, ("dra.cpu",)) == 10
    assert claimed_cpus(grouped, "gpu", ("dra.cpu",)) == 0
    grouped["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"dra.cpu/cpu": "1500m"}
    with pytest.raises(FactUnavailable, match=r"consumedCapacity dra\.cpu/cpu is '1500m', not whole CPUs"):
        claimed_cpus(grouped, None, ("dra.cpu",))


def test_a_cpu_claim_that_cannot_be_counted_leaves_only_its_container_unknown(tmp_path):
    """A grouped claim whose consumed capacity is no whole number of CPUs: that container's DRA record carries
    the error (its checks say error), and the pod beside it is still listed and judged."""
    from conformance.cluster.api import api_client
    from conformance.cluster.dra import DraReader
    from conformance.cluster.pods import gpu_pods
    from conformance.config.kubernetes import KubeSpec
    from tests.fakeapi import kubeconfig, pod_object, resource_claim, serve
    from tests.kube_fixtures import fake_api

    api = fake_api()
    gpu = {
        "requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
    }
    for name in ("odd", "plain"):
        app = {"name": "app", "resources": {**gpu, **({"claims": [{"name": "cpus"}]} if name == "odd" else {})}}
        claims = [{"name": "cpus", "resourceClaimName": "cpus-odd"}] if name == "odd" else None
        api.add_pod(pod_object("ml", name, f"uid-{name}", "n1", [app], resource_claims=claims))
    claim = resource_claim("ml", "cpus-odd", [("cpus", "dra.cpu", "n1", "cpudevnuma000")], [("odd", "uid-odd")])
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"dra.cpu/cpu": "1500m"}
    api.claims[("ml", "cpus-odd")] = claim
    with serve(api) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, "full-token"))
        client = api_client(KubeSpec(kubeconfig=str(tmp_path / "kc")))
        pods = {p.name: p for p in gpu_pods(client, "n1", dra=DraReader(client), cpu_drivers=("dra.cpu",))}
    assert "not whole CPUs" in (pods["odd"].containers[0]["dra"].error or "")
    assert pods["plain"].containers[0]["dra"].error is None
