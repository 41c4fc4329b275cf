"""Outputs derived from results.json: JUnit per node, Prometheus text format, and run diffs.

They read the results document only, so a live run, a snapshot replay and a re-render agree."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

FAILING = ("failed", "error")


def subject_text(subject: dict[str, Any]) -> str:
    if "endpoint" in subject:
        return f"endpoint={subject['endpoint']}"
    if "pod" in subject:
        return f"{subject.get('namespace', '')}/{subject['pod']}/{subject.get('container', '')}"
    if "gpu" in subject:
        return f"gpu={subject['gpu']}"
    return ""


def result_key(r: dict[str, Any]) -> tuple[str, str, str]:
    return r["node"], r["check"], json.dumps(r.get("subject") or {}, sort_keys=True)


# -- JUnit -------------------------------------------------------------------------------------
# The layout strict CI consumers validate against: the Jenkins xUnit plugin's junit-10.xsd (the family
# pytest's xunit2 follows). There a <testcase> holds only skipped/error/failure/system-out/system-err
# (no <properties>), and <testsuites> has no `skipped` attribute; per-result details therefore travel in
# the testcase's <system-out>, as `key: value` lines, and the node's verdict and profile as testsuite
# properties.
def _case_details(r: dict[str, Any]) -> str:
    lines = [f"{k}: {r[k]}" for k in ("node", "check", "severity", "outcome")]
    sub = subject_text(r.get("subject") or {})
    if sub:
        lines.append(f"subject: {sub}")
    lines += [f"source: {r['source']}", f"message: {r['message']}", *(f"evidence: {e}" for e in r.get("evidence", []))]
    return "\n".join(lines)


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


def _attr(text: str) -> str:
    """An attribute value escaped as ElementTree escapes it (quotes and line breaks as references)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return text.replace("\r", "&#13;").replace("\n", "&#10;").replace("\t", "&#09;")


def _cdata(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _open(name: str, attrs: list[tuple[str, str]]) -> str:
    return "<" + name + "".join(f' {k}="{_attr(v)}"' for k, v in attrs) + ">"


def _tag(name: str, attrs: list[tuple[str, str]], text: str | None = None) -> str:
    """A leaf element: with its text, or empty in ElementTree's short form."""
    return f"{_open(name, attrs)}{_cdata(text)}</{name}>" if text else _open(name, attrs)[:-1] + " />"


def _suite(started_at: str, node: dict[str, Any], rows: list[dict[str, Any]], counts: dict[str, int]) -> str:
    """One <testsuite>, as ElementTree writes it indented at level 1 (written directly: building and
    serialising an element tree cost a quarter of a 10,000-node merge)."""
    i2, i3 = "\n    ", "\n      "
    attrs = [("name", node["name"]), ("timestamp", started_at), *((k, str(v)) for k, v in counts.items())]
    out = [_open("testsuite", attrs), i2, "<properties>"]
    for k in ("verdict", "profile"):
        out += [i3, _tag("property", [("name", k), ("value", str(node.get(k, "")))])]
    out += [i2, "</properties>"]
    for r in rows:
        sub = subject_text(r.get("subject") or {})
        name = r["check"] + (f" [{sub}]" if sub else "")
        out += [i2, _open("testcase", [("classname", node["name"]), ("name", name), ("time", f"{r.get('duration_s', 0):.3f}")])]
        text = "\n".join([r["message"], f"source: {r['source']}", *r.get("evidence", [])])
        if r["outcome"] == "failed":
            out += [i3, _tag("failure", [("message", r["message"][:500]), ("type", r["severity"])], text)]
        elif r["outcome"] == "error":
            out += [i3, _tag("error", [("message", r["message"][:500]), ("type", "error")], text)]
        elif r["outcome"] == "skipped":
            out += [i3, _tag("skipped", [("message", r["message"][:500])])]
        elif r["outcome"] == "waived":
            w = r.get("waiver") or {}
            out += [i3, _tag("skipped", [("message", f"waived until {w.get('expires')}: {w.get('justification')}")])]
        out += [i3, _tag("system-out", [], _case_details(r)), i2, "</testcase>"]
    out.append("\n  </testsuite>")
    return "".join(out)


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
def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kv: Any) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in kv.items()) + "}"


def _epoch(iso: str | None) -> float:
    return datetime.fromisoformat(iso).timestamp() if iso else 0.0


# The series of one run stay bounded at fleet scale: per-result series for at most this many results;
# above it only the results that need attention (failed, error, waived) get one, and the per-check
# outcome counts carry the rest. Worst case: PROM_RESULT_SERIES_MAX (or the failing results) + checks x 5
# outcome counts + one verdict series per node + 3 run series.
PROM_RESULT_SERIES_MAX = 10_000


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
    old = {result_key(r): r for r in before["results"]}
    new = {result_key(r): r for r in after["results"]}
    old_nodes = {n["name"] for n in before["nodes"]}
    new_nodes = {n["name"] for n in after["nodes"]}

    def item(r: dict[str, Any], was: str | None = None) -> dict[str, Any]:
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

    new_failures, fixed, still = [], [], []
    for k, r in new.items():
        prev = old.get(k)
        if r["outcome"] in FAILING:
            if prev is not None and prev["outcome"] in FAILING:
                still.append(item(r, prev["outcome"]))
            elif r["node"] in old_nodes:
                new_failures.append(item(r, prev["outcome"] if prev else "absent"))
        elif prev is not None and prev["outcome"] in FAILING and r["outcome"] in ("passed", "waived"):
            fixed.append(item(r, prev["outcome"]))
    was_identity = {n["name"]: n.get("identity") for n in before["nodes"]}
    changed = []
    for n in after["nodes"]:
        old_id, new_id = was_identity.get(n["name"]), n.get("identity")
        if old_id is None or new_id is None:
            continue  # a new node, or a record without identities: nothing to compare
        for attr in sorted(set(old_id) | set(new_id)):
            if old_id.get(attr) != new_id.get(attr):
                changed.append({"node": n["name"], "attribute": attr, "was": old_id.get(attr), "now": new_id.get(attr)})
    return {
        "baseline_started_at": before.get("started_at"),
        "new_failures": new_failures,
        "fixed": fixed,
        "still_failing": still,
        "new_nodes": sorted(new_nodes - old_nodes),
        "vanished_nodes": sorted(old_nodes - new_nodes),
        "identity_changes": changed,
    }


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
