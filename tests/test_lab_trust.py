"""Trust nothing from a node: read-only, injection, secrets and faults, against the lab's real sshd."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.facts.node_facts import NodeFacts
from tests.lab.nodes import MARKERS, PLANTED_SECRETS
from tests.relay import ResettingRelay

pytestmark = pytest.mark.lab
# sshd's own login records are the only writes a login may cause
LOGIN_RECORDS = {"var/log/wtmp", "var/log/btmp", "var/log/lastlog", "run/utmp"}


def conformance(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def digest(lab) -> dict[str, str]:
    """Every file of every node's writable layers and fake sysfs trees, with its content hash and mode."""
    out = {}
    for node in lab.nodes:
        for base in (node.dir / "upper", node.dir / "sys"):
            for p in sorted(base.rglob("*")):
                rel = str(p.relative_to(base))
                if rel in LOGIN_RECORDS:
                    continue
                st = p.lstat()
                h = ""
                if p.is_file() and st.st_size < 64 * 1024 * 1024:
                    h = hashlib.sha256(p.read_bytes()).hexdigest()
                out[f"{node.spec.name}:{base.name}/{rel}"] = f"{oct(st.st_mode)} {st.st_size} {h}"
        cg = lab.cg_dir / node.spec.name
        if cg.exists():
            out[f"{node.spec.name}:cgroup"] = " ".join(sorted(p.name for p in cg.iterdir() if p.is_dir()))
    return out


def node_processes(node) -> list[str]:
    """The command names of every process in the node's PID namespace."""
    children = Path(f"/proc/{node.proc.pid}/task/{node.proc.pid}/children").read_text().split()
    ns = os.readlink(f"/proc/{children[0]}/ns/pid")
    names = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.readlink(p / "ns" / "pid") == ns:
                    names.append((p / "comm").read_text().strip())
            except OSError:
                continue
    return sorted(names)


def resident(node) -> list[str]:
    """What runs on a lab node between audits: its kubelet, its sshd, and a containerd where it has one."""
    return sorted(["kubelet", "sshd", *(["containerd"] if node.spec.containerd is not None else [])])


def settled_processes(nodes, timeout: float = 10.0) -> dict[str, list[str]]:
    """Process names per node once only kubelet and sshd are left (sessions of earlier tests, such as
    refused logins, end on their own), or as they are when the timeout ends."""
    deadline = time.monotonic() + timeout
    while True:
        procs = {n.spec.name: node_processes(n) for n in nodes}
        if all(procs[n.spec.name] == resident(n) for n in nodes) or time.monotonic() > deadline:
            return procs
        time.sleep(0.1)


@pytest.fixture(scope="module")
def full_audit(lab, tmp_path_factory):
    """Digests and process lists around a full `conformance run` and `conformance collect`."""
    tmp = tmp_path_factory.mktemp("trust")
    inv = tmp / "inventory.yaml"
    inv.write_text(lab.inventory())
    up = [n for n in lab.nodes if n.spec.up]
    before = digest(lab)
    procs_before = settled_processes(up)
    run = conformance("run", "--inventory", str(inv), "--output", str(tmp / "out"), cwd=tmp)
    collect = conformance("collect", "--inventory", str(inv), "--output", str(tmp / "snap"), cwd=tmp)
    procs_after = settled_processes(up)
    return {
        "before": before,
        "after": digest(lab),
        "procs_before": procs_before,
        "procs_after": procs_after,
        "run": run,
        "collect": collect,
        "tmp": tmp,
        "up": up,
    }


def test_audit_leaves_every_node_unchanged(full_audit):
    before, after = full_audit["before"], full_audit["after"]
    assert full_audit["run"].returncode == 1 and full_audit["collect"].returncode == 1
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert added == [] and changed == [] and set(before) == set(after)


def test_no_process_is_left_on_any_node(full_audit):
    assert full_audit["procs_before"] == full_audit["procs_after"]
    for node in full_audit["up"]:
        assert full_audit["procs_after"][node.spec.name] == resident(node)


def test_planted_shell_metacharacters_never_ran(lab, full_audit):
    for node in lab.nodes:
        for marker in MARKERS:
            assert not list((node.dir / "upper").rglob(marker)), f"{marker} appeared on {node.spec.name}"
    for where in (Path("/tmp"), full_audit["tmp"], Path.home()):
        for marker in MARKERS:
            assert not (where / marker).exists()


def test_planted_secrets_reach_no_output(full_audit):
    tmp = full_audit["tmp"]
    outputs = [
        tmp / "out" / "report.html",
        tmp / "out" / "junit.xml",
        tmp / "out" / "results.json",
        *sorted((tmp / "snap").glob("*.json")),
    ]
    assert len(outputs) > 5
    for path in outputs:
        text = path.read_text()
        for secret in PLANTED_SECRETS:
            assert secret not in text, f"{secret} in {path.name}"
    snap = json.loads((tmp / "snap" / "hostile.json").read_text())
    assert any("credential value(s) redacted" in n for n in snap["notes"])
    assert "<redacted>" in json.dumps(snap)
    # the secrets were there to be found
    assert full_audit["run"].stdout


def test_hostile_files_give_errors_naming_the_fact(full_audit):
    doc = json.loads((full_audit["tmp"] / "out" / "results.json").read_text())
    by = {(r["node"], r["check"]): r for r in doc["results"]}
    huge = by[("hostile", "KUBELET-CPU-STATE")]
    assert huge["outcome"] == "error" and "cpu_manager_state: larger than the 4194304-byte read bound" in huge["message"]
    binary = by[("hostile", "NODE-NVME-SCHEDULER")]
    assert binary["outcome"] == "error" and "/sys/block/nvme0n1/queue/scheduler: not UTF-8" in binary["message"]
    assert by[("hostile", "KUBELET-CPU-POLICY")]["outcome"] == "passed"  # read through the hostile file name


def spec_for(lab, name: str, **ssh) -> NodeSpec:
    node = next(n for n in lab.nodes if n.spec.name == name)
    base = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    base.update(ssh)
    return NodeSpec(name=name, address=node.address, ssh=base)


def test_permission_denied_is_an_error_naming_the_file(lab):
    b = collect_node(spec_for(lab, "good", user="auditor"))
    assert b.error is None and b.complete
    with pytest.raises(Exception, match=r"cpu_manager_state: permission denied reading it on node good"):
        NodeFacts(b).cpu_manager_state  # noqa: B018
    # an unprivileged user cannot verify which process is the kubelet (its namespaces and executable are root's
    # to read): its command line, and so its config, stay unknown, never a guess from the process's name
    with pytest.raises(Exception, match=r"no process named kubelet is the kubelet .*needs root or CAP_SYS_PTRACE"):
        NodeFacts(b).kubelet_config  # noqa: B018
    # a drop-in folder this user cannot list is not "no drop-ins": the runtime's merged config is unknown
    imports = next(r for r in b.records if r.kind == "G" and r.name == "import:/etc/containerd/config.toml")
    assert imports.status == "denied" and imports.data == b"/etc/containerd/conf.d/*.toml"
    # (and which containerd runs, so which file it reads, is unknown to this user too)
    with pytest.raises(Exception, match=r"no process named containerd is containerd .*CAP_SYS_PTRACE"):
        NodeFacts(b).runtime_config  # noqa: B018


def test_command_timeout(lab):
    b = collect_node(spec_for(lab, "good"), timeout=0.001)
    assert b.error_kind == "timeout" and "did not finish within" in b.error


def test_connection_reset_mid_collection_then_the_run_goes_on(lab, tmp_path):
    good = next(n for n in lab.nodes if n.spec.name == "good")
    relay = ResettingRelay((good.address, 22), limit=6000)
    try:
        # the relay's address must be known under its own name
        kh = tmp_path / "known_hosts"
        key = next(line for line in lab.known_hosts.read_text().splitlines() if line.startswith(good.address + " "))
        kh.write_text(f"[127.0.0.1]:{relay.port} {key.split(' ', 1)[1]}\n" + lab.known_hosts.read_text())
        inv = tmp_path / "inv.yaml"
        inv.write_text(
            f"defaults:\n  ssh: {{user: root, identity_file: {lab.client_key}, known_hosts: {kh}}}\n"
            f"nodes:\n  - name: flaky\n    address: 127.0.0.1\n    ssh: {{port: {relay.port}}}\n"
            f"  - name: good\n    address: {good.address}\n"
        )
        p = conformance("run", "--inventory", str(inv), "--output", str(tmp_path / "out"))
    finally:
        relay.close()
    assert relay.resets >= 1
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    assert verdicts == {"flaky": "unreachable", "good": "accepted"}, p.stdout
    flaky = [r for r in doc["results"] if r["node"] == "flaky" and r["outcome"] != "skipped"]
    assert flaky and all(r["outcome"] == "error" for r in flaky)
    assert all(
        "flaky" in r["message"]
        and ("broke" in r["message"] or "reset" in r["message"].lower() or "closed" in r["message"].lower())
        for r in flaky
    ), flaky[0]["message"]
    for name in ("report.html", "junit.xml", "results.json"):
        assert (tmp_path / "out" / name).is_file()


def test_transient_failure_is_retried_with_backoff(lab, tmp_path):
    good = next(n for n in lab.nodes if n.spec.name == "good")
    relay = ResettingRelay((good.address, 22), limit=6000, faulty=1)
    try:
        kh = tmp_path / "known_hosts"
        key = next(line for line in lab.known_hosts.read_text().splitlines() if line.startswith(good.address + " "))
        kh.write_text(f"[127.0.0.1]:{relay.port} {key.split(' ', 1)[1]}\n")
        spec = NodeSpec(
            name="flaky",
            address="127.0.0.1",
            ssh={"port": relay.port, "user": "root", "identity_file": str(lab.client_key), "known_hosts": str(kh)},
        )
        b = collect_node(spec, retries=2, backoff=0.1)
    finally:
        relay.close()
    assert b.error is None and b.complete
    assert b.executions == 2 and relay.connections == 2
    assert b.notes[0].startswith("attempt 1 failed: connection to 127.0.0.1") and "broke during collection" in b.notes[0]


def test_auth_failures_are_not_retried(lab, tmp_path):
    other = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    t = time.monotonic()
    b = collect_node(spec_for(lab, "good", identity_file=str(other)), retries=3, backoff=2)
    assert b.error_kind == "auth" and "attempts" not in b.error and time.monotonic() - t < 2
