"""A node's raw facts: what one run of the collector returned, kept as evidence and snapshots."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import FactUnavailable, ParseError

WIRE_VERSION = "1"
SNAPSHOT_FORMAT = 1


@dataclass
class Record:
    kind: str  # F file, C command, D directory, G glob, P process, L link, M meta, S stat (site rules), A the API's
    name: str
    status: str
    data: bytes = b""
    truncated: bool = False


# What the collector's verdict on a candidate says when the process is definitely not the node's daemon (a user's or a
# container's process), as against facts that could not be read, which leave it unknown.
RULED_OUT = ("it runs as uid", "it runs in other namespaces", "its PID named another process")
USER_WRITABLE = "can be written by a user other than root"
IN_CONTAINER = "it runs in other namespaces"


@dataclass(frozen=True)
class Daemon:
    """A process whose command name is a daemon's, and whether the collector found it to be one: it runs as
    root, in the node's own PID and mount namespaces, from an executable only root could have written
    (collector.sh; issue 50). `why` says why not ("" for a daemon). `start`: when it started (clock ticks after
    boot, /proc/PID/stat field 22; None where not recorded)."""

    comm: str
    pid: int
    exe: str
    why: str
    start: int | None = None

    @property
    def trusted(self) -> bool:
        return not self.why

    @property
    def ruled_out(self) -> bool:
        """Definitely not the node's daemon: another user's process, one run from a file a user could write, or a
        container's (as against a process whose facts could not be read: that one may be the daemon)."""
        return self.why.startswith(RULED_OUT) or USER_WRITABLE in self.why

    @property
    def in_container(self) -> bool:
        """A process in other namespaces than the node's PID 1: a container's (the GPU Operator's driver container
        runs nv-fabricmanager and nvidia-persistenced), never evidence that the host lacks the daemon."""
        return self.why.startswith(IN_CONTAINER)

    def describe(self) -> str:
        return f"pid {self.pid} ({self.exe or 'executable unread'}{': ' + self.why if self.why else ''})"


@dataclass
class Bundle:
    """Everything gathered from one node, addressable by path or label."""

    node: str
    records: list[Record] = field(default_factory=list)
    max_bytes: int = 4 * 1024 * 1024
    error: str | None = None  # set when the node could not be collected at all
    error_kind: str | None = None
    collected_at: str | None = None
    duration_s: float | None = None
    executions: int = 0
    notes: list[str] = field(default_factory=list)
    labels: dict[str, str] | None = None  # the node's labels as the inventory or API gave them (None: not known)

    def __post_init__(self) -> None:
        self._index: dict[tuple[str, str], Record] = {}
        for r in self.records:
            self._index.setdefault((r.kind, r.name), r)

    def add(self, record: Record) -> None:
        """One more record (the API's, beside what the node said); the first of a kind and name wins, as parsed."""
        self.records.append(record)
        self._index.setdefault((record.kind, record.name), record)

    # -- lookups -------------------------------------------------------------------------------
    def file(self, path: str) -> Record | None:
        return self._index.get(("F", path))

    def stat(self, path: str) -> Record | None:
        """A site rule's stat record: `mode uid gid user group type` (status ok, missing or denied)."""
        return self._index.get(("S", path))

    def text(self, path: str, what: str | None = None) -> str:
        """A file's text, or FactUnavailable saying why it could not be read."""
        rec = self.file(path)
        label = what or path
        if rec is None:
            raise FactUnavailable(f"{label}: not collected from node {self.node}")
        if rec.status == "missing":
            raise FactUnavailable(f"{label}: no such file on node {self.node}")
        if rec.status == "denied":
            raise FactUnavailable(f"{label}: permission denied reading it on node {self.node}")
        if rec.status == "unreadable":
            raise FactUnavailable(f"{label}: not one line of plain text on node {self.node}")
        if rec.status == "special":
            raise FactUnavailable(f"{label}: not a regular file (FIFO, socket or device) on node {self.node}; not opened")
        if rec.status == "dir":
            raise FactUnavailable(f"{label}: is a directory on node {self.node}, expected a file")
        if rec.truncated:
            raise FactUnavailable(f"{label}: larger than the {self.max_bytes}-byte read bound on node {self.node}; not parsed")
        try:
            return rec.data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FactUnavailable(f"{label}: not UTF-8 text (byte {e.start}) on node {self.node}") from None

    def optional_text(self, path: str) -> str | None:
        rec = self.file(path)
        if rec is None or rec.status == "missing":
            return None
        return self.text(path)

    def command(self, label: str) -> Record:
        rec = self._index.get(("C", label))
        if rec is None:
            raise FactUnavailable(f"command {label}: not run on node {self.node}")
        return rec

    def optional_command(self, label: str) -> Record | None:
        return self._index.get(("C", label))

    def meta(self, name: str) -> Record | None:
        return self._index.get(("M", name))

    # Unknown is never "none": every lookup of a listing (glob, meta list, directory, import, process, link)
    # raises FactUnavailable when its record says it could not be read, instead of reading as empty.
    def _unreadable(self, rec: Record, what: str, verb: str = "read") -> FactUnavailable:
        return FactUnavailable(f"{what}: could not be {verb} on node {self.node} ({rec.status})")

    def meta_lines(self, name: str) -> list[str] | None:
        """A meta record that lists paths, one per line (None: the collector did not write it)."""
        rec = self.meta(name)
        if rec is not None and rec.status != "ok":
            raise self._unreadable(rec, f"the list of {name}")
        return None if rec is None else [x for x in rec.data.decode("utf-8", "replace").split("\n") if x]

    def dirs(self) -> dict[str, bool]:
        """Directory -> whether it exists, for every directory the collector looked for."""
        for r in self.records:
            if r.kind == "D" and r.status not in ("present", "missing"):
                raise self._unreadable(r, f"whether {r.name} exists")
        return {r.name: r.status == "present" for r in self.records if r.kind == "D"}

    def glob(self, pattern: str) -> list[str]:
        rec = self._index.get(("G", pattern))
        if rec is None:
            raise FactUnavailable(f"{pattern}: not listed on node {self.node}")
        if rec.status != "ok":
            raise self._unreadable(rec, f"the files matching {pattern}", "listed")
        return sorted(p for p in rec.data.decode("utf-8", "replace").split("\n") if p)

    def listed(self, pattern: str) -> bool:
        """Whether the collector listed `pattern` at all (a snapshot of an older collector may not have)."""
        return ("G", pattern) in self._index

    def import_matches(self, path: str) -> list[str]:
        """Every file that `path`'s containerd `imports` name or match, as the collector listed them on the node."""
        rec = self._index.get(("G", f"imports-of:{path}"))
        if rec is None:
            raise FactUnavailable(
                f"the imports of {path}: not listed on node {self.node} (a file deeper than the collector follows, "
                "or a snapshot taken before imports were listed as a whole)"
            )
        if rec.status != "ok":
            raise self._unreadable(rec, f"the imports of {path}", "listed")
        lines = [p for p in rec.data.decode("utf-8", "replace").split("\n") if p]
        if denied := [p[len("-denied ") :] for p in lines if p.startswith("-denied ")]:
            raise FactUnavailable(f"the imports of {path}: {denied[0]} could not be listed on node {self.node}")
        return lines

    def processes(self, comm: str) -> list[int]:
        pids = []
        for r in self.records:
            if r.kind == "P" and r.name == comm:
                if not r.status.isdigit():
                    raise self._unreadable(r, f"the process {comm}")
                pids.append(int(r.status))
        return pids

    def daemons(self, comm: str) -> list[Daemon]:
        """Every process named `comm`, each with the collector's verdict on whether it is the node's daemon. A
        snapshot from a collector that gave no verdict names none as a daemon: a command name alone is forgeable."""
        out = []
        recheck = self._recheck()
        for pid in self.processes(comm):
            exe = self._index.get(("L", f"/proc/{pid}/exe"))
            verdict = self._index.get(("M", f"daemon:{pid}"))
            why = (
                verdict.data.decode("utf-8", "replace")
                if verdict is not None and verdict.status == "ok"
                else "not verified as the node's daemon (a snapshot taken before the collector verified daemons: "
                "a command name alone is forgeable)"
            )
            started = self._index.get(("M", f"daemon-start:{pid}"))
            start = int(started.data) if started is not None and started.status == "ok" and started.data.isdigit() else None
            if not why and started is not None and start is None:
                why = f"its start time (/proc/{pid}/stat) was not recorded readably"
            if not why and recheck is not None and start is not None and recheck.get(pid) != str(start):
                # issue 59: what was read of a PID that names another process by the end is not this daemon's
                later = recheck.get(pid)
                then = "not checked again" if later is None else "gone" if later == "gone" else f"tick {later}"
                why = (
                    f"its PID named another process by the end of the collection (started at tick {start}, then "
                    f"{then}): it ended or restarted while it was read, and what was read of it is not used"
                )
            out.append(Daemon(comm, pid, exe.data.decode("utf-8", "replace") if exe is not None else "", why, start))
        return out

    def _recheck(self) -> dict[int, str] | None:
        """Each verified daemon's start time as read again at the end of the collection (None: an older snapshot,
        or not recorded; a record that is not readable makes every daemon unknown, never unchanged)."""
        rec = self._index.get(("M", "daemon-recheck"))
        if rec is None:
            return None
        if rec.status != "ok":
            return {}
        out = {}
        for word in rec.data.decode("utf-8", "replace").split():
            pid, _, start = word.partition(":")
            if pid.isdigit():
                out[int(pid)] = start
        return out

    def api(self, name: str) -> tuple[dict[str, Any] | None, str | None] | None:
        """What the Kubernetes API said of this node when it was collected (an `A` record: the run read it beside
        the collection, and a snapshot keeps it): (document, None), (None, why it could not be read), or None where
        the run did not use the API."""
        rec = self._index.get(("A", name))
        if rec is None:
            return None
        text = rec.data.decode("utf-8", "replace")
        if rec.status != "ok":
            return None, text or f"status {rec.status}"
        try:
            doc = json.loads(text)
        except ValueError:
            return None, "its record does not parse"
        return (doc, None) if isinstance(doc, dict) else (None, "its record is not an object")

    def boot(self) -> tuple[str, int] | None:
        """(this boot's id, when it began: btime, seconds since the epoch), None where not recorded."""
        rec = self._index.get(("M", "boot"))
        if rec is None or rec.status != "ok":
            return None
        words = rec.data.decode("utf-8", "replace").split()
        if len(words) != 2 or not words[1].isdigit() or not words[0]:
            return None
        return words[0], int(words[1])

    def link(self, path: str) -> str | None:
        """Where a symlink points (None: not a symlink, or not looked at)."""
        rec = self._index.get(("L", path))
        if rec is not None and rec.status != "ok":
            raise self._unreadable(rec, f"the link {path}")
        return rec.data.decode("utf-8", "replace") if rec and rec.data else None

    def files_matching(self, pattern: str) -> list[str]:
        return sorted(r.name for r in self.records if r.kind == "F" and fnmatch.fnmatchcase(r.name, pattern))

    @property
    def complete(self) -> bool:
        return any(r.kind == "M" and r.name == "end" for r in self.records)

    # -- serialisation -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": SNAPSHOT_FORMAT,
            "node": self.node,
            "collected_at": self.collected_at,
            "duration_s": self.duration_s,
            "executions": self.executions,
            "max_bytes": self.max_bytes,
            "error": self.error,
            "error_kind": self.error_kind,
            "notes": list(self.notes),
            **({"labels": dict(self.labels)} if self.labels is not None else {}),
            "records": [],
        }
        for r in self.records:
            item: dict[str, Any] = {"kind": r.kind, "name": r.name, "status": r.status}
            if r.truncated:
                item["truncated"] = True
            if r.data:
                try:
                    item["text"] = r.data.decode("utf-8")
                except UnicodeDecodeError:
                    item["base64"] = base64.b64encode(r.data).decode("ascii")
            out["records"].append(item)
        return out

    @classmethod
    def from_json(cls, doc: Any, source: str = "snapshot") -> Bundle:
        if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT or not isinstance(doc.get("node"), str):
            raise ParseError(f"{source}: not a gpu-node-conformance snapshot (format {SNAPSHOT_FORMAT})")
        records = []
        for i, item in enumerate(doc.get("records") or []):
            try:
                data = (
                    base64.b64decode(item["base64"], validate=True)
                    if "base64" in item
                    else str(item.get("text", "")).encode("utf-8")
                )
                records.append(
                    Record(str(item["kind"]), str(item["name"]), str(item["status"]), data, bool(item.get("truncated")))
                )
            except (KeyError, TypeError, binascii.Error) as e:
                raise ParseError(f"{source}: records[{i}] is malformed: {e}") from e
        return cls(
            node=doc["node"],
            records=records,
            max_bytes=int(doc.get("max_bytes") or 4 * 1024 * 1024),
            error=doc.get("error"),
            error_kind=doc.get("error_kind"),
            collected_at=doc.get("collected_at"),
            duration_s=doc.get("duration_s"),
            executions=int(doc.get("executions") or 0),
            notes=[str(n) for n in doc.get("notes") or []],
            labels={str(k): str(v) for k, v in doc["labels"].items()} if isinstance(doc.get("labels"), dict) else None,
        )


def parse_wire(node: str, raw: bytes, max_bytes: int) -> Bundle:
    """Decode the collector's output (one record per line, base64 fields)."""
    records: list[Record] = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith(b"T "):  # one-line text file: `T =NAME STATUS TEXT`
            t = line.split(b" ", 3)
            if len(t) != 4 or not t[1].startswith(b"="):
                raise ParseError(f"collector output line {lineno}: malformed text record")
            status = t[2].decode("ascii", "replace")
            data = t[3] + b"\n" if status == "ok" else b""
            records.append(Record("F", t[1][1:].decode("utf-8", "replace"), status, data))
            continue
        parts = line.split(b" ")
        if len(parts) != 4:
            raise ParseError(f"collector output line {lineno}: expected 4 fields, got {len(parts)}")
        kind, name_b64, status, data_b64 = parts
        try:
            if name_b64.startswith(b"="):
                name = name_b64[1:].decode("utf-8", "replace")
            else:
                name = base64.b64decode(name_b64, validate=True).decode("utf-8", "replace")
            data = base64.b64decode(data_b64, validate=True) if data_b64 else b""
        except binascii.Error as e:
            raise ParseError(f"collector output line {lineno}: bad base64: {e}") from e
        truncated = False
        if kind == b"F" and len(data) > max_bytes:
            data, truncated = data[:max_bytes], True
        records.append(Record(kind.decode("ascii", "replace"), name, status.decode("ascii", "replace"), data, truncated))
    bundle = Bundle(node=node, records=records, max_bytes=max_bytes)
    if not records or records[0].kind != "M" or records[0].data.decode("ascii", "replace") != WIRE_VERSION:
        raise ParseError("collector output does not start with the version record")
    return bundle
