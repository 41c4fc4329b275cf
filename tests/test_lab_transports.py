"""Transports against the lab: the OpenSSH binary gives the same verdicts as paramiko and verifies host
certificates (which paramiko cannot); the local transport run inside a node's own namespaces gives the
same verdicts as SSH (in-cluster mode); --timeout bounds connection, authentication and the remote
command together, tested with stalls that are events (a relay that holds data, a key lookup that
blocks), never with delays a slow machine could outlast."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conformance.collection.collect import collect_node, collector_script, transport_for
from conformance.config.inventory import NodeSpec
from conformance.errors import TransportError
from tests.conftest import require_or_skip
from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import EXPECTED, EXPECTED_ALONE, specs
from tests.relay import HoldingRelay

pytestmark = pytest.mark.lab
PYTHON = sys.executable


def conformance(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "conformance", *args], capture_output=True, text=True, timeout=timeout, env=env)


def outcomes(doc) -> dict[str, dict[str, str]]:
    got: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        got.setdefault(r["node"], {})[r["check"]] = r["outcome"]
    return got


def test_openssh_transport_gives_the_same_verdicts_as_paramiko(lab, tmp_path):
    inv = yaml.safe_load(lab.inventory())
    inv["defaults"]["transport"] = "openssh"
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    conformance("run", "--inventory", str(tmp_path / "inv.yaml"), "--output", str(tmp_path / "out"))
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert outcomes(doc) == EXPECTED
    runs = {n["name"]: n["collection"]["remote_executions"] for n in doc["nodes"]}
    assert runs == {name: (0 if name == "down" else 1) for name in EXPECTED}, [n["collection"] for n in doc["nodes"]]
    down = next(n for n in doc["nodes"] if n["name"] == "down")
    assert down["collection"]["error_kind"] == "unreachable" and "OpenSSH" in down["collection"]["error"]


@pytest.fixture(scope="module")
def ca_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("calab")), first_subnet=230, host_ca=True)
    lab.add(next(s for s in specs() if s.name == "good"))
    with lab.running():
        yield lab


def _spec(lab: Lab, transport: str) -> NodeSpec:
    node = lab.nodes[0]
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    return NodeSpec(name="certified", transport=transport, address=node.address, ssh=ssh)


def test_openssh_verifies_a_host_certificate(ca_lab):
    assert ca_lab.known_hosts.read_text().startswith("@cert-authority 198.18.* ssh-ed25519 ")
    b = collect_node(_spec(ca_lab, "openssh"), retries=0)
    assert b.error is None and b.complete and b.executions == 1


def test_paramiko_cannot_verify_a_host_certificate_and_refuses(ca_lab):
    b = collect_node(_spec(ca_lab, "ssh"), retries=0)
    assert b.error_kind == "host-key" and "198.18.230.2" in b.error and "use transport: openssh" in b.error


def test_openssh_refuses_a_host_signed_by_another_ca(ca_lab, tmp_path):
    other = tmp_path / "other_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority 198.18.* {Path(f'{other}.pub').read_text().strip()}\n")
    spec = _spec(ca_lab, "openssh")
    spec.ssh["known_hosts"] = str(kh)
    b = collect_node(spec, retries=0)
    assert b.error_kind == "host-key" and "host key not verified by OpenSSH" in b.error


@pytest.mark.parametrize("name", ["good", "bad-runtime", "bad-kubelet"])
def test_local_transport_inside_the_node_gives_the_same_verdicts_as_ssh(lab, tmp_path, name):
    """In-cluster mode is the local transport in the node's own mount, PID and network namespaces
    (there with hostPID/hostNetwork and the root at /host); here the node's namespaces themselves."""
    pid = lab.node_pid(name)
    out = Path("/dev/shm") / f"gnc-inside-{os.getpid()}-{name}"  # /dev/shm is shared: nothing lands in the node's layers
    env = {**os.environ, "GNC_NODE_NAME": name, "PYTHONDONTWRITEBYTECODE": "1"}
    argv = ["nsenter", "-t", str(pid), "-m", "-n", "-p", "--", PYTHON, "-m", "conformance", "run", "--output", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd="/")
    try:
        local = json.loads((out / "results.json").read_text())
    finally:
        subprocess.run(["rm", "-rf", str(out)], check=False)
    assert local["nodes"][0]["transport"] == "local", p.stderr[-2000:]
    assert outcomes(local) == {name: EXPECTED_ALONE[name]}


def _relayed(lab: Lab, tmp_path: Path, port: int, transport: str = "ssh", **ssh_extra) -> NodeSpec:
    """The lab's 'good' node reached through a relay on 127.0.0.1:port, its host key known under that name."""
    good = next(n for n in lab.nodes if n.spec.name == "good")
    key = next(line for line in lab.known_hosts.read_text().splitlines() if line.startswith(good.address + " "))
    kh = tmp_path / f"known_hosts.{port}"
    kh.write_text(f"[127.0.0.1]:{port} {key.split(' ', 1)[1]}\n")
    ssh = {"port": port, "user": "root", "identity_file": str(lab.client_key), "known_hosts": str(kh), **ssh_extra}
    return NodeSpec(name="slow", address="127.0.0.1", transport=transport, ssh=ssh)


def test_slow_node_is_waited_for_within_its_timeout(lab, tmp_path):
    """The path stalls in the middle of the collector's input and resumes: the run waits for it. The
    stall is an event the test waits for, not a delay that a slow machine could outlast."""
    relay = HoldingRelay((next(n.address for n in lab.nodes if n.spec.name == "good"), 22), hold_after=16384)
    try:
        resume = threading.Thread(target=lambda: relay.holding.wait(60) and relay.release(), daemon=True)
        resume.start()
        b = collect_node(_relayed(lab, tmp_path, relay.port), timeout=120, retries=0)
        resume.join()
    finally:
        relay.close()
    assert relay.holding.is_set() and len(collector_script()) > 4 * 16384  # it stalled inside the collector's input
    assert b.error is None and b.complete and b.executions == 1, b.error


@pytest.mark.parametrize("transport", ["ssh", "openssh"])
def test_timeout_covers_the_connection(lab, tmp_path, transport):
    """--timeout bounds the whole attempt: a node that accepts TCP but never says hello is cut at the
    timeout, although the connect timeout is far longer, and a timeout is not retried."""
    relay = HoldingRelay((next(n.address for n in lab.nodes if n.spec.name == "good"), 22), hold_after=0)
    try:
        t0 = time.monotonic()
        b = collect_node(_relayed(lab, tmp_path, relay.port, transport, connect_timeout=300), timeout=1.0, retries=2)
        took = time.monotonic() - t0
    finally:
        relay.close()
    assert b.error_kind == "timeout" and "did not finish within 1 s" in b.error, b.error
    if transport == "ssh":
        assert "cut while in the SSH handshake" in b.error
    assert "attempts" not in b.error
    # paramiko knows the command never started; one ssh process may have, as far as the runner can tell
    assert b.executions == (0 if transport == "ssh" else 1)
    assert took < 300  # cut by --timeout, not by the 300 s connect timeout


@pytest.fixture(scope="module")
def auth_lab(tmp_path_factory):
    """One node whose sshd looks the client's key up with a command that blocks (a named pipe nobody
    writes yet), as an authorized-keys lookup against a directory service that stopped answering."""
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("authlab")), first_subnet=235)
    good = next(s for s in specs() if s.name == "good")
    good.name = "slow-auth"
    good.fifos = ["/etc/ssh/gnc_keys.fifo"]
    good.sshd_config = (
        "AuthorizedKeysFile none\nAuthorizedKeysCommand /usr/bin/cat /etc/ssh/gnc_keys.fifo\nAuthorizedKeysCommandUser root\n"
    )
    node = lab.add(good)
    try:
        lab.start()
        yield lab
    finally:
        fifo = node.dir / "upper" / "etc" / "ssh" / "gnc_keys.fifo"
        with contextlib.suppress(OSError):  # let a waiting lookup finish, so sshd's child ends
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        lab.stop()


def test_timeout_covers_authentication(auth_lab):
    node = auth_lab.nodes[0]
    ssh = {"user": "root", "identity_file": str(auth_lab.client_key), "known_hosts": str(auth_lab.known_hosts)}
    b = collect_node(NodeSpec(name="slow-auth", address=node.address, ssh=ssh), timeout=1.0, retries=2)
    assert b.error_kind == "timeout" and "did not finish within 1 s" in b.error and "cut while authenticating" in b.error, b.error
    assert b.executions == 0 and "attempts" not in b.error


def test_timeout_covers_the_remote_command(lab, tmp_path):
    """Connected and authenticated, then the path stalls inside the collector's input: the deadline,
    started once the connection is open, cuts the command."""
    relay = HoldingRelay((next(n.address for n in lab.nodes if n.spec.name == "good"), 22), hold_after=16384)
    transport = transport_for(_relayed(lab, tmp_path, relay.port))
    try:
        transport.open()
        transport.set_deadline(1.0)
        with pytest.raises(TransportError) as e:
            transport.run(["sh", "-s", "--", "", "4194304"], collector_script(), 1.0)
    finally:
        transport.close()
        relay.close()
    assert relay.holding.is_set()
    assert (
        e.value.kind == "timeout"
        and "did not finish within 1 s" in str(e.value)
        and "cut while running the collector" in str(e.value)
    )
