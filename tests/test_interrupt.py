"""Ctrl-C (or SIGTERM: a cancelled CI job, a stopped pod) during a run: exit code 2, the run ends at once
rather than when a hanging node reaches its timeouts, and the three reports are still written, marked
incomplete."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.streams import default_sigint


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_writes_reports_and_exits_2(tmp_path, signum):
    # A TCP listener on loopback that accepts and never speaks SSH: the collection hangs there.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    held = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        # timeouts no loaded machine reaches: the node is still hanging when the interrupt comes, and
        # the run ends within the bounds below only if the interrupt cuts the hanging connection
        "defaults:\n  ssh: {known_hosts: /dev/null, connect_timeout: 3600}\n"
        f"nodes:\n  - name: hanging\n    address: 127.0.0.1\n    ssh: {{port: {port}}}\n"
        "  - name: here\n    transport: local\n"
    )
    out = tmp_path / "out"
    p = subprocess.Popen(
        [sys.executable, "-m", "conformance", "run", "--inventory", str(inv), "--output", str(out), "--timeout", "3600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,  # a background shell's SIG_IGN must not swallow the interrupt
    )
    try:
        deadline = time.monotonic() + 300  # generous: a loaded machine starts Python and its imports slowly
        while not held and time.monotonic() < deadline:  # wait until the collection is under way
            time.sleep(0.05)
        assert held, "the run never connected"
        p.send_signal(signum)
        stdout, _ = p.communicate(timeout=300)
    finally:
        stop.set()
        server.close()
        for c in held:
            c.close()
    assert p.returncode == 2, stdout
    for name in ("report.html", "junit.xml", "results.json"):
        assert (out / name).is_file(), name
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] is False
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    records = {n["name"]: n.get("collection") for n in doc["nodes"]}
    assert verdicts == {"hanging": "incomplete", "here": "incomplete"}, (records, stdout)
    assert records["hanging"]["error_kind"] == "interrupted", records  # cut, not left to its timeouts
    assert "the run was interrupted" in records["hanging"]["error"], records


def test_silent_node_ends_within_its_timeouts_and_the_run_goes_on(tmp_path):
    """A node that accepts TCP but never speaks SSH: connect timeout 1 s, 2 retries with backoff."""
    from conformance.collection.collect import collect_node
    from conformance.config.inventory import NodeSpec

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        spec = NodeSpec(
            name="silent",
            address="127.0.0.1",
            ssh={"port": server.getsockname()[1], "known_hosts": "/dev/null", "connect_timeout": 1},
        )
        t = time.monotonic()
        b = collect_node(spec, retries=2, backoff=0.1)
        took = time.monotonic() - t
    finally:
        server.close()
    assert b.error_kind == "unreachable" and "after 3 attempts" in b.error
    assert 3 <= took < 8  # three 1 s banner timeouts plus short backoffs, no more
