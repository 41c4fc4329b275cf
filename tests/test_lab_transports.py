"""Transports against the lab: the OpenSSH binary gives the same verdicts as paramiko and verifies host
certificates (which paramiko cannot); the local transport run inside a node's own namespaces gives the
same verdicts as SSH (in-cluster mode); a slow node is waited for within its timeout and cut off
beyond it, while the rest of the run goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.delayline import DelayLines
from conformance.collect import collect_node
from conformance.inventory import NodeSpec
from tests.conftest import require_or_skip
from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import EXPECTED, specs

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
    assert runs == {name: (0 if name == "down" else 1) for name in EXPECTED}
    down = next(n for n in doc["nodes"] if n["name"] == "down")
    assert down["collection"]["error_kind"] == "unreachable" and "OpenSSH" in down["collection"]["error"]


@pytest.fixture(scope="module")
def ca_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("calab")), first_subnet=230, host_ca=True)
    lab.add(next(s for s in specs() if s.name == "good"))
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


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
    assert outcomes(local) == {name: EXPECTED[name]}


def test_slow_node_is_waited_for_within_its_timeout(lab, tmp_path):
    good = next(n for n in lab.nodes if n.spec.name == "good")
    lines = DelayLines([(good.address, 22)], delay=0.15)  # 300 ms round trip
    try:
        kh = tmp_path / "known_hosts"
        key = next(line for line in lab.known_hosts.read_text().splitlines() if line.startswith(good.address + " "))
        kh.write_text(f"[127.0.0.1]:{lines.ports[0]} {key.split(' ', 1)[1]}\n")
        ssh = {"port": lines.ports[0], "user": "root", "identity_file": str(lab.client_key), "known_hosts": str(kh)}
        t0 = time.monotonic()
        b = collect_node(NodeSpec(name="slow", address="127.0.0.1", ssh=ssh), timeout=60, retries=0)
        took = time.monotonic() - t0
        assert b.error is None and b.complete, b.error
        assert took > 1.0  # several round trips of 300 ms: the delay was real
        t0 = time.monotonic()
        cut = collect_node(NodeSpec(name="slow", address="127.0.0.1", ssh=ssh), timeout=1.0, retries=2)
        took = time.monotonic() - t0
    finally:
        lines.close()
    assert cut.error_kind == "timeout" and "did not finish within 1 s" in cut.error
    assert cut.executions == 1 and took < 10  # a timeout is not retried: the run does not wait three times
