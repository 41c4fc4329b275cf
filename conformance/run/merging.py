"""The sources of a replay (results.json files, folders of them, pod logs) into one NodeSpool, with the
nodes that `--expect` names and no source reported marked incomplete."""

from __future__ import annotations

import sys
import time

from conformance.outputs.documents import parts_of_document
from conformance.outputs.merge import missing_document, sources
from conformance.run.node_spool import NodeSpool

PROGRESS_EVERY_S = 2.0


class Ticker:
    """A progress line on the terminal at most every PROGRESS_EVERY_S (on the process's own stderr, which
    pytest does not capture): on a terminal always, elsewhere with -v."""

    def __init__(self, verbose: bool) -> None:
        self.tty = sys.__stderr__ is not None and sys.__stderr__.isatty()
        self.on = verbose or self.tty
        self._last = time.monotonic()

    def due(self) -> bool:
        """Whether a progress line is due (asked before the line is made)."""
        return self.on and time.monotonic() - self._last > PROGRESS_EVERY_S

    def say(self, text: str, last: bool = False) -> None:
        """The line, on a terminal over the last one (the last line ends it)."""
        if not self.on or sys.__stderr__ is None:
            return
        self._last = time.monotonic()
        sys.__stderr__.write(("\r" + text + "\033[K" + ("\n" if last else "")) if self.tty else text + "\n")
        sys.__stderr__.flush()


def spool_sources(paths: list[str], expected: list[str], ticker: Ticker | None = None) -> NodeSpool:
    spool = NodeSpool()
    cuts: dict[str, str] = {}
    try:
        for where, parts in sources(paths, cuts):
            spool.add(parts, where)
            if ticker is not None and ticker.due():
                ticker.say(f"read {spool.documents} results documents ({len(spool.entries)} nodes), now {where}")
        if ticker is not None and spool.documents:
            ticker.say(f"read {spool.documents} results documents ({len(spool.entries)} nodes)", last=True)
        marker = missing_document(set(spool.entries), expected, cuts)
        if marker is not None:
            spool.add(parts_of_document(marker, "(expected nodes)"))
    except BaseException:
        spool.close()
        raise
    return spool
