"""pytest-html hooks: verdicts and the node x check matrix on top, check columns, evidence extras.

pytest-html 4 inserts cells as HTML in the browser: every value from a node is escaped here."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pytest

from conformance import __version__
from conformance.checks import REGISTRY
from conformance.config.check_contract import BLOCKING
from conformance.config.fleet import FLEET_CHECK_ID
from conformance.config.verdict import ATTENTION_ORDER, attention_key, verdict_counts, why_not_accepted
from conformance.outputs.findings import anchor, check_anchor, findings_section, node_anchor
from conformance.outputs.fleet_view import (
    MATRIX_MAX_NODES,
    TABLE_NODES_MAX,
    VERDICT_ROWS_MAX,
    FleetSummary,
    drift_section,
    e,
    fleet_view,
)
from conformance.outputs.palette import MUTED, OUTCOME_COLOURS, VERDICT_COLOURS
from conformance.outputs.svg import heatmap, histogram

SYMBOLS = {"passed": "✓", "failed": "✗", "error": "!", "skipped": "–", "waived": "w", None: ""}
_STYLE = """<style>
.gnc table{border-collapse:collapse;margin:6px 0 14px}
.gnc td,.gnc th{border:1px solid #ccc;padding:2px 6px;font-size:12px}
.gnc .verdict{color:#fff;font-weight:bold;padding:1px 6px;border-radius:3px}
.gnc .gnc-interrupted{border:2px solid #b35900;background:#fff4e5;padding:6px 10px;font-size:14px}
.gnc .m td.c{width:18px;height:18px;text-align:center;color:#fff;padding:0;font-size:11px}
.gnc .m th.r{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;white-space:nowrap;max-height:190px}
.gnc .fam{text-align:center;background:#f5f5f5}
.gnc pre{white-space:pre-wrap;margin:2px 0}
.gnc .m td.c{cursor:pointer}
/* the page: what was judged and the verdicts first, the runner's environment last */
body{display:flex;flex-direction:column;color:#222}
body>#environment-header,body>#environment{order:90}
body>footer{order:99}
#results-table{color:#222}
a{color:#0d47a1}
p.filter{color:#222}
.filters button,.collapse button{color:#0d47a1;text-decoration:underline}
</style>
<style media="print">
@page{size:A4 landscape;margin:10mm}
body{min-width:0;font-size:10px}
.controls,.summary__reload,p.filter,.collapse,#show_all_details,#hide_all_details,.logexpander,.media,
.gnc-search,.sortable::after{display:none!important}
tbody.results-table-row,.gnc tr,.gnc section>table{break-inside:avoid}
.failed .extras-row,.error .extras-row{display:table-row!important}
.gnc .verdict,.gnc .m td.c{color:#000!important;background:none!important;border:1px solid #000}
.gnc .m td.c{width:11px;height:11px;font-size:8px}
.gnc .m th.r{max-height:120px;font-size:8px}
</style>
<style>
/* pytest's item count: the scope section states the tool's own */
.run-count{display:none}
.gnc .mwrap{overflow:auto;max-height:85vh;max-width:100%}
.gnc table.m thead tr.ids th{position:sticky;top:0;background:#fff;z-index:2}
.gnc table.m tbody th{position:sticky;left:0;background:#fff;z-index:1;font-weight:normal;text-align:left;font-size:12px}
.gnc table.m td.c a{color:#fff;text-decoration:none;display:block}
.gnc table.m td.b,.gnc span.b{box-shadow:inset 0 0 0 2px #000;font-weight:bold}
.gnc tr:target,.gnc tr:has(:target){outline:3px solid #1565c0}
.gnc .sr{position:absolute;left:-9999px}
.gnc td.blocks{font-weight:bold}
.gnc table.findings td{vertical-align:top}
.gnc .gnc-filters label{margin-right:8px}
@media print{.gnc .mwrap{overflow:visible;max-height:none}.gnc-filters,#gnc-shown,.gnc a.pl,#results-table,
#gnc-find,#gnc-found{display:none!important}.gnc table.m td.c a{color:#000!important}.gnc a{color:#000}
.gnc .findings tr{break-inside:avoid}}
tbody.gnc-target td{outline:2px solid #1565c0}
.gnc .fleet-total .verdict{font-size:15px;margin-right:6px}
.gnc table.fleet td.n{text-align:right;min-width:28px}
.gnc table.fleet td.hot{background:#ffcdd2}
</style>
<script>
// A click on a matrix cell shows its result row: re-enable the outcome filter that hides it,
// expand it and scroll to it. Rows are tbody elements whose id is the pytest node id.
document.addEventListener("click", function (ev) {
  var cell = ev.target.closest && ev.target.closest(".gnc table.m td.c");
  if (!cell) return;
  var test = cell.getAttribute("data-test");
  if (!test) {
    var head = cell.closest("table").querySelector("tr.ids").children[cell.cellIndex];
    var tpl = head && head.getAttribute("data-tpl");
    if (!tpl) return;
    test = tpl.replace("{node}", cell.parentNode.getAttribute("data-node"));
  }
  function find() {
    var rows = document.querySelectorAll("tbody.results-table-row");
    for (var i = 0; i < rows.length; i++) {
      var id = rows[i].id;  // "<node id>" for the call phase, "<node id>::setup" for a setup error
      if (id === test || id.indexOf(test + "::") === 0) return rows[i];
    }
    return null;
  }
  function reveal(row) {
    // expand without going through the table's own handlers, which may re-render it
    var extras = row.querySelector("tr.extras-row");
    if (extras) extras.classList.remove("hidden");
    var result = row.querySelector("td.col-result");
    if (result) result.classList.remove("collapsed");
    document.querySelectorAll("tbody.gnc-target").forEach(function (r) { r.classList.remove("gnc-target"); });
    row.classList.add("gnc-target");
    row.scrollIntoView({block: "center"});
  }
  if (!find()) {
    // filtered out: turn the outcome filters back on (the table re-renders)
    var boxes = document.querySelectorAll("input.filter:not(:checked)");
    for (var j = 0; j < boxes.length; j++) boxes[j].click();
  }
  // reveal now and again for a moment, in case the table re-renders after this click
  var ticks = 0;
  (function again() {
    var r = find();
    if (r && !r.classList.contains("gnc-target")) reveal(r);
    if (++ticks < 20) setTimeout(again, 50);
  })();
});
</script>
<script>
// pytest-html's outcome filters: one labelled group of labelled checkboxes
document.addEventListener("DOMContentLoaded", function () {
  var group = document.querySelector(".controls .filters");
  if (group) { group.setAttribute("role", "group"); group.setAttribute("aria-label", "Show results by outcome"); }
  document.querySelectorAll("input.filter[data-test-result]").forEach(function (box) {
    box.setAttribute("aria-label", "show " + box.getAttribute("data-test-result") + " results");
  });
  // pytest-html's row expanders (a row's result cell) answer clicks only: reachable by Tab, opened with Enter
  // or Space. pytest-html redraws its whole table on every toggle, filter or sort: the cells are marked again.
  function focusable() {
    document.querySelectorAll("#results-table tr.collapsible > td.col-result:not([tabindex])").forEach(function (td) {
      td.setAttribute("tabindex", "0"); td.setAttribute("role", "button");
      td.setAttribute("aria-label", "show or hide the details of this " + td.textContent.toLowerCase() + " result");
    });
  }
  focusable();
  new MutationObserver(focusable).observe(document.body, {childList: true, subtree: true});
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if ((ev.key === "Enter" || ev.key === " ") && t.matches && t.matches("#results-table tr.collapsible > td.col-result")) {
      ev.preventDefault(); t.click();
    }
  });
});
</script>"""
# one palette for the page (conformance.outputs.palette): the matrix, the badges and pytest-html's own table
_STYLE = _STYLE.replace(
    "</style>\n<script>",
    "".join(f".gnc .v-{v}{{background:{c}}}\n" for v, c in VERDICT_COLOURS.items())
    + "".join(f".gnc .o-{o}{{background:{c}}}\n" for o, c in OUTCOME_COLOURS.items())
    + "".join(f"span.{o},.{o} .col-result{{color:{c}}}\n" for o, c in OUTCOME_COLOURS.items() if o != "none")
    + "".join(f"span.{o},.{o} .col-result{{color:{MUTED}}}\n" for o in ("xfailed", "xpassed", "rerun"))  # never used here
    + "</style>\n<script>",
)


_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG[:] = [config]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The environment table's nested values (packages, plugins) as one line each: pytest-html 4.2 writes a
    list of values as `<ul>…<ul>` (an unclosed list inside a list), which no reader parses as a list."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    metadata = session.config.stash.get(metadata_key, None)
    if metadata is None:
        return
    for key, value in list(metadata.items()):
        if isinstance(value, dict):
            metadata[key] = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list | tuple):
            metadata[key] = ", ".join(str(v) for v in value)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The page's language, which pytest-html's template leaves out (screen readers and hyphenation use it)."""
    path = getattr(config.option, "htmlpath", None)
    if not path:
        return
    try:
        with open(path, "r+b") as f:
            head = f.read(64)
            if b"<html>" not in head:
                return
            rest = f.read()
            f.seek(0)
            f.write(head.replace(b"<html>", b'<html lang="en">', 1) + rest)
    except OSError:
        return  # pytest-html reported its own failure to write the page


def _passed_rows() -> bool:
    if not _CONFIG:
        return True
    mode = _CONFIG[0].getoption("conformance_html_passed")
    if mode != "auto":
        return mode == "rows"
    session_items = getattr(_CONFIG[0], "_gnc_items", None)
    return session_items is None or session_items <= PASSED_ROWS_LIMIT


def pytest_collection_finish(session: pytest.Session) -> None:
    # results, not items: a live run's node item holds a node's checks (conformance.run.check_items)
    session.config._gnc_items = sum(getattr(i, "result_count", 1) for i in session.items)  # type: ignore[attr-defined]
    nodes = {n for i in session.items for n in [_node_of(i)] if n is not None}
    _TABLE.reset(bounded=len(nodes) > MATRIX_MAX_NODES)


def _node_of(item: pytest.Item) -> str | None:
    checks = getattr(item, "checks", None)  # a live run's node item (conformance.run.check_items)
    first = checks[0] if checks else item
    callspec = getattr(first, "callspec", None)
    return callspec.params.get("node") if callspec is not None else None


# failing results given rows on a live run's page above MATRIX_MAX_NODES nodes (a node's are all shown or none)
TABLE_RESULTS_MAX = 2000


class TableBudget:
    """A page above MATRIX_MAX_NODES nodes gives result rows to the first nodes with failing results only (up to
    TABLE_NODES_MAX nodes and about TABLE_RESULTS_MAX results), as a merge's page is bounded
    (conformance.run.streamed): a live run over 1,082 nodes wrote a 41 MB page of every failing row with its
    evidence. What it leaves out is counted for the page's note."""

    def __init__(self) -> None:
        self.reset(bounded=False)

    def reset(self, bounded: bool) -> None:
        self.bounded = bounded
        self.admitted: set[str] = set()
        self.left_nodes: set[str] = set()
        self.left_results: set[str] = set()
        self.shown: set[str] = set()

    def admits(self, result: dict[str, Any]) -> bool:
        if not self.bounded:
            return True
        node = str(result.get("node") or "")
        if not node:
            return True  # a report of no node's check (a collection or internal error): always shown
        key = f"{node}\0{result.get('test') or result.get('check')}\0{result.get('subject')}"
        if node in self.admitted or (len(self.admitted) < TABLE_NODES_MAX and len(self.shown) < TABLE_RESULTS_MAX):
            self.admitted.add(node)
            self.shown.add(key)  # a set: the table and pytest's teardown both ask of one result
            return True
        self.left_nodes.add(node)
        self.left_results.add(key)
        return False

    def left_out(self) -> dict[str, int]:
        if not self.left_nodes:
            return {}
        return {"table_rows": len(self.left_nodes), "table_results": len(self.left_results), "table_shown": len(self.admitted)}


_TABLE = TableBudget()


_REPORT: list[Any] = []  # pytest-html's report object; it asks for the title at session start, before any verdict


def pytest_html_report_title(report: Any) -> None:
    report.title = "GPU node conformance report"
    _REPORT[:] = [report]


def dated_title(doc: dict[str, Any]) -> str:
    """The tab's title carries the run's date and its verdict counts, so a tab or a saved file says what it is."""
    title = "GPU node conformance report"
    whole = doc.get("run_totals")  # a streamed page: the whole run's counts, not the kept nodes'
    counts = Counter(whole["verdicts"]) if whole else Counter(n["verdict"] for n in doc.get("nodes") or [])
    shown = verdict_counts(counts)
    day = str(doc.get("started_at") or "")[:10]
    cut = "" if doc.get("complete", True) else " (INTERRUPTED)"
    return " ".join(p for p in (title, day) if p) + cut + (f": {shown}" if shown else "")


@dataclass(frozen=True)
class ReportView:
    """What the report's summary shows: the run's results document (as results.json holds it), and the two
    things about the run that the document does not say."""

    doc: dict[str, Any]
    snapshot_dir: str | None = None  # a replay of this snapshot folder
    wrote: bool = False  # the run created acceptance pods
    # a merge streamed node by node (conformance.run.streamed): `doc` holds its first non-accepted nodes and
    # the results with figures only; these say what the page leaves to results.json and junit.xml
    fleet: FleetSummary | None = None
    left_out: dict[str, int] | None = None
    outcomes: Counter[str] | None = None  # every result's outcome, where `doc` holds only some results

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.doc["results"]

    @property
    def node_names(self) -> list[str]:
        return [n["name"] for n in self.doc["nodes"]]


# The run puts a function here that gives the view when the report is written (plugin.py); outputs never
# reach into the run itself.
VIEW_KEY = pytest.StashKey[Callable[[], ReportView]]()


def _view(session: pytest.Session) -> ReportView | None:
    make = session.config.stash.get(VIEW_KEY, None)
    return make() if make is not None else None


SCOPE_LISTED = 50  # nodes not accepted listed by name in the scope section (the verdict table has them all)


def _seconds(start: Any, end: Any) -> str:
    try:
        took = datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))
    except (TypeError, ValueError):
        return "not recorded"
    return f"{took.total_seconds():.0f} s"


def _when(doc: dict[str, Any]) -> str:
    """When the run was: a live run's start and duration; a replay's or merge's audits (the first start, the last
    finish) and how long the replay itself took (the span from the oldest audit to the merge is no duration)."""
    audits = doc.get("audits")
    if isinstance(audits, dict):
        return (
            f"audits ran from {e(audits.get('started_at') or '-')} to {e(audits.get('finished_at') or '-')}; "
            f"merged {e(doc.get('finished_at') or '-')} in {_seconds(doc.get('replayed_at'), doc.get('finished_at'))}"
        )
    return f"started {e(doc.get('started_at') or '-')}, took {_seconds(doc.get('started_at'), doc.get('finished_at'))}"


INTERRUPTED_BANNER = (
    "<p class='gnc-interrupted' role='alert'><b>This run was interrupted</b> (Ctrl-C or SIGTERM): the nodes it did not "
    "finish collecting are incomplete, and no verdict below covers what was not judged.</p>"
)


def scope_section(run: ReportView) -> str:
    """What was judged, first: the totals, the nodes not accepted and why, the profiles, how many checks out of how
    many, complete or interrupted, the tool version, inventory, start and duration."""
    doc, nodes = run.doc, run.doc["nodes"]
    whole = doc.get("run_totals")  # a streamed page keeps some nodes and results: the scope is the whole run's
    counts = Counter(whole["verdicts"]) if whole else Counter(n["verdict"] for n in nodes)
    total = whole["nodes"] if whole else doc.get("node_count", len(nodes))
    totals = " ".join(f"<span class='verdict v-{v}'>{counts[v]} {v}</span>" for v in ATTENTION_ORDER)
    judged = set(whole["checks"]) if whole else {r["check"] for r in run.results}
    known = {c for c, spec in REGISTRY.items() if spec.origin == "built-in"}
    checks = f"{len(judged & known)} of the {len(known)} built-in checks" + (
        f" and {len(judged - known)} site check(s)" if judged - known else ""
    )
    narrowed = [n for n in nodes if n.get("not_judged")]
    narrowed_count = whole["narrowed"] if whole else len(narrowed)
    state = (
        "<b>interrupted (Ctrl-C or SIGTERM): what was not collected is incomplete</b>" if not doc.get("complete", True)
        else "complete"
    )  # fmt: skip
    facts = [
        f"profile(s): {e(', '.join(whole['profiles'] if whole else sorted({str(n.get('profile', '-')) for n in nodes})) or '-')}",
        f"checks judged: {checks}",
        f"run: {state}",
        f"nodes with checks that block not judged: {narrowed_count}"
        if narrowed_count
        else "every node judged on every check that blocks",
        f"tool version {e(__version__)}",
        f"inventory {e(doc.get('inventory') or '-')}",
        _when(doc),
    ]
    bad = sorted((n for n in nodes if n["verdict"] != "accepted"), key=attention_key)[:SCOPE_LISTED]
    items = "".join(
        f"<li><a href='#node-{e(n['name'])}'>{e(n['name'])}</a> <span class='verdict v-{e(n['verdict'])}'>"
        f"{e(n['verdict'])}</span> {e(why_not_accepted(n))}</li>"
        for n in bad
    )
    listed = f"<p>Not accepted ({total - counts['accepted']} of {total}):</p><ul>{items}</ul>" if bad else ""
    return (
        f"<section aria-label='Scope and verdicts' id='gnc-scope'><h2>Scope and verdicts</h2>"
        f"{INTERRUPTED_BANNER if not doc.get('complete', True) else ''}"
        f"<p class='gnc-totals'>{total} node(s): {totals}</p>{listed}<p>{'; '.join(facts)}.</p></section>"
    )


WROTE = "; <b>this run created acceptance pods (the only write the suite makes to a cluster)</b>"


def verdict_table(run: ReportView, summaries: list[dict[str, Any]]) -> str:
    rows = []
    fleet = run.fleet is not None or len(summaries) > MATRIX_MAX_NODES
    for n in sorted(summaries, key=attention_key):
        if fleet and n["verdict"] == "accepted":
            continue  # at fleet scale the fleet view lists every node; here only those that need attention
        c = n["counts"]
        col = n.get("collection") or {}
        why = why_not_accepted(n)
        notes = list(col.get("notes", []))
        if n.get("discovered"):
            notes.append(f"found through the Kubernetes API: {n['discovered']}")
        if n.get("kubelet_config_source"):
            notes.append(f"kubelet settings from {n['kubelet_config_source']}")
        made = n.get("acceptance_pod")
        if made:
            if made.get("pod"):
                state = "created and deleted" if made.get("deleted") else "created, NOT deleted"
                notes.append(f"acceptance pod {made['pod']} {state}" + (f" ({made['error']})" if made.get("error") else ""))
                if made.get("sizing"):
                    notes.append(f"acceptance pod sized {made['sizing']}")
            else:
                notes.append(f"acceptance pod not created: {made.get('error')}")
        why = "; ".join([why or "", *notes]).strip("; ")
        anchor = "" if fleet else f" id='node-{e(n['name'])}'"  # at fleet scale the fleet view holds the anchor
        rows.append(
            f"<tr{anchor}><td><a href='#node-{e(n['name'])}'>{e(n['name'])}</a></td><td><span class='verdict' style='background:"
            f"{VERDICT_COLOURS.get(n['verdict'], '#999')}'>{e(n['verdict'])}</span></td><td>{e(n['profile'])}</td>"
            f"<td>{c['passed']}</td><td>{c['failed']}</td><td>{c['error']}</td><td>{c['skipped']}</td>"
            f"<td>{c['waived']}</td><td>{e(why)}</td></tr>"
        )
    scope = f" Showing the {len(rows)} nodes that were not accepted; the fleet overview counts all." if fleet else ""
    more = (run.left_out or {}).get("verdict_rows", 0)
    if fleet and len(rows) > VERDICT_ROWS_MAX:  # a live run's page, bounded as a merge's is
        more, rows = more + len(rows) - VERDICT_ROWS_MAX, rows[:VERDICT_ROWS_MAX]
    if more:
        scope = f" Showing the first {len(rows)} of {len(rows) + more} nodes that were not accepted; results.json lists all."
    return (
        "<h2>Node verdicts</h2><p>A node is <b>accepted</b> when every check that blocks (critical or high) was judged "
        "on it and none failed or errored."
        f"{scope}"
        f" Tool version {e(__version__)}; inventory {e(run.doc['inventory'])}; started {e(run.doc['started_at'])}"
        f"{'; snapshot replay from ' + e(run.snapshot_dir) if run.snapshot_dir else ''}"
        f"{'; <b>run interrupted: results incomplete</b>' if not run.doc['complete'] else ''}"
        f"{WROTE if run.wrote else ''}.</p>"
        f"{api_access(run.doc.get('api_access') or [])}"
        "<table><tr><th>node</th><th>verdict</th><th>profile</th><th>passed</th><th>failed</th><th>error</th>"
        f"<th>skipped</th><th>waived</th><th>blocking checks / reason</th></tr>{''.join(rows)}</table>"
    )


def api_access(lines: list[str]) -> str:
    """The Kubernetes API grants the run relied on; a broad grant (nodes/proxy) stands out."""
    if not lines:
        return ""
    items = "".join(f"<li>{'<b>' + e(x) + '</b>' if 'nodes/proxy' in x else e(x)}</li>" for x in lines)
    return f"<p>Kubernetes API access of this run (as the API server answered for the suite's identity):</p><ul>{items}</ul>"


def waivers_and_diff(run: ReportView) -> str:
    parts = []
    w = run.doc.get("waivers")
    if w is not None:
        unused = "".join(
            f"<li>#{x['index']} {e(x['check'])} on {e(x['nodes'])} (expires {e(x['expires'])}): {e(x['justification'])}</li>"
            for x in w["unused"]
        )
        parts.append(
            f"<p>Waivers: {w['count']} from {e(w['file'])}; matching nothing: {len(w['unused'])}</p>"
            + (f"<ul>{unused}</ul>" if unused else "")
        )
    if run.doc.get("diff") is not None:
        d = run.doc["diff"]
        rows = "".join(
            f"<tr><td>{label}</td><td>{e(r['node'])}</td><td>{e(r['check'])}</td><td>{e(r['was'])} &rarr; "
            f"{e(r['outcome'])}</td><td>{e(r['message'][:200])}</td></tr>"
            for label, key in (("new failure", "new_failures"), ("fixed", "fixed"))
            for r in d[key]
        )
        nodes = "".join(f"<li>new node {e(n)}</li>" for n in d["new_nodes"]) + "".join(
            f"<li>vanished node {e(n)}</li>" for n in d["vanished_nodes"]
        )
        parts.append(
            f"<h2>Changes since the baseline run of {e(d.get('baseline_started_at'))}</h2><p>{len(d['new_failures'])} new "
            f"failure(s), {len(d['fixed'])} fixed, {len(d['still_failing'])} still failing, {len(d['new_nodes'])} new "
            f"node(s), {len(d['vanished_nodes'])} vanished node(s).</p>"
            + (
                f"<table><tr><th></th><th>node</th><th>check</th><th>outcome</th><th>message</th></tr>{rows}</table>"
                if rows
                else ""
            )
            + (f"<ul>{nodes}</ul>" if nodes else "")
        )
    return "".join(parts)


def matrix(run: ReportView, linked: set[str] | None = None) -> str:
    """Nodes down, check ids across (grouped by family), each cell coloured by outcome, its severity marked (an
    outlined cell blocks: critical or high), each finding a link to its row (`#NODE/CHECK`: the browser's history
    and the keyboard reach it); the header row and the node column stay in view while scrolling; checks skipped on
    every node are named once instead of as empty columns."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    order = {"error": 4, "failed": 3, "waived": 2, "passed": 1, "skipped": 0}
    for r in run.results:
        key = (r["node"], r["check"])
        if key not in cells or order[r["outcome"]] > order[cells[key]["outcome"]]:
            cells[key] = r
    every = sorted({r["check"] for r in run.results}, key=lambda c: (REGISTRY[c].family, c) if c in REGISTRY else ("", c))
    skipped_everywhere: dict[str, str] = {}  # check -> the reason of its first skip, while it skips everywhere
    ran: set[str] = set()
    for (_, c), r in cells.items():
        if r["outcome"] != "skipped":
            ran.add(c)
        else:
            skipped_everywhere.setdefault(c, r["message"])
    skipped_everywhere = {c: why for c, why in skipped_everywhere.items() if c not in ran}
    ids = [c for c in every if c not in skipped_everywhere]
    if not every:
        return ""
    linked = linked or set()
    fams: list[tuple[str, int]] = []
    for c in ids:
        fam = REGISTRY[c].family if c in REGISTRY else "?"
        if fams and fams[-1][0] == fam:
            fams[-1] = (fam, fams[-1][1] + 1)
        else:
            fams.append((fam, 1))
    head1 = "".join(f"<th class='fam' colspan='{n}'>{e(f)}</th>" for f, n in fams)
    # A passed or skipped cell has no row of its own; a click finds its pytest-html row from its test id. Where a
    # column's ids differ only by node name, the column carries the pattern once (data-tpl) instead of every cell.
    patterns: dict[str, set[str]] = defaultdict(set)
    for (node, c), r in cells.items():  # one pass over the cells, not one per column
        patterns[c].add((r.get("test") or "").replace(node, "{node}", 1))
    templates = {c: next(iter(p)) for c, p in patterns.items() if len(p) == 1 and c in ids}
    head2 = "".join(
        f"<th scope='col' class='r' id='{e(check_anchor(c))}' title='{e(REGISTRY[c].title if c in REGISTRY else c)}'"
        + (f" data-tpl='{e(templates[c])}'" if c in templates else "")
        + f">{_check_head(c)}</th>"
        for c in ids
    )
    body = []
    for node in run.node_names:
        tds = []
        for c in ids:
            r = cells.get((node, c))
            o = r["outcome"] if r else None
            sev = r["severity"] if r else ""
            blocks = " b" if sev in BLOCKING and o in ("failed", "error") else ""
            attrs = f" class='c o-{o or 'none'}{blocks}'"
            if o != "passed":
                tip = f"{node} {c}: {o or 'not run'}" + (f" ({sev})" if r else "")
                tip += f" - {r['message']}" if r and r["message"] else ""
                attrs += f" title='{e(tip[:300])}'"
            target = anchor(node, c)
            if target in linked:
                tds.append(f"<td{attrs}><a href='#{e(target)}' aria-label='{e(target)}: {e(o)}, {e(sev)}'>{SYMBOLS[o]}</a></td>")
                continue
            if c == FLEET_CHECK_ID and r:
                tds.append(f"<td{attrs}><a href='#gnc-drift' aria-label='{e(target)}: {e(o)}'>{SYMBOLS[o]}</a></td>")
                continue
            if r and c not in templates:
                attrs += f" data-test='{e(r.get('test', ''))}'"
            tds.append(f"<td{attrs}>{SYMBOLS[o]}</td>")
        head = f"<th scope='row'><a href='#{e(node_anchor(node))}'>{e(node)}</a></th>"
        body.append(f"<tr data-node='{e(node)}'>{head}{''.join(tds)}</tr>")
    legend = " ".join(
        f"<span class='verdict o-{o}'>{SYMBOLS[o]} {o}</span>" for o in ("passed", "failed", "error", "skipped", "waived")
    )
    folded = ""
    if skipped_everywhere:
        folded = (
            "<p>Skipped on every node (no column): "
            + "; ".join(
                f"<span id='{e(check_anchor(c))}'>{e(c)}</span> ({e(why[:120])})" for c, why in skipped_everywhere.items()
            )
            + ".</p>"
        )
    return (
        f"<h2>Node x check matrix</h2><p>{legend}; <span class='verdict o-failed b'>✗</span> outlined: a failure or error "
        "that blocks (critical or high severity). Hover a cell for its message; a finding's cell links to its row.</p>"
        f"{folded}<div class='mwrap' tabindex='0' role='region' aria-label='Node x check matrix'><table class='m'>"
        f"<thead><tr><th></th>{head1}</tr><tr class='ids'><th scope='col'>node</th>{head2}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _check_head(c: str) -> str:
    return f"<a href='#gnc-drift'>{e(c)}</a>" if c == FLEET_CHECK_ID else e(c)


def latency_section(run: ReportView) -> str:
    """One histogram per measured endpoint, with P50/P99(/P99.9) marked, and the numbers."""
    figures = []
    for r in run.results:
        m = r.get("metrics") or {}
        if r["check"] != "LATENCY-JITTER" or not m.get("samples_ms"):
            continue
        marks = {"P50": m["p50_ms"], "P99": m["p99_ms"]}
        if m.get("p99_9_ms") is not None:
            marks["P99.9"] = m["p99_9_ms"]
        name = f"{r['node']} / {r['subject'].get('endpoint', '')}"
        svg = histogram(m["samples_ms"], marks, title=f"{name}: {m['samples']} requests")
        p999 = f"{m['p99_9_ms']} ms" if m.get("p99_9_ms") is not None else f"n/a ({e(m.get('p99_9_note', ''))})"
        figures.append(
            f"<figure style='display:inline-block;margin:4px 12px 8px 0'>{svg}<figcaption>{e(name)}: "
            f"<b>{e(r['outcome'])}</b>; P50 {m['p50_ms']} ms, P99 {m['p99_ms']} ms, P99.9 {p999}, mean "
            f"{m['mean_ms']} ms, jitter coefficient {m['jitter_coefficient']}, errors {m['errors']}/{m['sent']}"
            "</figcaption></figure>"
        )
    if not figures:
        return ""
    return (
        "<h2>Workload latency</h2><p>Percentiles by linear interpolation between closest ranks; jitter "
        "coefficient = standard deviation / mean of successful requests.</p>" + "".join(figures)
    )


def bandwidth_section(run: ReportView) -> str:
    """Per node, the GPU x NUMA node H2D matrix as a heat map, with its verdict."""
    figures = []
    for r in run.results:
        m = (r.get("metrics") or {}).get("h2d_matrix")
        if r["check"] != "GPU-H2D-NUMA-MATRIX" or not m or not m.get("gpus"):
            continue
        svg = heatmap(
            m["gpus"],
            [f"node{n}" for n in m["nodes"]],
            m["gbps"],
            [m["nodes"].index(loc) if loc in m["nodes"] else None for loc in m["local"]],
            title=f"{r['node']}: H2D bandwidth per GPU and NUMA node",
        )
        notes = "".join(f"<br>{e(n)}" for n in m.get("notes", [])[:20])
        figures.append(
            f"<figure style='display:inline-block;margin:4px 12px 8px 0'>{svg}<figcaption>{e(r['node'])}: "
            f"<b>{e(r['outcome'])}</b> {e(r['message'])}{notes}</figcaption></figure>"
        )
    if not figures:
        return ""
    return (
        "<h2>H2D bandwidth</h2><p>Pinned host-to-device copies, median of samples, decimal GB/s, the measuring "
        "process bound to each NUMA node in turn (CPU affinity and memory policy).</p>" + "".join(figures)
    )


def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session) -> None:
    run = _view(session)
    if run is not None and _REPORT:
        _REPORT[0].title = dated_title(run.doc)  # read when the page is written, after this hook
        _tool_counts(_REPORT[0], run)
    if run is None or (not run.results and run.fleet is None):
        return
    if _TABLE.left_out():  # a live run's page, bounded as a merge's is
        run = replace(run, left_out={**(run.left_out or {}), **_TABLE.left_out()})
    summaries = run.doc["nodes"]
    if run.fleet is not None or len(summaries) > MATRIX_MAX_NODES:
        # the fleet first, where the page opens; the matrix would be unreadable at this size
        wanted = session.config.getoption("conformance_group_by")
        fleet = run.fleet or FleetSummary.of(summaries, run.results, wanted)
        findings, _ = findings_section(fleet.findings.texts(), summaries, of=fleet.finding_results)
        sections = [scope_section(run), fleet_view(fleet), verdict_table(run, summaries), findings, waivers_and_diff(run),
                    _left_out(run)]  # fmt: skip
    else:
        wanted = session.config.getoption("conformance_group_by")
        findings, linked = findings_section(run.results, summaries)
        sections = [
            scope_section(run),
            verdict_table(run, summaries),
            findings,
            waivers_and_diff(run),
            matrix(run, linked),
            drift_section(summaries, wanted),
        ]
    sections += [bandwidth_section(run), latency_section(run)]
    prefix.append(f"<div class='gnc'>{_STYLE}{''.join(sections)}</div>")


def _tool_counts(report: Any, run: ReportView) -> None:
    """pytest-html's filter bar counts pytest's reports (a live run's node item holds many results; passed rows
    are left out at scale): it shows the tool's counts of results instead, one count everywhere. A waived result
    is pytest's "expected failure"; its checkbox says Waived."""
    outcomes = getattr(report, "outcomes", None)
    if not isinstance(outcomes, dict):
        return
    counts = run.outcomes if run.outcomes is not None else Counter(r["outcome"] for r in run.results)
    for outcome, key in (("passed", "passed"), ("failed", "failed"), ("error", "error"), ("skipped", "skipped"),
                         ("waived", "xfailed")):  # fmt: skip
        if key in outcomes:
            outcomes[key]["value"] = int(counts.get(outcome, 0))
    if "xfailed" in outcomes:
        outcomes["xfailed"]["label"] = "Waived"


def _left_out(run: ReportView) -> str:
    """What a streamed merge's page does not list, and where it is."""
    left = run.left_out or {}
    notes = []
    if left.get("table_rows"):
        notes.append(
            f"The results table below lists the first {left['table_shown']} nodes with a failed or errored result; "
            f"{left['table_rows']} more nodes and their {left['table_results']} failed or errored results are left out here."
        )
    for kind in ("bandwidth", "latency"):
        if left.get(kind):
            notes.append(f"{left[kind]} more {kind} figures are left out here.")
    if not notes:
        return ""
    where = "results.json and junit.xml, beside this report, have every result."
    return f"<p><b>Left out of this page:</b> {' '.join(notes)} {where}</p>"


# pytest-html's columns that say nothing to an auditor: a check's duration in milliseconds, and links no check sets
_DROPPED_COLUMNS = ("col-duration", "col-links")


def _keep(cell: str) -> bool:
    return not any(c in cell for c in _DROPPED_COLUMNS)


def pytest_html_results_table_header(cells: list[str]) -> None:
    cells[:] = [c for c in cells if _keep(c)]
    cells.insert(1, "<th scope='col'>Node</th>")
    cells.insert(2, "<th scope='col'>Check</th>")
    cells.insert(3, "<th scope='col'>Severity</th>")


def pytest_html_results_table_html(report: pytest.TestReport, data: list[str]) -> None:
    """A skipped result's log is its reason, not pytest's (file, line, reason) tuple."""
    if report.skipped:
        r = getattr(report, "conformance_result", None) or {}
        reason = r.get("message") or (report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr))
        data[:] = [f"<div class='log'>skipped: {e(str(reason).removeprefix('Skipped: '))}</div>"]


PASSED_ROWS_LIMIT = 2000


def shows_row(result: dict[str, Any]) -> bool:
    """Whether a check's result gets a row in pytest-html's table (else the matrix or the fleet view alone shows
    it): passed and skipped results up to PASSED_ROWS_LIMIT results, failing ones within the page's budget."""
    if result.get("outcome") in ("passed", "skipped"):
        return _passed_rows() and not _TABLE.bounded
    return _TABLE.admits(result)


@pytest.hookimpl(tryfirst=True)
def pytest_html_results_table_row(report: pytest.TestReport, cells: list[str]) -> None:
    r = getattr(report, "conformance_result", None) or {}
    if not shows_row(r):
        cells.clear()  # pytest-html drops a row without cells; the matrix still shows the result
        return
    cells[:] = [c for c in cells if _keep(c)]
    cells.insert(1, f"<td>{e(r.get('node', ''))}</td>")
    cells.insert(2, f"<td>{e(r.get('check', ''))}</td>")
    cells.insert(3, f"<td>{e(r.get('severity', ''))}</td>")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    r = getattr(report, "conformance_result", None)
    if r is None or r["outcome"] not in ("failed", "error") or not shows_row(r):
        return report
    import pytest_html

    spec = REGISTRY.get(r["check"])
    parts = [f"<div class='gnc'><p><b>{e(r['check'])}</b> ({e(r['severity'])}) on <b>{e(r['node'])}</b>: {e(r['message'])}</p>"]
    if spec and not _TABLE.bounded:  # at fleet scale the fleet view gives each check's remediation once
        parts.append(f"<p><b>Why it matters:</b> {e(spec.rationale)}</p><p><b>Remediation:</b> {e(spec.remediation)}</p>")
    if not _TABLE.bounded:
        parts.append(f"<p><b>Source:</b> {e(r['source'])}</p>")
    if r["evidence"]:
        # open: a failure's evidence is what its reader needs, on screen and on paper (a closed one is not printed)
        parts.append("<details open><summary>Evidence</summary><pre>" + e("\n".join(r["evidence"])) + "</pre></details>")
    parts.append("</div>")
    extras = getattr(report, "extras", [])
    extras.append(pytest_html.extras.html("".join(parts)))
    report.extras = extras
    return report
