"""Live runs at fleet scale: one pytest item per node that judges all of that node's checks.

pytest's protocol costs about half a millisecond per test (three phases, each with its capture and
logging wrappers, a report and its hooks): 26-30 ms per node of 52 checks, measured on the fleet lab,
more than the rest of a node's share of the run. A `NodeChecksItem` holds a node's check items, which
pytest collected, parametrized and selected (`-k`, `-m`, `--select`) as ever, and runs them with
pytest's own parts: the session's SetupState sets up and tears down their fixtures (the node's fixtures
once, as in the per-check mode), the check's function runs, and pytest's `pytest_runtest_makereport`
and `pytest_runtest_logreport` hooks make and log the check's report. So every check still has its
report (the terminal's counts, the HTML rows, -x), results.json, JUnit and Prometheus are written from
the same results, and what a check sees is what it sees in the per-check mode. What is skipped: the
per-check `pytest_runtest_setup/call/teardown` hook calls (per-test output capture and log capture), the
report of a setup that passed (the call's report follows it) and that of a clean teardown that no
report reads (pytest-html makes a test's row when it sees the teardown, but shows no row for a passed or
skipped check at fleet scale: the matrix and the fleet view show those). A check that carries
a skip, skipif or xfail mark, which those setup and call hooks evaluate, runs through them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from _pytest.outcomes import Exit
from _pytest.runner import CallInfo

from conformance.outputs.html_report import shows_row

MODES = ("auto", "check", "node")
# `--check-items auto` (what `conformance run` passes) uses one item per node from this many nodes on.
# Measured with benchmarks/check_items.py (benchmarks/RESULTS.md, 2026-12-04): a node of 53 checks costs
# the runner 23 ms of CPU this way against 37 ms with an item per check; below 10 nodes the whole saving
# is under a tenth of a second (none measurable at 5), within the start-up's variation, so small runs keep
# the per-check form (per-test output capture, -v lines, per-test plugins).
NODE_ITEMS_FROM = 10
MARKS_WITH_HOOKS = ("skip", "skipif", "xfail")


class NodeChecksItem(pytest.Item):
    """The checks of one node, run one after another by `run_node_checks` (not by pytest's protocol)."""

    def __init__(self, *, checks: list[pytest.Item], **kw: Any) -> None:
        super().__init__(**kw)
        self.checks = checks
        self.result_count = len(checks)  # the HTML report counts results, not items

    def runtest(self) -> None:  # pragma: no cover - pytest_runtest_protocol runs the checks instead
        raise NotImplementedError("run by conformance.run.check_items.run_node_checks")

    def reportinfo(self) -> tuple[str, int, str]:
        return "node", 0, self.name


def node_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("node") if callspec is not None else None


def group_by_node(session: pytest.Session, items: list[pytest.Item]) -> list[pytest.Item]:
    """Consecutive checks of one node (the items are ordered node by node) become one NodeChecksItem;
    items of no node stay as they are."""
    out: list[pytest.Item] = []
    run: list[pytest.Item] = []
    for item in [*items, None]:
        node = node_of(item) if item is not None else None
        if run and (item is None or node != node_of(run[0])):
            out.append(NodeChecksItem.from_parent(session, name=f"node[{node_of(run[0])}]", checks=run))
            run = []
        if item is None:
            break
        if node is None:
            out.append(item)
        else:
            run.append(item)
    return out


def checks_of(items: Iterable[pytest.Item]) -> Iterable[pytest.Item]:
    """Every check item, those inside node items included, in the order they run."""
    for item in items:
        if isinstance(item, NodeChecksItem):
            yield from item.checks
        else:
            yield item


def use_node_items(mode: str, nodes: int) -> bool:
    return mode == "node" or (mode == "auto" and nodes >= NODE_ITEMS_FROM)


def run_node_checks(item: NodeChecksItem, nextitem: pytest.Item | None) -> None:
    """pytest_runtest_protocol for a node item: each check set up, run and reported in turn."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    after = nextitem.checks[0] if isinstance(nextitem, NodeChecksItem) else nextitem
    needs_teardown = _teardown_readers(item.config)
    for i, check in enumerate(item.checks):
        following = item.checks[i + 1] if i + 1 < len(item.checks) else after
        _run_check(check, following, needs_teardown)
        if item.session.shouldfail or item.session.shouldstop:
            break
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _teardown_readers(config: pytest.Config) -> Callable[[pytest.TestReport], bool]:
    """Whether a clean teardown's report must be logged: pytest-html builds a test's row when it sees its
    teardown (a row only for what the table shows: html_report.shows_row), pytest's --junitxml writes
    its testcase then. Nothing else here reads it (the terminal and the results take the deciding phase)."""
    if getattr(config.option, "xmlpath", None):
        return lambda report: True
    if not config.pluginmanager.hasplugin("html") or not getattr(config.option, "htmlpath", None):
        return lambda report: False
    return lambda report: shows_row(getattr(report, "conformance_result", None) or {"outcome": report.outcome})


def _run_check(item: pytest.Item, nextitem: pytest.Item | None, needs_teardown: Callable[[pytest.TestReport], bool]) -> None:
    """One check as pytest's runtestprotocol runs it, minus the hook calls around each phase (unless a mark
    needs them) and the reports of a setup that passed and of a clean teardown that nothing reads."""
    reraise: tuple[type[BaseException], ...] = (Exit,) if item.config.getoption("usepdb", False) else (Exit, KeyboardInterrupt)
    hooks = any(item.get_closest_marker(m) is not None for m in MARKS_WITH_HOOKS)
    state = item.session._setupstate
    ihook = item.ihook
    if hasattr(item, "_request") and not item._request:  # type: ignore[attr-defined]
        item._initrequest()  # type: ignore[attr-defined]
    try:
        setup: Callable[[], None] = (lambda: ihook.pytest_runtest_setup(item=item)) if hooks else (lambda: state.setup(item))
        call = CallInfo.from_call(setup, when="setup", reraise=reraise)
        decided = ihook.pytest_runtest_makereport(item=item, call=call)
        if decided.passed:
            run: Callable[[], None] = (lambda: ihook.pytest_runtest_call(item=item)) if hooks else item.runtest
            call = CallInfo.from_call(run, when="call", reraise=reraise)
            decided = ihook.pytest_runtest_makereport(item=item, call=call)
        ihook.pytest_runtest_logreport(report=decided)
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        call = CallInfo.from_call(lambda: state.teardown_exact(nextitem), when="teardown", reraise=reraise)
        if call.excinfo is not None or needs_teardown(decided):
            ihook.pytest_runtest_logreport(report=ihook.pytest_runtest_makereport(item=item, call=call))
    finally:
        if hasattr(item, "_request"):
            item._request = False  # type: ignore[attr-defined]
            item.funcargs = None  # type: ignore[attr-defined]
