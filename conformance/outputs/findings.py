"""The report's findings: every failed, errored and waived result, what blocks first, each with a permalink
(`report.html#NODE/CHECK`), its message and its evidence, filterable by node, check, severity and outcome
and searchable. pytest-html's results table stays below it; it cannot order rows by severity, fold them
or link to them, so the page does that here, beside it.

A node's identical errors (an unreachable node answers every check with one "Connection refused") fold
into one row that names the checks; each folded check keeps its permalink."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from conformance.checks import REGISTRY
from conformance.config.check_contract import BLOCKING, SEVERITY_RANK
from conformance.config.verdict import ATTENTION_ORDER
from conformance.outputs.page_budget import within_bytes
from conformance.outputs.safe_text import e

FINDINGS = ("failed", "error", "waived")
OUTCOME_RANK = {"failed": 0, "error": 1, "waived": 2}
VERDICT_RANK = {v: i for i, v in enumerate(ATTENTION_ORDER)}
FOLD_MIN = 3  # a node's results with one outcome and one message fold from this many on
ROWS_MAX = 2000  # rows on the page; results.json has every result
ROWS_BYTES = 1_500_000  # and at most about this much of them (a row holds a message and up to EVIDENCE_LINES lines)
EVIDENCE_LINES = 40


def anchor(node: str, check: str, subject: dict[str, Any] | None = None) -> str:
    """The permalink of a node's result of a check: `#NODE/CHECK`, and for a pod check's result (one per
    container) `#NODE/CHECK/NAMESPACE/POD/CONTAINER`, so that two containers' results never share one."""
    where = subject_label(subject)
    return f"{node}/{check}" + (f"/{where}" if where else "")


def subject_label(subject: dict[str, Any] | None) -> str:
    """`namespace/pod/container` of a pod check's result ("" for a node's own result)."""
    if not subject or not subject.get("pod"):
        return ""
    return "/".join(str(subject.get(k) or "-") for k in ("namespace", "pod", "container"))


def node_anchor(node: str) -> str:
    return f"node-{node}"


def check_anchor(check: str) -> str:
    return f"check-{check}"


def finding_key(r: dict[str, Any], verdict: str = "") -> tuple:
    """Where a result ranks among the findings: what blocks acceptance first (a critical or high failure or error),
    then by severity, then by outcome; then the nodes in attention order (issue 54: a critical error sat below
    medium failures that block nothing)."""
    blocks = r["outcome"] != "waived" and r["severity"] in BLOCKING
    return (0 if blocks else 1, SEVERITY_RANK.get(r["severity"], 9), OUTCOME_RANK.get(r["outcome"], 9),
            VERDICT_RANK.get(verdict, 9), r["node"], r["check"])  # fmt: skip


def fold_key(r: dict[str, Any]) -> tuple[str, str, str, str]:
    """What makes two nodes' findings the same finding on a fleet page: the check, the outcome, the message and the
    container (for a pod check)."""
    return (r["check"], r["outcome"], r["message"], subject_label(r.get("subject")))


def _across_nodes(results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A fleet page's rows: the findings given (ranked, what blocks first) with the same finding on other nodes
    folded into the row of its first (the row then names them all)."""
    firsts: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in results:
        if r["outcome"] in FINDINGS:
            firsts.setdefault(fold_key(r), r)
    return [[r] for r in firsts.values()]


def _entries(results: list[dict[str, Any]], verdicts: dict[str, str]) -> list[list[dict[str, Any]]]:
    """The findings as rows: one result each, or a node's identical ones folded; what blocks first."""
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r["outcome"] in FINDINGS:
            by_node[r["node"]].append(r)
    rows: list[list[dict[str, Any]]] = []
    for rs in by_node.values():
        same: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            same[(r["outcome"], r["message"])].append(r)
        for group in same.values():
            if len(group) >= FOLD_MIN:
                rows.append(group)
            else:
                rows.extend([r] for r in group)

    def rank(group: list[dict[str, Any]]) -> tuple:
        return min(finding_key(r, verdicts.get(r["node"], "")) for r in group)

    return sorted(rows, key=rank)


def findings_section(
    results: list[dict[str, Any]], nodes: list[dict[str, Any]], of: int | None = None, same: dict[Any, Any] | None = None
) -> tuple[str, set[str]]:
    """The section, and the `NODE/CHECK` permalinks its rows hold (the matrix links its cells to them). `of`: a
    fleet page's count of every finding, when `results` holds only the first of them, what blocks first; `same`:
    a fleet page's findings across nodes (fold_key -> fleet_view.Same): one finding on many nodes is one row that
    says on how many and names the first of them, each a link."""
    verdicts = {n["name"]: n["verdict"] for n in nodes}
    entries = _across_nodes(results) if same is not None else _entries(results, verdicts)
    total = sum(len(g) for g in entries)
    used: set[str] = set()
    if not entries:
        return (
            "<section aria-label='Findings' id='gnc-findings'><h2>Findings</h2>"
            "<p>No check failed, errored or was waived.</p></section>",
            used,
        )
    drawn = (_row(group, used, same.get(fold_key(group[0])) if same is not None else None) for group in entries[:ROWS_MAX])
    rows = within_bytes(drawn, ROWS_BYTES)  # drawn one by one: no permalink of a row left out is marked used
    more = len(entries) - len(rows)
    shown = f"{total} result(s) in {len(entries)} row(s)" + (
        f"; the first {len(rows)} rows here, results.json has the other {more}" if more else ""
    )
    if same is not None:
        shown = (f"{of if of is not None else total} results of the nodes reached; the same finding on many nodes is "
                 f"one row that says on how many: the first {len(rows)} rows here (results.json has every result; a node "
                 "not reached is counted under its cause above)")  # fmt: skip
    elif of is not None and of > total:
        shown = (f"the first {total} of {of} results of the nodes reached, in {len(entries)} row(s) (results.json has "
                 "every one; a node not reached is counted under its cause above)")  # fmt: skip
    severities = "".join(f"<option>{s}</option>" for s in SEVERITY_RANK)
    outcomes = "".join(f"<option>{o}</option>" for o in FINDINGS)
    return (
        "<section aria-label='Findings' id='gnc-findings'><h2>Findings</h2>"
        f"<p>Failed, errored and waived results, what blocks acceptance first: {shown}. A node's identical errors are "
        "folded into one row. Each row's <b>#</b> is its permalink (report.html#NODE/CHECK).</p>"
        "<form class='gnc-filters' role='search' aria-label='Filter the findings' onsubmit='return false'>"
        "<label>node <input name='node' size='14'></label> <label>check <input name='check' size='14'></label> "
        f"<label>severity <select name='severity'><option value=''>any</option>{severities}</select></label> "
        f"<label>outcome <select name='outcome'><option value=''>any</option>{outcomes}</select></label> "
        "<label>search <input name='text' type='search' size='20'></label></form>"
        f"<p id='gnc-shown' aria-live='polite'>{len(rows)} of {len(rows)} rows shown</p>"
        "<table class='findings'><thead><tr><th scope='col'>outcome</th><th scope='col'>severity</th>"
        "<th scope='col'>node</th><th scope='col'>check</th><th scope='col'>message and evidence</th>"
        f"<th scope='col'><span class='sr'>permalink</span></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"{_SCRIPT}</section>",
        used,
    )


def _row(group: list[dict[str, Any]], used: set[str], same: Any = None) -> str:
    """One row: a result, a node's identical results folded, or (`same`, a fleet page) one finding on many nodes."""
    first = group[0]
    node, outcome = first["node"], first["outcome"]
    severity = min((r["severity"] for r in group), key=lambda s: SEVERITY_RANK.get(s, 9))
    ids = []
    aliases = []  # the first row of a node's check also answers #NODE/CHECK (the matrix's cells link there)
    for r in group:
        a = anchor(node, r["check"], r.get("subject"))
        if a not in used:
            used.add(a)
            ids.append(a)
        plain = anchor(node, r["check"])
        if plain != a and plain not in used:
            used.add(plain)
            aliases.append(plain)
    own = ids[0] if ids and len(group) == 1 else None
    checks = " ".join(r["check"] for r in group)
    where = subject_label(first.get("subject")) if len(group) == 1 else ""
    if len(group) == 1:
        check_cell = f"<a href='#{e(check_anchor(first['check']))}'>{e(first['check'])}</a>"
        if where:
            check_cell += f"<br><span class='subject'>{e(where)}</span>"
        message = e(first["message"])
    else:
        # every folded check keeps its own permalink target
        check_cell = ", ".join(f"<span id='{e(a)}'>{e(a.split('/', 2)[1])}</span>" for a in ids) or e(checks)
        message = f"{len(group)} checks, one {e(outcome)}: {e(first['message'])}"
    check_cell += "".join(f"<span id='{e(a)}'></span>" for a in aliases)
    spec = REGISTRY.get(first["check"])
    fix = ""
    if spec and len(group) == 1 and outcome in ("failed", "error"):
        fix = f"<p class='fix'><b>Remediation:</b> {e(spec.remediation)}</p>"
    waiver = first.get("waiver") if outcome == "waived" else None
    if isinstance(waiver, dict):  # the record an auditor asks for: why, who, where it is tracked, until when
        fix += (
            f"<p class='waiver'><b>Waived:</b> {e(str(waiver.get('justification') or '(no justification)'))}; "
            f"owner {e(str(waiver.get('owner') or '?'))}; ticket {e(str(waiver.get('ticket') or '?'))}; "
            f"expires {e(str(waiver.get('expires') or '?'))}</p>"
        )
    evidence = ""
    if first.get("evidence"):
        lines = first["evidence"][:EVIDENCE_LINES]
        more = len(first["evidence"]) - EVIDENCE_LINES
        cut = f"\n... {more} more line(s) in results.json" if more > 0 else ""
        evidence = f"<details open><summary>Evidence</summary><pre>{e(chr(10).join(lines))}{e(cut)}</pre></details>"
    target = own or (ids[0] if ids else "")
    blocks = " blocks" if severity in BLOCKING and outcome != "waived" else ""
    node_cell = f"<a href='#{e(node_anchor(node))}'>{e(node)}</a>"
    if same is not None and same.nodes > 1:
        # the other nodes' permalinks (#NODE/CHECK) land here too; the evidence shown is the first node's
        node_cell = f"<b>{same.nodes} nodes</b>: " + same.named(lambda n: f"<a href='#{e(node_anchor(n))}'>{e(n)}</a>")
        for other in same.names.kept():
            a = anchor(other, first["check"], first.get("subject"))
            if a not in used:
                used.add(a)
                check_cell += f"<span id='{e(a)}'></span>"
        if evidence:
            evidence = evidence.replace("<summary>Evidence</summary>", f"<summary>Evidence ({e(node)})</summary>", 1)
    return (
        f"<tr{f' id={chr(39)}{e(own)}{chr(39)}' if own else ''} data-node='{e(node)}' data-check='{e(checks)}' "
        f"data-subject='{e(where)}' "
        f"data-severity='{e(severity)}' data-outcome='{e(outcome)}'>"
        f"<td><span class='verdict o-{e(outcome)}'>{e(outcome)}</span></td><td class='s-{e(severity)}{blocks}'>{e(severity)}</td>"
        f"<td>{node_cell}</td><td>{check_cell}</td>"
        f"<td>{message}{fix}{evidence}</td>"
        f"<td><a class='pl' href='#{e(target)}' aria-label='permalink to {e(target)}'>#</a></td></tr>"
    )


# Filters: every field narrows the rows; the count says how many are shown and when none matches. A link to a
# row hidden by a filter clears the filters first, so a permalink always lands.
_SCRIPT = """<script>
(function () {
  var form = document.querySelector("#gnc-findings form"), shown = document.getElementById("gnc-shown");
  var rows = document.querySelectorAll("#gnc-findings tbody tr");
  function apply() {
    var f = {node: form.node.value.toLowerCase(), check: form.check.value.toLowerCase(),
             severity: form.severity.value, outcome: form.outcome.value,
             words: form.text.value.toLowerCase().split(/\\s+/).filter(Boolean)};  // every word must occur
    var n = 0;
    rows.forEach(function (r) {
      var ok = r.dataset.node.toLowerCase().indexOf(f.node) >= 0 && r.dataset.check.toLowerCase().indexOf(f.check) >= 0
        && (!f.severity || r.dataset.severity === f.severity) && (!f.outcome || r.dataset.outcome === f.outcome)
        && f.words.every(function (w) { return r.textContent.toLowerCase().indexOf(w) >= 0; });
      r.style.display = ok ? "" : "none"; if (ok) n++;
    });
    shown.textContent = n ? n + " of " + rows.length + " rows shown"
      : "No finding matches these filters (" + rows.length + " rows in all)";
  }
  form.addEventListener("input", apply); form.addEventListener("change", apply);
  function land() {
    var id = decodeURIComponent(location.hash.slice(1)), el = id && document.getElementById(id);
    // a finding a fleet page leaves out: land on its node's row (node names hold no "/")
    if (!el && id.indexOf("/") > 0 && document.getElementById("gnc-every-node")) {
      location.hash = "node-" + id.split("/")[0]; return;
    }
    var row = el && el.closest && el.closest("#gnc-findings tbody tr");
    if (row && row.style.display === "none") { form.reset(); apply(); el.scrollIntoView({block: "center"}); }
  }
  window.addEventListener("hashchange", land); land();
})();
</script>"""
