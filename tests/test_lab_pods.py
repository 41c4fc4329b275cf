"""Every POD-* check against real lab pods through the wire-level fake API server: the official
client lists the node's GPU pods and execs one shell per container over a websocket; the facts come
from real processes with real CPU affinity, /dev/shm sizes, /dev/nvidia<N> nodes and environments."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conformance.cluster.api import api_client
from conformance.cluster.pods import ContainerRef, exec_inside
from conformance.config.kubernetes import KubeSpec
from tests.conftest import require_or_skip
from tests.fakeapi import kubeconfig, node_object, pod_object, serve
from tests.gpu_standins import CONFIG, build_standins, driver_files
from tests.kube_fixtures import fake_api
from tests.lab import pods as labpods
from tests.lab.builder import Lab, NodeSpec
from tests.lab.gpu_nodes import pci, require_two_cpu_gpu_lab, two_gpu_config
from tests.lab.nodes import POD_CHECKS
from tests.lab.pods import LabPod

pytestmark = pytest.mark.lab
NODE = "gpu-pods"
POD_SYSCTLS = {
    "net.ipv4.tcp_tw_reuse": "1",
    "net.core.somaxconn": "65535",
    "net.ipv4.ip_local_port_range": "1024 65535",
    "net.ipv4.ip_local_reserved_ports": "30000-32767",
}
GOOD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PODS = [
    # conformant: Guaranteed, cpu0 (NUMA 0) with GPU0 (NUMA 0), 2 GiB /dev/shm, thread pools of 1; its
    # init container's CPUs are reused by the app container (legal); PID 1 is the pause process; a log
    # shipper with 100m keeps the pod Guaranteed and runs in the shared pool (the GPU container is pinned)
    # the pod sets the network sysctls in its own network namespace (securityContext.sysctls); no CFS quota
    LabPod(
        "good",
        "uid-good",
        "0",
        gpus=[0],
        env=GOOD_ENV,
        shm_mib=2048,
        init="setup",
        share_pid=True,
        sidecar="log-shipper",
        # a wide range in its own network namespace needs no NodePort reservation there: NodePorts are the node's
        sysctls={**POD_SYSCTLS, "net.ipv4.ip_local_reserved_ports": ""},
    ),
    # Burstable, on the shared pool across both NUMA nodes, GPU1, 64 MiB /dev/shm, no thread variables;
    # its own network namespace with the kernel's defaults except somaxconn, which it raises
    LabPod(
        "burst",
        "uid-burst",
        "0-1",
        gpus=[1],
        requests={"cpu": "500m", "memory": "1Gi"},
        limits={"cpu": "1", "memory": "2Gi"},
        runtime_class=None,
        sysctls={"net.core.somaxconn": "65535"},
    ),
    # Guaranteed on cpu1 (NUMA 1) with GPU0 (NUMA 0); a worker thread pins itself to cpu0; OMP too large;
    # shares cpu1 with 'twin' in the kubelet's state
    # (its own network namespace: the kernel's defaults); a CFS quota of 0.2 CPU that a busy worker really hits
    LabPod(
        "far-gpu",
        "uid-far",
        "1",
        gpus=[0],
        env={"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "1"},
        shm_mib=2048,
        stray_cpu=0,
        cfs_quota_us=20000,
        busy=1,
        runtime_class="kata-gpu",  # names a handler the node's containerd does not define
    ),
    # ... and with its own restartable init container (a sidecar), which must not share the app's CPUs
    # hostNetwork: the node's sysctls; a CFS quota of one CPU it stays under (mostly asleep)
    LabPod(
        "twin",
        "uid-twin",
        "1",
        gpus=[1],
        env=GOOD_ENV,
        shm_mib=2048,
        restartable_init="proxy",
        host_network=True,
        cfs_quota_us=100000,
        runtime_class="nvidia-cgroupfs",  # a handler on the cgroupfs driver
    ),
    # deleted while the run goes on (the API says so at exec), and one whose image has no shell
    LabPod("gone", "uid-gone", "1", gpus=[1], running=False),
    LabPod("distroless", "uid-distroless", "1", gpus=[1], running=False, has_shell=False),
]
PROFILE = """\
extends: default
pods:
  runtime_class: nvidia
"""

P, F, E, S = "passed", "failed", "error", "skipped"
API_CHECKS = ("POD-QOS-GUARANTEED", "POD-RUNTIME-CLASS", "RUNTIME-CLASS-HANDLER")  # judged without an exec
EXEC_CHECKS = [c for c in POD_CHECKS if c not in API_CHECKS]
RUNTIME_CLASSES = {"nvidia": "nvidia", "kata-gpu": "kata", "nvidia-cgroupfs": "nvidia-legacy"}
CONTAINERD = labpods.containerd_config({"nvidia": True, "nvidia-legacy": False})


def row(**kw: str) -> dict[str, str]:
    return {c: kw[c.removeprefix("POD-").replace("-", "_")] for c in POD_CHECKS}


EXPECTED = {
    "good": dict.fromkeys(POD_CHECKS, P),
    "burst": row(
        QOS_GUARANTEED=F,
        CPUS_EXCLUSIVE=F,
        CPUS_SINGLE_NUMA=F,
        GPU_NUMA_ALIGNED=F,
        MEMS_LOCAL=F,
        FULL_CORES=F,
        THREAD_AFFINITY=F,
        THREAD_ENV=F,
        SHM_SIZE=F,
        RUNTIME_CLASS=F,
        SYSCTL_TCP_TW_REUSE=F,
        SYSCTL_SOMAXCONN=P,
        SYSCTL_PORT_RANGE=F,
        CPU_THROTTLING=S,  # no exclusive CPUs
        RUNTIME_CLASS_HANDLER=S,  # no runtimeClassName
    ),
    "far-gpu": row(
        QOS_GUARANTEED=P,
        CPUS_EXCLUSIVE=F,
        CPUS_SINGLE_NUMA=P,
        GPU_NUMA_ALIGNED=F,
        MEMS_LOCAL=F,
        FULL_CORES=F,
        THREAD_AFFINITY=F,
        THREAD_ENV=F,
        SHM_SIZE=P,
        RUNTIME_CLASS=F,  # kata-gpu, not the profile's nvidia
        SYSCTL_TCP_TW_REUSE=F,
        SYSCTL_SOMAXCONN=F,
        SYSCTL_PORT_RANGE=F,
        CPU_THROTTLING=F,
        RUNTIME_CLASS_HANDLER=F,
    ),
    # memory binding is real only on NUMA node 0 here, so a pod on node 1 honestly fails POD-MEMS-LOCAL
    "twin": row(
        QOS_GUARANTEED=P,
        CPUS_EXCLUSIVE=F,
        CPUS_SINGLE_NUMA=P,
        GPU_NUMA_ALIGNED=P,
        MEMS_LOCAL=F,
        FULL_CORES=F,
        THREAD_AFFINITY=P,
        THREAD_ENV=P,
        SHM_SIZE=P,
        RUNTIME_CLASS=F,
        SYSCTL_TCP_TW_REUSE=P,  # hostNetwork: the node's values
        SYSCTL_SOMAXCONN=P,
        SYSCTL_PORT_RANGE=P,
        CPU_THROTTLING=P,  # a quota, never hit
        RUNTIME_CLASS_HANDLER=F,
    ),
    "gone": {**dict.fromkeys(EXEC_CHECKS, E), **dict.fromkeys(API_CHECKS, P)},
    "distroless": {**dict.fromkeys(EXEC_CHECKS, E), **dict.fromkeys(API_CHECKS, P)},
}


def node_spec(built) -> NodeSpec:
    conf = two_gpu_config(cpu1_node_cpus="1,3")
    return NodeSpec(
        name=NODE,
        files={
            **driver_files(built, conf, cuda=False),
            "/var/lib/kubelet/cpu_manager_state": labpods.cpu_manager_state(PODS),
            "/etc/containerd/config.toml": CONTAINERD,
        },
        # cpu0 is a core of its own on NUMA node 0; cpu1 shares a core with cpu3 on node 1 (cpu3 exists
        # only in this sysfs: no pod runs there), so a pod on cpu1 alone does not own a whole core
        numa={0: "0", 1: "1,3"},
        siblings={0: "0", 1: "1,3", 3: "1,3"},
        online="0-1,3",
        pci={"0000:18:00.0": pci("0", "0"), "0000:9a:00.0": pci("1", "1,3")},
        sysctls=POD_SYSCTLS,  # the node's network namespace: what hostNetwork pods see
    )


@pytest.fixture(scope="module")
def pods_lab(tmp_path_factory):
    require_two_cpu_gpu_lab()
    # POD-CPU-THROTTLING needs a pod really throttled: a CFS quota through the cgroup v1 cpu controller
    require_or_skip(None if labpods.cpu_hierarchy() else "the pods lab throttles a pod through a cgroup v1 cpu hierarchy, "
                    "which this machine does not mount (cpu in /proc/self/mounts)")  # fmt: skip
    root = Path(tmp_path_factory.mktemp("podslab"))
    lab = Lab(root / "lab", first_subnet=220)
    lab.add(node_spec(build_standins(root / "standins")))
    running = [p for p in PODS if p.running]
    try:
        lab.start()
        for pod in running:
            labpods.start(lab, NODE, pod)
        for pod in running:
            labpods.wait_until_strayed(pod)  # the event, not a pause: the stray worker thread has pinned itself
            labpods.wait_until_throttled(pod)  # and the quota-bound pod's cgroup has counted a throttled period
        yield lab
    finally:
        try:
            labpods.stop(lab, running)
        finally:
            lab.stop()


@pytest.fixture(scope="module")
def cluster(pods_lab):
    api = fake_api()
    api.add_node(node_object(NODE, gpus=2, internal_ip=pods_lab.nodes[0].address))
    for pod in PODS:
        api.add_pod(pod.api_object(NODE))
    api.vanish_on_exec.add(("inference", "gone"))
    api.runtime_classes.update(RUNTIME_CLASSES)
    by_name = {p.name: p for p in PODS}
    api.exec_handler = lambda ns, name, container, argv, stdin: (
        labpods.exec_in(by_name[name], argv, stdin) if name in by_name else None
    )
    with serve(api) as url:
        yield api, url


def run(lab, url, token, tmp_path, profile: str = PROFILE, select: str = "test_pod"):
    (tmp_path / "kubeconfig").write_text(kubeconfig(url, token))
    inv = {
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "configz": False},
        "defaults": yaml.safe_load(lab.inventory())["defaults"],
    }
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    (tmp_path / "profile.yaml").write_text(profile)
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "run",
            "--inventory",
            str(tmp_path / "inv.yaml"),
            "--profile",
            str(tmp_path / "profile.yaml"),
            "--output",
            str(out),
            "--",
            "-k",
            select,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (out / "results.json").exists(), p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    got: dict[str, dict[str, dict]] = {}
    for r in doc["results"]:
        got.setdefault(r["subject"].get("pod", "-"), {})[r["check"]] = r
    return p, doc, got


@pytest.fixture(scope="module")
def audit(pods_lab, cluster, tmp_path_factory):
    return run(pods_lab, cluster[1], "full-token", tmp_path_factory.mktemp("podaudit"))


def test_exact_pod_outcomes(audit):
    p, _, got = audit
    outcomes = {pod: {c: r["outcome"] for c, r in checks.items()} for pod, checks in got.items()}
    assert outcomes == EXPECTED, p.stdout[-3000:] + p.stderr[-2000:]


def test_every_pod_check_has_a_pass_and_a_failure():
    for check in POD_CHECKS:
        seen = {EXPECTED[pod][check] for pod in EXPECTED}
        assert {P, F} <= seen, check


def test_results_name_the_subject_and_the_cause(audit):
    _, _, got = audit
    r = got["far-gpu"]["POD-GPU-NUMA-ALIGNED"]
    assert r["subject"] == {"namespace": "inference", "pod": "far-gpu", "container": "app"}
    assert "GPU0 (/dev/nvidia0) on NUMA node 0, CPUs on ['1']" in r["message"]
    assert (
        "thread" in got["far-gpu"]["POD-THREAD-AFFINITY"]["message"]
        and "allowed on 0" in got["far-gpu"]["POD-THREAD-AFFINITY"]["message"]
    )
    assert "OMP_NUM_THREADS=8, expected 1..1" in got["far-gpu"]["POD-THREAD-ENV"]["message"]
    assert "also assigned to pod uid-twin" in got["far-gpu"]["POD-CPUS-EXCLUSIVE"]["message"]
    assert (
        "also assigned to restartable init container (sidecar) proxy of the same pod"
        in got["twin"]["POD-CPUS-EXCLUSIVE"]["message"]
    )
    assert "log-shipper (other container, evidence only): cpu 100m/100m" in " ".join(
        got["good"]["POD-QOS-GUARANTEED"]["evidence"]
    )
    assert "qosClass is Burstable" in got["burst"]["POD-QOS-GUARANTEED"]["message"]
    assert "/dev/shm is 64 MiB, 2Gi required" in got["burst"]["POD-SHM-SIZE"]["message"]
    assert "span NUMA nodes" in got["burst"]["POD-CPUS-SINGLE-NUMA"]["message"]
    assert "the pod is gone" in got["gone"]["POD-SHM-SIZE"]["message"]
    assert "no /bin/sh" in got["distroless"]["POD-SHM-SIZE"]["message"]
    # shareProcessNamespace: the pause process (PID 1, the sandbox's cgroup) is not the container's
    env = got["good"]["POD-THREAD-ENV"]["evidence"]
    assert env and all("OMP" in line or "MKL" in line for line in env)


def test_no_other_environment_value_leaves_the_container(audit, pods_lab):
    _, doc, _ = audit
    text = json.dumps(doc)
    assert "PATH=/usr/bin" not in text  # only the profile's thread variables are read inside


def test_one_exec_per_container(cluster, audit):
    api, _ = cluster
    execs = [path for _, _, path in api.requests if path.endswith("/exec")]
    assert sorted(execs) == sorted({f"/api/v1/namespaces/inference/pods/{p.name}/exec" for p in PODS})


def test_exec_over_the_v4_protocol_too(cluster, tmp_path):
    api, url = cluster
    (tmp_path / "kc").write_text(kubeconfig(url, "full-token"))
    api.exec_protocols = ["v4.channel.k8s.io"]
    try:
        facts = exec_inside(
            api_client(KubeSpec(kubeconfig=str(tmp_path / "kc"))),
            ContainerRef(NODE, "inference", "twin", "app", "uid-twin"),
            ["OMP_NUM_THREADS"],
        )
    finally:
        api.exec_protocols = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    assert facts.cpus == {1} and facts.gpu_minors == [1] and facts.shm_bytes == 2048 * 2**20


def test_missing_permission_is_named(pods_lab, cluster, tmp_path):
    _, _, got = run(pods_lab, cluster[1], "limited-token", tmp_path)
    results = got["-"]
    assert {r["outcome"] for r in results.values()} == {E}
    assert all("lacks the RBAC permission list on pods" in r["message"] for r in results.values())


def test_exec_without_permission_is_named(pods_lab, cluster, tmp_path):
    _, _, got = run(pods_lab, cluster[1], "noexec-token", tmp_path)
    good = got["good"]
    assert good["POD-QOS-GUARANTEED"]["outcome"] == P  # from the API: no exec needed
    for check in EXEC_CHECKS:
        assert good[check]["outcome"] == E
        assert "lacks the RBAC permission create and get on pods/exec" in good[check]["message"]


def test_gpu_count_compares_with_the_capacity_the_node_advertises(pods_lab, cluster, tmp_path):
    api, url = cluster
    capacity = api.nodes[NODE]["status"]["capacity"]
    capacity["nvidia.com/gpu"] = "3"  # not a multiple of the 2 GPUs: no sharing configuration explains it
    try:
        (tmp_path / "kubeconfig").write_text(kubeconfig(url, "full-token"))
        inv = {"kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "configz": False},
               "defaults": yaml.safe_load(pods_lab.inventory())["defaults"]}  # fmt: skip
        (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
        subprocess.run(
            [sys.executable, "-m", "conformance", "run", "--inventory", str(tmp_path / "inv.yaml"), "--output",
             str(tmp_path / "out"), "--", "-k", "test_gpu_count"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        capacity["nvidia.com/gpu"] = "2"
    (r,) = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    assert r["outcome"] == F
    assert "2 GPU(s) visible to NVML x 1 replica(s) = 2, the node advertises nvidia.com/gpu 3" in r["message"]


def test_profile_selector_adds_labelled_pods_without_gpus(pods_lab, cluster, tmp_path):
    api, url = cluster
    resources = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    api.add_pod(pod_object("inference", "tokenizer", "uid-tok", NODE, [{"name": "tok", "resources": resources}],
                           labels={"app": "tokenizer"}))  # fmt: skip
    try:
        _, _, got = run(pods_lab, url, "full-token", tmp_path, PROFILE + "  selector: app=tokenizer\n", "test_pod_qos")
    finally:
        del api.pods[("inference", "tokenizer")]
    assert got["tokenizer"]["POD-QOS-GUARANTEED"]["outcome"] == P
    assert got["tokenizer"]["POD-QOS-GUARANTEED"]["subject"] == {"namespace": "inference", "pod": "tokenizer", "container": "tok"}
    assert {"good", "burst", "tokenizer"} <= set(got)


def test_an_exec_that_hangs_is_an_error_within_the_timeout(pods_lab, cluster, tmp_path):
    api, url = cluster
    normal = api.exec_handler

    def slow(ns, name, container, argv, stdin):
        if name == "twin":
            time.sleep(6)
        return normal(ns, name, container, argv, stdin)

    api.exec_handler = slow
    try:
        t0 = time.monotonic()
        _, _, got = run(pods_lab, url, "full-token", tmp_path, PROFILE + "  exec_timeout_s: 2\n", "test_pod_shm")
        took = time.monotonic() - t0
    finally:
        api.exec_handler = normal
    assert got["twin"]["POD-SHM-SIZE"]["outcome"] == E
    assert "exec did not finish within 2 s" in got["twin"]["POD-SHM-SIZE"]["message"]
    assert got["good"]["POD-SHM-SIZE"]["outcome"] == P and took < 60


def test_cpus_single_numa_needs_gpu_facts_only_when_aligning_to_gpus(pods_lab, cluster, tmp_path):
    """The default rule needs the container's CPUs and the NUMA map: a node whose NVML cannot be read still
    gets its verdicts; under pods.numa_alignment: gpus the GPUs' NUMA nodes decide, so there it is an error."""
    conf = next(n for n in pods_lab.nodes if n.spec.name == NODE).dir / "upper" / CONFIG.lstrip("/")
    before = conf.read_text()
    conf.write_text(before + "fail\tnvmlInitWithFlags\t999\n")  # NVML_ERROR_UNKNOWN at init
    (tmp_path / "plain").mkdir()
    (tmp_path / "gpus").mkdir()
    try:
        _, _, plain = run(pods_lab, cluster[1], "full-token", tmp_path / "plain", select="test_pod_cpus_single_numa")
        gpus = PROFILE + "  numa_alignment: gpus\n"
        _, _, aligned = run(pods_lab, cluster[1], "full-token", tmp_path / "gpus", gpus, "test_pod_cpus_single_numa")
    finally:
        conf.write_text(before)
    got = {pod: checks["POD-CPUS-SINGLE-NUMA"]["outcome"] for pod, checks in plain.items()}
    assert got == {pod: EXPECTED[pod]["POD-CPUS-SINGLE-NUMA"] for pod in got} and {"good", "burst", "far-gpu", "twin"} <= set(got)
    for pod in ("good", "far-gpu", "twin"):  # each sees a GPU
        r = aligned[pod]["POD-CPUS-SINGLE-NUMA"]
        assert r["outcome"] == E and "GPU" in r["message"], r


def test_the_exec_sends_its_program_on_stdin_not_in_the_request(pods_lab, cluster, tmp_path):
    """Issue 53.13: the pod exec's request line carries the shell and the variable names only (the program goes
    on stdin, as the SSH path sends it): nothing of the program lands in the API server's audit log, and the
    line fits the 8 KB request line of common proxies."""
    api, url = cluster
    api.exec_requests.clear()
    _, _, got = run(pods_lab, url, "full-token", tmp_path, PROFILE, "test_pod_shm")
    assert got and api.exec_requests
    for line in api.exec_requests:
        assert len(line) < 1024 and "Cpus_allowed_list" not in line and "command=-s" in line, line[:300]
    assert got["good"]["POD-SHM-SIZE"]["outcome"] == P  # the program ran: its facts were read
