"""A live run gathers its nodes in the background and runs each node's checks as soon as that node's
facts are in: the checks of a node that answered do not wait for a node that has not. And it gathers
only the nodes that the selected checks need."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.streams import lines_of


class SilentListener:
    """A TCP listener on loopback that accepts connections and never speaks SSH: a collection from it
    waits until the listener lets go. `accepted` is set at the first connection."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(conn)
            self.accepted.set()

    def release(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent():
    listener = SilentListener()
    yield listener
    listener.release()


def inventory(tmp_path: Path, port: int, first: str, second: str) -> Path:
    """`here` is this machine (local transport); `away` is the silent listener. Retries off and a long
    connect timeout: `away` answers only when the test releases it."""
    nodes = {
        "here": "  - name: here\n    transport: local\n",
        "away": f"  - name: away\n    address: 127.0.0.1\n    ssh: {{port: {port}}}\n",
    }
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults:\n  ssh: {known_hosts: /dev/null, connect_timeout: 600}\nnodes:\n" + nodes[first] + nodes[second])
    return inv


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "conformance", "run", "--retries=0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_a_nodes_checks_run_while_a_later_node_is_still_being_gathered(tmp_path, silent):
    out = tmp_path / "out"
    p = start("--inventory", str(inventory(tmp_path, silent.port, "here", "away")), "--output", str(out), "-v")
    lines = lines_of(p)
    seen: list[str] = []
    try:
        # In -v, pytest names each check as it starts, after the previous one has reported. The first
        # check of `away` starts after every check of `here`, while `away` has still not answered.
        while True:
            line = lines.get(timeout=300)
            assert line is not None, "the run ended before any check of the silent node started:\n" + "".join(seen)
            seen.append(line)
            if "[away]" in line:
                break
        assert silent.accepted.is_set() and p.poll() is None
        started_here = re.findall(r"::\w+\[here\]", "".join(seen))
    finally:
        silent.release()  # `away` fails now (connection closed before the SSH banner)
    rest, _ = p.communicate(timeout=300)
    doc = json.loads((out / "results.json").read_text())
    here = [r for r in doc["results"] if r["node"] == "here" and r["check"] != "FLEET-CONSISTENT"]  # no pytest item
    away = [r for r in doc["results"] if r["node"] == "away"]
    assert here and len(started_here) == len(here), "".join(seen) + rest
    assert away and all(r["outcome"] == "error" for r in away if r["outcome"] != "skipped")
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    assert verdicts["away"] == "unreachable"


@pytest.mark.parametrize("narrowing", [["-k", "here"], ["--collect-only"]], ids=["-k", "--collect-only"])
def test_only_the_nodes_the_selected_checks_need_are_gathered(tmp_path, silent, narrowing):
    out = tmp_path / "out"
    p = start("--inventory", str(inventory(tmp_path, silent.port, "away", "here")), "--output", str(out), "--", *narrowing)
    stdout, _ = p.communicate(timeout=300)
    assert not silent.accepted.is_set(), "the run connected to a node none of the selected checks needs:\n" + stdout
    if narrowing[0] == "-k":
        doc = json.loads((out / "results.json").read_text())
        assert doc["results"] and {r["node"] for r in doc["results"]} == {"here"}
