"""The acceptance pod end to end: `conformance run --acceptance-pod` creates a Guaranteed GPU pod on
each brand-new node through the fake API server; the test plays the kubelet (a conformant one hands
out an exclusive, NUMA-local CPU and GPU and records them in cpu_manager_state; a broken one, CPU
manager policy none, leaves the pod on the shared pool) by starting a real lab pod; the pod checks run
on it, and the pod is deleted afterwards, also when it never ran."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.fakeapi import kubeconfig, node_object, serve
from tests.gpu_standins import build_standins, driver_files
from tests.kube_fixtures import fake_api
from tests.lab import pods as labpods
from tests.lab.builder import Lab, NodeSpec
from tests.lab.gpu_nodes import NUMA, SIBLINGS, pci, require_two_cpu_gpu_lab, two_gpu_config
from tests.lab.nodes import POD_CHECKS
from tests.lab.pods import LabPod
from tests.streams import default_sigint

pytestmark = pytest.mark.lab
P, F, E, S = "passed", "failed", "error", "skipped"
NODES = ("fresh-ok", "fresh-broken", "fresh-stuck")
EXPECTED = {
    "fresh-ok": dict.fromkeys(POD_CHECKS, P),
    "fresh-broken": {
        **dict.fromkeys(POD_CHECKS, P),
        "POD-CPUS-EXCLUSIVE": F,
        "POD-CPUS-SINGLE-NUMA": F,
        "POD-GPU-NUMA-ALIGNED": F,
        "POD-MEMS-LOCAL": F,
        "POD-THREAD-AFFINITY": F,
        "POD-CPU-THROTTLING": S,  # no exclusive CPUs under the none policy
        "RUNTIME-CLASS-HANDLER": F,  # its nvidia handler is on cgroupfs
    },
}
PROFILE = """\
extends: default
pods:
  runtime_class: nvidia
  acceptance_timeout_s: 4
"""

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"  # POSTs that ask, and write nothing


def node_spec(name: str, built, policy: str) -> NodeSpec:
    conf = two_gpu_config()
    state = json.dumps({"policyName": policy, "defaultCpuSet": "0-1" if policy == "static" else "", "checksum": 1})
    return NodeSpec(
        name=name,
        files={
            **driver_files(built, conf, cuda=False),
            "/var/lib/kubelet/cpu_manager_state": state,
            # the broken node's nvidia handler creates cgroups itself (cgroupfs) under a systemd kubelet
            "/etc/containerd/config.toml": labpods.containerd_config({"nvidia": name != "fresh-broken"}),
        },
        numa=NUMA,
        siblings=SIBLINGS,
        online="0-1",
        pci={"0000:18:00.0": pci("0", "0"), "0000:9a:00.0": pci("1", "1")},
    )


class Kubelets:
    """The kubelets' part: place a created pod (or not), record it, run it; remove it on delete."""

    def __init__(self, lab: Lab, api) -> None:
        self.lab, self.api = lab, api
        self.running: dict[tuple[str, str], LabPod] = {}

    def create(self, pod: dict) -> None:
        node = pod["spec"]["nodeName"]
        if node == "fresh-stuck":
            return  # never scheduled: stays Pending
        c = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        uid = pod["metadata"]["uid"]
        if node == "fresh-ok":  # static CPU manager + topology manager: cpu0 and GPU0, both on NUMA node 0
            cpus, gpus, entry = "0", [0], {uid: {c["name"]: "0"}}
            state = {"policyName": "static", "defaultCpuSet": "1", "entries": entry, "checksum": 2}
        else:  # policy none: the shared pool, and whichever GPU the device plugin picked
            cpus, gpus, state = "0-1", [1], {"policyName": "none", "defaultCpuSet": "", "checksum": 2}
        upper = next(n for n in self.lab.nodes if n.spec.name == node).dir / "upper"
        (upper / "var/lib/kubelet/cpu_manager_state").write_text(json.dumps(state))
        sysctls = {x["name"]: x["value"] for x in (pod["spec"].get("securityContext") or {}).get("sysctls", [])}
        lp = LabPod(pod["metadata"]["name"], uid, cpus, gpus=gpus, env=env, shm_mib=2048, namespace=pod["metadata"]["namespace"],
                    container=c["name"], sysctls=sysctls)  # fmt: skip
        labpods.start(self.lab, node, lp)
        self.running[(lp.namespace, lp.name)] = lp
        pod["status"].update(phase="Running", containerStatuses=[{"name": c["name"], "ready": True, "restartCount": 0,
                             "image": c["image"], "imageID": "", "state": {"running": {}}}])  # fmt: skip

    def delete(self, pod: dict) -> None:
        lp = self.running.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
        if lp is not None:
            labpods.stop_one(self.lab, lp)

    def exec(self, ns: str, name: str, container: str, argv: list[str], stdin=None):
        return labpods.exec_in(self.running[(ns, name)], argv, stdin)


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory):
    require_two_cpu_gpu_lab()
    root = Path(tmp_path_factory.mktemp("acceptlab"))
    built = build_standins(root / "standins")
    lab = Lab(root / "lab", first_subnet=210)
    for name, policy in (("fresh-ok", "static"), ("fresh-broken", "none"), ("fresh-stuck", "static")):
        lab.add(node_spec(name, built, policy))
    api = fake_api()
    api.runtime_classes["nvidia"] = "nvidia"
    kubelets = Kubelets(lab, api)
    api.on_create, api.on_delete, api.exec_handler = kubelets.create, kubelets.delete, kubelets.exec
    try:
        lab.start()
        for n in lab.nodes:
            api.add_node(node_object(n.spec.name, gpus=2, internal_ip=n.address))
        with serve(api) as url:
            (root / "kubeconfig").write_text(kubeconfig(url, "full-token"))
            inv = {"kubernetes": {"kubeconfig": str(root / "kubeconfig"), "configz": False},
                   "defaults": yaml.safe_load(lab.inventory())["defaults"]}  # fmt: skip
            (root / "inv.yaml").write_text(yaml.safe_dump(inv))
            (root / "profile.yaml").write_text(PROFILE)
            p = subprocess.run(
                [sys.executable, "-m", "conformance", "run", "--inventory", str(root / "inv.yaml"), "--profile",
                 str(root / "profile.yaml"), "--acceptance-pod", "--output", str(root / "out"), "--", "-k", "test_pod"],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            doc = json.loads((root / "out" / "results.json").read_text())
            yield p, doc, api, kubelets, root
    finally:
        for lp in list(kubelets.running.values()):
            labpods.stop_one(lab, lp)
        lab.stop()


def test_acceptance_pod_outcomes(acceptance):
    p, doc, *_ = acceptance
    got: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        if r["subject"].get("pod", "").startswith("gnc-acceptance-"):
            got.setdefault(r["node"], {})[r["check"]] = r["outcome"]
    assert got == EXPECTED, p.stdout[-3000:] + p.stderr[-2000:]


def test_a_pod_that_never_runs_is_an_error_and_is_deleted(acceptance):
    _, doc, *_ = acceptance
    stuck = [r for r in doc["results"] if r["node"] == "fresh-stuck"]
    assert stuck and all(r["outcome"] == E and "was not running after 4 s" in r["message"] for r in stuck)
    node = next(n for n in doc["nodes"] if n["name"] == "fresh-stuck")
    assert node["acceptance_pod"]["deleted"] is True


def test_every_acceptance_pod_is_deleted_and_the_report_says_so(acceptance):
    _, doc, api, kubelets, root = acceptance
    for n in doc["nodes"]:
        made = n["acceptance_pod"]
        assert made["pod"].startswith("gpu-node-conformance/gnc-acceptance-") and made["deleted"] is True
    assert api.pods == {} and kubelets.running == {}
    # every POST or DELETE is the acceptance pods' own; access reviews are questions, stored nowhere
    writes = [(verb, path) for _, verb, path in api.requests if verb in ("POST", "DELETE") and path != REVIEWS]
    assert sorted(v for v, _ in writes) == ["DELETE"] * 3 + ["POST"] * 3
    assert all("/namespaces/gpu-node-conformance/pods" in path for _, path in writes)
    html = (root / "out" / "report.html").read_text()
    assert "this run created acceptance pods" in html and html.count("created and deleted") >= 3


def test_the_pod_is_guaranteed_with_the_profiles_settings():
    # the manifest as the API received it: whole CPUs, equal requests and limits, one GPU, runtime class, /dev/shm
    from conformance.cluster.acceptance import manifest
    from conformance.config.profile import load_profile

    body = manifest("fresh-ok", load_profile(None), "gpu-node-conformance", "img", "nvidia.com/gpu")
    res = body["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    assert body["spec"]["nodeName"] == "fresh-ok" and body["spec"]["activeDeadlineSeconds"] > 0
    assert body["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_an_interrupt_while_waiting_still_deletes_the_pod(acceptance):
    _, _, api, _, root = acceptance
    inv = yaml.safe_load((root / "inv.yaml").read_text())
    inv["kubernetes"]["node_selector"] = "kubernetes.io/hostname=fresh-stuck"
    (root / "inv-stuck.yaml").write_text(yaml.safe_dump(inv))
    (root / "profile-slow.yaml").write_text(PROFILE.replace("acceptance_timeout_s: 4", "acceptance_timeout_s: 120"))
    before = len(api.requests)
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance", "run", "--inventory", str(root / "inv-stuck.yaml"), "--profile",
         str(root / "profile-slow.yaml"), "--acceptance-pod", "--output", str(root / "out-int")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )  # fmt: skip

    def created() -> bool:  # the pod's own POST, not an access review's
        return any(verb == "POST" and path != REVIEWS for _, verb, path in api.requests[before:])

    deadline = time.monotonic() + 180
    while not created() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert created(), "the run never created its acceptance pod"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)  # a loaded machine writes the reports slowly: wait for the event
    assert proc.returncode == 2, out + err
    assert [v for _, v, path in api.requests[before:] if v in ("POST", "DELETE") and path != REVIEWS] == ["POST", "DELETE"]
    assert api.pods == {}
