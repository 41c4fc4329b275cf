import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conformance.config.inventory import load_inventory, parse_inventory
from conformance.config.profile import load_profile
from conformance.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "inventory" / "inventory.schema.json").read_text())

ISSUE_EXAMPLE = """\
defaults:
  ssh:
    user: root
    port: 22
    identity_file: ~/.ssh/id_ed25519
    known_hosts: ~/.ssh/known_hosts
nodes:
  - name: gpu-node-07
    address: 10.0.1.100
  - name: gpu-node-08
    address: 10.0.1.101
    ssh: {port: 2222, user: ops}
  - name: this-host
    transport: local
"""


def test_issue_example_is_accepted_as_written(tmp_path):
    f = tmp_path / "inv.yaml"
    f.write_text(ISSUE_EXAMPLE)
    inv = load_inventory(f)
    by = {n.name: n for n in inv.nodes}
    assert by["gpu-node-07"].ssh == {
        "user": "root",
        "port": 22,
        "identity_file": "~/.ssh/id_ed25519",
        "known_hosts": "~/.ssh/known_hosts",
    }
    assert by["gpu-node-08"].ssh["port"] == 2222 and by["gpu-node-08"].ssh["user"] == "ops"
    assert by["this-host"].transport == "local"
    jsonschema.validate(yaml.safe_load(ISSUE_EXAMPLE), SCHEMA)


@pytest.mark.parametrize("name", ["example.yaml", "bastion.yaml", "latency.yaml"])
def test_shipped_examples_are_valid(name):
    path = ROOT / "inventory" / name
    load_inventory(path)
    jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMA)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"nodes": [{"name": "a", "address": "x", "colour": 1}]}, "nodes[0] (a).colour: unknown field"),
        ({"nodes": [{"name": "a", "address": "x", "ssh": {"port": "22"}}]}, "nodes[0] (a).ssh.port: must be a integer"),
        ({"nodes": [{"name": "a", "address": "x", "ssh": {"prot": 22}}]}, "nodes[0] (a).ssh.prot: unknown field"),
        ({"nodes": [{"name": "a"}]}, "nodes[0] (a).address: required for transport ssh"),
        ({"nodes": [{"name": "<img src=x>", "address": "x"}]}, "nodes[0].name: '<img src=x>' is not a valid node name"),
        ({"nodes": [{"name": "a", "transport": "telnet"}]}, "nodes[0] (a).transport: 'telnet' is not one of"),
        ({"nodes": [{"name": "a", "address": "x"}, {"name": "a", "address": "y"}]}, "nodes[1] (a).name: duplicate"),
        ({"nodes": [{"name": "a", "transport": "local", "host_root": "host"}]}, "nodes[0] (a).host_root: must be an absolute"),
        (
            {"defaults": {"ssh": {"insecure_accept_unknown_host_keys": "yes"}}, "nodes": [{"name": "a", "address": "x"}]},
            "defaults.ssh.insecure_accept_unknown_host_keys: must be a boolean",
        ),
        ({"nodes": []}, "nodes: must be a non-empty list"),
        ({"node": []}, "node: unknown top-level field"),
    ],
)
def test_errors_name_file_entry_and_field(doc, expected):
    with pytest.raises(UsageError) as e:
        parse_inventory(doc, "/etc/inv.yaml")
    assert str(e.value).startswith("/etc/inv.yaml: invalid inventory")
    assert expected in str(e.value)
    if "duplicate" not in expected:  # uniqueness of names is beyond JSON Schema
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, SCHEMA)


def test_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_inventory(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [")
    with pytest.raises(UsageError, match=r"bad\.yaml: not valid YAML"):
        load_inventory(bad)


def test_profiles(tmp_path):
    default = load_profile(None)
    assert default.get("kubelet.cpu_manager_policy") == "static"
    assert default.get("sysctl.min_somaxconn") == 65535
    relaxed = load_profile("relaxed-reconcile")
    assert relaxed.get("kubelet.max_cpu_manager_reconcile_period") == "30s"
    assert relaxed.get("kubelet.topology_manager_policies") == ["single-numa-node"]
    own = tmp_path / "mine.yaml"
    own.write_text("sysctl: {min_somaxconn: 4096}\n")
    assert load_profile(str(own)).get("sysctl.min_somaxconn") == 4096
    own.write_text("sysctl: {max_somaxconn: 4096}\n")
    with pytest.raises(UsageError, match=r"mine\.yaml: unknown key 'sysctl\.max_somaxconn'"):
        load_profile(str(own))
    own.write_text("kubelet: {topology_manager_policies: [numa-ish]}\n")
    with pytest.raises(UsageError, match=r"kubelet\.topology_manager_policies must be"):
        load_profile(str(own))
    with pytest.raises(UsageError, match="no such bundled profile"):
        load_profile("nope")
