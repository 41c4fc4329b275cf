"""pytest-html hooks: the page's sections on top (each its own module: page_scope, page_verdicts, findings, page_matrix,
fleet_view, page_figures), check columns, evidence extras.

pytest-html 4 inserts cells as HTML in the browser: every value from a node is escaped here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from conformance.checks import REGISTRY
from conformance.outputs.findings import findings_section
from conformance.outputs.fleet_view import (
    MATRIX_MAX_NODES,
    TABLE_BYTES_MAX,
    TABLE_NODES_MAX,
    FleetSummary,
    drift_section,
    e,
    fleet_view,
    row_bytes,
)
from conformance.outputs.page_figures import bandwidth_section, latency_section
from conformance.outputs.page_matrix import matrix
from conformance.outputs.page_scope import dated_title, scope_section
from conformance.outputs.page_style import STYLE
from conformance.outputs.page_verdicts import verdict_table, waivers_and_diff
from conformance.outputs.report_view import ReportView

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


# failing results given rows on a live run's page above MATRIX_MAX_NODES nodes (a node's are all shown or none);
# fleet_view.TABLE_BYTES_MAX bounds the bytes they add
TABLE_RESULTS_MAX = 2000


class TableBudget:
    """A page above MATRIX_MAX_NODES nodes gives result rows to the first nodes with failing results only (up to
    TABLE_NODES_MAX nodes, about TABLE_RESULTS_MAX results and TABLE_BYTES_MAX bytes), as a merge's page is bounded
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
        self.bytes = 0

    def admits(self, result: dict[str, Any]) -> bool:
        if not self.bounded:
            return True
        node = str(result.get("node") or "")
        if not node:
            return True  # a report of no node's check (a collection or internal error): always shown
        key = f"{node}\0{result.get('test') or result.get('check')}\0{result.get('subject')}"
        room = len(self.admitted) < TABLE_NODES_MAX and len(self.shown) < TABLE_RESULTS_MAX and self.bytes < TABLE_BYTES_MAX
        if node in self.admitted or room:
            self.admitted.add(node)
            if key not in self.shown:  # a set: the table and pytest's teardown both ask of one result
                self.shown.add(key)
                self.bytes += row_bytes(result)
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


# The run puts a function here that gives the view when the report is written (plugin.py); outputs never
# reach into the run itself.
VIEW_KEY = pytest.StashKey[Callable[[], ReportView]]()


def _view(session: pytest.Session) -> ReportView | None:
    make = session.config.stash.get(VIEW_KEY, None)
    return make() if make is not None else None


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
        findings, _ = findings_section(fleet.folded_findings(), summaries, of=fleet.finding_results, same=fleet.same)
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
    prefix.append(f"<div class='gnc'>{STYLE}{''.join(sections)}</div>")


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
