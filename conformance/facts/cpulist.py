"""The Linux cpulist syntax (`0-3,8,10-11`), as in sysfs, /proc/<pid>/status and kubelet state."""

from __future__ import annotations

from conformance.errors import ParseError

MAX_CPU = 16383  # Linux's NR_CPUS ceiling (CONFIG_NR_CPUS max is 8192 on x86; 16384 on arm64)


def parse_ranges(text: str, *, what: str = "cpulist", maximum: int = MAX_CPU) -> set[int]:
    """Parse a comma-separated list of integers and inclusive ranges into a set.

    >>> sorted(parse_ranges("0-2,5"))
    [0, 1, 2, 5]
    """
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    s = text.strip()
    out: set[int] = set()
    if not s:
        return out
    for part in s.split(","):
        part = part.strip()
        if not part:
            raise ParseError(f"{what}: empty element in {text.strip()!r}")
        lo_s, sep, hi_s = part.partition("-")
        lo = _number(lo_s, part, what, maximum)
        hi = _number(hi_s, part, what, maximum) if sep else lo
        if hi < lo:
            raise ParseError(f"{what}: range {part!r} ends before it starts")
        out.update(range(lo, hi + 1))
    return out


def _number(s: str, part: str, what: str, maximum: int) -> int:
    s = s.strip()
    if not s.isdigit() or not s.isascii():
        raise ParseError(f"{what}: {part!r} is not a number or a range of numbers")
    n = int(s)
    if n > maximum:
        raise ParseError(f"{what}: {n} is above the largest possible value {maximum}")
    return n


def parse_cpulist(text: str, *, what: str = "cpulist") -> frozenset[int]:
    return frozenset(parse_ranges(text, what=what))


def format_cpulist(cpus: set[int] | frozenset[int]) -> str:
    """The canonical short form: `format_cpulist({0, 1, 2, 5}) == "0-2,5"`."""
    items = sorted(cpus)
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        parts.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(parts)
