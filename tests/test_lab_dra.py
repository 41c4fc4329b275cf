"""GPUs allocated through DRA ResourceClaims, judged on real lab pods (real processes with real CPU
affinity and /dev/nvidia<N> nodes) through the wire-level fake API server, which serves resource.k8s.io
as k8s.io/api/resource/v1 defines it. The node lays NUMA node 0 on cpu0 with GPU0 (0000:18:00.0) and NUMA
node 1 on cpu1 with GPU1 (0000:9a:00.0), as tests/test_lab_pods.py does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fakeapi import kubeconfig, node_object, resource_claim, resource_slice, serve
from tests.gpu_standins import build_standins, driver_files
from tests.kube_fixtures import fake_api
from tests.lab import pods as labpods
from tests.lab.builder import Lab, NodeSpec
from tests.lab.gpu_nodes import pci, require_two_cpu_gpu_lab, two_gpu_config
from tests.lab.pods import LabPod

pytestmark = pytest.mark.lab
NODE = "gpu-dra"
DRIVER = "gpu.nvidia.com"
UUID0, UUID1 = "GPU-00000000-0000-4000-8000-000000000018", "GPU-00000000-0000-4000-8000-00000000009A"
GOOD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _dra(name: str, cpus: str, gpus: list[int], **kw) -> LabPod:
    return LabPod(name, f"uid-{name}", cpus, gpus=gpus, env=GOOD, shm_mib=2048, gpu_count=0, **kw)


PODS = [
    _dra("dra-aligned", "0", [0], claims={"gpu": "aligned-gpu"}),  # cpu0 and GPU0, both NUMA 0
    _dra("dra-far", "1", [0], claim_templates={"gpu": "dra-far-gpu-x7k2p"}),  # cpu1 (NUMA 1), GPU0 (NUMA 0)
    _dra("dra-two", "0", [0, 1], claims={"gpus": "two-gpus"}),  # GPU0 and GPU1 across both NUMA nodes
    _dra("dra-shared-a", "1", [1], claims={"gpu": "shared-gpu"}),  # one claim, two pods, GPU1 beside cpu1
    _dra("dra-shared-b", "1", [1], claims={"gpu": "shared-gpu"}),
    _dra("dra-mig", "1", [1], claims={"mig": "mig-slice"}),  # a MIG device of GPU1: its parent's NUMA node counts
    LabPod("plugin", "uid-plugin", "0", gpus=[0], env=GOOD, shm_mib=2048),  # the device plugin's nvidia.com/gpu
    # nvidia.com/gpu served by DRA (KEP-5004: a DeviceClass's extendedResourceName): the scheduler's special claim
    # holds GPU0 (NUMA 0) for a container pinned to cpu1 (NUMA 1), which no Topology Manager aligned
    LabPod(
        "dra-extended",
        "uid-dra-extended",
        "1",
        gpus=[0],
        env=GOOD,
        shm_mib=2048,
        extended_claim=("dra-extended-extended-resources-q8w4n", "container-0-request-0"),
    ),
]
CLAIMS = {
    "aligned-gpu": (["gpu", DRIVER, NODE, "gpu-0"], ["dra-aligned"]),
    "dra-far-gpu-x7k2p": (["gpu", DRIVER, NODE, "gpu-0"], ["dra-far"]),
    "two-gpus": ([("gpus", DRIVER, NODE, "gpu-0"), ("gpus", DRIVER, NODE, "gpu-1")], ["dra-two"]),
    "shared-gpu": (["gpu", DRIVER, NODE, "gpu-1"], ["dra-shared-a", "dra-shared-b"]),
    "mig-slice": (["mig", DRIVER, NODE, "gpu-1-mig-1g10gb-0"], ["dra-mig"]),
    "dra-extended-extended-resources-q8w4n": (["container-0-request-0", DRIVER, NODE, "gpu-0"], ["dra-extended"]),
}


def _attrs(**kw: str) -> dict:
    return {k: {"string": v} for k, v in kw.items()}


def slices(pci_attr: str = "resource.kubernetes.io/pciBusID") -> list[dict]:
    """The node's slice as NVIDIA's GPU DRA driver publishes it: GPU0 with the PCI attribute under `pci_attr`
    (pcieBusID before v25.12.0), GPU1 with none, and a MIG device of GPU1 naming its parent."""
    devices = [
        {
            "name": "gpu-0",
            "attributes": _attrs(type="gpu", uuid=UUID0, productName="Stand-in H100", **{pci_attr: "0000:18:00.0"}),
        },
        {"name": "gpu-1", "attributes": _attrs(type="gpu", uuid=UUID1, productName="Stand-in H100")},
        {"name": "gpu-1-mig-1g10gb-0", "attributes": _attrs(type="mig", uuid="MIG-7c1e", parentUUID=UUID1, profile="1g.10gb")},
    ]
    return [resource_slice(f"{NODE}-gpu.nvidia.com-abcde", NODE, DRIVER, NODE, devices)]


def prepared(skip: str | None = None) -> str:
    """The node's DRA checkpoint: every claim of CLAIMS prepared for its pods (but `skip`)."""
    uids = {p.name: p.uid for p in PODS}
    entries = []
    for name, (results, holders) in CLAIMS.items():
        if name == skip:
            continue
        rows = [tuple(results)] if isinstance(results[0], str) else results
        devices = [{"PoolName": pool, "DeviceName": dev, "RequestNames": [req], "CDIDeviceIDs": [f"k8s.{drv}/gpu={dev}"]}
                   for req, drv, pool, dev in rows]  # fmt: skip
        entries.append({"ClaimUID": f"uid-{name}", "ClaimName": name, "Namespace": "inference",
                        "PodUIDs": {uids[h]: {} for h in holders}, "DriverState": {DRIVER: {"Devices": devices}}})  # fmt: skip
    return labpods.dra_checkpoint(entries)


def claim_uid(name: str) -> str:
    return resource_claim("inference", name, [], [])["metadata"]["uid"]


# What kubernetes-sigs/dra-driver-cpu writes for each claim it prepared (pkg/driver/cdi.go AddDevice, as
# specs-go.Spec marshals: cdiVersion 0.8.0, kind dra.k8s.io/cpu, one device claim-<UID> whose only edit is the
# DRA_CPUSET_<UID> variable its NRI plugin pins the container to); the file name is GenerateTransientSpecName's.
# The lab prepares CPU claims for dra-aligned (cpu0) and dra-far (cpu1, though its claim asked for 2 CPUs).
CPU_CLAIMS = {"aligned-gpu": "0", "dra-far-gpu-x7k2p": "1"}


def cpu_specs() -> dict[str, str]:
    out = {}
    for name, cpus in CPU_CLAIMS.items():
        uid = claim_uid(name)
        spec = {"cdiVersion": "0.8.0", "kind": "dra.k8s.io/cpu",
                "devices": [{"name": f"claim-{uid}", "containerEdits": {"env": [f"DRA_CPUSET_{uid}={cpus}"]}}],
                "containerEdits": {}}  # fmt: skip
        out[f"/var/run/cdi/dra.k8s.io-cpu_claim-{uid}.json"] = json.dumps(spec)
    return out


def node_spec(built) -> NodeSpec:
    return NodeSpec(
        name=NODE,
        files={
            **driver_files(built, two_gpu_config(cpu1_node_cpus="1"), cuda=False),
            "/var/lib/kubelet/cpu_manager_state": labpods.cpu_manager_state(PODS),
            "/var/lib/kubelet/dra_manager_state": prepared(),
            **cpu_specs(),
        },
        numa={0: "0", 1: "1"},
        siblings={0: "0", 1: "1"},
        online="0-1",
        pci={"0000:18:00.0": pci("0", "0"), "0000:9a:00.0": pci("1", "1")},
    )


@pytest.fixture(scope="module")
def dra_lab(tmp_path_factory):
    require_two_cpu_gpu_lab()
    root = Path(tmp_path_factory.mktemp("dralab"))
    lab = Lab(root / "lab", first_subnet=250)
    lab.add(node_spec(build_standins(root / "standins")))
    try:
        lab.start()
        for pod in PODS:
            labpods.start(lab, NODE, pod)
        yield lab
    finally:
        try:
            labpods.stop(lab, PODS)
        finally:
            lab.stop()


def _cluster(lab: Lab, plugin_gpus: int, extra: dict[str, str] | None = None):
    api = fake_api()
    address = lab.nodes[0].address
    labels = {"nvidia.com/gpu.present": "true"}
    api.add_node(node_object(NODE, gpus=plugin_gpus, internal_ip=address, labels=labels, extra=extra))
    for pod in PODS:
        api.add_pod(pod.api_object(NODE))
    uids = {p.name: p.uid for p in PODS}
    for name, (results, holders) in CLAIMS.items():
        rows = [tuple(results)] if isinstance(results[0], str) else results
        api.claims[("inference", name)] = resource_claim("inference", name, rows, [(h, uids[h]) for h in holders])
    for s in slices():
        api.slices[s["metadata"]["name"]] = s
    by_name = {p.name: p for p in PODS}
    api.exec_handler = lambda ns, name, container, argv, stdin: (
        labpods.exec_in(by_name[name], argv, stdin) if name in by_name else None
    )
    return api


@pytest.fixture(scope="module")
def cluster(dra_lab):
    api = _cluster(dra_lab, plugin_gpus=0)  # a DRA-only node: the device plugin advertises nothing
    with serve(api) as url:
        yield api, url


def run(lab, url, tmp_path, token="full-token", select="test_pod_gpu_numa or test_gpu_count or test_pod_qos", profile=""):
    (tmp_path / "kubeconfig").write_text(kubeconfig(url, token))
    inv = {"kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "configz": False},
           "defaults": yaml.safe_load(lab.inventory())["defaults"]}  # fmt: skip
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    (tmp_path / "profile.yaml").write_text("extends: default\n" + profile)
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--inventory", str(tmp_path / "inv.yaml"), "--profile",
         str(tmp_path / "profile.yaml"), "--output", str(out), "--", "-k", select],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    doc = json.loads((out / "results.json").read_text())
    got: dict[str, dict[str, dict]] = {}
    for r in doc["results"]:
        got.setdefault(r["subject"].get("pod", "-"), {})[r["check"]] = r
    return p, got


@pytest.fixture(scope="module")
def audit(dra_lab, cluster, tmp_path_factory):
    return run(dra_lab, cluster[1], tmp_path_factory.mktemp("draaudit"))


def test_dra_pods_are_found_and_judged(audit):
    p, got = audit
    outcomes = {pod: checks["POD-GPU-NUMA-ALIGNED"]["outcome"] for pod, checks in got.items() if pod != "-"}
    assert outcomes == {
        "dra-aligned": "passed",
        "dra-far": "failed",
        "dra-two": "failed",
        "dra-shared-a": "passed",
        "dra-shared-b": "passed",
        "dra-mig": "passed",
        "plugin": "passed",  # the device plugin's pod beside them keeps its verdict
        "dra-extended": "failed",  # nvidia.com/gpu from DRA's special claim: judged as a DRA GPU, and misplaced
    }, p.stdout[-3000:] + p.stderr[-2000:]


def test_an_extended_resource_served_by_dra_is_judged_as_a_dra_gpu(audit):
    """Issue 52 item 3 (KEP-5004, DRAExtendedResource: alpha 1.34; k8s.io/api core/v1 PodExtendedResourceClaimStatus):
    the container asks for nvidia.com/gpu, and status.extendedResourceClaimStatus names the special claim that holds
    it. It is no device plugin's GPU (no checkpoint entry, no Topology Manager hint): its devices are the claim's."""
    _, got = audit
    r = got["dra-extended"]["POD-GPU-NUMA-ALIGNED"]
    assert "claim dra-extended-extended-resources-q8w4n (driver gpu.nvidia.com, device gpu-0" in r["message"], r["message"]
    evidence = " | ".join(got["dra-extended"]["POD-QOS-GUARANTEED"]["evidence"])
    assert "DRA extended resource" in evidence and "GPUs from the device plugin" not in evidence
    assert "GPU from DRA: claim dra-extended-extended-resources-q8w4n, request container-0-request-0" in evidence


def test_the_failure_names_the_claim_and_the_device(audit):
    p, got = audit
    far = got["dra-far"]["POD-GPU-NUMA-ALIGNED"]["message"]
    assert "claim dra-far-gpu-x7k2p (driver gpu.nvidia.com, device gpu-0, PCI 0000:18:00.0, NUMA 0) on NUMA node 0" in far
    assert "CPUs on ['1']" in far
    two = got["dra-two"]["POD-GPU-NUMA-ALIGNED"]["message"]
    assert "device gpu-1, PCI 0000:9a:00.0, NUMA 1" in two and "device gpu-0" not in two
    checks = json.loads(Path(p.args[p.args.index("--output") + 1], "results.json").read_text())["checks"]
    check = (
        checks["POD-GPU-NUMA-ALIGNED"]
        if isinstance(checks, dict)
        else next(c for c in checks if c["id"] == "POD-GPU-NUMA-ALIGNED")
    )
    assert "Topology Manager aligns nothing" in check["remediation"] and "matchAttribute" in check["remediation"]


def test_rows_say_where_each_gpu_came_from(audit):
    _, got = audit
    evidence = " | ".join(got["dra-shared-a"]["POD-GPU-NUMA-ALIGNED"]["evidence"])
    assert "GPU from DRA: claim shared-gpu, request gpu, driver gpu.nvidia.com" in evidence
    assert "claim shared-gpu is shared: reserved for pod dra-shared-a, pod dra-shared-b" in evidence
    mig = " | ".join(got["dra-mig"]["POD-GPU-NUMA-ALIGNED"]["evidence"])
    assert "device gpu-1-mig-1g10gb-0, MIG device of GPU1, PCI 0000:9a:00.0, NUMA 1" in mig
    plugin = " | ".join(got["plugin"]["POD-QOS-GUARANTEED"]["evidence"])
    assert "GPUs from the device plugin: 1" in plugin and "DRA" not in plugin


def test_the_nodes_dra_checkpoint_corroborates_the_api(audit):
    _, got = audit
    evidence = " | ".join(got["dra-far"]["POD-GPU-NUMA-ALIGNED"]["evidence"])
    assert "dra_manager_state: the kubelet prepared claim inference/dra-far-gpu-x7k2p for this pod: gpu-0" in evidence


def test_where_api_and_node_disagree_it_is_said(dra_lab, tmp_path):
    api = _cluster(dra_lab, plugin_gpus=0)
    api.claims[("inference", "aligned-gpu")]["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_pod_gpu_numa")
    r = got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]
    assert r["outcome"] == "error"
    assert (
        "the API and the node disagree: claim inference/aligned-gpu: the API allocated gpu-1, the node prepared gpu-0"
        in r["message"]
    )


def test_a_dra_only_node_counts_its_published_gpus(audit):
    _, got = audit
    r = got["-"]["GPU-COUNT"]
    assert r["outcome"] == "passed", r["message"]
    assert any("DRA device gpu-1-mig-1g10gb-0 (mig)" in line for line in r["evidence"])


def test_gpus_advertised_twice_fail(dra_lab, tmp_path):
    api = _cluster(dra_lab, plugin_gpus=2)  # the device plugin advertises the same two GPUs
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_gpu_count")
    r = got["-"]["GPU-COUNT"]
    assert r["outcome"] == "failed"
    assert "GPUs advertised twice: the device plugin advertises nvidia.com/gpu 2" in r["message"]
    assert UUID0 in r["message"] and UUID1 in r["message"]


@pytest.mark.parametrize(
    "extra",
    [{"nvidia.com/mig-1g.10gb": "7"}, {"nvidia.com/gpu.shared": "8"}],
    ids=["mig-mixed-strategy", "renamed-time-slicing"],
)
def test_gpus_advertised_twice_under_another_resource_name_fail(dra_lab, tmp_path, extra):
    """Issue 53.1: the device plugin's MIG slices (mixed strategy) or its renamed shared GPUs are the same GPUs
    DRA publishes, whatever nvidia.com/gpu says (0 here); the Network Operator's nvidia.com/ devices are not."""
    api = _cluster(dra_lab, plugin_gpus=0, extra={**extra, "nvidia.com/rdma_shared_device_a": "63"})
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_gpu_count")
    r = got["-"]["GPU-COUNT"]
    assert r["outcome"] == "failed", r["message"]
    ((name, count),) = extra.items()
    assert f"GPUs advertised twice: the device plugin advertises {name} {count} and DRA publishes" in r["message"]
    assert "rdma" not in r["message"]


def test_a_device_the_node_does_not_have_is_an_error(dra_lab, tmp_path):
    api = _cluster(dra_lab, plugin_gpus=0)
    api.slices[f"{NODE}-gpu.nvidia.com-abcde"]["spec"]["devices"][0]["attributes"]["uuid"] = {"string": "GPU-not-here"}
    api.slices[f"{NODE}-gpu.nvidia.com-abcde"]["spec"]["devices"][0]["attributes"].pop("resource.kubernetes.io/pciBusID")
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path)
    r = got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]
    assert r["outcome"] == "error"
    assert (
        "claim inference/aligned-gpu: device gpu-0 (driver gpu.nvidia.com, UUID GPU-not-here, PCI ?) maps to no GPU"
        in r["message"]
    )
    assert got["-"]["GPU-COUNT"]["outcome"] == "failed"  # the node's GPU0 is not published; a stranger is


def test_a_claim_that_cannot_be_read_is_an_error(dra_lab, cluster, tmp_path):
    # scoped-token: the pods role in namespace inference, but no resource.k8s.io grant
    _, got = run(dra_lab, cluster[1], tmp_path, token="scoped-token", profile="pods:\n  namespaces: [inference]\n")
    for pod in ("dra-aligned", "dra-far", "dra-mig"):
        r = got[pod]["POD-GPU-NUMA-ALIGNED"]
        assert r["outcome"] == "error", r
        assert "lacks the RBAC permission get on resourceclaims.resource.k8s.io" in r["message"]
    assert got["plugin"]["POD-GPU-NUMA-ALIGNED"]["outcome"] == "passed"
    assert got["-"]["GPU-COUNT"]["outcome"] == "error"
    assert "resourceslices" in got["-"]["GPU-COUNT"]["message"]


def test_beta_only_servers_are_read_too(dra_lab, tmp_path):
    """A server that serves resource.k8s.io/v1beta1 only (Kubernetes 1.32, 1.33): read there, same verdicts."""
    api = _cluster(dra_lab, plugin_gpus=0)
    api.dra_versions = ["v1beta1"]
    for s in api.slices.values():  # the driver releases of that time published the PCI address as pcieBusID
        s["spec"]["devices"][0]["attributes"]["pcieBusID"] = s["spec"]["devices"][0]["attributes"].pop(
            "resource.kubernetes.io/pciBusID"
        )
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_pod_gpu_numa")
    assert got["dra-far"]["POD-GPU-NUMA-ALIGNED"]["outcome"] == "failed"
    assert "PCI 0000:18:00.0, NUMA 0" in got["dra-far"]["POD-GPU-NUMA-ALIGNED"]["message"]
    assert got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]["outcome"] == "passed"
    assert any("/apis/resource.k8s.io/v1beta1/" in path for _, _, path in api.requests)


def test_a_profile_can_require_cpus_selected_with_dra_gpus(dra_lab, tmp_path):
    """pods.dra_cpu_coselection: a DRA GPU claim must also hold the container's CPUs from a DRA CPU driver,
    with a matchAttribute constraint across both requests (kubernetes-sigs/dra-driver-cpu README); one that
    does not is aligned only by chance and fails, even where its GPU happens to sit beside the CPUs."""
    api = _cluster(dra_lab, plugin_gpus=0)
    claim = api.claims[("inference", "aligned-gpu")]
    claim["spec"]["devices"]["requests"].append({"name": "cpus", "exactly": {"deviceClassName": "dra.cpu"}})
    claim["spec"]["devices"]["constraints"] = [{"requests": ["gpu", "cpus"], "matchAttribute": "resource.kubernetes.io/numaNode"}]
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "cpus", "driver": "dra.cpu", "pool": NODE, "device": "cpudev000"}
    )
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_pod_gpu_numa", profile="pods:\n  dra_cpu_coselection: true\n")
    aligned = got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]
    assert aligned["outcome"] == "passed", aligned["message"]
    assert any("CPUs co-selected with its GPUs: GPU request(s) gpu and CPU request(s) cpus match resource.kubernetes.io/numaNode"
               in line for line in aligned["evidence"])  # fmt: skip
    mig = got["dra-mig"]["POD-GPU-NUMA-ALIGNED"]  # on its GPU's NUMA node, but by chance
    assert mig["outcome"] == "failed"
    assert "claim mig-slice: the claim holds no CPUs of a DRA CPU driver (dra.cpu)" in mig["message"]
    assert got["plugin"]["POD-GPU-NUMA-ALIGNED"]["outcome"] == "passed"  # the Topology Manager aligns the device plugin's


def test_cpus_from_a_dra_cpu_driver_are_judged_from_its_claims(dra_lab, tmp_path):
    """Issue 52 item 5 (pods.cpu_source: dra): the kubelet runs cpuManagerPolicy none and dra-driver-cpu pins the
    containers. POD-CPUS-EXCLUSIVE judges the CPUs each container's CPU claim was allocated (grouped mode: the
    consumed capacity dra.cpu/cpu; the CPUs the driver chose are in its CDI spec) against the real cpuset: the pod
    whose cpuset is its claim's passes; one holding fewer CPUs than its claim was allocated fails; one with no CPU
    claim fails, named beside the claim whose CPUs it shares."""
    api = _cluster(dra_lab, plugin_gpus=0)
    for name, count in (("aligned-gpu", "1"), ("dra-far-gpu-x7k2p", "2")):
        claim = api.claims[("inference", name)]
        claim["spec"]["devices"]["requests"].append(
            {"name": "cpus", "exactly": {"deviceClassName": "dra.cpu", "capacity": {"requests": {"dra.cpu/cpu": count}}}}
        )
        claim["status"]["allocation"]["devices"]["results"].append(
            {"request": "cpus", "driver": "dra.cpu", "pool": NODE, "device": "cpudevnuma000",
             "consumedCapacity": {"dra.cpu/cpu": count}, "shareID": "7f3e0c1a-5b2d-4e8f-9a61-0c2b3d4e5f60"}
        )  # fmt: skip
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path, select="test_pod_cpus_exclusive",
                     profile="pods:\n  cpu_source: dra\n")  # fmt: skip
    aligned = got["dra-aligned"]["POD-CPUS-EXCLUSIVE"]
    assert aligned["outcome"] == "passed", aligned["message"]
    assert any("the DRA CPU driver's CDI specs" in line and "entry 0" in line for line in aligned["evidence"]), aligned
    far = got["dra-far"]["POD-CPUS-EXCLUSIVE"]
    assert (
        far["outcome"] == "failed"
        and "1 CPUs (1) for an allocation of 2 CPU(s) from claim(s) inference/dra-far" in far["message"]
    )
    two = got["dra-two"]["POD-CPUS-EXCLUSIVE"]
    assert two["outcome"] == "failed"
    assert "holds no CPU claim of a DRA CPU driver" in two["message"]
    assert f"also prepared for claim {claim_uid('aligned-gpu')}" in two["message"]


@pytest.mark.parametrize(
    "variant",
    ["claim deleted", "claims forbidden", "slice deleted", "no DRA served", "checkpoint corrupt", "checkpoint empty"],
)
def test_unknown_dra_records_never_turn_a_failure_into_a_pass(dra_lab, tmp_path, variant):
    """Each DRA record the verdicts rest on, made unreadable in turn: the misaligned pods stay failed or
    become errors, never passed, and the aligned one never passes on what was not read."""
    api = _cluster(dra_lab, plugin_gpus=0)
    token = "full-token"
    checkpoint = next(n for n in dra_lab.nodes if n.spec.name == NODE).dir / "upper" / "var/lib/kubelet/dra_manager_state"
    before = checkpoint.read_text()
    if variant == "claim deleted":
        for key in list(api.claims):
            del api.claims[key]
    elif variant == "claims forbidden":
        token = "scoped-token"
    elif variant == "slice deleted":
        api.slices.clear()
    elif variant == "no DRA served":
        api.dra_versions = []
    elif variant == "checkpoint corrupt":
        checkpoint.write_text(before.replace('"Checksum":', '"Checksum":1'))
    else:  # the kubelet prepared no claim (as with no checkpoint file at all: it writes one with its first claim)
        checkpoint.write_text(labpods.dra_checkpoint([]))
    try:
        with serve(api) as url:
            profile = "pods:\n  namespaces: [inference]\n" if token == "scoped-token" else ""
            _, got = run(dra_lab, url, tmp_path, token=token, select="test_pod_gpu_numa", profile=profile)
    finally:
        checkpoint.write_text(before)
    outcomes = {pod: got[pod]["POD-GPU-NUMA-ALIGNED"]["outcome"] for pod in ("dra-far", "dra-two", "dra-aligned")}
    assert outcomes["dra-far"] in ("failed", "error") and outcomes["dra-two"] in ("failed", "error"), outcomes
    if variant != "checkpoint missing":  # a missing checkpoint says the kubelet prepared nothing: API and node disagree
        assert outcomes["dra-aligned"] == "error", (variant, got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]["message"])
    else:
        assert (
            outcomes["dra-aligned"] == "error" and "has not prepared it" in got["dra-aligned"]["POD-GPU-NUMA-ALIGNED"]["message"]
        )


def test_the_clusters_view_of_gpu_health_is_judged_beside_the_nodes(dra_lab, tmp_path):
    """Issue 52 item 4: the node reads both GPUs healthy (NVML, kernel log). Untainted, the cluster agrees; a
    KEP-5055 taint on gpu-1 as NVIDIA's driver sets it, or the kubelet reporting gpu-1 Unhealthy to the pod holding
    it (KEP-4680), is the cluster keeping work off a GPU the node reads healthy: a finding."""
    api = _cluster(dra_lab, plugin_gpus=0)
    for d in ("clean", "tainted", "reported"):
        (tmp_path / d).mkdir()
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path / "clean", select="test_gpu_cluster_health")
    clean = got["-"]["GPU-CLUSTER-HEALTH"]
    assert clean["outcome"] == "passed", clean["message"]
    assert any("GPU1" in line and "the node reads it healthy; the cluster: schedules on it" in line for line in clean["evidence"])
    (s,) = api.slices.values()
    s["spec"]["devices"][1]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute",
                                          "timeAdded": "2026-12-03T00:00:00Z"}]  # fmt: skip
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path / "tainted", select="test_gpu_cluster_health")
    r = got["-"]["GPU-CLUSTER-HEALTH"]
    assert r["outcome"] == "failed" and "DRA device gpu-1 tainted gpu.nvidia.com/xid=79:NoExecute" in r["message"], r
    del s["spec"]["devices"][1]["taints"]
    pod = next(p for p in PODS if p.name == "dra-shared-a")
    obj = pod.api_object(NODE)
    obj["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "claim:shared-gpu/gpu", "resources": [{"resourceID": f"{DRIVER}/{NODE}/gpu-1", "health": "Unhealthy"}]}
    ]
    api.add_pod(obj)
    with serve(api) as url:
        _, got = run(dra_lab, url, tmp_path / "reported", select="test_gpu_cluster_health")
    r = got["-"]["GPU-CLUSTER-HEALTH"]
    assert r["outcome"] == "failed" and "the kubelet reports gpu.nvidia.com/gpu-dra/gpu-1 Unhealthy" in r["message"], r
