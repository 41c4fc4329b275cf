"""The node verdict table, the API access lines, and the waivers and the diff against the baseline."""

from __future__ import annotations

from typing import Any

from conformance import __version__
from conformance.config.verdict import attention_key, why_not_accepted
from conformance.outputs.fleet_view import (
    MATRIX_MAX_NODES,
    VERDICT_ROWS_BYTES,
    VERDICT_ROWS_MAX,
    e,
)
from conformance.outputs.page_budget import within_bytes
from conformance.outputs.palette import VERDICT_COLOURS
from conformance.outputs.report_view import ReportView

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
    if fleet:  # a live run's page, bounded as a merge's is, and either by bytes
        kept = within_bytes(rows[:VERDICT_ROWS_MAX], VERDICT_ROWS_BYTES)
        more, rows = more + len(rows) - len(kept), kept
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
