"""SSH trust and failures against a lab node's real sshd."""

from __future__ import annotations

import subprocess

import pytest

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec

pytestmark = pytest.mark.lab


def node_spec(lab, **ssh) -> NodeSpec:
    good = next(n for n in lab.nodes if n.spec.name == "good")
    base = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    base.update(ssh)
    return NodeSpec(name="good", address=good.address, ssh=base)


def test_known_host_collects_in_one_execution(lab):
    b = collect_node(node_spec(lab))
    assert b.error is None and b.complete and b.executions == 1
    assert b.notes == []


def test_unknown_host_key_is_refused_by_default(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    b = collect_node(node_spec(lab, known_hosts=str(empty)))
    assert b.error_kind == "host-key"
    assert "is unknown" in b.error and "ssh-keyscan" in b.error and "insecure_accept_unknown_host_keys" in b.error


def test_missing_known_hosts_file_is_refused(lab, tmp_path):
    b = collect_node(node_spec(lab, known_hosts=str(tmp_path / "nope")))
    assert b.error_kind == "host-key" and "does not exist" in b.error


def test_opt_in_accepts_unknown_keys_and_says_so(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    b = collect_node(node_spec(lab, known_hosts=str(empty), insecure_accept_unknown_host_keys=True))
    assert b.error is None and b.complete
    assert len(b.notes) == 1 and "accepted unknown host key" in b.notes[0]
    assert empty.read_text() == ""  # nothing is written to known_hosts


def test_changed_host_key_is_refused_even_with_opt_in(lab, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    good = next(n for n in lab.nodes if n.spec.name == "good")
    kind, key = (other.with_suffix(".pub")).read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{good.address} {kind} {key}\n")
    b = collect_node(node_spec(lab, known_hosts=str(kh), insecure_accept_unknown_host_keys=True))
    assert b.error_kind == "host-key" and "CHANGED" in b.error


def test_wrong_client_key_is_an_auth_error(lab, tmp_path):
    other = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    b = collect_node(node_spec(lab, identity_file=str(other)))
    assert b.error_kind == "auth" and "authentication as root@" in b.error


def test_proxy_jump_through_a_bastion(lab):
    # The lab's namespaces do not route to each other (the host does not forward), so the bastion
    # forwards to its own sshd: the collection still travels inside the jump host's channel.
    bastion = next(n for n in lab.nodes if n.spec.name == "bad-kubelet")
    spec = node_spec(lab, proxy_jump=f"root@{bastion.address}:22")
    spec.address = bastion.address
    b = collect_node(spec)
    assert b.error is None and b.complete
    assert "/opt/k8s/kubelet.json" in {r.name for r in b.records}  # the bastion node's own files


def test_jump_host_that_cannot_reach_the_node_names_both(lab):
    bastion = next(n for n in lab.nodes if n.spec.name == "bad-kubelet")
    b = collect_node(node_spec(lab, proxy_jump=f"root@{bastion.address}"))
    assert b.error_kind == "unreachable"
    assert f"jump host {bastion.address} could not open a connection to" in b.error


def test_ssh_config_supplies_host_and_user(lab, tmp_path):
    good = next(n for n in lab.nodes if n.spec.name == "good")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host lab-good\n  HostName {good.address}\n  User root\n  IdentityFile {lab.client_key}\n"
        f"  UserKnownHostsFile {lab.known_hosts}\n"
    )
    spec = NodeSpec(name="lab-good", address="lab-good", ssh={"ssh_config": str(cfg)})
    b = collect_node(spec)
    assert b.error is None and b.complete
