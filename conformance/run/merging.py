"""The sources of a replay (results.json files, folders of them, pod logs) into one NodeSpool, with the
nodes that `--expect` names and no source reported marked incomplete."""

from __future__ import annotations

import sys
import time

from conformance.outputs.documents import parts_of_document
from conformance.outputs.merge import missing_document, sources
from conformance.run.node_spool import NodeSpool

PROGRESS_EVERY_S = 2.0


def spool_sources(paths: list[str], expected: list[str], progress: bool = False) -> NodeSpool:
    spool = NodeSpool()
    try:
        shown = time.monotonic()
        for where, parts in sources(paths):
            spool.add(parts)
            if progress and time.monotonic() - shown > PROGRESS_EVERY_S:
                shown = time.monotonic()
                sys.stderr.write(f"read {spool.documents} results documents ({len(spool.entries)} nodes), now {where}\n")
        marker = missing_document(set(spool.entries), expected)
        if marker is not None:
            spool.add(parts_of_document(marker, "(expected nodes)"))
    except BaseException:
        spool.close()
        raise
    return spool
