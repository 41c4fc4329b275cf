"""What every domain's facts of one node share: the bundle they are read from, the `fact` decorator that reads a
fact once and remembers its value or its failure, and a process's command line. NodeFacts
(conformance.facts.node_facts) composes the domains."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

from conformance.collection.bundle import Bundle
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.kubelet import split_cmdline

T = TypeVar("T")

# What a `NAME-package` record's status says (collector.sh emit_owner)
PACKAGE_STATUS = {
    "deleted": "its executable was replaced on disk since it started (an upgrade without a restart): the package "
    "database describes the new file, not the running one; restart it",
    "unowned": "no package of the node's package database (dpkg or rpm) owns its executable (installed by hand or by "
    "an installer script): its release cannot be read without running it, which the audit never does",
    "unread": "its executable (/proc/PID/exe) could not be read",
    "127": "the node has no package database tool (dpkg-query or rpm) and timeout(1)",
}


def package_version(rec: Any, who: str, node: str) -> str:
    """The version text of a `NAME-package` record ("dpkg PACKAGE VERSION", "rpm NAME VERSION-RELEASE"),
    the Debian epoch left off; FactUnavailable saying why it is unknown."""
    if rec.status != "0":
        why = PACKAGE_STATUS.get(rec.status, f"status {rec.status}")
        raise FactUnavailable(f"node {node}: the running {who.removeprefix('the ')}'s release is unknown: {why}")
    words = rec.data.decode("utf-8", "replace").split()
    if len(words) < 3:
        raise FactUnavailable(f"node {node}: the package record of {who} reads {' '.join(words)!r}: no version in it")
    version = words[2].split(":", 1)[-1]  # dpkg's epoch ("1:1.7.27-1") is not part of the release
    return f"{words[1]} {version}"


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

    def listed(self, pattern: str, name: re.Pattern[str], what: str) -> list[tuple[str, str]]:
        """(the name's first group, path) of every path the collector listed for `pattern`; a listing that holds a
        path `name` does not match (a record cut or mangled) is a ParseError naming the listing, never an index
        error of the suite's own (issue 53.21)."""
        out = []
        for path in self.bundle.glob(pattern):
            m = name.fullmatch(path)
            if not m:
                raise ParseError(f"the listing of {pattern} on node {self.name} holds {path[:120]!r}, not {what}")
            out.append((m.group(1), path))
        return out

    def daemon_pid(self, comms: tuple[str, ...], who: str) -> int | None:
        """The pid of the node's one daemon among processes named `comms` (None: no process has such a name).
        A name is forgeable: only a process the collector verified (root, the node's own namespaces, an
        executable only root could write) is the daemon. Processes of that name that are not, or two that are,
        leave it unknown (FactUnavailable naming every candidate), never the first one's (issue 50)."""
        found = [d for c in comms for d in self.bundle.daemons(c)]
        if not found:
            return None
        trusted = [d for d in found if d.trusted]
        if len(trusted) == 1:
            return trusted[0].pid
        names = "; ".join(f"{d.comm} {d.describe()}" for d in found)
        if trusted:
            raise FactUnavailable(
                f"node {self.name}: {len(trusted)} processes qualify as {who}, which one runs is unknown: {names}"
            )
        raise FactUnavailable(
            f"node {self.name}: no process named {'/'.join(comms)} is {who} that a local user could not have started: {names}"
        )

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
