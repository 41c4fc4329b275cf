"""Many results documents merged by node without holding them: each node's record and results go to an
unlinked temporary file as they are read (gone with the process, however it ends), and memory keeps, per
node, where its latest run lies and the little that grouping and the drift check need of it.

A node present in several documents is merged check by check: of each check, the rows of the run that
finished last and judged it win (a rerun of some checks replaces those, and the earlier run's other checks
stay: `merge monday/ rerun-with-select.json` keeps Monday's other failures); of two runs that finished
together, the later source. The node's record is its newest run's, with `runs` naming every run its results
came from, and it keeps the place it first had among the documents ordered by finish time. A result that
comes before its node in a hand-edited document is kept for that node."""

from __future__ import annotations

import json
import marshal
import struct
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from conformance.outputs.documents import Part

Span = tuple[int, int]  # offset and length in the spool file
# A spooled value is its length (4 bytes) and its marshal form: the values are parsed JSON (dicts, lists, strings,
# numbers, booleans, None), which marshal writes and reads back unchanged four to seven times as fast as JSON
# (issue 60: a 10,000-node merge spent 10 s of its 35 encoding and decoding the spool as JSON lines). The file is
# this process's own, unlinked: nothing else reads it.
_LENGTH = struct.Struct("<I")


@dataclass
class Entry:
    """Where one node's run lies in the spool, and the keys that order and pick among its runs."""

    first: tuple[str, int, int]  # (finished_at, document, position) of its first appearance
    won: tuple[str, int]  # (finished_at, document) of the run kept
    record: Span
    results: list[Span] = field(default_factory=list)
    count: int = 0  # results
    light: dict[str, Any] = field(default_factory=dict)  # what pools and FLEET-CONSISTENT read of the record
    source: str = ""  # the document this run came from
    older: list[tuple[tuple[str, int], list[Span], str]] = field(default_factory=list)  # earlier runs: (won, results, source)


LIGHT_KEYS = ("name", "profile", "profile_reason", "transport", "labels", "identity", "identity_errors")


class NodeSpool:
    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - unlinked already: gone with the process
        self._end = 0
        self._at = 0  # the file's position: writes append without a seek while nothing was read between them
        self.entries: dict[str, Entry] = {}
        self.documents = 0
        self.meta = _Meta()
        self._strings: dict[Any, Any] = {}  # one copy of each repeated label and identity value
        self._settings: dict[str, Any] = {}

    def add(self, parts: Iterable[Part], source: str = "") -> None:
        """One document's parts (conformance.outputs.documents), in file order."""
        doc = self.documents
        self.documents += 1
        finished = ""
        mine: dict[str, Entry] = {}
        position = 0
        last: Entry | None = None
        early: list[dict[str, Any]] = []  # results met before their node (a hand-edited document)
        for kind, value in parts:
            if kind == "meta":
                finished = self.meta.add(value, finished, doc)
            elif kind == "node":
                name = value["name"]
                span = self._write(value)
                entry = Entry((finished, doc, position), (finished, doc), span, light=self._light(value), source=source)
                position += 1
                mine[name] = entry
            else:
                name = value.get("node")
                entry = mine.get(name) if name is not None else None
                if entry is None:
                    early.append(value)  # its node may come later; a result of no node the document lists is dropped
                    continue
                span = self._write(value)
                entry.count += 1
                if last is entry and entry.results and sum(entry.results[-1]) == span[0]:
                    entry.results[-1] = (entry.results[-1][0], entry.results[-1][1] + span[1])
                else:
                    entry.results.append(span)
                last = entry
        for value in early:
            entry = mine.get(value.get("node"))
            if entry is not None:
                entry.results.append(self._write(value))
                entry.count += 1
        for name, entry in mine.items():
            entry.first = (finished, doc, entry.first[2])
            entry.won = (finished, doc)
            old = self.entries.get(name)
            if old is None:
                self.entries[name] = entry
                continue
            entry.first = min(old.first, entry.first)
            new, other = (entry, old) if entry.won >= old.won else (old, entry)
            new.first = entry.first
            new.older += [(other.won, other.results, other.source), *other.older]
            new.older.sort(reverse=True)
            new.count += other.count
            self.entries[name] = new
        self.meta.finish(finished, doc)

    def names(self) -> list[str]:
        """Every node, in the merged order."""
        return sorted(self.entries, key=lambda n: self.entries[n].first)

    def count_results(self) -> int:
        return sum(e.count for e in self.entries.values())

    def record(self, name: str) -> dict[str, Any]:
        entry = self.entries[name]
        (record,) = _values(self._read(entry.record))
        if entry.older:
            runs = [(entry.won, entry.source), *((won, source) for won, _, source in entry.older)]
            record["runs"] = [{"source": source or f"document {won[1] + 1}", "finished_at": won[0]} for won, source in runs]
        return record

    def results_of(self, name: str) -> Iterator[dict[str, Any]]:
        """The node's results; merged from several runs, each check's rows from the newest run that has any."""
        entry = self.entries[name]
        if not entry.older:
            yield from self._rows(entry.results)
            return
        taken: set[str] = set()
        for spans in [entry.results, *(results for _, results, _ in entry.older)]:
            rows = list(self._rows(spans))
            mine = {r.get("check") for r in rows} - taken
            yield from (r for r in rows if r.get("check") in mine)
            taken |= mine

    def _rows(self, spans: list[Span]) -> Iterator[dict[str, Any]]:
        for span in spans:
            yield from _values(self._read(span))

    def close(self) -> None:
        self._file.close()

    def _write(self, value: Any) -> Span:
        data = marshal.dumps(value)
        if self._at != self._end:
            self._file.seek(self._end)
        self._file.write(_LENGTH.pack(len(data)))
        self._file.write(data)
        span = (self._end, _LENGTH.size + len(data))
        self._end = self._at = self._end + span[1]
        return span

    def _read(self, span: Span) -> bytes:
        self._file.seek(span[0])
        self._at = span[0] + span[1]
        return self._file.read(span[1])

    def _light(self, record: dict[str, Any]) -> dict[str, Any]:
        light = {k: self._shared(record[k]) for k in LIGHT_KEYS if k in record}
        light["profile"] = self._shared(record.get("profile", "default"))  # as a replay names it
        if "fleet" in record:  # one copy of each set of fleet settings
            light["fleet"] = self._settings.setdefault(json.dumps(record["fleet"], sort_keys=True), record["fleet"])
        error = (record.get("collection") or {}).get("error")
        if record.get("collection") is not None:
            light["collection"] = {"error": error} if error else {}
        return light

    def _shared(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self._shared(k): self._shared(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._shared(v) for v in value]
        if isinstance(value, str):
            return self._strings.setdefault(value, value)
        return value


class _Meta:
    """The merged document's metadata: as merge_parsed took it from the documents ordered by finish time."""

    def __init__(self) -> None:
        self.started_at: str | None = None
        self.finished_at = ""
        self.complete = True
        self.checks: dict[str, tuple[tuple[str, int], Any]] = {}
        self.waivers: tuple[tuple[str, int], Any] | None = None
        self.api_access: list[tuple[tuple[str, int], int, str]] = []
        self._pending: dict[str, Any] = {}

    def add(self, value: dict[str, Any], finished: str, doc: int) -> str:
        """A metadata part; returns the document's finish time (once known: it comes before its nodes)."""
        self._pending.update(value)
        if "finished_at" in value:
            finished = value["finished_at"] or ""
        return finished

    def finish(self, finished: str, doc: int) -> None:
        d, key = self._pending, (finished, doc)
        self._pending = {}
        started = d.get("started_at") or ""
        audits = d.get("audits") if isinstance(d.get("audits"), dict) else {}  # a merge's: its audits' own times
        self.started_at = started if self.started_at is None else min(self.started_at, started)
        self.finished_at = max(self.finished_at, str(audits.get("finished_at") or finished))
        self.complete = self.complete and d.get("complete", True)
        for cid, spec in (d.get("checks") or {}).items():
            if cid not in self.checks or key >= self.checks[cid][0]:
                self.checks[cid] = (key, spec)
        if self.waivers is None or key >= self.waivers[0]:
            self.waivers = (key, d.get("waivers"))
        self.api_access += [(key, i, x) for i, x in enumerate(d.get("api_access") or [])]

    def checks_json(self) -> dict[str, Any]:
        return {cid: spec for cid, (_, spec) in self.checks.items()}

    def api_access_json(self) -> list[str]:
        return list(dict.fromkeys(x for _, _, x in sorted(self.api_access)))


def _values(data: bytes) -> Iterator[Any]:
    """The values of a span: each its length, then its marshal form."""
    view = memoryview(data)
    at = 0
    while at < len(data):
        (size,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        yield marshal.loads(view[at : at + size])
        at += size
