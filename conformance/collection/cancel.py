"""Stopping the collections under way at once. Ctrl-C or SIGTERM ends the run now, not when a hanging
node reaches its --timeout: each transport, while it works, leaves a way to cut it here, and `cancel()`
cuts them all (closing the SSH connection, killing the local program) from whichever thread asks."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from conformance.config.verdict import INTERRUPTED  # the error kind of a collection cut this way: incomplete

__all__ = ["INTERRUPTED", "Cancel"]


class Cancel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = threading.Event()
        self._cuts: dict[object, Callable[[], None]] = {}

    def is_set(self) -> bool:
        return self._set.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` (a retry's backoff), or less if cancelled meanwhile; True when cancelled."""
        return self._set.wait(seconds)

    @contextlib.contextmanager
    def watching(self, cut: Callable[[], None]) -> Iterator[None]:
        """While the block runs, cancel() calls `cut`; if cancel() came already, `cut` runs at once."""
        token = object()
        with self._lock:
            self._cuts[token] = cut
            already = self._set.is_set()
        if already:
            cut()
        try:
            yield
        finally:
            with self._lock:
                self._cuts.pop(token, None)

    def cancel(self) -> None:
        with self._lock:
            self._set.set()
            cuts = list(self._cuts.values())
        for cut in cuts:
            with contextlib.suppress(Exception):  # one transport failing to close must not keep the others open
                cut()
