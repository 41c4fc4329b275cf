"""The node x check matrix of a small fleet: a symbol and a colour per outcome, each cell a link to its result."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from conformance.checks import REGISTRY
from conformance.config.check_contract import BLOCKING
from conformance.config.fleet import FLEET_CHECK_ID
from conformance.outputs.findings import anchor, check_anchor, node_anchor
from conformance.outputs.fleet_view import (
    e,
)
from conformance.outputs.report_view import ReportView

SYMBOLS = {"passed": "✓", "failed": "✗", "error": "!", "skipped": "–", "waived": "w", None: ""}


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
