"""Issue 58: each daemon's release and presence from what nobody on the node can forge, on lab nodes laid out as
the platforms GPU fleets run on install their daemons.

- `tarball`: the kubelet and containerd from release tarballs, owned by no package (EKS, GKE, AKS, k3s). With the
  Kubernetes API, the Node's nodeInfo decides (its Lease renewed, its bootID this boot's); over SSH alone the
  release-dependent checks are judged where every release agrees, and are errors naming the deciding release where
  not. A stale Lease makes nodeInfo not used.
- `journald`: the same, with a real journald: the daemons' own start lines (their trusted _PID) decide; a line a
  user logged as `kubelet` (SYSLOG_IDENTIFIER, which anyone sets) with another release is ignored.
- `overwritten`: dpkg says containerd.io 1.6.20, and a release tarball's 2.1.4 was copied over its file: the digest
  dpkg recorded tells, and 1.6.20's merge rules are never applied.
- `eks`, `eks-forged`: EKS's /etc/eks/*-version.txt, root's (used) and a user's (ignored).
- `k3s-decoyed`: a k3s node where a user runs a program named kubelet: k3s's kubelet is judged.
- `gpu-operator`, `gpu-user-daemon`: NVSwitch nodes whose GPUs report fabric registration completed; the fabric
  manager and persistence daemon run in the GPU Operator's driver container, or persistenced on the host as its
  own user (NVIDIA's unit runs it with --user): GPU-FABRIC and GPU-PERSISTENCE pass."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec as InventoryNode
from conformance.facts.node_facts import NodeFacts
from tests.conftest import require_or_skip
from tests.fakeapi import kubeconfig, node_lease, node_object, serve
from tests.gpu_standins import build_standins
from tests.kube_fixtures import fake_api
from tests.lab.builder import Decoy, Lab, lab_available
from tests.lab.every_node import k3s_node
from tests.lab.gpu_nodes import LAB_PROFILE, gpu_specs, require_two_cpu_gpu_lab
from tests.lab.nodes import specs

pytestmark = pytest.mark.lab

# What the daemons print first (cmd/kubelet/app/server.go Run; cmd/containerd/command/main.go), as journald keeps it
KUBELET_LINE = 'I1207 09:00:00.000001      77 server.go:467] "Kubelet version" kubeletVersion="v1.32.4"'
CONTAINERD_LINE = 'time="2026-12-07T09:00:00.000000000Z" level=info msg="starting containerd" revision=1a2b3c4d version=v2.0.4'
FORGED_LINE = 'I1207 09:00:00.000001      77 server.go:467] "Kubelet version" kubeletVersion="v1.99.0"'
# `containerd --version` of a release tarball (containerd v2.1.4), `kubelet --version` of EKS's build
TARBALL_CONTAINERD = "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376"
EKS_KUBELET = "Kubernetes v1.31.2-eks-7f9249a\n"
EKS_CONTAINERD = "containerd github.com/containerd/containerd/v2 2.0.5 fb4c30d4ede3531652d86197bf3fc9515e5276d9\n"
NOBODY = 65534
RELEASE_CHECKS = ("KUBELET-CGROUP-DRIVER", "RUNTIME-SYSTEMD-CGROUP", "KUBELET-ALLOWED-UNSAFE-SYSCTLS")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def node_specs() -> list:
    good = next(s for s in specs() if s.name == "good")
    by_hand = ["kubelet", "containerd"]
    eks_files = {**good.files, "/etc/eks/kubelet-version.txt": EKS_KUBELET, "/etc/eks/containerd-version.txt": EKS_CONTAINERD}
    k3s = k3s_node(good)
    return [
        replace(good, name="tarball", unpackaged=by_hand),
        replace(
            good,
            name="journald",
            unpackaged=by_hand,
            journal=True,
            start_lines={"kubelet": KUBELET_LINE, "containerd": CONTAINERD_LINE},
            journal_lines=[(NOBODY, "kubelet", FORGED_LINE)],
        ),
        replace(good, name="overwritten", containerd=TARBALL_CONTAINERD, tarball_over={"containerd": "1.6.20"}),
        replace(good, name="eks", unpackaged=by_hand, files=eks_files, after_daemons=list(eks_files)[-2:]),
        replace(
            good,
            name="eks-forged",
            unpackaged=by_hand,
            files=eks_files,
            after_daemons=list(eks_files)[-2:],
            owners={"/etc/eks/kubelet-version.txt": NOBODY, "/etc/eks/containerd-version.txt": NOBODY},
        ),
        replace(k3s, name="k3s-decoyed", decoys=[Decoy("kubelet", ("--config", "/etc/kubernetes/kubelet-config.yaml"))]),
    ]


@pytest.fixture(scope="module")
def release_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("releaselab")), first_subnet=200)
    for spec in node_specs():
        lab.add(spec)
    with lab.running():
        lab.started_at = time.time()  # the daemons started before this: their first status comes after
        yield lab


def collect(lab: Lab, name: str):
    node = next(n for n in lab.nodes if n.spec.name == name)
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    b = collect_node(InventoryNode(name=name, address=node.address, ssh=ssh), timeout=120, retries=0)
    assert b.error is None and b.complete, b.error
    return b


def audit(lab: Lab, tmp: Path, nodes: list[str], api_url: str | None = None, extra: tuple[str, ...] = ()) -> dict:
    inv = yaml.safe_load(lab.inventory())
    inv["nodes"] = [n for n in inv["nodes"] if n["name"] in nodes]
    if api_url is not None:
        (tmp / "kubeconfig").write_text(kubeconfig(api_url, "full-token"))
        inv["kubernetes"] = {"kubeconfig": str(tmp / "kubeconfig"), "discover": False, "configz": "off"}
    (tmp / "inv.yaml").write_text(yaml.safe_dump(inv))
    p = subprocess.run([sys.executable, "-m", "conformance", "run", "--inventory", str(tmp / "inv.yaml"), "--output",
                        str(tmp / "out"), *extra], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert (tmp / "out" / "results.json").is_file(), p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp / "out" / "results.json").read_text())
    return {(r["node"], r["check"]): r for r in doc["results"]}


def api_node(name: str, address: str, kubelet: str, runtime: str, started_at: float) -> dict:
    """The Node as a live kubelet keeps it: nodeInfo of this boot, the Ready heartbeat of the status it posted after
    it started (Kubernetes times are whole seconds: the next second at least)."""
    while time.time() < started_at + 2:
        time.sleep(0.2)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    obj = node_object(name, internal_ip=address)
    obj["status"]["nodeInfo"].update(kubeletVersion=kubelet, containerRuntimeVersion=runtime, bootID=BOOT_ID)
    obj["status"]["conditions"][0]["lastHeartbeatTime"] = now
    return obj


@pytest.fixture(scope="module")
def with_api(release_lab, tmp_path_factory):
    """`tarball` and `journald` audited with the API: the Nodes say kubelet v1.32.4-eks-1a2b3c4 and containerd 2.0.4,
    their Leases renewed by live kubelets; `tarball` is audited a second time with its Lease stale."""
    api = fake_api()
    addresses = {n.spec.name: n.address for n in release_lab.nodes}
    for name in ("tarball", "journald"):
        api.add_node(api_node(name, addresses[name], "v1.32.4-eks-1a2b3c4", "containerd://2.0.4", release_lab.started_at))
        api.leases[name] = node_lease(name, "2026-01-01T00:00:00.000000Z")
        api.renewing.add(name)
    with ExitStack() as stack:
        url = stack.enter_context(serve(api))
        fresh = audit(release_lab, tmp_path_factory.mktemp("api-fresh"), ["tarball", "journald"], url)
        api.renewing.discard("tarball")  # its kubelet stopped renewing an hour ago... the Lease says 2026-01-01
        stale = audit(release_lab, tmp_path_factory.mktemp("api-stale"), ["tarball"], url)
    return fresh, stale


@pytest.fixture(scope="module")
def ssh_only(release_lab, tmp_path_factory):
    names = [s.name for s in node_specs()]
    return audit(release_lab, tmp_path_factory.mktemp("ssh-only"), names)


def test_with_the_api_the_nodes_own_report_decides(with_api):
    fresh, _ = with_api
    for node in ("tarball", "journald"):
        for check in RELEASE_CHECKS:
            r = fresh[(node, check)]
            assert r["outcome"] == "passed", (node, check, r["message"], r["evidence"])
        evidence = " ".join(fresh[(node, "KUBELET-CGROUP-DRIVER")]["evidence"])
        assert "the kubelet's release: 1.32.4 (from the Node's status.nodeInfo.kubeletVersion" in evidence, evidence
        assert "containerd's release: 2.0.4 (from the Node's status.nodeInfo.containerRuntimeVersion" in evidence, evidence


def test_a_stale_lease_leaves_nodeinfo_unused(with_api):
    _, stale = with_api
    r = stale[("tarball", "KUBELET-CGROUP-DRIVER")]
    assert r["outcome"] == "error", r
    assert "the node's Lease is stale" in " ".join(r["evidence"]), r["evidence"]


def test_over_ssh_alone_a_check_is_judged_where_every_release_agrees(ssh_only):
    # the tarball node: no package, no journal, no record; its releases are unknown
    driver = ssh_only[("tarball", "KUBELET-CGROUP-DRIVER")]
    assert driver["outcome"] == "error", driver
    assert "whether containerd is 2.0.0 or later" in driver["message"], driver["message"]
    runtime = ssh_only[("tarball", "RUNTIME-SYSTEMD-CGROUP")]
    assert runtime["outcome"] == "error" and "releases it may be read these files differently" in runtime["message"], runtime
    # every release of the kubelet counts tcp_tw_reuse and somaxconn unsafe, and its allowlist admits them: a pass
    # whatever the release (the profile's pod sysctls that are safe from a release need it: they decide nothing here)
    assert ssh_only[("tarball", "KUBELET-ALLOWED-UNSAFE-SYSCTLS")]["outcome"] in ("passed", "error")


def test_the_journal_start_line_decides_and_a_users_line_is_ignored(release_lab, ssh_only):
    b = collect(release_lab, "journald")
    facts = NodeFacts(b)
    assert facts.kubelet_release.release == (1, 32, 4), facts.kubelet_release.evidence()
    assert "its start line in the journal" in facts.kubelet_release.source
    assert facts.runtime_release.release == (2, 0, 4), facts.runtime_release.evidence()
    # the user's line is in the node's journal, under the identifier kubelet, and came back nowhere
    pid1 = release_lab.node_pid("journald")
    shown = subprocess.run(["nsenter", "-t", str(pid1), "-m", "--", "journalctl", "--no-pager", "-o", "json",
                            "SYSLOG_IDENTIFIER=kubelet"], capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    entries = [json.loads(line) for line in shown.splitlines() if line.strip()]
    forged = [e for e in entries if "v1.99.0" in str(e.get("MESSAGE"))]
    assert forged and forged[0]["_UID"] == str(NOBODY), entries
    assert b"v1.99.0" not in json.dumps([r.data.decode("latin-1") for r in b.records]).encode()
    for check in RELEASE_CHECKS:
        assert ssh_only[("journald", check)]["outcome"] == "passed", ssh_only[("journald", check)]


def test_a_tarball_over_a_package_file_is_not_judged_by_the_package(release_lab, ssh_only):
    b = collect(release_lab, "overwritten")
    assert b.optional_command("containerd-package").data.decode() == "dpkg containerd.io 1.6.20-1"
    proof = b.meta("containerd-package-proof").data.decode().split()
    assert proof[:2] == ["digest", "md5"] and proof[2] != proof[3], proof  # the ctime proof failed: the digest decided
    facts = NodeFacts(b)
    rel = facts.runtime_release
    assert rel.release is None, rel.evidence()
    assert "the running file is not the package's" in " ".join(rel.evidence())
    assert "1.6.20" not in (facts.runtime_config.rules or ""), facts.runtime_config.rules
    r = ssh_only[("overwritten", "RUNTIME-SYSTEMD-CGROUP")]
    assert r["outcome"] != "passed" or "1.6.20" not in r["message"], r


def test_a_package_file_that_is_the_packages_is_proven_by_its_ctime(release_lab):
    b = collect(release_lab, "eks")  # its containerd and kubelet have no package; the lab's sshd's do not matter
    good = collect(release_lab, "k3s-decoyed")  # containerd.io 2.0.0 from the lab's package, as installed
    proof = good.meta("containerd-package-proof").data.decode().split()
    assert proof[0] == "ctime" and int(proof[1]) <= int(proof[2]), proof
    assert NodeFacts(good).runtime_release.release == (2, 0, 0)
    assert b.optional_command("kubelet-package").status == "unowned"


def test_root_owned_eks_records_decide_and_a_users_are_ignored(release_lab, ssh_only):
    eks = NodeFacts(collect(release_lab, "eks"))
    assert eks.kubelet_release.release == (1, 31, 2) and eks.kubelet_release.source == "/etc/eks/kubelet-version.txt"
    assert eks.runtime_release.release == (2, 0, 5)
    forged = NodeFacts(collect(release_lab, "eks-forged"))
    assert forged.kubelet_release.release is None
    assert "a user other than root could have written it" in " ".join(forged.kubelet_release.evidence())
    for check in RELEASE_CHECKS:
        assert ssh_only[("eks", check)]["outcome"] == "passed", ssh_only[("eks", check)]


def test_a_users_kubelet_beside_k3s_leaves_k3s_judged(release_lab, ssh_only):
    facts = NodeFacts(collect(release_lab, "k3s-decoyed"))
    (decoy,) = facts.bundle.daemons("kubelet")
    assert decoy.ruled_out and not decoy.trusted
    assert facts.bundle.processes("k3s") == [facts.kubelet_pid]
    assert facts.kubelet_config.get("cpuManagerPolicy").value == "static"
    assert ssh_only[("k3s-decoyed", "KUBELET-CPU-POLICY")]["outcome"] == "passed"


# -- the GPU Operator: its daemons run in its driver container ----------------------------------------------------


@pytest.fixture(scope="module")
def operator_lab(tmp_path_factory):
    require_two_cpu_gpu_lab()
    root = Path(tmp_path_factory.mktemp("operatorlab"))
    good = next(s for s in gpu_specs(build_standins(root / "standins")) if s.name == "gpu-good")
    lab = Lab(root / "lab", first_subnet=206)
    lab.add(replace(good, name="gpu-operator", contained=["nv-fabricmanager", "nvidia-persistenced"]))
    lab.add(replace(good, name="gpu-user-daemon", daemon_uids={"nvidia-persistenced": 143}))
    with lab.running():
        yield lab, root


@pytest.mark.parametrize("persistence", ["mode_or_daemon", "daemon"])
def test_gpu_daemons_in_the_driver_container_or_as_their_own_user(operator_lab, tmp_path, persistence):
    lab, _ = operator_lab
    (tmp_path / "gpu-lab.yaml").write_text(LAB_PROFILE + f"  persistence: {persistence}\n")
    got = audit(lab, tmp_path, ["gpu-operator", "gpu-user-daemon"],
                extra=("--profile", str(tmp_path / "gpu-lab.yaml"), "--", "-k", "FABRIC or PERSISTENCE"))  # fmt: skip
    for node in ("gpu-operator", "gpu-user-daemon"):
        for check in ("GPU-FABRIC", "GPU-PERSISTENCE"):
            r = got[(node, check)]
            assert r["outcome"] == "passed", (node, check, r["message"], r["evidence"])
    fabric = " ".join(got[("gpu-operator", "GPU-FABRIC")]["evidence"])
    assert "nvidia-fabricmanager: running in a container" in fabric and "fabric completed, status SUCCESS" in fabric, fabric
    persisted = " ".join(got[("gpu-user-daemon", "GPU-PERSISTENCE")]["evidence"])
    assert "nvidia-persistenced: running on the host" in persisted, persisted
