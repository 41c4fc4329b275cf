"""Every kind of lab node in one lab: the main lab's nodes that are up, the GPU lab's, a k3s node and a
witness node, each built once per node userland (tests/lab/builder.py USERLANDS). One collection of it
serves the shell matrix (tests/test_lab_shells.py) and the unknown-is-never-a-pass invariant
(tests/test_unknown_never_passes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from tests.gpu_standins import build_standins
from tests.lab.builder import USERLANDS, Lab, NodeSpec, Userland
from tests.lab.gpu_nodes import LAB_PROFILE, gpu_specs
from tests.lab.nodes import GOOD_KUBELET, TOPOLOGY_DROPIN, specs

# Nodes that lack a program the collector uses: it must fail naming the program, or work without it.
NO_BASE64 = Userland("busybox", "busybox", "busybox", missing=("base64",))
NO_TIMEOUT = Userland("busybox", "busybox", "busybox", missing=("timeout",))
# k3s runs the kubelet in its own process; its flags come from k3s's config file, which the collector scans
# with awk (the kubelet-arg values `config=` and `config-dir=`), in the forms the k3s docs show.
K3S_CONFIG = """\
kubelet-arg:
  - "config=/etc/rancher/k3s/kubelet.yaml"
  - 'config-dir=/etc/rancher/k3s/kubelet.conf.d'
"""
# A long Xid line with multibyte text before the collector's 512-byte cut: awk in a UTF-8 locale would
# count characters (gawk), in the C locale bytes (every awk).
LONG_XID = "Dec  3 09:12:00 gpu kernel: NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception: " + "é" * 400 + "\n"
# The witness fails where less information used to make a pass: the kubelet on cgroupfs by its config (no pod
# cgroup tree decides) under a systemd runtime, two reserved CPUs that are one SMT core, and a drop-in that
# sets the topology scope to pod. Unreadable kubelet files, sibling lists or drop-in folders must not pass it.
WITNESS_KUBELET = GOOD_KUBELET.replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs").replace(
    'reservedSystemCPUs: "0,4,8,12"', 'reservedSystemCPUs: "0,8"'
)
WITNESS_SCOPE = TOPOLOGY_DROPIN + "topologyManagerScope: pod\n"


def k3s_node(good: NodeSpec) -> NodeSpec:
    files = {p: c for p, c in good.files.items() if not p.startswith("/etc/kubernetes/")}
    files.update(
        {
            "/etc/rancher/k3s/config.yaml": K3S_CONFIG,
            "/etc/rancher/k3s/kubelet.yaml": GOOD_KUBELET,
            "/etc/rancher/k3s/kubelet.conf.d/10-topology.conf": TOPOLOGY_DROPIN,
        }
    )
    return replace(good, name="k3s", kubelet_args=[], daemons=["k3s"], files=files)


def witness_node(good: NodeSpec) -> NodeSpec:
    files = dict(good.files)
    files["/etc/kubernetes/kubelet-config.yaml"] = WITNESS_KUBELET
    files["/etc/kubernetes/kubelet.conf.d/10-topology.conf"] = WITNESS_SCOPE
    return replace(good, name="witness", files=files, kubepods=None)


def bases(standins: Path) -> list[NodeSpec]:
    """The lab's nodes that are up, the GPU lab's, the k3s node and the witness; every login in a UTF-8
    locale (as most distributions set LANG), so that a locale-dependent tool shows."""
    nodes = [s for s in specs() if s.up] + gpu_specs(build_standins(standins))
    assert nodes[0].name == "good"
    nodes += [k3s_node(nodes[0]), witness_node(nodes[0])]
    out = []
    for spec in nodes:
        files = dict(spec.files)
        if spec.name == "gpu-good":
            files["/var/log/kern.log"] = str(files["/var/log/kern.log"]) + LONG_XID
        if spec.name == "hostile":  # dash's echo would turn \c and \n in an import's name into an end and a newline
            files["/etc/containerd/conf.d/51 back\\c\\n.toml"] = "version = 2\n"
        out.append(replace(spec, files=files, sshd_config="SetEnv LANG=C.UTF-8\n" + spec.sshd_config))
    return out


def node_name(base: str, userland: Userland) -> str:
    return f"{base}-u{USERLANDS.index(userland)}" if userland in USERLANDS else f"{base}-{userland.name.split('-no-')[1]}"


def build(root: Path) -> tuple[Lab, list[str]]:
    """The lab (not started) and the names of its base nodes."""
    nodes = bases(root / "standins")
    lab = Lab(root / "lab", first_subnet=100)  # 198.18.100-187: beside the other labs (1-8, 199-250)
    for userland in USERLANDS:
        for spec in nodes:
            lab.add(replace(spec, name=node_name(spec.name, userland), userland=userland))
    by_name = {s.name: s for s in nodes}
    lab.add(replace(by_name["good"], name=node_name("good", NO_BASE64), userland=NO_BASE64))
    lab.add(replace(by_name["containerd1"], name=node_name("containerd1", NO_TIMEOUT), userland=NO_TIMEOUT))
    return lab, [s.name for s in nodes]


@dataclass
class Collected:
    """One `conformance collect` of the whole lab and one offline judgement of its snapshots."""

    bases: list[str]
    collect: subprocess.CompletedProcess
    run: subprocess.CompletedProcess
    doc: dict
    snaps: dict[str, dict]
    snapshot_dir: Path
    profile: Path


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=900)


def collect(lab: Lab, bases: list[str], out: Path) -> Collected:
    (out / "inventory.yaml").write_text(lab.inventory())
    profile = out / "gpu-lab.yaml"
    profile.write_text(LAB_PROFILE)
    c = conformance("collect", "--inventory", str(out / "inventory.yaml"), "--output", str(out / "snap"))
    r = conformance("run", "--snapshot", str(out / "snap"), "--profile", str(profile), "--output", str(out / "out"))
    doc = json.loads((out / "out" / "results.json").read_text())
    snaps = {p.stem: json.loads(p.read_text()) for p in (out / "snap").glob("*.json")}
    return Collected(bases, c, r, doc, snaps, out / "snap", profile)
