"""A node's raw facts: what one run of the collector returned, kept as evidence and snapshots."""

from __future__ import annotations

import base64
import binascii
import fnmatch
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import FactUnavailable, ParseError

WIRE_VERSION = "1"
SNAPSHOT_FORMAT = 1


@dataclass
class Record:
    kind: str  # F file, C command, D directory, G glob, P process, L link, M meta, S stat (site rules)
    name: str
    status: str
    data: bytes = b""
    truncated: bool = False


@dataclass(frozen=True)
class Daemon:
    """A process whose command name is a daemon's, and whether the collector found it to be one: it runs as
    root, in the node's own PID and mount namespaces, from an executable only root could have written
    (collector.sh daemon_check; issue 50). `why` says why not ("" for a daemon)."""

    comm: str
    pid: int
    exe: str
    why: str

    @property
    def trusted(self) -> bool:
        return not self.why

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
        for pid in self.processes(comm):
            exe = self._index.get(("L", f"/proc/{pid}/exe"))
            verdict = self._index.get(("M", f"daemon:{pid}"))
            why = (
                verdict.data.decode("utf-8", "replace")
                if verdict is not None and verdict.status == "ok"
                else "not verified as the node's daemon (a snapshot taken before the collector verified daemons: "
                "a command name alone is forgeable)"
            )
            out.append(Daemon(comm, pid, exe.data.decode("utf-8", "replace") if exe is not None else "", why))
        return out

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
