"""RPM package versions compared as rpm compares them.

Segments (rpm 4.18 rpmio/rpmvercmp.c, rpmvercmp): separators (anything but ASCII letters, digits, `~` and `^`)
are skipped; `~` sorts before everything, even the end of the string (1.0~rc1 < 1.0); `^` sorts after
the end but before any other segment (1.0 < 1.0^git1 < 1.0.1); a run of digits compares as a number and
is newer than a run of letters; runs of letters compare byte by byte; the string with segments left over
is newer.

Versions with epoch and release (rpm 4.18 rpmio/rpmver.c parseEVR and rpmverOverlap, as `rpm -q --whatprovides
'NAME >= EVR'` applies them): `[epoch:]version[-release]`, split at the last '-'; a missing epoch is 0;
the release is compared only when both sides have a non-empty one (rpmverOverlap), so `>= 550.90.07`
holds for every release of 550.90.07 and `> 550.90.07` for none of them.
"""

from __future__ import annotations

import re


def _alpha(c: str) -> bool:
    return c.isascii() and c.isalpha()


def _digit(c: str) -> bool:
    return c.isascii() and c.isdigit()


def vercmp(a: str, b: str) -> int:
    """-1, 0 or 1 as version (or release) string a is older than, equal to or newer than b."""
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and not (_alpha(a[i]) or _digit(a[i]) or a[i] in "~^"):
            i += 1
        while j < len(b) and not (_alpha(b[j]) or _digit(b[j]) or b[j] in "~^"):
            j += 1
        ca, cb = a[i : i + 1], b[j : j + 1]
        if ca == "~" or cb == "~":
            if ca != "~":
                return 1
            if cb != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        if ca == "^" or cb == "^":
            if not ca:
                return -1
            if not cb:
                return 1
            if ca != "^":
                return 1
            if cb != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (ca and cb):
            break
        kind = _digit if _digit(ca) else _alpha
        ei, ej = i, j
        while ei < len(a) and kind(a[ei]):
            ei += 1
        while ej < len(b) and kind(b[ej]):
            ej += 1
        sa, sb = a[i:ei], b[j:ej]
        if not sb:  # a digit run against letters: numbers are newer
            return 1 if kind is _digit else -1
        if kind is _digit:
            sa, sb = sa.lstrip("0"), sb.lstrip("0")
            if len(sa) != len(sb):
                return 1 if len(sa) > len(sb) else -1
        if sa != sb:
            return 1 if sa.encode() > sb.encode() else -1
        i, j = ei, ej
    if i >= len(a) and j >= len(b):
        return 0
    return -1 if i >= len(a) else 1


def split_evr(evr: str) -> tuple[str | None, str, str | None]:
    """(epoch or None, version, release or None) as rpmverParse splits `[epoch:]version[-release]`."""
    m = re.match(r"\d*", evr)
    end = m.end() if m else 0
    epoch: str | None = None
    rest = evr
    if evr[end : end + 1] == ":":
        epoch, rest = evr[:end] or "0", evr[end + 1 :]
    version, dash, release = rest.rpartition("-")
    if not dash:
        return epoch, rest, None
    return epoch, version, release


def evrcmp(a: str, b: str) -> int:
    """-1, 0 or 1 comparing `[epoch:]version[-release]` strings as rpmverCmp does."""
    ea, va, ra = split_evr(a)
    eb, vb, rb = split_evr(b)
    return vercmp(ea or "0", eb or "0") or vercmp(va, vb) or (vercmp(ra, rb) if ra and rb else 0)


def satisfies(evr: str, constraint: str) -> bool:
    """Whether an installed `[epoch:]version-release` meets `>=550.90`, `<2.0`, `=1.2-1`. rpm's operators are
    `<`, `<=`, `=`, `>=`, `>`, strict where they look strict; dpkg's `<<` and `>>` read as `<` and `>`."""
    m = re.fullmatch(r"\s*(>=|<=|>>|<<|=|>|<)?\s*(\S+)\s*", constraint)
    if not m:
        raise ValueError(f"not a version constraint: {constraint!r}")
    op, want = m.group(1) or "=", m.group(2)
    c = evrcmp(evr, want)
    return {">=": c >= 0, ">": c > 0, ">>": c > 0, "<=": c <= 0, "<": c < 0, "<<": c < 0, "=": c == 0}[op]
