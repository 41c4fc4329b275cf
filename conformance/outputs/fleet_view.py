"""The report's fleet view, for runs too large for a node x check matrix: verdict counts per profile
and per node group, a check x group table of failure counts that expands to the failing nodes, and a
searchable list of every node. Nothing is dropped: every node and every failed or errored result is
in the page, behind a <details> where it would otherwise drown the overview.

The group is a node label: the one named with `--group-by`, else the first of GROUP_LABELS that most
nodes carry (node pools of the common installers and clouds), else the profile."""

from __future__ import annotations

from collections import Counter, defaultdict
from html import escape
from typing import Any

from conformance.config.fleet import IDENTITY_ATTRIBUTES, group_label, group_of, pools
from conformance.outputs import FAILING

# Above this many nodes the report shows the fleet view and drops the node x check matrix and the
# per-node verdict rows of accepted nodes (each node stays in the fleet view's node list).
MATRIX_MAX_NODES = 300
VERDICT_COLOURS = {"accepted": "#2e7d32", "rejected": "#c62828", "unreachable": "#ef6c00", "incomplete": "#9e9e9e"}
VERDICTS = tuple(VERDICT_COLOURS)


def e(value: Any) -> str:
    """Escaped for HTML text and (quoted) attribute values: every value in the report passes here."""
    return escape(str(value), quote=True)


def _counts_table(title: str, rows: dict[str, Counter[str]]) -> str:
    head = "".join(f"<th>{v}</th>" for v in VERDICTS)
    body = "".join(
        f"<tr><td>{e(name)}</td><td>{sum(c.values())}</td>" + "".join(f"<td>{c.get(v, 0)}</td>" for v in VERDICTS) + "</tr>"
        for name, c in sorted(rows.items())
    )
    return f"<table class='fleet'><tr><th>{e(title)}</th><th>nodes</th>{head}</tr>{body}</table>"


def fleet_view(nodes: list[dict[str, Any]], results: list[dict[str, Any]], wanted_label: str | None = None) -> str:
    label = group_label(nodes, wanted_label)
    groups = {n["name"]: group_of(n, label) for n in nodes}
    by_profile: dict[str, Counter[str]] = defaultdict(Counter)
    by_group: dict[str, Counter[str]] = defaultdict(Counter)
    for n in nodes:
        by_profile[n.get("profile", "-")][n["verdict"]] += 1
        by_group[groups[n["name"]]][n["verdict"]] += 1
    total = Counter(n["verdict"] for n in nodes)
    badges = " ".join(
        f"<span class='verdict v-{v}'>{total.get(v, 0)} {v}</span>" for v in VERDICTS if total.get(v, 0) or v == "accepted"
    )
    grouped = f"label <code>{e(label)}</code>" if label else "profile (no pool label on most nodes; name one with --group-by)"
    parts = [
        # elementtiming: the browser records when this text is painted (benchmarks/merge_scale.py reads it)
        f"<h2>Fleet overview</h2><p class='fleet-total' elementtiming='gnc-fleet-total'>{len(nodes)} nodes: {badges}</p>",
        _counts_table("profile", by_profile),
        f"<p>Nodes grouped by {grouped}.</p>",
        _counts_table("group", by_group),
        _check_by_group(results, groups, sorted(by_group)),
        drift_section(nodes, wanted_label),
        _node_list(nodes, results, groups),
    ]
    return "".join(parts)


DRIFT_SHOWN = 20  # nodes named per attribute; the rest are counted


def drift_section(nodes: list[dict[str, Any]], wanted_label: str | None = None, linked: bool = True) -> str:
    """Per group, each identity attribute whose nodes do not all agree: its values with node counts, and the
    nodes off the majority value (or every node, where there is no majority), linked to their rows."""
    if not any(n.get("identity") is not None for n in nodes):
        return ""
    _, groups = pools(nodes, wanted_label)
    blocks = []
    for g, pool in sorted(groups.items()):
        rows = []
        recorded = [n for n in pool.members if n.get("identity") is not None]
        for attr in IDENTITY_ATTRIBUTES:
            counts = pool.values.get(attr, Counter())
            unknown = sum(1 for n in recorded if n["identity"].get(attr) is None)
            if len(counts) <= 1 and not unknown:
                continue
            top, _, _ = pool.majority(attr)
            off = [n["name"] for n in recorded if n["identity"].get(attr) is not None and str(n["identity"][attr]) != top]
            names = ", ".join(f"<a href='#gnc-node-{e(x)}'>{e(x)}</a>" if linked else e(x) for x in off[:DRIFT_SHOWN])
            names += f" and {len(off) - DRIFT_SHOWN} more" if len(off) > DRIFT_SHOWN else ""
            values = ", ".join(f"{e(v)} ({c})" for v, c in counts.most_common(6))
            values += f"; unknown on {unknown}" if unknown else ""
            rows.append(f"<tr><td>{e(attr)}</td><td>{values}</td><td>{'' if top else 'no majority: '}{names}</td></tr>")
        if rows:
            blocks.append(
                f"<h4>{e(g)}</h4><table class='fleet'><tr><th>attribute</th><th>values (nodes)</th>"
                f"<th>nodes off the majority</th></tr>{''.join(rows)}</table>"
            )
    if not blocks:
        return "<h3>Fleet drift</h3><p>In every group, every node's identity record agrees with its peers'.</p>"
    return "<h3>Fleet drift</h3><p>What nodes of one group do not share (FLEET-CONSISTENT judges it).</p>" + "".join(blocks)


def _check_by_group(results: list[dict[str, Any]], groups: dict[str, str], names: list[str]) -> str:
    """Rows: checks with failed or errored results; cells: how many nodes of each group; the row
    expands to every failing (node, subject) with its message."""
    failing: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r["outcome"] in FAILING:
            failing[r["check"]].append(r)
    if not failing:
        return "<p>No check failed or errored on any node.</p>"
    head = "".join(f"<th>{e(g)}</th>" for g in names)
    rows = []
    for check in sorted(failing, key=lambda c: (-len({r["node"] for r in failing[c]}), c)):
        rs = failing[check]
        per_group = Counter(groups.get(g, "(no label)") for g in {r["node"] for r in rs})
        cells = "".join(f"<td class='n{' hot' if per_group.get(g) else ''}'>{per_group.get(g, '')}</td>" for g in names)
        items = "".join(
            f"<li><b>{e(r['node'])}</b> {e(r['outcome'])}: {e(r['message'][:300])}</li>"
            for r in sorted(rs, key=lambda r: r["node"])
        )
        nodes = len({r["node"] for r in rs})
        rows.append(
            f"<tr><td>{e(check)}</td><td>{e(rs[0]['severity'])}</td>{cells}"
            f"<td><details><summary>{nodes} node(s)</summary><ul>{items}</ul></details></td></tr>"
        )
    return (
        "<h3>Failed or errored checks by group</h3><p>Nodes with a failed or errored result, per group; "
        "open a row for the nodes and their messages.</p>"
        f"<table class='fleet'><tr><th>check</th><th>severity</th>{head}<th>nodes</th></tr>{''.join(rows)}</table>"
    )


def _node_list(nodes: list[dict[str, Any]], results: list[dict[str, Any]], groups: dict[str, str]) -> str:
    """Every node, one row each, with its failing checks; a search box filters the rows."""
    failing: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r["outcome"] in FAILING and r["check"] not in failing[r["node"]]:
            failing[r["node"]].append(r["check"])
    rows = []
    for n in sorted(nodes, key=lambda n: (n["verdict"] == "accepted", n["name"])):
        reason = ((n.get("collection") or {}).get("error") or "") if n["verdict"] in ("unreachable", "incomplete") else ""
        checks = ", ".join(failing.get(n["name"], []))
        rows.append(
            f"<tr id='gnc-node-{e(n['name'])}'><td>{e(n['name'])}</td><td>{e(n['verdict'])}</td>"
            f"<td>{e(n.get('profile', '-'))}</td>"
            f"<td>{e(groups[n['name']])}</td><td>{e(reason or checks)}</td></tr>"
        )
    return (
        f"<h3>Every node</h3><details><summary>{len(nodes)} nodes (non-accepted first); search: name, verdict, group "
        "or check</summary><input id='gnc-find' placeholder='filter nodes' size='40'>"
        "<table class='fleet' id='gnc-nodes'><tr><th>node</th><th>verdict</th><th>profile</th><th>group</th>"
        f"<th>failed or errored checks / reason</th></tr>{''.join(rows)}</table></details>"
        "<script>document.getElementById('gnc-find').addEventListener('input',function(ev){"
        "var q=ev.target.value.toLowerCase();var rows=document.querySelectorAll('#gnc-nodes tr');"
        "for(var i=1;i<rows.length;i++){rows[i].style.display=rows[i].textContent.toLowerCase().indexOf(q)<0?'none':'';}});"
        "</script>"
    )
