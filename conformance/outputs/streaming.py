"""The outputs written node by node: results.json, junit.xml and the Prometheus text take each node's
summary and results as they come and keep only what a file needs before its body (JUnit's totals,
Prometheus' per-check counts); the bodies wait in spools, in memory while small and then in unlinked
temporary files, which never outlive the process (nothing to clean up after a crash or a kill). A run's
whole document goes through the same writers (conformance.outputs.junit_chunks, prometheus_text,
write_json_document), so a merge of 50,000 nodes and a run of one write the same bytes for the same
results."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import IO, Any

from conformance.outputs import PROM_RESULT_SERIES_MAX, _epoch, _labels, _open, _suite, _tag, subject_text

SPILL_CHARS = 4 << 20  # a spool moves to disk above this much text
_compact = json.JSONEncoder(separators=(",", ":")).encode


class Spool:
    """Text in the order it was added: in memory up to SPILL_CHARS, then in an unlinked temporary file."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._file: IO[str] | None = None
        self.count = 0

    def add(self, text: str) -> None:
        self.count += 1
        if self._file is not None:
            self._file.write(text)
            return
        self._parts.append(text)
        self._size += len(text)
        if self._size > SPILL_CHARS:
            self._file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - unlinked already: gone with the process
            self._file.writelines(self._parts)
            self._parts = []

    def chunks(self) -> Iterator[str]:
        if self._file is None:
            yield from self._parts
            return
        self._file.flush()
        self._file.seek(0)
        while block := self._file.read(1 << 20):
            yield block

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._parts = []


class JsonItems(Spool):
    """The items of a JSON list, each on a line of its own (results.json's layout for nodes and results)."""

    def add_item(self, value: Any) -> None:
        self.add(("    " if not self.count else ",\n    ") + _compact(value))


def write_document(f: IO[str], doc: dict[str, Any], lists: dict[str, list[JsonItems]]) -> None:
    """results.json's text: the document's keys in order, its metadata indented; the keys in `lists` hold
    the items of those spools (one after the other) as one list."""
    keys = list(doc)
    f.write("{\n")
    for i, key in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        spools = [s for s in lists.get(key, []) if s.count]
        if key in lists and not spools:
            f.write(f"  {json.dumps(key)}: []{comma}\n")
        elif key in lists:
            f.write(f"  {json.dumps(key)}: [\n")
            for j, spool in enumerate(spools):
                if j:
                    f.write(",\n")
                f.writelines(spool.chunks())
            f.write(f"\n  ]{comma}\n")
        else:
            f.write(f"  {json.dumps(key)}: {json.dumps(doc[key], indent=2).replace(chr(10), chr(10) + '  ')}{comma}\n")
    f.write("}\n")


class JunitSuites:
    """junit.xml, one testsuite per node as nodes come; the totals go in the <testsuites> tag at the end."""

    def __init__(self) -> None:
        self.totals = {"tests": 0, "failures": 0, "errors": 0}
        self.suites = Spool()

    def add(self, node: dict[str, Any], rows: list[dict[str, Any]], started_at: str) -> None:
        counts = {
            "tests": len(rows),
            "failures": sum(r["outcome"] == "failed" for r in rows),
            "errors": sum(r["outcome"] == "error" for r in rows),
            "skipped": sum(r["outcome"] in ("skipped", "waived") for r in rows),
        }
        for k in self.totals:
            self.totals[k] += counts[k]
        self.suites.add("\n  " + _suite(started_at, node, rows, counts))

    def chunks(self) -> Iterator[bytes]:
        attrs = [("name", "gpu-node-conformance"), *((k, str(v)) for k, v in self.totals.items())]
        yield b'<?xml version="1.0" encoding="utf-8"?>\n'
        if not self.suites.count:
            yield _tag("testsuites", attrs).encode("utf-8")
            return
        yield _open("testsuites", attrs).encode("utf-8", "xmlcharrefreplace")
        for text in self.suites.chunks():
            yield text.encode("utf-8", "xmlcharrefreplace")
        yield b"\n</testsuites>"
        self.suites.close()


P = "gpu_node_conformance"


class PromSeries:
    """The Prometheus text: per-result series (all of them up to PROM_RESULT_SERIES_MAX results, else only
    failed, error and waived ones), per-check outcome counts, a verdict series per node, the run's times."""

    def __init__(self) -> None:
        self.total = 0
        self.outcomes: Counter[tuple[str, str, str]] = Counter()
        self.every: Spool | None = Spool()  # dropped once the run has more results than PROM_RESULT_SERIES_MAX
        self.attention = Spool()
        self.nodes = Spool()

    def add_results(self, rows: Iterable[dict[str, Any]]) -> None:
        for r in rows:
            self.total += 1
            self.outcomes[(r["check"], r["severity"], r["outcome"])] += 1
            labels = _labels(
                node=r["node"], check=r["check"], subject=subject_text(r.get("subject") or {}), severity=r["severity"],
                outcome=r["outcome"],
            )  # fmt: skip
            line = f"{P}_check_result{labels} 1\n"
            if r["outcome"] not in ("passed", "skipped"):
                self.attention.add(line)
            if self.every is not None:
                self.every.add(line)
                if self.total > PROM_RESULT_SERIES_MAX:
                    self.every.close()
                    self.every = None

    def add_node(self, n: dict[str, Any]) -> None:
        labels = _labels(node=n["name"], verdict=n["verdict"], profile=n["profile"])
        self.nodes.add(f"{P}_node_accepted{labels} {1 if n['verdict'] == 'accepted' else 0}\n")

    def chunks(self, started_at: str | None, finished_at: str | None, complete: bool) -> Iterator[str]:
        bounded = self.every is None
        yield (
            f"# HELP {P}_check_result 1 for the outcome of a check on a node and subject (labels say which)"
            + (f"; this run had {self.total} results, above {PROM_RESULT_SERIES_MAX}: only failed, error and waived ones."
               if bounded else ".")
            + f"\n# TYPE {P}_check_result gauge\n"
        )  # fmt: skip
        yield from (self.attention if bounded else self.every).chunks()  # type: ignore[union-attr]
        yield f"# HELP {P}_check_outcomes How many results of a check had each outcome in this run.\n"
        yield f"# TYPE {P}_check_outcomes gauge\n"
        for (check, severity, outcome), n in sorted(self.outcomes.items()):
            yield f"{P}_check_outcomes{_labels(check=check, severity=severity, outcome=outcome)} {n}\n"
        yield f"# HELP {P}_node_accepted 1 when the node is accepted, else 0; verdict and profile as labels.\n"
        yield f"# TYPE {P}_node_accepted gauge\n"
        yield from self.nodes.chunks()
        started, finished = _epoch(started_at), _epoch(finished_at)
        yield (
            f"# HELP {P}_run_timestamp_seconds When the run started (Unix time).\n"
            f"# TYPE {P}_run_timestamp_seconds gauge\n"
            f"{P}_run_timestamp_seconds {started:.0f}\n"
            f"# HELP {P}_run_duration_seconds How long the run took.\n"
            f"# TYPE {P}_run_duration_seconds gauge\n"
            f"{P}_run_duration_seconds {max(0.0, finished - started):.0f}\n"
            f"# HELP {P}_run_complete 1 when the run was not interrupted.\n"
            f"# TYPE {P}_run_complete gauge\n"
            f"{P}_run_complete {1 if complete else 0}\n"
        )
        for spool in (self.every, self.attention, self.nodes):
            if spool is not None:
                spool.close()
