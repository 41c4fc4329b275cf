"""A local program run to its end, or cut: at its timeout, or at once by abort() from another thread
(the run was interrupted). Its output so far is kept either way.

The exchange is a selector loop of its own rather than Popen.communicate() with short timeouts: a
communicate() retried after a TimeoutExpired must be given no input, and then (CPython 3.11,
Lib/subprocess.py Popen._communicate: "if self.stdin and input: selector.register(self.stdin, ...)") it no
longer writes the rest of the input nor closes stdin, so a program that reads its stdin late (ssh,
which reads it only once the session is open) waits for the end of its input forever."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

from conformance.collection.cancel import INTERRUPTED
from conformance.collection.transports.base import OUTPUT_CAP, over_cap
from conformance.errors import TransportError

POLL_S = 0.25  # how often the exchange looks whether it was aborted
DRAIN_S = 2.0  # after a kill, how long the output still in the pipes is read (a grandchild may hold them)
CHUNK = 65536


class Child:
    def __init__(self, description: str, timed_out: Callable[[float], str]) -> None:
        self.description = description
        self.timed_out = timed_out  # what a timeout says, given the timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._aborted = False

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            proc = self._proc
        if proc is not None:
            _kill(proc)

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        """The program's exit status, output and error output. Raises TransportError (kind "timeout" or
        "interrupted", with the output so far as `partial`) and OSError (it could not start)."""
        with self._lock:
            if self._aborted:
                raise TransportError(f"{self.description}: not started: the run was interrupted", kind=INTERRUPTED)
            # its own process group, so that a kill reaches the programs it started too, and so that the
            # terminal's Ctrl-C reaches this process alone, which then stops it (with its output kept)
            self._proc = proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        exchange = _Exchange(proc, stdin)
        try:
            end = time.monotonic() + timeout
            finished = exchange.until(end, lambda: self._aborted) and _exited(proc, end, lambda: self._aborted)
            if exchange.overflow:
                _kill(proc)
                raise TransportError(over_cap(self.description, exchange.outlen), kind="error")
            if not finished:
                _kill(proc)
                exchange.until(time.monotonic() + DRAIN_S, lambda: False)  # what it wrote before the kill
                raise self._cut(timeout, exchange.out)
        except BaseException:  # Ctrl-C in this thread, or the cut: the program goes with the run
            _kill(proc)
            raise
        finally:
            exchange.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(DRAIN_S)
        if self._aborted and proc.returncode < 0:  # killed by abort() just as its output ended
            raise self._cut(timeout, exchange.out)
        return proc.returncode, exchange.out, exchange.err

    def _cut(self, timeout: float, partial: bytes) -> TransportError:
        if self._aborted:
            e = TransportError(f"{self.description}: stopped: the run was interrupted", kind=INTERRUPTED)
        else:
            e = TransportError(self.timed_out(timeout), kind="timeout")
        e.partial = partial
        return e


class _Exchange:
    """The program's input written and its two outputs read, all at once, without blocking."""

    def __init__(self, proc: subprocess.Popen[bytes], data: bytes) -> None:
        assert proc.stdin and proc.stdout and proc.stderr
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr
        self._data, self._sent = memoryview(data), 0
        self._outs: list[bytes] = []
        self._errs: list[bytes] = []
        self._chunks = {self.stdout: self._outs, self.stderr: self._errs}
        self.outlen = 0
        self.overflow = False  # the output passed OUTPUT_CAP: the exchange stops
        self._selector = selectors.DefaultSelector()
        for pipe in (self.stdout, self.stderr):
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ)
        if data:
            os.set_blocking(self.stdin.fileno(), False)
            self._selector.register(self.stdin, selectors.EVENT_WRITE)
        else:
            self.stdin.close()

    @property
    def out(self) -> bytes:
        return b"".join(self._outs)

    @property
    def err(self) -> bytes:
        return b"".join(self._errs)

    def until(self, end: float, stop: Callable[[], bool]) -> bool:
        """Exchange until both outputs ended (True), or `end` passed, `stop()` or the output passed its cap (False)."""
        while self._selector.get_map():
            left = end - time.monotonic()
            if left <= 0 or stop() or self.overflow:
                return False
            for key, _ in self._selector.select(min(POLL_S, left)):
                if key.fileobj is self.stdin:
                    self._write()
                else:
                    self._read(self.stdout if key.fileobj is self.stdout else self.stderr)
        return True

    def _write(self) -> None:
        try:
            self._sent += os.write(self.stdin.fileno(), self._data[self._sent : self._sent + CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:  # the program stopped reading: what it says decides
            self._sent = len(self._data)
        if self._sent >= len(self._data):
            self._selector.unregister(self.stdin)
            with contextlib.suppress(OSError):
                self.stdin.close()

    def _read(self, pipe: IO[bytes]) -> None:
        try:
            data = os.read(pipe.fileno(), CHUNK)
        except BlockingIOError:
            return
        if data:
            self._chunks[pipe].append(data)
            if pipe is self.stdout:
                self.outlen += len(data)
                self.overflow = self.outlen > OUTPUT_CAP
            elif sum(map(len, self._errs)) > 65536:  # error output: its first 64 KiB say what went wrong
                self._errs[:] = [b"".join(self._errs)[:65536]]
        else:
            self._selector.unregister(pipe)

    def close(self) -> None:
        self._selector.close()
        for pipe in (self.stdin, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                pipe.close()


def _exited(proc: subprocess.Popen[bytes], end: float, stop: Callable[[], bool]) -> bool:
    """Its outputs ended: wait for the program itself to exit, as the exchange does."""
    while proc.poll() is None:
        left = end - time.monotonic()
        if left <= 0 or stop():
            return False
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(min(POLL_S, left))
    return True


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the program's process group (a program that put itself in a group of its own, such as
    `timeout`, ends at its own timeout)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
