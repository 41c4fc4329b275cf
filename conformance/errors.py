"""The exceptions the suite raises. Each carries a message that names what to fix."""

from collections.abc import Callable
from typing import Any


class ConformanceError(Exception):
    """Base class of every error the suite raises on purpose."""


class UsageError(ConformanceError):
    """A bad command line, inventory or profile: the run cannot start (exit code 4)."""


class ParseError(ConformanceError):
    """A parser was given data it cannot read. The message names the input and the problem."""


class FactUnavailable(ConformanceError):
    """A fact could not be obtained (node unreachable, file missing, malformed, unreadable).

    A check that needs it reports `error`, never `passed`."""


def remembered(cache: dict[Any, Any], key: Any, read: Callable[[], Any]) -> Any:
    """`read()` once per key: its value, or the FactUnavailable it raised, raised again on every later ask."""
    if key not in cache:
        try:
            cache[key] = read()
        except FactUnavailable as e:
            cache[key] = e
    got = cache[key]
    if isinstance(got, FactUnavailable):
        raise got
    return got


class TransportError(ConformanceError):
    """A node could not be reached or the remote collection failed."""

    def __init__(self, message: str, *, kind: str = "unreachable", executed: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.executed = executed  # False: the remote program never started (no session was opened)
        self.partial = b""  # what the remote program had printed before the failure (a timeout, a cut)


def clipped(value: object, limit: int = 160) -> str:
    """A value as a message shows it: its first `limit` characters, and "..." where it was longer."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."
