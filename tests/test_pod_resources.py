"""Issue 52 items 6 and 7: pods as Kubernetes 1.34-1.37 writes them. Pod-level resources (KEP-2837, beta 1.34):
a pod whose spec.resources has requests equal to limits is Guaranteed though its containers state none (the API's
ComputePodQOS; the fake computes it the same way and refuses what the API refuses). In-place resize (KEP-1287,
GA 1.35): the spec holds the desired size, status.containerStatuses[].allocatedResources what the container holds,
and a resize the static CPU manager cannot do is PodResizePending (Infeasible)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cluster.api import api_client
from conformance.cluster.pods import gpu_pods
from conformance.config.kubernetes import KubeSpec
from tests.fakeapi import kubeconfig, pod_object, serve
from tests.kube_fixtures import fake_api

GPU = {"nvidia.com/gpu": "1"}


def listed(tmp_path: Path, *pods: dict):
    api = fake_api()
    for p in pods:
        api.add_pod(p)
    with serve(api) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, "full-token"))
        return {p.name: p for p in gpu_pods(api_client(KubeSpec(kubeconfig=str(tmp_path / "kc"))), "gpu-a1")}


def test_pod_level_resources_make_a_guaranteed_pod_whose_containers_state_none(tmp_path):
    level = {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}}
    pod = pod_object("ml", "pod-level", "uid-pl", "gpu-a1", [{"name": "app", "resources": {"limits": GPU}}],
                     pod_resources=level)  # fmt: skip
    assert pod["status"]["qosClass"] == "Guaranteed"  # as ComputePodQOS computes it from spec.resources
    got = listed(tmp_path, pod)["pod-level"]
    assert got.qos == "Guaranteed"
    assert got.pod_resources == {"cpu_request": "8", "cpu_limit": "8", "mem_request": "32Gi", "mem_limit": "32Gi"}
    app = got.containers[0]
    assert app["cpu_request"] is None and app["cpu_limit"] is None
    # the fake refuses what the API server refuses: pod-level resources other than cpu, memory (and hugepages)
    with pytest.raises(ValueError, match="unsupported pod-level resources"):
        pod_object("ml", "x", "u", "gpu-a1", [{"name": "app"}], pod_resources={"limits": {"nvidia.com/gpu": "1"}})


def test_an_infeasible_resize_is_judged_on_what_was_allocated(tmp_path):
    res = {"requests": {"cpu": "4", "memory": "8Gi", **GPU}, "limits": {"cpu": "4", "memory": "8Gi", **GPU}}
    pending = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                "message": "Node didn't have enough capacity: cpu, requested: 4000, capacity: 2000",
                "lastTransitionTime": "2026-12-03T00:00:00Z"}]  # fmt: skip
    pod = pod_object("ml", "resized", "uid-rs", "gpu-a1", [{"name": "app", "resources": res}],
                     allocated={"app": {"cpu": "2", "memory": "8Gi"}}, conditions=pending)  # fmt: skip
    got = listed(tmp_path, pod)["resized"]
    app = got.containers[0]
    assert app["cpu_request"] == "4" and app["cpu_allocated"] == "2"
    assert got.resize and got.resize.startswith("PodResizePending (Infeasible:")


def _evidence():
    from conformance.checks import Evidence

    return Evidence()


def test_the_checks_judge_pod_level_resources_and_the_allocation(tmp_path):
    """The QoS check passes a pod-level Guaranteed pod (it failed: "cpu request None / limit None"); the exclusivity
    check fails it while the kubelet gives no exclusive CPUs, saying why and what to change; a resized container is
    judged on the CPUs it holds."""
    from conformance.cluster.pods import ContainerRef, InsideFacts
    from conformance.facts.checkpoints import CpuManagerState
    from suites.test_pods import test_pod_cpus_exclusive, test_pod_qos

    level = {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}}
    res = {"requests": {"cpu": "4", "memory": "8Gi", **GPU}, "limits": {"cpu": "4", "memory": "8Gi", **GPU}}
    pending = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "no capacity",
                "lastTransitionTime": "2026-12-03T00:00:00Z"}]  # fmt: skip
    pods = listed(
        tmp_path,
        pod_object("ml", "pod-level", "uid-pl", "gpu-a1", [{"name": "app", "resources": {"limits": GPU}}], pod_resources=level),
        pod_object("ml", "resized", "uid-rs", "gpu-a1", [{"name": "app", "resources": res}],
                   allocated={"app": {"cpu": "2", "memory": "8Gi"}}, conditions=pending),
    )  # fmt: skip
    pl, rs = pods["pod-level"], pods["resized"]
    test_pod_qos("gpu-a1", ContainerRef("gpu-a1", "ml", "pod-level", "app", "uid-pl"), pl, pl.containers[0], _evidence())
    state = CpuManagerState(policy="static", default_cpus=frozenset(range(4, 16)), entries={"uid-rs": {"app": frozenset({2, 3})}})
    inside = InsideFacts(frozenset(range(8)), frozenset({0}), None, [], [], {}, {}, None)
    with pytest.raises(AssertionError, match="PodLevelResourceManagers"):
        test_pod_cpus_exclusive("gpu-a1", ContainerRef("gpu-a1", "ml", "pod-level", "app", "uid-pl"), pl, pl.containers[0],
                                inside, None, state, _evidence())  # fmt: skip
    # with the PodLevelResourceManagers gate the kubelet records the pod's set (podEntries, V3/V4): a container with
    # no CPU of its own runs within it, and a cpuset reaching outside it fails
    gated = CpuManagerState(policy="static", default_cpus=frozenset(range(8, 16)), pod_entries={"uid-pl": frozenset(range(8))})
    ev = _evidence()
    test_pod_cpus_exclusive("gpu-a1", ContainerRef("gpu-a1", "ml", "pod-level", "app", "uid-pl"), pl, pl.containers[0],
                            inside, None, gated, ev)  # fmt: skip
    assert any("pod-level exclusive CPUs 0-7" in line for line in ev.lines)
    wide = InsideFacts(frozenset(range(10)), frozenset({0}), None, [], [], {}, {}, None)
    with pytest.raises(AssertionError, match=r"not within the pod's exclusive CPUs 0-7.*8-9 are in the shared pool"):
        test_pod_cpus_exclusive("gpu-a1", ContainerRef("gpu-a1", "ml", "pod-level", "app", "uid-pl"), pl, pl.containers[0],
                                wide, None, gated, _evidence())  # fmt: skip
    held = InsideFacts(frozenset({2, 3}), frozenset({0}), None, [], [], {}, {}, None)
    ev = _evidence()
    test_pod_cpus_exclusive("gpu-a1", ContainerRef("gpu-a1", "ml", "resized", "app", "uid-rs"), rs, rs.containers[0],
                            held, frozenset({2, 3}), state, ev)  # fmt: skip
    assert any("PodResizePending" in line for line in ev.lines)


def test_admin_access_results_are_no_workload_allocation():
    """Issue 52 item 2: a claim with adminAccess (a DCGM exporter holding every GPU: allocationMode All) is allowed
    beside the devices' ordinary claims (k8s.io/api/resource/v1 ExactDeviceRequest.adminAccess,
    DeviceRequestAllocationResult.adminAccess): its results are not an allocation of the GPUs."""
    from conformance.cluster.dra import allocated
    from tests.fakeapi import resource_claim

    rows = [("gpus", "gpu.nvidia.com", "node-a", "gpu-0"), ("gpus", "gpu.nvidia.com", "node-a", "gpu-1")]
    claim = resource_claim("monitoring", "dcgm-all", rows, [("dcgm", "uid-d")])
    for r in claim["status"]["allocation"]["devices"]["results"]:
        r["adminAccess"] = True
    assert allocated(claim, None) == []
    assert [d[3] for d in allocated(claim, None, admin=True)] == ["gpu-0", "gpu-1"]


def test_a_sidecar_is_judged_like_a_container_and_a_finished_init_container_is_not(tmp_path):
    """Issue 52 item 8: a restartable init container (restartPolicy Always: a sidecar, KEP-753, GA 1.33) runs for the
    pod's life beside its containers, and with integer CPUs holds exclusive CPUs the kubelet never hands on
    (policy_static.go, updateCPUsToReuse reuses only the CPUs of init containers that are not restartable). With a GPU
    it is a GPU container to judge; an ordinary init container has finished before any container started."""
    whole = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    gpu = {"requests": {**whole["requests"], **GPU}, "limits": {**whole["limits"], **GPU}}
    inits = [{"name": "fetch-weights", "resources": gpu}, {"name": "proxy", "resources": gpu, "restartPolicy": "Always"}]
    pod = pod_object("ml", "with-sidecar", "uid-sc", "gpu-a1", [{"name": "app", "resources": whole}], init_containers=inits)
    got = listed(tmp_path, pod)["with-sidecar"]
    assert [(c["name"], c.get("sidecar", False), c["gpus"]) for c in got.containers] == [("proxy", True, 1), ("app", False, 0)]
    assert got.init_containers == {"fetch-weights": False, "proxy": True}


def test_the_fake_refuses_an_extended_resource_claim_status_the_api_refuses():
    """k8s.io/api core/v1 PodExtendedResourceClaimStatus: resourceClaimName and each mapping's containerName,
    resourceName and requestName are required; a mapping names an init or regular container of the pod (KEP-5004)."""
    res = {"requests": GPU, "limits": GPU}
    mapping = {"containerName": "app", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}
    good = {"resourceClaimName": "x-extended-resources-q8w4n", "requestMappings": [mapping]}
    pod = pod_object("ml", "x", "u", "gpu-a1", [{"name": "app", "resources": res}], extended_claim=good)
    assert pod["status"]["extendedResourceClaimStatus"] == good
    for bad, why in (
        ({**good, "resourceClaimName": ""}, "resourceClaimName: Required value"),
        ({**good, "requestMappings": [{**good["requestMappings"][0], "requestName": ""}]}, "requestName: Required value"),
        ({**good, "requestMappings": [{**good["requestMappings"][0], "containerName": "sidecar"}]}, "containerName: Not found"),
    ):
        with pytest.raises(ValueError, match=why):
            pod_object("ml", "x", "u", "gpu-a1", [{"name": "app", "resources": res}], extended_claim=bad)
