"""The page's first section: its title, the scope (totals, the nodes not accepted and why, the profiles, the checks
judged, complete or interrupted, when the run or the merged audits were), and an interrupted run's banner."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from conformance import __version__
from conformance.checks import REGISTRY
from conformance.config.kubernetes import MISSING_FROM_AUDIT
from conformance.config.verdict import ATTENTION_ORDER, attention_key, verdict_counts, why_not_accepted
from conformance.outputs.fleet_view import (
    e,
)
from conformance.outputs.report_view import ReportView


def dated_title(doc: dict[str, Any]) -> str:
    """The tab's title carries the run's date and its verdict counts, so a tab or a saved file says what it is."""
    title = "GPU node conformance report"
    whole = doc.get("run_totals")  # a streamed page: the whole run's counts, not the kept nodes'
    counts = Counter(whole["verdicts"]) if whole else Counter(n["verdict"] for n in doc.get("nodes") or [])
    shown = verdict_counts(counts)
    day = str(doc.get("started_at") or "")[:10]
    cut = "" if doc.get("complete", True) else " (INTERRUPTED)"
    return " ".join(p for p in (title, day) if p) + cut + (f": {shown}" if shown else "")


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
    # what may be missing from the scope itself comes first: an interrupted run, nodes discovery could not find
    alerts = [INTERRUPTED_BANNER] if not doc.get("complete", True) else []
    alerts += [f"<p class='gnc-interrupted' role='alert'>{e(line)}</p>" for line in doc.get("api_access") or []
               if MISSING_FROM_AUDIT in line]  # fmt: skip
    return (
        f"<section aria-label='Scope and verdicts' id='gnc-scope'><h2>Scope and verdicts</h2>{''.join(alerts)}"
        f"<p class='gnc-totals'>{total} node(s): {totals}</p>{listed}<p>{'; '.join(facts)}.</p></section>"
    )
