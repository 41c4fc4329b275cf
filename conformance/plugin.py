"""The pytest plugin (entry point `pytest11`): options, per-node parametrization, outcomes, results.

It stays inert for test functions that are not checks, so the project's own tests run beside it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from conformance import fixtures
from conformance.checks import Evidence, selects, spec_of
from conformance.cluster.pods import ContainerRef
from conformance.config.check_contract import SEVERITY_RANK, CheckSpec
from conformance.config.fleet import FLEET_CHECK_ID
from conformance.config.site_rules import SiteRule
from conformance.config.verdict import subject_id
from conformance.errors import ConformanceError, UsageError
from conformance.outputs import FAILING, diff, junit_chunks, load_results, prometheus_text, write_atomically
from conformance.outputs.markdown_summary import document_markdown
from conformance.outputs.replay import NodeReplayItem, ReplayItem, make_items, node_summary_message, result_id
from conformance.run import starts, streamed
from conformance.run.check_items import MODES, NodeChecksItem, checks_of, group_by_node, node_of, run_node_checks, use_node_items
from conformance.run.merging import Ticker
from conformance.session import RUN_KEY, Run

MESSAGE_LIMIT = 2000


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("conformance", "gpu-node-conformance")
    g.addoption(
        "--inventory",
        dest="conformance_inventory",
        metavar="FILE",
        help="inventory YAML of the nodes to audit (default: this machine, local transport)",
    )
    g.addoption(
        "--profile",
        dest="conformance_profile",
        metavar="NAME|FILE",
        help="profile for every node, overriding the inventory (default: the inventory's, else 'default')",
    )
    g.addoption(
        "--snapshot",
        dest="conformance_snapshot",
        metavar="DIR",
        help="evaluate node snapshots saved by 'conformance collect' instead of collecting live",
    )
    g.addoption("--results-json", dest="conformance_results", metavar="FILE", help="write results.json here")
    g.addoption(
        "--junit",
        dest="conformance_junit",
        metavar="FILE",
        help="write a JUnit XML with one testsuite per node and one testcase per check",
    )
    g.addoption(
        "--prometheus",
        dest="conformance_prometheus",
        metavar="FILE",
        help="write results in the Prometheus text format (for the node exporter's textfile collector)",
    )
    g.addoption(
        "--baseline",
        dest="conformance_baseline",
        metavar="RESULTS_JSON",
        help="a previous run's results.json: show new failures, fixed, still failing, new and vanished nodes",
    )
    g.addoption(
        "--retries",
        dest="conformance_retries",
        type=int,
        default=2,
        metavar="N",
        help="retries of a transient connection failure, with exponential backoff (default 2)",
    )
    g.addoption(
        "--measure",
        dest="conformance_measure",
        action="store_true",
        default=False,
        help="measure pinned H2D bandwidth per GPU and NUMA node (opt-in: it opens a CUDA context on each idle GPU)",
    )
    g.addoption(
        "--acceptance-pod",
        dest="conformance_acceptance_pod",
        action="store_true",
        default=False,
        help="create a short-lived Guaranteed test pod on each node, run the pod checks on it, delete it "
        "(the only write the suite makes to a cluster)",
    )
    g.addoption(
        "--replay",
        dest="conformance_replay",
        action="append",
        metavar="RESULTS_JSON",
        help="render reports from results documents instead of running checks: results.json files, folders of "
        "them, pod logs with framed results (repeat to merge runs)",
    )
    g.addoption(
        "--replay-expect",
        dest="conformance_replay_expect",
        action="append",
        default=[],
        metavar="NODES",
        help="with --replay: nodes that should be there (names, comma lists, @FILE with a name per line); those "
        "no document reports are marked incomplete",
    )
    g.addoption(
        "--select",
        dest="conformance_select",
        action="append",
        default=[],
        metavar="PATTERN",
        help="judge only these checks: globs over check ids and family names (KUBELET-CPU-*, gpu_health, "
        "FLEET-CONSISTENT); repeat. Works alike in a live run and in report/merge, unlike -k",
    )
    g.addoption(
        "--group-by",
        dest="conformance_group_by",
        metavar="LABEL",
        default=None,
        help="the node label that groups nodes in the report's fleet view (default: the first common node-pool label)",
    )
    g.addoption(
        "--replay-items",
        dest="conformance_replay_items",
        choices=("auto", "result", "node"),
        default="auto",
        help="a replay's pytest items: one per result, or per node with failing results (the nodes streamed "
        "through the outputs one at a time, in memory that does not grow with the fleet), or auto (per node "
        "above 20,000 results or 300 nodes); the files written are the same",
    )
    g.addoption(
        "--check-items",
        dest="conformance_check_items",
        choices=MODES,
        default="check",
        help="a live run's pytest items: one per check (default), one per node judging all of the node's checks "
        "(the same results and reports at a fraction of pytest's cost per check), or auto (per node from "
        "10 nodes on; what 'conformance run' uses). -k, -m and --select select checks in both",
    )
    g.addoption(
        "--html-passed",
        dest="conformance_html_passed",
        choices=("auto", "rows", "matrix"),
        default="auto",
        help="passed and skipped results in the HTML: as table rows, in the matrix only, or auto (rows up to 2000 results)",
    )
    g.addoption(
        "--waivers",
        dest="conformance_waivers",
        metavar="FILE",
        help="waivers YAML: known failures reported as waived until they expire",
    )
    g.addoption(
        "--host-root",
        dest="conformance_host_root",
        default="",
        metavar="DIR",
        help="with no inventory: read this machine's files below DIR (e.g. /host in a pod)",
    )
    g.addoption(
        "--checks",
        dest="conformance_checks",
        action="append",
        default=[],
        metavar="FILE|DIR",
        help="site checks: YAML rule files, or folders of them (repeatable; Python site checks: pass their folder as a path)",
    )
    g.addoption(
        "--parallel",
        dest="conformance_parallel",
        type=int,
        default=16,
        metavar="N",
        help="collect from at most N nodes at once (default 16)",
    )
    g.addoption(
        "--collect-timeout",
        dest="conformance_timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="per-node collection timeout (default 120)",
    )


def _xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _xdist_controller(config: pytest.Config) -> bool:
    return not _xdist_worker(config) and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(fixtures, "conformance-fixtures")
    if _xdist_controller(config):
        if getattr(config.option, "conformance_acceptance_pod", False):
            raise pytest.UsageError("--acceptance-pod cannot run under pytest-xdist (each worker would create pods)")
        # every check of a node in one worker, one collection per node: pytest_xdist_make_scheduler below; scope
        # scheduling, so that pytest-xdist does not rewrite test ids as its loadgroup does
        config.option.dist = "loadscope"
    try:
        config.stash[RUN_KEY] = Run.of(starts.from_options(config))
        config.stash[RUN_KEY].pytest_config = config
        config.pluginmanager.register(fixtures.run_plugin(config.stash[RUN_KEY]), "conformance-run")
        config.stash[RUN_KEY].store.xdist_worker = _xdist_worker(config)
        if _xdist_controller(config):
            config.pluginmanager.register(XdistController(config.stash[RUN_KEY]), "conformance-xdist-controller")
        if config.getoption("conformance_baseline"):
            load_results(config.getoption("conformance_baseline"))  # a bad baseline is a usage error, early
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None
    if config.pluginmanager.hasplugin("html"):
        from conformance.outputs import html_report

        config.pluginmanager.register(html_report, "conformance-html")
        run = config.stash[RUN_KEY]
        config.stash[html_report.VIEW_KEY] = lambda: (
            html_report.ReportView(run.to_json(), run.snapshot_dir, bool(run.pods.acceptance))
            if run.shown is None
            else html_report.ReportView(
                run.shown.doc, fleet=run.shown.fleet, left_out=run.shown.left_out, outcomes=run.shown.outcomes
            )
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's controller: each node's checks are one unit of work (conformance.run.xdist_nodes)."""
    run: Run | None = config.stash.get(RUN_KEY, None)
    if run is None or not run.node_names:
        return None  # not an audit (another plugin's tests): pytest-xdist's own scheduling
    from conformance.run.xdist_nodes import NodeScheduling

    return NodeScheduling(config, log, frozenset(run.node_names))


def pytest_unconfigure(config: pytest.Config) -> None:
    run: Run | None = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.store.close()  # an interrupted run starts no more collections
        run.pods.cleanup()  # again, in case the session ended before sessionfinish (deleting twice is a no-op)
        run.site.close()  # the connections Python site checks' `host` opened


def _spec(item: Any) -> CheckSpec | None:
    """The check an item runs: its function's @check, or for a declarative site rule, the rule's."""
    rule = getattr(item, "callspec", None) and item.callspec.params.get("site_rule")
    if rule is not None and not isinstance(rule, SiteRule):  # pytest's empty parameter set: no rule at all
        return None
    return rule.spec if rule is not None else spec_of(getattr(item, "obj", None))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the declarative site-rule test without any rule to run (pytest's empty parameter set) is dropped
    items[:] = [i for i in items if _spec(i) is not None or "site_rule" not in getattr(i, "fixturenames", ())]
    patterns = config.getoption("conformance_select")
    if patterns:  # --select: the checks not named are deselected, as -k deselects (a replay filters its document)
        spec_ids = [(_spec(i), i) for i in items]
        dropped = [i for s, i in spec_ids if s is not None and not selects(patterns, s.id)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            keep = set(map(id, dropped))
            items[:] = [i for i in items if id(i) not in keep]
    # A check's failure is its message: skip pytest's traceback formatting (slow at fleet scale),
    # but keep the traceback of a defect (any other exception) for whoever fixes it.
    for item in items:
        if _spec(item) is not None:
            original = item.repr_failure

            def short(excinfo: pytest.ExceptionInfo[BaseException], style: Any = None, _orig: Any = original) -> Any:
                if isinstance(excinfo.value, AssertionError | ConformanceError):
                    return _message(excinfo)
                return _orig(excinfo, style) if style is not None else _orig(excinfo)

            item.repr_failure = short  # type: ignore[method-assign]


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_by_node(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each node's checks together, nodes in the inventory's order (the order they are gathered in):
    a node's checks run as soon as its facts are in, and its fixtures are computed once. After pytest's
    own ordering by session-scoped parameters, which would put checks of different nodes side by side
    when they share a container or endpoint parameter (None: the node has none)."""
    run: Run | None = config.stash.get(RUN_KEY, None)
    if run is None or run.ledger.replay is not None:
        return
    order = {name: i for i, name in enumerate(run.node_names)}
    items.sort(key=lambda item: order.get(node_of(item), -1))
    # fleet scale: one item per node judging the node's checks (conformance.run.check_items), after -k, -m
    # and --select chose the checks; not for a listing (--collect-only) nor under pytest-xdist
    nodes = len({node_of(i) for i in items} - {None})
    if (
        items
        and use_node_items(config.getoption("conformance_check_items"), nodes)
        and not config.option.collectonly
        and not (_xdist_worker(config) or _xdist_controller(config))
    ):
        items[:] = group_by_node(items[0].session, items)


def _stream(config: pytest.Config, run: Run) -> streamed.Shown:
    """A streamed replay's one pass over its nodes, which writes its files (results.json, JUnit, Prometheus)."""
    opt = config.getoption
    baseline = load_results(opt("conformance_baseline")) if opt("conformance_baseline") else None
    out = streamed.Outputs(
        results=opt("conformance_results"), junit=opt("conformance_junit"), prometheus=opt("conformance_prometheus"),
        select=opt("conformance_select"), group_by=opt("conformance_group_by"), baseline=baseline,
        judge_fleet=selects(opt("conformance_select"), FLEET_CHECK_ID),
    )  # fmt: skip
    try:
        shown = streamed.stream(run, run.streamed, out, Ticker(config.option.verbose > 0))
    finally:
        run.streamed.close()
    run.shown = shown
    if out.results:
        WRITTEN[str(Path(out.results).resolve())] = streamed.summary_for_cli(shown)
    return shown


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if not isinstance(item, NodeChecksItem):
        return None
    run_node_checks(item, nextitem)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    run: Run | None = session.config.stash.get(RUN_KEY, None)
    if run is None or run.ledger.replay is None:
        return None
    patterns = session.config.getoption("conformance_select")
    doc = run.ledger.replay
    if run.streamed is not None:
        session.items = streamed.items(session, _stream(session.config, run))
    else:
        if patterns:
            doc = dict(doc, results=[r for r in doc["results"] if selects(patterns, r["check"])])
        session.items = make_items(session, doc)
    session.testscollected = len(session.items)
    session.config.hook.pytest_collection_modifyitems(session=session, config=session.config, items=session.items)
    session.config.hook.pytest_collection_finish(session=session)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Before the first check: begin gathering, in the background, every node a selected check needs
    facts of, in the order the checks will run (each node's checks together: `node` is a session-scoped
    parameter), so that the first nodes' checks run while later nodes are still on their way. Not
    under pytest-xdist (each worker gathers the nodes it is given) nor for --collect-only."""
    run: Run | None = session.config.stash.get(RUN_KEY, None)
    config = session.config
    if (
        run is None
        or run.ledger.replay is not None
        or config.option.collectonly
        or _xdist_worker(config)
        or _xdist_controller(config)
    ):
        return
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return  # pytest stops here: collection errors
    checks = list(checks_of(session.items))
    session.testscollected = len(checks)  # the tests are the checks, also where a node's are one item
    run.store.start(item.callspec.params["node"] for item in checks if "facts" in getattr(item, "fixturenames", ()))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "site_rule" in metafunc.fixturenames:
        # one test per (node, declarative site rule that applies to the node)
        site_run: Run = metafunc.config.stash[RUN_KEY]
        pairs = [(node, rule) for node in site_run.node_names for rule in site_run.site.rules_for(node)]
        ids = [f"{node}/{rule.spec.id}" for node, rule in pairs]
        metafunc.parametrize(("node", "site_rule"), pairs, ids=ids, scope="session")
        return
    if "node" not in metafunc.fixturenames or spec_of(metafunc.function) is None:
        return
    run: Run = metafunc.config.stash[RUN_KEY]
    if "container" in metafunc.fixturenames:
        # one test per (node, pod, container); a node without GPU pods (or without the API) gets one that skips
        pairs = [(node, ref) for node in run.node_names for ref in run.pods.pod_targets(node)]
        ids = [ref.id if isinstance(ref, ContainerRef) else node for node, ref in pairs]
        check_id = spec_of(metafunc.function).id
        for node, ref in pairs:
            if isinstance(ref, ContainerRef):
                subject = subject_id(_subject(None, ref))
                run.ledger.planned.setdefault(node, {}).setdefault(check_id, []).append(subject)
        metafunc.parametrize(("node", "container"), pairs, ids=ids, scope="session")
    elif "endpoint" in metafunc.fixturenames:
        # one test per (node, endpoint); a node without endpoints gets one test that skips
        pairs = [(n.name, ep) for n in run.inventory.nodes for ep in (n.endpoints or [None])]
        ids = [f"{node}/{ep.name}" if ep else node for node, ep in pairs]
        metafunc.parametrize(("node", "endpoint"), pairs, ids=ids, scope="session")
    else:
        metafunc.parametrize("node", run.node_names, ids=run.node_names, scope="session")


def _subject(endpoint: Any, container: Any) -> dict[str, str]:
    if endpoint is not None:
        return {"endpoint": endpoint.name}
    if isinstance(container, ContainerRef):
        return {"namespace": container.namespace, "pod": container.pod, "container": container.container}
    return {}


def _message(excinfo: pytest.ExceptionInfo[BaseException] | None) -> str:
    if excinfo is None:
        return ""
    value = excinfo.value
    if isinstance(value, AssertionError):
        text = str(value).split("\nassert ", 1)[0]
    elif isinstance(value, pytest.skip.Exception):
        text = value.msg
    elif isinstance(value, ConformanceError):
        text = str(value)
    else:
        text = f"{type(value).__name__}: {value} (a defect in the check; please report it)"
    return text[:MESSAGE_LIMIT]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    excinfo = call.excinfo
    replaced = excinfo is not None and isinstance(excinfo.value, (AssertionError, ConformanceError))
    skipped = excinfo is not None and isinstance(excinfo.value, pytest.skip.Exception)
    if excinfo is not None and (replaced or skipped) and hasattr(item, "callspec") and _spec(item):
        # the report's text becomes the check's own line below: pytest need not format a traceback nobody reads (it
        # filters it frame by frame, a stat and a path parse each: a third of a replay's time, issue 60); a skip
        # keeps the frame that called pytest.skip, where its report says it was skipped
        excinfo.traceback = excinfo.traceback[-1:] if replaced else excinfo.traceback[-2:]
    report: pytest.TestReport = yield
    if isinstance(item, ReplayItem):
        return _replayed_report(item, report)
    if isinstance(item, NodeReplayItem):
        return _replayed_node_report(item, report)
    spec = _spec(item)
    if spec is None or not hasattr(item, "callspec"):
        return report
    node = item.callspec.params.get("node")
    endpoint = item.callspec.params.get("endpoint")
    if report.when == "setup":
        if report.passed:
            return report
        outcome = "skipped" if report.skipped else "error"
    elif report.when == "call":
        if report.passed:
            outcome = "passed"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = "failed" if excinfo is not None and isinstance(excinfo.value, AssertionError) else "error"
    else:
        return report
    message = _message(excinfo)
    run: Run = item.config.stash[RUN_KEY]
    waiver = None
    if outcome == "failed" and run.ledger.waivers:
        outcome, waiver, message = run.apply_waivers(node, spec.id, message)
        if outcome == "waived":
            report.outcome = "skipped"  # in pytest's own terms: an expected failure
            report.wasxfail = f"waived: {waiver['justification'] if waiver else ''}"
    if (excinfo is not None and outcome == "failed") or (
        outcome == "error" and isinstance(getattr(excinfo, "value", None), ConformanceError)
    ):
        report.longrepr = f"{outcome.upper()} [{spec.id}] {node}: {message}"
    ev: Evidence = getattr(item, "funcargs", {}).get("evidence") or Evidence()
    result = {
        "node": node,
        "check": spec.id,
        "subject": _subject(endpoint, item.callspec.params.get("container")),
        "severity": spec.severity,
        "outcome": outcome,
        "message": message,
        "evidence": ev.lines[:200],
        "source": ev.source or spec.source,
        "waiver": waiver,
        "duration_s": round(report.duration, 4),
        "test": item.nodeid,
    }
    if ev.metrics is not None:
        result["metrics"] = ev.metrics
    run.results.append(result)
    props = [("check", spec.id), ("node", node), ("severity", spec.severity), ("outcome", outcome)]
    item.user_properties.extend(props)  # junitxml writes the item's properties with the teardown report
    report.user_properties.extend(props)
    report.conformance_result = result  # type: ignore[attr-defined]
    return report


class XdistController:
    """Registered on the pytest-xdist controller only: the workers run the checks; this gathers each
    result (pytest serialises a report's attributes, `conformance_result` included) and each worker's
    collection summaries, so the controller writes the same outputs as a serial run."""

    def __init__(self, run: Run) -> None:
        self.run = run

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = getattr(report, "conformance_result", None)
        if result is not None:
            self.run.results.append(result)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.run.store.remote.collection.update(json.loads(node.workeroutput.get("gnc_nodes", "{}")))
        self.run.store.remote.identity.update(json.loads(node.workeroutput.get("gnc_identity", "{}")))


def _replayed_report(item: ReplayItem, report: pytest.TestReport) -> pytest.TestReport:
    r = item.result
    decided = (report.when == "setup" and r["outcome"] == "error") or (report.when == "call" and r["outcome"] != "error")
    if not decided:
        return report
    r.setdefault("test", result_id(r))  # the live run's test id stays; else the one either item mode gives
    if not report.passed:
        report.longrepr = f"{r['outcome'].upper()} [{r['check']}] {r['node']}: {r['message']}"
    props = [("check", r["check"]), ("node", r["node"]), ("severity", r["severity"]), ("outcome", r["outcome"])]
    item.user_properties.extend(props)
    report.user_properties.extend(props)
    report.conformance_result = r  # type: ignore[attr-defined]
    item.config.stash[RUN_KEY].results.append(r)
    return report


def _replayed_node_report(item: NodeReplayItem, report: pytest.TestReport) -> pytest.TestReport:
    if report.when != "call":
        return report
    rows = item.results
    run: Run = item.config.stash[RUN_KEY]
    failing = [r for r in rows if r["outcome"] in FAILING]
    worst = "error" if any(r["outcome"] == "error" for r in failing) else "failed" if failing else "passed"
    rank = SEVERITY_RANK
    severity = min((r["severity"] for r in failing), key=lambda sev: rank.get(sev, len(rank)), default="")
    # one row in the HTML table for the node; its failing results in the row's extras (html_report)
    report.conformance_result = {  # type: ignore[attr-defined]
        "node": rows[0]["node"], "check": f"{len(failing)} of {item.total} results", "severity": severity, "outcome": worst,
        "message": node_summary_message(failing) if failing else "every result passed, skipped or was waived",
        "source": "replayed results", "evidence": [f"{r['outcome'].upper()} [{r['check']}] {r['message']}" for r in failing],
    }  # fmt: skip
    if failing:
        report.longrepr = f"{worst.upper()} {rows[0]['node']}: {report.conformance_result['message']}"  # type: ignore[attr-defined]
    if run.shown is None:  # a streamed replay wrote its files already
        run.results.extend(rows)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    """Quiet (`-qq`, what the command line passes unless -v): no progress letter per result. pytest's letters count
    reports (a live run's item holds a node's checks), and the command line prints the tool's own count and
    progress; the category still counts as pytest counts it."""
    status = yield
    if status and config.get_verbosity() <= -2:
        category, _, word = status
        return category, "", word
    return status


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run: Run | None = session.config.stash.get(RUN_KEY, None)
    if run is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        run.ledger.interrupted = True
        run.store.interrupt()  # the collections under way end now, and their records say so
    run.pods.cleanup()  # the acceptance pods go before the results are written, which say they went
    if run.store.xdist_worker:  # the controller writes the outputs; it needs this worker's collection summaries
        summaries = {n: c for n in run.node_names if (c := run.collection_of(n)) is not None}
        session.config.workeroutput["gnc_nodes"] = json.dumps(summaries)  # type: ignore[attr-defined]
        identities = {n: i for n in run.node_names if (i := run.identity_of(n))}
        session.config.workeroutput["gnc_identity"] = json.dumps(identities)  # type: ignore[attr-defined]
        return
    opt = session.config.getoption
    if run.shown is not None:
        return  # a streamed replay wrote its files as it read its nodes (conformance.run.streamed)
    # the drift check judges the whole run's node records, after every other check; a run narrowed with
    # -k or -m judges only what it selected, and an interrupted run has no whole to judge
    if not (opt("keyword") or opt("markexpr") or run.ledger.interrupted) and selects(opt("conformance_select"), FLEET_CHECK_ID):
        run.judge_fleet(opt("conformance_group_by"))
    if opt("conformance_baseline"):
        run.ledger.diff = diff(load_results(opt("conformance_baseline")), run.to_json())
    doc = run.to_json()
    if opt("conformance_results"):
        run.write_results(opt("conformance_results"), doc)
        # what the command line prints next, without reading 200 MB of results.json back at fleet scale
        WRITTEN[str(Path(opt("conformance_results")).resolve())] = {k: doc.get(k) for k in SUMMARY_KEYS} | {
            "markdown": document_markdown(doc)
        }
    if opt("conformance_junit"):
        _write(opt("conformance_junit"), junit_chunks(doc))
    if opt("conformance_prometheus"):
        _write(opt("conformance_prometheus"), [prometheus_text(doc).encode("utf-8")])


SUMMARY_KEYS = ("nodes", "waivers", "diff", "complete", "api_access")
WRITTEN: dict[str, dict[str, Any]] = {}  # results.json path -> its SUMMARY_KEYS, for the CLI in this process


def written_summary(path: Path) -> dict[str, Any] | None:
    """The summary of the results.json this process just wrote at `path` (once), else None."""
    return WRITTEN.pop(str(path.resolve()), None)


def _write(path: str, chunks: Iterable[bytes]) -> None:
    write_atomically(path, chunks)
