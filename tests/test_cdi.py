"""GPU-CDI's facts and rules (issue 51 item 6): CDI specs as the runtimes' CDI cache reads them
(tags.cncf.io/container-device-interface pkg/cdi/cache.go), on a real `nvidia-ctk cdi generate` output; the
NVIDIA Container Toolkit's mode; whether containerd and CRI-O inject CDI devices, by release and setting. The
lab's GPU nodes carry specs and the check's outcomes over SSH (tests/lab/gpu_nodes.py, tests/test_lab_gpu.py)."""

from __future__ import annotations

import pytest

from conformance.checks.runtime_rules import cdi_enabled
from conformance.errors import ParseError
from conformance.facts.cdi import cdi_registry, parse_spec, toolkit_mode
from tests.lab.gpu_nodes import CDI_SAMPLE, cdi_spec
from tests.test_parsers_runtime_kernel import containerd_of, load

UUID = "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e"  # the sample's GPU


def test_a_real_nvidia_ctk_spec():
    spec = parse_spec(CDI_SAMPLE.read_text(), "/etc/cdi/nvidia.yaml")
    assert (spec.kind, spec.devices, spec.driver) == ("nvidia.com/gpu", ["0", UUID, "all"], "575.64.03")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("cdiVersion: 0.5.0\nkind: nvidia.com\ndevices: [{name: '0'}]\n", "kind 'nvidia.com' is not vendor/class"),
        ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n", "no devices"),
        ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: '0'}, {name: '0'}]\n", "defined twice"),
        ("kind: nvidia.com/gpu\ndevices: [{name: '0'}]\n", "cdiVersion is missing"),
        ("{", "not YAML or JSON"),
        ("", "not a CDI spec"),
    ],
)
def test_what_the_cache_leaves_out(text, why):
    with pytest.raises(ParseError, match=why):
        parse_spec(text, "/var/run/cdi/x.yaml")


def test_the_cache_resolves_by_folder_priority_and_drops_conflicts():
    """cache.go refresh(): a later spec folder wins; two specs of one folder defining a device drop it; files other
    than .json and .yaml are not read; a file that does not validate is left out with its error."""
    old = cdi_spec("535.183.01", [UUID])
    new = cdi_spec("575.64.03", [UUID])
    reg = cdi_registry([
        (0, "/etc/cdi/nvidia.yaml", old),
        (1, "/var/run/cdi/nvidia.yaml", new),
        (1, "/var/run/cdi/nvidia.yaml.bak", "not read"),
        (1, "/var/run/cdi/broken.json", '{"cdiVersion": "0.5.0"}'),
    ])  # fmt: skip
    assert reg.devices[f"nvidia.com/gpu={UUID}"] == "/var/run/cdi/nvidia.yaml"
    assert not reg.conflicts and list(reg.errors) == ["/var/run/cdi/broken.json"]
    twice = cdi_registry([(1, "/var/run/cdi/a.yaml", new), (1, "/var/run/cdi/b.yaml", new)])
    assert f"nvidia.com/gpu={UUID}" not in twice.devices
    assert twice.conflicts[f"nvidia.com/gpu={UUID}"] == ["/var/run/cdi/a.yaml", "/var/run/cdi/b.yaml"]


def test_the_toolkit_mode():
    assert toolkit_mode(None)[0] == "auto"
    assert toolkit_mode('[nvidia-container-runtime]\nmode = "cdi"\n')[0] == "cdi"
    assert toolkit_mode("[nvidia-container-cli]\nldconfig = '@/sbin/ldconfig'\n")[0] == "auto"
    with pytest.raises(ParseError, match="not auto, legacy, cdi or csv"):
        toolkit_mode('[nvidia-container-runtime]\nmode = "fast"\n')


@pytest.mark.parametrize(
    ("runtime", "setting", "release", "want"),
    [
        ("cri-o", None, None, True),
        ("containerd", None, (2, 0, 0), True),  # internal/cri/config: EnableCDI true
        ("containerd", None, (1, 7, 27), False),  # pkg/cri/config: EnableCDI false
        ("containerd", (True, "x.enable_cdi"), (1, 7, 27), True),
        ("containerd", (False, "x.enable_cdi"), (2, 1, 0), False),
        ("containerd", (True, "x.enable_cdi"), (1, 6, 20), False),  # no CDI before 1.7
        ("containerd", (True, "x.enable_cdi"), None, None),  # 1.6 or later: unknown
        ("containerd", None, None, None),
        ("containerd", (False, "x.enable_cdi"), None, False),
        ("containerd", ("yes", "x.enable_cdi"), (2, 0, 0), None),
    ],
)
def test_whether_the_runtime_injects_cdi_devices(runtime, setting, release, want):
    assert cdi_enabled(runtime, setting, release)[0] is want


def test_containerd_files_set_enable_cdi_where_each_release_reads_it():
    """1.x: the CRI plugin's table (`[plugins."io.containerd.grpc.v1.cri"] enable_cdi`, as the GPU setup of
    salilkadam/Infrastructure sets it); 2.x: the runtime plugin's (`[plugins.'io.containerd.cri.v1.runtime']`)."""
    v2 = '\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n'
    rc = containerd_of(
        {"/etc/containerd/config.toml": load("containerd.config.v2.systemdcgroup.containerd-docs.toml") + v2}, "1.7.27"
    )
    assert rc.cdi_enable == (True, 'plugins."io.containerd.grpc.v1.cri".enable_cdi')
    assert rc.cdi_dirs == ["/etc/cdi", "/var/run/cdi"]
    v3 = "\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = false\n"
    rc = containerd_of(
        {"/etc/containerd/config.toml": load("containerd.config.v3.systemdcgroup.containerd-docs.toml") + v3}, "2.0.0"
    )
    assert rc.cdi_enable == (False, 'plugins."io.containerd.cri.v1.runtime".enable_cdi')
    rc = containerd_of({"/etc/containerd/config.toml": load("containerd.config.v3.systemdcgroup.containerd-docs.toml")}, "2.0.0")
    assert rc.cdi_enable is None and cdi_enabled("containerd", rc.cdi_enable, (2, 0, 0))[0] is True
