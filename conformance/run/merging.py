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

    def tick(self, text: str | None = None, last: bool = False) -> bool:
        """Whether a line is due; with `text`, writes it when it is (and always when `last`)."""
        due = self.on and (last or time.monotonic() - self._last > PROGRESS_EVERY_S)
        if due and text is not None and sys.__stderr__ is not None:
            self._last = time.monotonic()
            sys.__stderr__.write(("\r" + text + "\033[K" + ("\n" if last else "")) if self.tty else text + "\n")
            sys.__stderr__.flush()
        return due


def spool_sources(paths: list[str], expected: list[str], ticker: Ticker | None = None) -> NodeSpool:
    spool = NodeSpool()
    try:
        for where, parts in sources(paths):
            spool.add(parts)
            if ticker is not None and ticker.tick():
                ticker.tick(f"read {spool.documents} results documents ({len(spool.entries)} nodes), now {where}")
        if ticker is not None and spool.documents:
            ticker.tick(f"read {spool.documents} results documents ({len(spool.entries)} nodes)", last=True)
        marker = missing_document(set(spool.entries), expected)
        if marker is not None:
            spool.add(parts_of_document(marker, "(expected nodes)"))
    except BaseException:
        spool.close()
        raise
    return spool
