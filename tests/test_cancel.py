"""Cutting collections under way (Ctrl-C, SIGTERM): each transport stops at once from another thread,
what it was doing is named, and the node's record says "interrupted" (its verdict: incomplete)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from conformance.collection.cancel import INTERRUPTED, Cancel
from conformance.collection.collect import collect_node
from conformance.collection.transports.child import POLL_S, Child
from conformance.config.inventory import NodeSpec
from conformance.errors import TransportError

BOUND_S = 120  # generous: the cut takes well under a second, but the machines here are shared


class Silent:
    """A loopback listener that accepts TCP and never speaks SSH; `accepted` is set at each connection."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.accepted = threading.Event()
        self.count = 0
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                continue
            self.count += 1
            self.accepted.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(BOUND_S)
        self.server.close()
        for c in self.held:
            c.close()


@pytest.fixture
def silent():
    s = Silent()
    yield s
    s.close()


def _in_thread(fn):
    """Run fn in a thread; returns (thread, box) where box gets the result or the exception."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # the test inspects whatever came
            box["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, box


def _node(port: int, transport: str) -> NodeSpec:
    # timeouts far past the test's bounds: only the cut can end the collection in time
    ssh = {"port": port, "known_hosts": "/dev/null", "connect_timeout": 3600}
    return NodeSpec(name="hanging", address="127.0.0.1", transport=transport, ssh=ssh)


TRANSPORTS = ["ssh", pytest.param("openssh", marks=pytest.mark.skipif(not shutil.which("ssh"), reason="no ssh client"))]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cancel_cuts_a_collection_hanging_before_the_banner(silent, transport):
    cancel = Cancel()
    t, box = _in_thread(lambda: collect_node(_node(silent.port, transport), timeout=3600, retries=0, cancel=cancel))
    assert silent.accepted.wait(BOUND_S), "the collection never connected"
    cut_at = time.monotonic()
    cancel.cancel()
    t.join(BOUND_S)
    assert not t.is_alive(), "the cut collection did not end"
    bundle = box["result"]
    assert bundle.error_kind == INTERRUPTED, bundle.error
    assert "the run was interrupted" in bundle.error
    assert time.monotonic() - cut_at < BOUND_S


def test_cancel_before_the_collection_connects_nowhere(silent):
    cancel = Cancel()
    cancel.cancel()
    bundle = collect_node(_node(silent.port, "ssh"), timeout=3600, cancel=cancel)
    assert bundle.error_kind == INTERRUPTED and "before it began" in bundle.error
    assert bundle.executions == 0
    time.sleep(0.5)  # a connection, had one been made, would have been accepted by now
    assert silent.count == 0


def test_cancel_cuts_the_backoff_between_attempts():
    # a refused port is retried after the backoff; a backoff of an hour ends only by the cut
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        cancel = Cancel()
        t, box = _in_thread(lambda: collect_node(_node(port, "ssh"), timeout=3600, retries=3, backoff=3600, cancel=cancel))
        time.sleep(0.5)  # usually in the backoff by now; if not, the attempt itself is cut
        cancel.cancel()
        t.join(BOUND_S)
    assert not t.is_alive()
    bundle = box["result"]
    assert bundle.error_kind == INTERRUPTED, bundle.error


def test_child_abort_kills_the_program_and_what_it_started(tmp_path):
    marker = tmp_path / "pid"
    child = Child("local", lambda t: f"did not finish within {t:g} s")
    script = f"echo started; sleep 3600 & echo $! > {marker}.tmp && mv {marker}.tmp {marker}; wait"
    t, box = _in_thread(lambda: child.run(["sh", "-c", script], b"", 3600))
    deadline = time.monotonic() + BOUND_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    child.abort()
    t.join(BOUND_S)
    assert not t.is_alive()
    err = box["error"]
    assert isinstance(err, TransportError) and err.kind == INTERRUPTED
    assert err.partial == b"started\n"  # the output so far is kept
    assert _gone(grandchild), "the program's own child outlived the abort"


def test_child_aborted_before_it_starts_runs_nothing(tmp_path):
    child = Child("local", lambda t: "timeout")
    child.abort()
    with pytest.raises(TransportError) as e:
        child.run(["touch", str(tmp_path / "ran")], b"", 60)
    assert e.value.kind == INTERRUPTED
    assert not (tmp_path / "ran").exists()


def test_child_timeout_keeps_the_output_so_far():
    child = Child("local", lambda t: f"did not finish within {t:g} s")
    with pytest.raises(TransportError) as e:
        child.run(["sh", "-c", "cat; echo partial; exec sleep 3600"], b"input\n", 1)
    assert e.value.kind == "timeout" and str(e.value) == "did not finish within 1 s"
    assert e.value.partial == b"input\npartial\n"


def test_child_runs_to_its_end():
    assert Child("local", str).run(["sh", "-c", "cat; echo err >&2; exit 3"], b"in", 60) == (3, b"in", b"err\n")


def _gone(pid: int) -> bool:
    """The process ended (gone, or a zombie nobody reaped yet), within a generous bound."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_child_feeds_a_program_that_reads_its_input_late(tmp_path):
    # ssh reads its stdin only once the session is open: the input (larger than a pipe holds) must
    # still be written in full, and stdin closed, however many polls went by before the first read
    go = tmp_path / "go"
    data = bytes(range(256)) * 4096  # 1 MiB
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; cat"
    t, box = _in_thread(lambda: Child("local", str).run(["sh", "-c", script], data, 3600))
    time.sleep(4 * POLL_S)  # several polls pass with nothing read; a slower machine only adds more
    go.touch()
    t.join(BOUND_S)
    assert not t.is_alive(), "the program never saw the end of its input"
    assert box["result"] == (0, data, b"")
