"""What every domain's facts of one node share: the bundle they are read from, the `fact` decorator that reads a
fact once and remembers its value or its failure, and a process's command line. NodeFacts
(conformance.facts.node_facts) composes the domains."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

from conformance.collection.bundle import Bundle, Daemon
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.daemon_release import (
    USER_HZ,
    Source,
    bottlerocket_inventory,
    crio_version_file,
    eks_version,
    journal_source,
    node_status_source,
    package_source,
    record_source,
)
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

    def release_sources(self, name: str, daemon: Daemon, info_field: str, runtime: str | None) -> list[Source]:
        """Every source of the release of the daemon `name` (kubelet, containerd, crio) runs, in the order they are
        trusted (conformance.facts.daemon_release): the Node's nodeInfo.`info_field`, the package of its running
        file, the platform's own records, its start line in the journal."""
        b = self.bundle
        boot, api, root = b.boot(), b.api("node-status"), b.meta("root")
        who = {"kubelet": "kubelet", "containerd": "containerd", "crio": "CRI-O"}[name]
        out: list[Source | None] = [
            node_status_source(api[0], api[1], info_field, boot, daemon.start, runtime) if api is not None else None,
            package_source(
                b.optional_command(f"{name}-package"),
                b.meta(f"{name}-package-proof"),
                who,
                b.meta("boot") is None,
                host_root=bool(root is not None and root.data),
            ),
        ]
        stat = b.meta(f"exe-stat:{daemon.pid}")
        words = stat.data.decode("utf-8", "replace").split() if stat is not None and stat.status == "ok" else []
        ctime = int(words[0]) if words and words[0].isdigit() else None
        bottlerocket = ("/usr/share/bottlerocket/application-inventory.json", "/var/lib/bottlerocket/inventory/applications.json")
        if name == "kubelet":
            out.append(record_source(b, "/etc/eks/kubelet-version.txt", who, eks_version, ctime))
            out += [record_source(b, p, who, bottlerocket_inventory("kubernetes"), None) for p in bottlerocket]
        elif name == "containerd":
            out.append(record_source(b, "/etc/eks/containerd-version.txt", who, eks_version, ctime))
            out += [record_source(b, p, who, bottlerocket_inventory("containerd"), None) for p in bottlerocket]
        else:
            since = boot[1] + daemon.start / USER_HZ if boot is not None and daemon.start is not None else None
            # a snapshot of a collector before issue 58 recorded no start times: its version file is taken as it was
            out.append(record_source(b, "/var/run/crio/version", who, crio_version_file, None, b.meta("boot") is not None, since))
        if name != "crio":
            out.append(journal_source(b.optional_command(f"{name}-journal"), daemon.pid, boot, daemon.start, who))
        return [s for s in out if s is not None]

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
