from pathlib import Path

import pytest

from conformance.errors import ParseError
from conformance.facts import kernel
from conformance.facts.runtime import containerd_runtime, crio_runtime, load_toml, merge_containerd
from conformance.facts.topology import Topology

SAMPLES = Path(__file__).parent / "samples"


def load(name):
    return (SAMPLES / name).read_text()


@pytest.mark.parametrize(
    "name", ["containerd.config.v2.systemdcgroup.containerd-docs.toml", "containerd.config.v3.systemdcgroup.containerd-docs.toml"]
)
def test_containerd_samples(name):
    rc = containerd_runtime(load_toml(load(name), name), [name])
    assert rc.default_handler == "runc" and rc.handlers["runc"].systemd_cgroup is True


def test_containerd_without_option_defaults_to_cgroupfs():
    rc = containerd_runtime(load_toml("version = 2\n", "c"), ["c"])
    assert rc.handlers["runc"].systemd_cgroup is False


def test_imports_replace_whole_plugin_sections_relative_and_glob():
    files = {
        "/etc/containerd/config.toml": 'version = 3\nimports = ["conf.d/*.toml"]\n'
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
        "[plugins.'io.containerd.grpc.v1.other']\nx = 1\n",
        "/etc/containerd/conf.d/50-nvidia.toml": "version = 3\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\nSystemdCgroup = true\n",
    }
    seen = []

    def expand(pattern):
        seen.append(pattern)
        return ["/etc/containerd/conf.d/50-nvidia.toml"]

    doc, used = merge_containerd("/etc/containerd/config.toml", files.get, expand)
    assert seen == ["/etc/containerd/conf.d/*.toml"]
    assert used == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/50-nvidia.toml"]
    rc = containerd_runtime(doc, used)
    # the imported section replaced the main file's CRI section: runc is back at its default
    assert rc.handlers["nvidia"].systemd_cgroup is True
    assert rc.handlers["runc"].systemd_cgroup is False
    assert doc["plugins"]["io.containerd.grpc.v1.other"] == {"x": 1}


def test_crio_dropin_sample_and_default():
    name = "crio.conf.d.02-cgroup-manager.cgroupfs.k8s-docs.toml"
    rc = crio_runtime([(name, load(name))])
    assert rc.cgroup_manager == "cgroupfs" and not any(h.systemd_cgroup for h in rc.handlers.values())
    assert crio_runtime([]).cgroup_manager == "systemd"
    later = crio_runtime([(name, load(name)), ("99.conf", '[crio.runtime]\ncgroup_manager = "systemd"\n')])
    assert later.cgroup_manager == "systemd"


def test_bad_toml():
    with pytest.raises(ParseError):
        load_toml("version = = 2", "/etc/containerd/config.toml")


def test_cgroup_samples():
    assert kernel.cgroup_version(load("stat-fc-T.sys-fs-cgroup.cgroup-v2.k8s-docs.txt")) == 2
    assert kernel.cgroup_version(load("stat-fc-T.sys-fs-cgroup.cgroup-v1.k8s-docs.txt")) == 1
    with pytest.raises(ParseError):
        kernel.cgroup_version("ext2/ext3\n")


def test_kubepods_layout():
    assert kernel.kubepods_driver({"/sys/fs/cgroup/kubepods.slice": True, "/sys/fs/cgroup/kubepods": False})[0] == "systemd"
    assert kernel.kubepods_driver({"/sys/fs/cgroup/cpu/kubepods": True})[0] == "cgroupfs"
    assert kernel.kubepods_driver({"/sys/fs/cgroup/kubepods": False})[0] is None


def test_sysctl_values():
    assert kernel.parse_port_range("32768\t60999\n") == (32768, 60999)
    assert kernel.parse_port_set("30000-32767\n") == set(range(30000, 32768))
    assert kernel.parse_port_set("\n") == set()
    for bad in ("1 2 3", "x y", "70000 80000"):
        with pytest.raises(ParseError):
            kernel.parse_port_range(bad)
    assert kernel.parse_scheduler("[none] mq-deadline kyber\n", "nvme0n1") == "none"
    assert kernel.parse_scheduler("none [mq-deadline]\n", "nvme0n1") == "mq-deadline"


def topo(nodes, siblings, online):
    return Topology(
        frozenset(online), {k: frozenset(v) for k, v in nodes.items()}, {k: frozenset(v) for k, v in siblings.items()}
    )


def test_topology_consistency():
    sib = {c: {c % 2, c % 2 + 2} for c in range(4)}
    ok = topo({0: {0, 2}, 1: {1, 3}}, sib, range(4))
    assert ok.problems() == [] and ok.threads_per_core == 2
    assert ok.whole_cores(frozenset({0, 2, 1})) == [frozenset({0, 2})]
    twice = topo({0: {0, 1, 2}, 1: {1, 3}}, sib, range(4))
    assert any("cpu1 is in node0 and in node1" in p for p in twice.problems())
    asym = topo({0: {0, 1, 2, 3}}, {0: {0, 1}, 1: {1}, 2: {2}, 3: {3}}, range(4))
    assert any("cpu0 lists cpu1" in p for p in asym.problems())
    missing = topo({0: {0, 1}}, sib, range(4))
    assert any("in no NUMA node" in p for p in missing.problems())


def test_systemd_cgroup_must_be_a_boolean():
    doc = load_toml(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = "false"\n', "c"
    )
    with pytest.raises(ParseError, match="not true or false"):
        containerd_runtime(doc, ["c"])
