"""What every domain's facts of one node share: the bundle they are read from, the `fact` decorator that reads a
fact once and remembers its value or its failure, and a process's command line. NodeFacts
(conformance.facts.node_facts) composes the domains."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from conformance.collection.bundle import Bundle
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.kubelet import split_cmdline

T = TypeVar("T")


def fact(fn: Callable[[Any], T]) -> property:
    """A lazily computed fact; the value or the failure is computed once and remembered."""
    name = fn.__name__

    @functools.wraps(fn)
    def get(self: FactsBase) -> T:
        if name not in self._memo:
            try:
                self._memo[name] = (True, fn(self))
            except ParseError as e:
                self._memo[name] = (False, FactUnavailable(str(e)))
            except FactUnavailable as e:
                self._memo[name] = (False, e)
        ok, value = self._memo[name]
        if not ok:
            raise value
        return value

    return property(get)


class FactsBase:
    """One node's bundle and the memo of its facts; the domains' classes read through it."""

    def __init__(self, bundle: Bundle, configz: dict[str, Any] | None = None, configz_error: str | None = None) -> None:
        self.bundle = bundle
        self.name = bundle.node
        self.configz = configz  # the kubelet's live config from the API server, when it could be read
        self.configz_error = configz_error  # why not (no API configured: None)
        self._memo: dict[str, tuple[bool, Any]] = {}

    @property
    def reachable(self) -> bool:
        return self.bundle.error is None

    def require_reachable(self) -> None:
        if self.bundle.error is not None:
            raise FactUnavailable(f"node {self.name} {self.bundle.error_kind or 'unreachable'}: {self.bundle.error}")
        if not self.bundle.complete:
            raise FactUnavailable(f"node {self.name}: collection ended early (output incomplete)")

    def _argv(self, pid: int, who: str) -> list[str]:
        """A running process's command line. Never empty for a live process: /proc/PID/cmdline reads empty for
        a zombie (or a kernel thread), so an empty one says the flags are unknown, not that none were given."""
        rec = self.bundle.file(f"/proc/{pid}/cmdline")
        if rec is None or rec.status != "ok":
            raise FactUnavailable(f"node {self.name}: {who}'s command line (/proc/{pid}/cmdline) could not be read")
        argv = split_cmdline(rec.data)
        if not argv:
            raise FactUnavailable(
                f"node {self.name}: {who}'s command line (/proc/{pid}/cmdline) reads empty (a process that was "
                "ending): its flags are unknown"
            )
        return argv
