"""Outputs derived from results.json: JUnit per node, Prometheus text format, and run diffs.

They read the results document only, so a live run, a snapshot replay and a re-render agree."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from conformance.outputs.streaming import PROM_RESULT_SERIES_MAX, subject_text

__all__ = ["PROM_RESULT_SERIES_MAX", "subject_text"]

FAILING = ("failed", "error")


def result_key(r: dict[str, Any]) -> tuple[str, str, str]:
    return r["node"], r["check"], json.dumps(r.get("subject") or {}, sort_keys=True)


def junit_xml(doc: dict[str, Any]) -> bytes:
    """One testsuite per node; each testcase is named by check id (and subject), classname = node."""
    return b"".join(junit_chunks(doc))


def junit_chunks(doc: dict[str, Any]) -> Iterator[bytes]:
    """junit.xml in pieces, one testsuite at a time (conformance.outputs.streaming.JunitSuites). The bytes are
    those ElementTree writes for the whole tree indented with ET.indent (two spaces per level), which is
    what this wrote before it was streamed."""
    from conformance.outputs.streaming import JunitSuites

    by_node: dict[str, list[dict[str, Any]]] = {n["name"]: [] for n in doc["nodes"]}
    for r in doc["results"]:
        by_node.setdefault(r["node"], []).append(r)
    suites = JunitSuites()
    for node in doc["nodes"]:
        suites.add(node, by_node.get(node["name"], []), doc.get("started_at") or "")
    return suites.chunks()


def write_json_document(path: str | Path, doc: dict[str, Any], lists: dict[str, list[Any]] | None = None) -> None:
    """results.json, written as a stream and then renamed into place: the run's metadata indented, and
    each node and each result on a line of its own (compact JSON, the C encoder), so that 500,000
    results are neither one string in memory nor minutes of indenting. `lists`: the nodes and results
    as spools of items (conformance.outputs.streaming.JsonItems), for a document streamed node by node."""
    from conformance.outputs.streaming import JsonItems, write_document

    if lists is None:
        lists = {}
        for key in ("nodes", "results"):
            if isinstance(doc.get(key), list):
                items = JsonItems()
                for value in doc[key]:
                    items.add_item(value)
                lists[key] = [items]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            write_document(f, doc, lists)
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)


def junit_case_details(case: ET.Element) -> dict[str, str]:
    """The `key: value` lines of a testcase's <system-out> (first value of each key)."""
    out: dict[str, str] = {}
    for line in (case.findtext("system-out") or "").splitlines():
        key, sep, value = line.partition(": ")
        if sep and key not in out:
            out[key] = value
    return out


# -- Prometheus --------------------------------------------------------------------------------
def prometheus_text(doc: dict[str, Any]) -> str:
    """Text exposition format: one series per (node, check, subject) (bounded, above), per-check outcome
    counts, per-node verdicts, run times (conformance.outputs.streaming.PromSeries)."""
    from conformance.outputs.streaming import PromSeries

    series = PromSeries()
    series.add_results(doc["results"])
    for n in doc["nodes"]:
        series.add_node(n)
    return "".join(series.chunks(doc.get("started_at"), doc.get("finished_at"), doc.get("complete", True)))


def push_to_gateway(url: str, text: str, job: str = "gpu_node_conformance", timeout: float = 10.0) -> None:
    """PUT the metrics to a Pushgateway (replacing the job's group). Raises OSError on failure."""
    import urllib3

    target = url.rstrip("/") + f"/metrics/job/{job}"
    try:
        r = urllib3.request(
            "PUT",
            target,
            body=text.encode("utf-8"),
            headers={"Content-Type": "text/plain; version=0.0.4"},
            timeout=timeout,
            retries=False,
        )
    except urllib3.exceptions.HTTPError as e:
        raise OSError(f"Pushgateway {url}: {e}") from None
    if r.status >= 300:
        raise OSError(f"Pushgateway {url} answered HTTP {r.status}: {r.data[:200]!r}")


# -- diff --------------------------------------------------------------------------------------
def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed between two runs: failures new, fixed or still there; nodes new or vanished."""
    d = Diff(before)
    d.add_results(after["results"])
    for n in after["nodes"]:
        d.add_node(n)
    return d.result()


class Diff:
    """The diff against a baseline, with the new run's results and nodes given as they come (a merge streams
    them); the baseline is held whole."""

    def __init__(self, before: dict[str, Any]) -> None:
        self.old = {result_key(r): r for r in before["results"]}
        self.old_nodes = {n["name"] for n in before["nodes"]}
        self.was_identity = {n["name"]: n.get("identity") for n in before["nodes"]}
        self.baseline_started_at = before.get("started_at")
        self.lists: dict[str, list[dict[str, Any]]] = {"new_failures": [], "fixed": [], "still_failing": []}
        self.new_nodes: set[str] = set()
        self.changed: list[dict[str, Any]] = []

    def add_results(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            prev = self.old.get(result_key(r))
            if r["outcome"] in FAILING:
                if prev is not None and prev["outcome"] in FAILING:
                    self.lists["still_failing"].append(_diff_item(r, prev["outcome"]))
                elif r["node"] in self.old_nodes:
                    self.lists["new_failures"].append(_diff_item(r, prev["outcome"] if prev else "absent"))
            elif prev is not None and prev["outcome"] in FAILING and r["outcome"] in ("passed", "waived"):
                self.lists["fixed"].append(_diff_item(r, prev["outcome"]))

    def add_node(self, n: dict[str, Any]) -> None:
        self.new_nodes.add(n["name"])
        old_id, new_id = self.was_identity.get(n["name"]), n.get("identity")
        if old_id is None or new_id is None:
            return  # a new node, or a record without identities: nothing to compare
        for attr in sorted(set(old_id) | set(new_id)):
            if old_id.get(attr) != new_id.get(attr):
                self.changed.append({"node": n["name"], "attribute": attr, "was": old_id.get(attr), "now": new_id.get(attr)})

    def result(self) -> dict[str, Any]:
        return {
            "baseline_started_at": self.baseline_started_at,
            **self.lists,
            "new_nodes": sorted(self.new_nodes - self.old_nodes),
            "vanished_nodes": sorted(self.old_nodes - self.new_nodes),
            "identity_changes": self.changed,
        }


def _diff_item(r: dict[str, Any], was: str | None = None) -> dict[str, Any]:
    out = {
        "node": r["node"],
        "check": r["check"],
        "subject": r.get("subject") or {},
        "outcome": r["outcome"],
        "severity": r["severity"],
        "message": r["message"],
    }
    if was is not None:
        out["was"] = was
    return out


def write_atomically(path: str | Path, chunks: Iterable[bytes]) -> None:
    """A file written beside its place and renamed into it: an interrupted write leaves no half file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    try:
        with tmp.open("wb") as f:
            for chunk in chunks:
                f.write(chunk)
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)


def diff_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"compared with the run of {d.get('baseline_started_at')}: {len(d['new_failures'])} new failure(s), "
        f"{len(d['fixed'])} fixed, {len(d['still_failing'])} still failing, {len(d['new_nodes'])} new node(s), "
        f"{len(d['vanished_nodes'])} vanished node(s)"
    ]
    for label, key in (("NEW", "new_failures"), ("FIXED", "fixed")):
        for r in d[key]:
            sub = subject_text(r["subject"])
            lines.append(f"  {label:<6} {r['node']} {r['check']}{' ' + sub if sub else ''}: {r['was']} -> {r['outcome']}")
    for n in d["new_nodes"]:
        lines.append(f"  NEW NODE {n}")
    for n in d["vanished_nodes"]:
        lines.append(f"  VANISHED NODE {n}")
    for c in d.get("identity_changes", []):
        lines.append(f"  CHANGED {c['node']} {c['attribute']}: {c['was']} -> {c['now']}")
    return lines


def load_results(path: str | Path) -> dict[str, Any]:
    from conformance.errors import UsageError

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{p}: not a readable results.json: {e}") from None
    return results_from_text(text, str(p))


def results_from_text(text: str, where: str) -> dict[str, Any]:
    """A results document from its JSON text; `where` names it in the error."""
    from conformance.errors import UsageError

    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{where}: not a readable results.json: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != 1 or not isinstance(doc.get("results"), list):
        raise UsageError(f"{where}: not a gpu-node-conformance results.json (schema_version 1)")
    return doc
