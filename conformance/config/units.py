"""Go durations (`"1m30s"`) and Kubernetes CPU quantities (`"1500m"`, `"2"`)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from conformance.errors import ParseError

_DURATION_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "μs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: object, *, what: str = "duration") -> float:
    """Seconds in a Go duration string, as Go's time.ParseDuration reads it ("10s", "1m0s", "0")."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ParseError(f"{what}: expected a duration string such as '10s', got {text!r}")
    s = str(text).strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = Decimal(1)
    if s and s[0] in "+-":
        sign = Decimal(-1) if s[0] == "-" else Decimal(1)
        s = s[1:]
    if not s:
        raise ParseError(f"{what}: empty duration")
    pos = 0
    total = Decimal(0)
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ParseError(f"{what}: {text!r} is not a Go duration (expected e.g. '10s', '1m30s', '500ms')")
        total += Decimal(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return float(sign * total)


_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(text: object, *, what: str = "quantity") -> Decimal:
    """A Kubernetes resource quantity as a Decimal ("1500m" -> 1.5, "2Gi" -> 2147483648)."""
    if isinstance(text, bool):
        raise ParseError(f"{what}: expected a quantity, got {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected a quantity, got {text!r}")
    m = _QUANTITY.match(text.strip())
    if not m:
        raise ParseError(f"{what}: {text!r} is not a Kubernetes quantity (e.g. '2', '1500m', '4Gi')")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except InvalidOperation as e:  # pragma: no cover - the regex admits only valid decimals
        raise ParseError(f"{what}: {text!r}: {e}") from e


def cpu_count(quantity: Any) -> float | None:
    """A CPU quantity ("4", "500m", 2) as a number of CPUs."""
    if quantity is None:
        return None
    try:
        return float(parse_quantity(quantity, what="cpu"))
    except ParseError:
        return None


def bytes_of(quantity: Any) -> int | None:
    return None if quantity is None else int(parse_quantity(str(quantity)))
