"""Sections of the page bounded by bytes as well as by count (issue 60): a fleet page stays a few megabytes
whatever the fleet's size and whatever its messages."""

from __future__ import annotations

from collections.abc import Iterable


def within_bytes(rows: Iterable[str], limit: int) -> list[str]:
    """The first rows, taken while what they add up to is under `limit` characters: at most the limit and one row
    (the first row always). Rows are drawn one at a time, so a generator renders no row past the one that crosses."""
    kept: list[str] = []
    size = 0
    for row in rows:
        kept.append(row)
        size += len(row)
        if size >= limit:
            break
    return kept
