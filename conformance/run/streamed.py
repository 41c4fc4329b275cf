"""A replay streamed node by node, for merges and re-renders of any fleet size: the nodes wait in a
NodeSpool, and one pass writes results.json, junit.xml and the Prometheus text while it judges the drift
check and gathers what the report shows (the fleet view's counts, bounded lists). Memory holds the spool's
index, the nodes' identity records (the drift check compares them across a pool) and those bounded lists,
never the results: at 50,000 nodes x 52 checks that is the difference between 7 GiB and well under 1.

What each node gets is what the in-memory replay gives it, through the same code: its summary from
Run.node_summary, the drift check from conformance.checks.fleet_drift, the files from the writers of
conformance.outputs.streaming; tests/test_replay_equals_live.py holds them to the live run's files."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from conformance.checks import REGISTRY, selects
from conformance.checks.fleet_drift import FLEET_CHECK, DriftJudge
from conformance.config.fleet import group_label
from conformance.config.verdict import attention_key
from conformance.outputs import FAILING, Diff, write_atomically, write_json_document
from conformance.outputs.fleet_view import (
    MATRIX_MAX_NODES,
    TABLE_BYTES_MAX,
    TABLE_NODES_MAX,
    VERDICT_ROWS_MAX,
    FleetSummary,
    Smallest,
    drift_section,
    row_bytes,
)
from conformance.outputs.markdown_summary import Tally, tally_markdown
from conformance.outputs.replay import NodeReplayItem, result_id, safe_id
from conformance.outputs.streaming import JsonItems, JunitSuites, PromSeries
from conformance.run.merging import Ticker
from conformance.run.node_spool import NodeSpool

if TYPE_CHECKING:
    from conformance.run.ledger import Ledger


class StreamedRun(Protocol):
    """What the streamed pass needs of the run (session.Run provides it). A protocol of this floor's, so that the
    run's parts never import the run composed above them (issue 60)."""

    ledger: Ledger

    def fleet_setting(self, node: str, key: str) -> Any: ...

    def node_summary(self, node: str, rows: list[dict[str, Any]]) -> dict[str, Any]: ...

    def forget(self, node: str) -> None: ...

    def document_head(self) -> dict[str, Any]: ...

    def document_tail(self, diff: Any) -> dict[str, Any]: ...


FIGURES_MAX = 50  # bandwidth heat maps, and latency histograms, drawn
FIGURE_CHECKS = {"GPU-H2D-NUMA-MATRIX": "bandwidth", "LATENCY-JITTER": "latency"}


@dataclass
class Outputs:
    """Where the streamed pass writes, and what it is asked to judge."""

    results: str | None
    junit: str | None
    prometheus: str | None
    select: list[str]
    group_by: str | None
    baseline: dict[str, Any] | None
    judge_fleet: bool


@dataclass
class Shown:
    """What the page and the command line show of a streamed replay: bounded, whatever the fleet's size."""

    doc: dict[str, Any]  # the metadata, the nodes the page lists, the results it draws
    fleet: FleetSummary | None
    table: list[tuple[str, list[dict[str, Any]], int]] = field(default_factory=list)  # (node, failing, results)
    table_bytes: int = 0  # what the table's rows add to the page, about (fleet_view.row_bytes)
    left_out: dict[str, int] = field(default_factory=dict)
    verdicts: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # every result's outcome, counted (the page holds few)
    figures: Counter[str] = field(default_factory=Counter)  # bandwidth and latency figures seen
    markdown: str | None = None  # summary.md, made in the pass that wrote results.json


def stream(run: StreamedRun, spool: NodeSpool, out: Outputs, ticker: Ticker | None = None) -> Shown:
    """The one pass: every node's summary and results to the files, in the merged order; the drift check's
    results after them, pool by pool (as a replay's Run.judge_fleet appends them)."""
    names = spool.names()
    lights = [spool.entries[n].light for n in names]
    judge = DriftJudge(lights, run.fleet_setting, out.group_by) if out.judge_fleet else None
    small = len(names) <= MATRIX_MAX_NODES
    fleet = None if small else FleetSummary(group_label(lights, out.group_by), drift_section(lights, out.group_by))
    nodes, checked, drifted = JsonItems(), JsonItems(), JsonItems()
    junit, prom = JunitSuites(), PromSeries()
    diff = Diff(out.baseline) if out.baseline is not None else None
    shown = Shown({}, fleet)
    tally = Tally()
    # the node summaries the page keeps: a small fleet's every one in its order, else the first in attention order
    listed = Smallest(len(names) if small else VERDICT_ROWS_MAX)
    drawn: list[dict[str, Any]] = []
    used: set[str] = set()
    profiles: set[str] = set()
    narrowed = 0
    started = run.ledger.started_at
    for i, name in enumerate(names):
        if ticker is not None and ticker.due():
            ticker.say(f"writing the reports: {i} of {len(names)} nodes")
        rows = [r for r in spool.results_of(name) if r["check"] != FLEET_CHECK.id and selects(out.select, r["check"])]
        for r in rows:
            r.setdefault("test", result_id(r))  # a live run's results carry their own test id
        every = rows + ([judge.result(name)] if judge is not None else [])
        run.ledger.replayed_nodes = {name: spool.record(name)}
        summary = run.node_summary(name, every)
        run.forget(name)
        nodes.add_item(summary)
        tally.add("node", summary)
        for r in rows:
            checked.add_item(r)
            tally.add("result", r)
        junit.add(summary, every, started)
        prom.add_results(rows)
        prom.add_node(summary)
        if diff is not None:
            diff.add_results(rows)
            diff.add_node(summary)
        used.update(r["check"] for r in every)
        profiles.add(str(summary.get("profile", "-")))
        if summary.get("not_judged"):
            narrowed += 1
        shown.verdicts[summary["verdict"]] += 1
        shown.outcomes.update(summary["counts"])
        if fleet is not None:
            fleet.add(summary, every)
        _keep(shown, summary, every, listed, drawn, small)
    for name in judge.order() if judge is not None else []:
        r = judge.result(name)
        drifted.add_item(r)
        tally.add("result", r)
        prom.add_results([r])
        if diff is not None:
            diff.add_results([r])
    run.ledger.replayed_nodes = {}
    doc = run.document_head()
    doc.update(nodes=[], checks={cid: REGISTRY[cid].to_json() for cid in sorted(used) if cid in REGISTRY})
    doc.update(run.document_tail(diff.result() if diff is not None else None))
    doc["results"] = []
    if out.results:
        write_json_document(out.results, doc, {"nodes": [nodes], "results": [checked, drifted]})
        tally.add("meta", {k: v for k, v in doc.items() if k not in ("nodes", "results")})
        shown.markdown = tally_markdown(tally)
    if out.junit:
        write_atomically(out.junit, junit.chunks())
    if out.prometheus:
        text = prom.chunks(doc["started_at"], doc["finished_at"], doc["complete"])
        write_atomically(out.prometheus, (t.encode("utf-8") for t in text))
    for spool_ in (nodes, checked, drifted):
        spool_.close()
    if ticker is not None:
        ticker.say(f"writing the reports: {len(names)} of {len(names)} nodes", last=True)
    kept = listed.kept()
    not_accepted = sum(k for v, k in shown.verdicts.items() if v != "accepted")
    if not small and not_accepted > len(kept):
        shown.left_out["verdict_rows"] = not_accepted - len(kept)
    # the page keeps a bounded part of the nodes and results; its scope, title and totals are the whole run's
    totals = {"nodes": sum(shown.verdicts.values()), "verdicts": dict(shown.verdicts), "checks": sorted(used),
              "profiles": sorted(profiles), "narrowed": narrowed}  # fmt: skip
    shown.doc = dict(doc, nodes=kept, results=drawn, run_totals=totals)
    if "table_rows" in shown.left_out:
        shown.left_out["table_shown"] = len(shown.table)
    return shown


def _keep(shown: Shown, summary: dict[str, Any], rows: list[dict[str, Any]], listed: Smallest, drawn: list, small: bool) -> None:
    """The bounded part of a node the page and the command line show."""
    left = shown.left_out
    if small or summary["verdict"] != "accepted":
        listed.add(() if small else attention_key(summary), summary)
    failing = [r for r in rows if r["outcome"] in FAILING]
    if failing:
        if len(shown.table) < TABLE_NODES_MAX and shown.table_bytes < TABLE_BYTES_MAX:
            shown.table.append((summary["name"], failing, len(rows)))
            shown.table_bytes += sum(row_bytes(r) for r in failing)
        else:
            left["table_rows"] = left.get("table_rows", 0) + 1
            left["table_results"] = left.get("table_results", 0) + len(failing)
    for r in rows:
        if small:
            drawn.append(r)  # the matrix shows every result of a small fleet
        elif r["check"] in FIGURE_CHECKS and r.get("metrics"):
            kind = FIGURE_CHECKS[r["check"]]
            shown.figures[kind] += 1
            if shown.figures[kind] <= FIGURES_MAX:
                drawn.append(r)
            else:
                left[kind] = left.get(kind, 0) + 1


def items(session: pytest.Session, shown: Shown) -> list[pytest.Item]:
    """The report session's items: one per node of the table (its failing results in the row's extras)."""
    return [NodeReplayItem.from_parent(session, name=safe_id(n), results=rows, total=total) for n, rows, total in shown.table]


def summary_for_cli(shown: Shown) -> dict[str, Any]:
    """What the command line prints (the verdict counts, the first nodes not accepted), without reading
    results.json back."""
    doc = shown.doc
    return {
        "nodes": doc["nodes"],
        "verdicts": dict(shown.verdicts),
        "node_count": sum(shown.verdicts.values()),
        "waivers": doc.get("waivers"),
        "diff": doc.get("diff"),
        "complete": doc.get("complete", True),
        "api_access": doc.get("api_access"),
        "markdown": shown.markdown,
    }
