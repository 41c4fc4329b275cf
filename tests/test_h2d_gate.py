"""The H2D probe's safety gate, from what the real collector reads on a host root: the CPUs the CPU manager
gave away, the devices the kubelet's device manager gave away, and the GPU DRA drivers registered with the
kubelet. It fails closed: what cannot be established keeps the probe off every GPU."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.errors import FactUnavailable
from conformance.facts.node_facts import NodeFacts
from tests.fakeroot import make_host_root
from tests.lab.nodes import SAMPLES

CPU_STATE = (SAMPLES / "cpu_manager_state.static.v2.lx1036.raw.json").read_text()  # CPUs 1 and 13 given away
DEVICES = (SAMPLES / "kubelet_internal_checkpoint.list-layout.k8s-issue-75880.json").read_text()


def facts(tmp_path: Path, files: dict[str, str], comm: str = "kubelet", argv=(), sockets=()) -> NodeFacts:
    root = make_host_root(tmp_path / "host", list(argv), files, comm=comm)
    held = []
    for path in sockets:  # a registration socket, as a plugin leaves it in the kubelet's registry
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        s = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(target.parent)  # bound by its name: the whole path is longer than a socket address holds
        try:
            s.bind(target.name)
        finally:
            os.chdir(here)
        held.append(s)
    try:
        bundle = collect_node(NodeSpec(name="n1", transport="local", host_root=str(root)), retries=0)
    finally:
        for s in held:
            s.close()
    assert bundle.error is None, bundle.error
    return NodeFacts(bundle)


def test_exclusive_cpus_devices_and_dra_drivers(tmp_path):
    got = facts(
        tmp_path,
        {"/var/lib/kubelet/cpu_manager_state": CPU_STATE, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint": DEVICES},
        sockets=[
            "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
            "/var/lib/kubelet/plugins_registry/ebs.csi.aws.com-reg.sock",
        ],
    ).kubelet_assignments
    assert got.exclusive == frozenset({1, 13})
    assert [g.device for g in got.grants] == [
        "GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa",
        "GPU-72cbf723-9f70-7d49-a6bb-626fcb3f8c30",
    ]
    assert got.dra_drivers == ("gpu.nvidia.com",)  # a CSI driver registers there too: not a GPU driver


def test_the_kubelets_root_dir_is_where_its_checkpoints_are(tmp_path):
    got = facts(
        tmp_path,
        {"/data/kubelet/cpu_manager_state": CPU_STATE, "/var/lib/kubelet/cpu_manager_state": '{"policyName":"none"}'},
        argv=["--root-dir=/data/kubelet"],
    ).kubelet_assignments
    assert got.exclusive == frozenset({1, 13}) and got.grants == ()  # no device checkpoint: no device plugin allocated


def test_a_running_kubelet_without_its_cpu_checkpoint_closes_the_gate(tmp_path):
    f = facts(tmp_path, {})
    with pytest.raises(FactUnavailable, match="cpu_manager_state does not exist although a kubelet runs"):
        _ = f.kubelet_assignments


def test_no_kubelet_and_no_state_files_is_nothing_assigned(tmp_path):
    got = facts(tmp_path, {}, comm="sshd").kubelet_assignments
    assert got.exclusive == frozenset() and got.grants == () and got.dra_drivers == ()


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/var/lib/kubelet/cpu_manager_state", "{"),
        ("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", '{"Data": {"PodDeviceEntries": {}}}'),
    ],
)
def test_a_checkpoint_that_does_not_parse_closes_the_gate(tmp_path, path, text):
    files = {"/var/lib/kubelet/cpu_manager_state": CPU_STATE, path: text}
    with pytest.raises(FactUnavailable, match=path):  # the parse error, as every fact reports one
        _ = facts(tmp_path, files).kubelet_assignments
