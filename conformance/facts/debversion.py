"""Debian package versions compared as dpkg compares them (deb-version(7): `[epoch:]upstream[-revision]`;
within upstream and revision, runs of non-digits compare character by character, letters before other
characters and `~` before everything, even the end; runs of digits compare as numbers)."""

from __future__ import annotations

import re


def _order(c: str) -> int:
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split(v: str) -> tuple[int, str, str]:
    v = v.strip()
    epoch = 0
    m = re.match(r"(\d+):(.*)", v)
    if m:
        epoch, v = int(m.group(1)), m.group(2)
    upstream, _, revision = v.rpartition("-") if "-" in v else (v, "", "")
    return epoch, upstream, revision


def compare(a: str, b: str) -> int:
    """<0, 0 or >0 as version a sorts before, equal to or after version b."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return ea - eb
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def satisfies(version: str, constraint: str) -> bool:
    """`>=550.90`, `<<2.0`, `=1.2-1` (dpkg's relations; `>` and `<` read as `>=` and `<=`, as dpkg does)."""
    m = re.fullmatch(r"\s*(>=|<=|>>|<<|=|>|<)?\s*(\S+)\s*", constraint)
    if not m:
        raise ValueError(f"not a version constraint: {constraint!r}")
    op, want = m.group(1) or "=", m.group(2)
    c = compare(version, want)
    return {">=": c >= 0, ">": c >= 0, "<=": c <= 0, "<": c <= 0, ">>": c > 0, "<<": c < 0, "=": c == 0}[op]
