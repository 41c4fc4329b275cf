"""The report's fleet view, for runs too large for a node x check matrix: verdict counts per profile
and per node group, a check x group table of failure counts that expands to the failing nodes, and a
searchable list of the nodes. Up to NODE_LIST_MAX nodes and MESSAGES_SHOWN messages per failing check,
nothing is dropped (behind a <details> where it would otherwise drown the overview); above, the page
says how many it leaves out, and results.json and junit.xml have every one.

The group is a node label: the one named with `--group-by`, else the first of GROUP_LABELS that most
nodes carry (node pools of the common installers and clouds), else the profile."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from conformance.checks import REGISTRY
from conformance.config.check_contract import BLOCKING, SEVERITY_RANK
from conformance.config.fleet import IDENTITY_ATTRIBUTES, group_label, group_of, pools
from conformance.config.verdict import attention_key, cause, not_reached
from conformance.outputs import FAILING
from conformance.outputs.findings import finding_key, fold_key
from conformance.outputs.page_budget import within_bytes
from conformance.outputs.palette import VERDICT_COLOURS
from conformance.outputs.safe_text import e

# Above this many nodes the report shows the fleet view and drops the node x check matrix and the
# per-node verdict rows of accepted nodes (each node stays in the fleet view's node list).
MATRIX_MAX_NODES = 300
VERDICTS = tuple(VERDICT_COLOURS)


def _counts_table(title: str, rows: dict[str, Counter[str]]) -> str:
    head = "".join(f"<th>{v}</th>" for v in VERDICTS)
    body = "".join(
        f"<tr><td>{e(name)}</td><td>{sum(c.values())}</td>" + "".join(f"<td>{c.get(v, 0)}</td>" for v in VERDICTS) + "</tr>"
        for name, c in sorted(rows.items())
    )
    return f"<table class='fleet'><tr><th>{e(title)}</th><th>nodes</th>{head}</tr>{body}</table>"


# Bounded lists, so that the page of 50,000 nodes stays light: the nodes listed, and per failing check the
# failing results named; the page says how many it leaves out and that results.json and junit.xml have all.
NODE_LIST_MAX = 2000
# A failing check's results, folded: the same outcome and message on many nodes is one line that says on how many
# and names the first NAMES_SHOWN (each a link); the MESSAGES_SHOWN most frequent messages are listed, up to
# MESSAGES_TRACKED distinct messages are counted (a message unique to each node folds nothing and stops being
# counted there). So a check's lines are bounded in bytes whatever the fleet (issue 60: 1.2 MB at 1,000 nodes).
NAMES_SHOWN = 20
MESSAGES_SHOWN = 10
MESSAGES_TRACKED = 500
# findings folded across nodes (check, outcome, message, container), counted for this many distinct findings
FOLDS_TRACKED = 5000
# A page above MATRIX_MAX_NODES nodes, live or merged: the nodes with failing results that get rows in the
# results table, and the non-accepted nodes in the verdict table; the page says how many it leaves out.
TABLE_NODES_MAX = 500
# and about the bytes their rows may add to the page: pytest-html keeps each row's cells, log and extras (the message
# and the evidence) as escaped JSON in the page, about 4 KB a result (8 MB for 2,000 results of 112 nodes, issue 60)
TABLE_BYTES_MAX = 1_500_000
ROW_BYTES = 1500  # a row's share of pytest-html's JSON besides its message and evidence, measured on such a page


def row_bytes(result: dict[str, Any]) -> int:
    """About what a failing result's row adds to the page: its message twice (the log and the extra), its evidence
    once, each escaped once for JSON and once for the HTML attribute that holds it."""
    text = 2 * len(str(result.get("message") or "")) + sum(len(str(x)) + 1 for x in result.get("evidence") or ())
    return ROW_BYTES + 2 * text


VERDICT_ROWS_MAX = 1000
# and by bytes (a row names its blocking checks or why it was not reached): these sections stay this size whatever
# the fleet and whatever its messages (issue 60)
VERDICT_ROWS_BYTES = 500_000
NODE_LIST_BYTES = 600_000


class FleetSummary:
    """What the fleet view shows, gathered node by node (a merge streams 50,000 nodes through it): verdict
    counts per profile and group, per failing check the nodes per group and its messages folded, the first
    FINDINGS_KEPT findings (what blocks first) and each finding's nodes (FOLDS_TRACKED of them), and the first
    NODE_LIST_MAX nodes of the node list in attention order."""

    def __init__(self, label: str | None, drift: str = "") -> None:
        self.label = label
        self.drift = drift  # the drift section, made from every node's identity record (drift_section)
        self.total: Counter[str] = Counter()
        self.by_profile: dict[str, Counter[str]] = defaultdict(Counter)
        self.by_group: dict[str, Counter[str]] = defaultdict(Counter)
        self.failing: dict[str, _Failing] = {}
        self.causes: Counter[str] = Counter()  # nodes not reached, each once, under its cause
        self.findings = Smallest(FINDINGS_KEPT)  # the failing and waived results the findings show, what blocks first
        self.finding_results = 0
        self.same: dict[tuple[str, str, str, str], Same] = {}  # one finding on many nodes: findings.fold_key
        self.listed = Smallest(NODE_LIST_MAX)
        self.compact: list[list[str]] = []

    @classmethod
    def of(cls, nodes: list[dict[str, Any]], results: list[dict[str, Any]], wanted_label: str | None = None) -> FleetSummary:
        """The summary of a whole document's nodes and results."""
        rows: dict[str, list[dict[str, Any]]] = {n["name"]: [] for n in nodes}
        for r in results:
            rows.setdefault(r["node"], []).append(r)
        summary = cls(group_label(nodes, wanted_label), drift_section(nodes, wanted_label))
        for n in nodes:
            summary.add(n, rows[n["name"]])
        return summary

    def add(self, n: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        group = group_of(n, self.label)
        self.total[n["verdict"]] += 1
        self.by_profile[n.get("profile", "-")][n["verdict"]] += 1
        self.by_group[group][n["verdict"]] += 1
        checks: list[str] = []
        unreached = not_reached(n)
        if unreached:
            self.causes[cause(n)] += 1
        for r in rows:
            if r["outcome"] == "error" and unreached:
                continue  # the node's one cause, counted above, not an error of each check
            if r["outcome"] in FAILING or r["outcome"] == "waived":
                self.finding_results += 1
                self.findings.add(finding_key(r, n["verdict"]), r)
                key = fold_key(r)
                same = self.same.get(key)
                if same is None and len(self.same) < FOLDS_TRACKED:
                    same = self.same[key] = Same()
                    same.first = (finding_key(r, n["verdict"]), r)
                if same is not None:
                    same.add(n["name"])
            if r["outcome"] in FAILING:
                failing = self.failing.setdefault(r["check"], _Failing(r["severity"]))
                failing.add(n["name"], group, r)
                if r["check"] not in checks:
                    checks.append(r["check"])
        reason = ((n.get("collection") or {}).get("error") or "") if n["verdict"] in ("unreachable", "incomplete") else ""
        self.listed.add(
            attention_key(n),
            f"<tr id='node-{e(n['name'])}'><td><a href='#node-{e(n['name'])}'>{e(n['name'])}</a></td><td>{e(n['verdict'])}</td>"
            f"<td>{e(n.get('profile', '-'))}</td><td>{e(group)}</td><td>{e(reason or ', '.join(checks))}</td></tr>",
        )
        # every node, compact, for the search and the permalinks of the nodes the list above leaves out
        self.compact.append([n["name"], n["verdict"], n.get("profile", "-"), group, (reason or ", ".join(checks))[:200]])

    @property
    def nodes(self) -> int:
        return sum(self.total.values())

    def folded_findings(self) -> list[dict[str, Any]]:
        """The findings a fleet page shows, what blocks first: the first result of each finding, however many nodes
        repeat it (so that no finding is crowded out by another's repetitions), and the first results kept of the
        findings past FOLDS_TRACKED."""
        firsts = [same.first for same in self.same.values() if same.first is not None]
        rest = [(finding_key(r), r) for r in self.findings.kept() if fold_key(r) not in self.same]
        return [r for _, r in sorted([*firsts, *rest], key=lambda kr: kr[0])]


class Smallest:
    """The `limit` entries with the smallest keys (ties: the first added), of any number added."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: list[tuple[Any, int, Any]] = []
        self.seen = 0

    def add(self, key: Any, item: Any) -> None:
        self.entries.append((key, self.seen, item))
        self.seen += 1
        if len(self.entries) > 2 * self.limit:
            self.entries = sorted(self.entries)[: self.limit]

    def kept(self) -> list[Any]:
        return [item for _, _, item in sorted(self.entries)[: self.limit]]


class Same:
    """One finding on many nodes: on how many (the results of one node come together), and the first NAMES_SHOWN
    of them by name."""

    __slots__ = ("_last", "first", "names", "nodes", "results")

    def __init__(self) -> None:
        self.nodes = 0
        self.results = 0  # a node may have it more than once (one per GPU, per container)
        self.names = Smallest(NAMES_SHOWN)
        self._last = ""
        self.first: tuple[Any, dict[str, Any]] | None = None  # a finding's: (its rank, its first result)

    def add(self, node: str) -> None:
        self.results += 1
        if node != self._last:
            self._last = node
            self.nodes += 1
            self.names.add(node, node)

    def named(self, link: Any) -> str:
        """The nodes named, each by `link(node)`, and how many more there are."""
        names = self.names.kept()
        more = self.nodes - len(names)
        return ", ".join(link(n) for n in names) + (f" and {more} more" if more > 0 else "")


class _Failing:
    """One check's failing results across the fleet, folded by outcome and message."""

    def __init__(self, severity: str) -> None:
        self.severity = severity
        self.per_group: Counter[str] = Counter()
        self.nodes = 0
        self.results = 0
        self.messages: dict[tuple[str, str], Same] = {}
        self.untracked = 0  # results whose message came after MESSAGES_TRACKED others
        self._last = ""

    def add(self, node: str, group: str, r: dict[str, Any]) -> None:
        if node != self._last:  # the results of one node come together
            self._last = node
            self.per_group[group] += 1
            self.nodes += 1
        self.results += 1
        key = (r["outcome"], r["message"][:300])
        same = self.messages.get(key)
        if same is None:
            if len(self.messages) >= MESSAGES_TRACKED:
                self.untracked += 1
                return
            same = self.messages[key] = Same()
        same.add(node)

    def lines(self, check: str) -> str:
        """The most frequent messages, each with the nodes it is on (each links to its finding, #NODE/CHECK; a
        finding the page leaves out lands on the node's row), and what the lines leave out."""
        top = sorted(self.messages.items(), key=lambda kv: (-kv[1].nodes, kv[0]))
        out = []
        for (outcome, message), same in top[:MESSAGES_SHOWN]:
            nodes = same.named(lambda n: f"<a href='#{e(n)}/{e(check)}'>{e(n)}</a>")
            out.append(f"<li><b>{same.nodes} node(s)</b> {e(outcome)}: {e(message)} <span class='nodes'>({nodes})</span></li>")
        shown = sum(s.results for _, s in top[:MESSAGES_SHOWN])
        others = len(top) - MESSAGES_SHOWN + (1 if self.untracked else 0)
        if self.results > shown:
            out.append(f"<li>and {self.results - shown} more failing result(s)"
                       f"{f' with other messages ({others} or more)' if others > 0 else ''}: results.json and junit.xml "
                       "have every one</li>")  # fmt: skip
        return "".join(out)


def fleet_view(summary: FleetSummary) -> str:
    total = summary.total
    badges = " ".join(
        f"<span class='verdict v-{v}'>{total.get(v, 0)} {v}</span>" for v in VERDICTS if total.get(v, 0) or v == "accepted"
    )
    label = summary.label
    grouped = f"label <code>{e(label)}</code>" if label else "profile (no pool label on most nodes; name one with --group-by)"
    parts = [
        # elementtiming: the browser records when this text is painted (benchmarks/merge_scale.py reads it)
        f"<h2>Fleet overview</h2><p class='fleet-total' elementtiming='gnc-fleet-total'>{summary.nodes} nodes: {badges}</p>",
        _counts_table("profile", summary.by_profile),
        f"<p>Nodes grouped by {grouped}.</p>",
        _counts_table("group", summary.by_group),
        _causes(summary),
        _check_by_group(summary),
        summary.drift,
        _node_list(summary),
    ]
    return "".join(parts)


DRIFT_SHOWN = 20  # nodes named per attribute; the rest are counted


def drift_section(nodes: list[dict[str, Any]], wanted_label: str | None = None, linked: bool = True) -> str:
    """Per group, each identity attribute whose nodes do not all agree: its values with node counts, and the
    nodes off the majority value (or every node, where there is no majority), linked to their rows."""
    if not any(n.get("identity") is not None for n in nodes) or len(nodes) < 2:
        return ""  # a fleet of one has no peers: nothing drifts from anything (issue 54)
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
            names = ", ".join(f"<a href='#node-{e(x)}'>{e(x)}</a>" if linked else e(x) for x in off[:DRIFT_SHOWN])
            names += f" and {len(off) - DRIFT_SHOWN} more" if len(off) > DRIFT_SHOWN else ""
            values = ", ".join(f"{e(v)} on {c}" for v, c in counts.most_common(6)) or "no node's value known"
            if len(counts) > 6:
                values += f", and {len(counts) - 6} more value(s)"
            if unknown:
                why = Counter(str((n.get("identity_errors") or {}).get(attr) or "not in the record") for n in recorded
                              if n["identity"].get(attr) is None).most_common(1)[0][0]  # fmt: skip
                values += f"; unknown on {unknown} (for example: {e(why[:160])})"
            off_cell = f"{'' if top else 'no majority: '}{names}" if off else "none with a known value"
            rows.append(f"<tr><td>{e(attr)}</td><td>{values}</td><td>{off_cell}</td></tr>")
        if rows:
            blocks.append(
                f"<h4>{e(g)}</h4><table class='fleet'><tr><th>attribute</th><th>values (nodes)</th>"
                f"<th>nodes off the majority</th></tr>{''.join(rows)}</table>"
            )
    if not blocks:
        return "<h3 id='gnc-drift'>Fleet drift</h3><p>In every group, every node's identity record agrees with its peers'.</p>"
    return (
        "<h3 id='gnc-drift'>Fleet drift</h3><p>What nodes of one group do not share (FLEET-CONSISTENT judges it): each "
        "attribute's values with the nodes that have them; a digest stands for a configuration (its files and "
        "results.json name the node's settings).</p>" + "".join(blocks)
    )


CAUSES_SHOWN = 20
FINDINGS_KEPT = 2000  # findings.ROWS_MAX: the findings section of a fleet page shows at most this many


def _causes(summary: FleetSummary) -> str:
    """The nodes not reached, counted once each under their cause (their errors stay out of the checks' tallies)."""
    if not summary.causes:
        return ""
    rows = "".join(f"<tr><td class='n'>{k}</td><td>{e(why)}</td></tr>" for why, k in summary.causes.most_common(CAUSES_SHOWN))
    more = len(summary.causes) - CAUSES_SHOWN
    tail = f"<p>and {more} more cause(s): the node list names each node's.</p>" if more > 0 else ""
    return (
        f"<h3>Not reached, by cause</h3><p>{sum(summary.causes.values())} node(s) could not be collected or sent "
        "nothing; each counts once here, and its errors are not counted against the checks below.</p>"
        f"<table class='fleet'><tr><th>nodes</th><th>cause</th></tr>{rows}</table>{tail}"
    )


def _check_by_group(summary: FleetSummary) -> str:
    """Rows: checks with failed or errored results; cells: how many nodes of each group; the row
    expands to its messages, each with the nodes it is on (_Failing.lines)."""
    if not summary.failing:
        return "<p>No check failed or errored on any node.</p>"
    names = sorted(summary.by_group)
    head = "".join(f"<th>{e(g)}</th>" for g in names)
    rows = []
    # what blocks acceptance first (critical, then high), then by the nodes it affects
    for check, f in sorted(summary.failing.items(), key=lambda kv: (SEVERITY_RANK.get(kv[1].severity, 9), -kv[1].nodes, kv[0])):
        cells = "".join(f"<td class='n{' hot' if f.per_group.get(g) else ''}'>{f.per_group.get(g, '')}</td>" for g in names)
        spec = REGISTRY.get(check)
        severity = f"<b>{e(f.severity)}: blocks</b>" if f.severity in BLOCKING else e(f.severity)
        rows.append(
            f"<tr><td>{e(check)}</td><td>{severity}</td>{cells}"
            f"<td><details><summary>{f.nodes} node(s)</summary><ul>{f.lines(check)}</ul></details></td>"
            f"<td>{e(spec.remediation) if spec else ''}</td></tr>"
        )
    return (
        "<h3>Failed or errored checks by group</h3><p>Nodes with a failed or errored result, per group, the checks "
        "that block acceptance first; a node not reached counts under its cause above, not here. Open a row for the "
        "nodes and their messages.</p>"
        f"<table class='fleet'><tr><th>check</th><th>severity</th>{head}<th>nodes</th><th>remediation</th></tr>"
        f"{''.join(rows)}</table>"
    )


def _node_list(summary: FleetSummary) -> str:
    """The nodes, one row each (non-accepted first, then by name; the first NODE_LIST_MAX, up to NODE_LIST_BYTES), with
    their failing checks; every node, compact, as data: the search finds any node of the fleet and says when none matches,
    and `#node-NAME` lands on any node, listed or not."""
    listed = summary.listed
    rows = within_bytes(listed.kept(), NODE_LIST_BYTES)
    shown = f"{summary.nodes} nodes (rejected, unreachable, incomplete, then accepted)"
    if listed.seen > len(rows):
        shown += f"; the first {len(rows)} listed here, results.json lists all {listed.seen}, the search finds any"
    data = json.dumps(summary.compact, separators=(",", ":")).replace("<", "\\u003c")
    return (
        f"<h3>Every node</h3><details id='gnc-every-node'><summary>{shown}; search: name, verdict, group "
        "or check</summary><label>find nodes <input id='gnc-find' type='search' size='40'></label>"
        "<p id='gnc-found' aria-live='polite'></p>"
        "<table class='fleet' id='gnc-nodes'><thead><tr><th>node</th><th>verdict</th><th>profile</th><th>group</th>"
        f"<th>failed or errored checks / reason</th></tr></thead><tbody>{''.join(rows)}</tbody></table></details>"
        f"<script type='application/json' id='gnc-all-nodes'>{data}</script>{_NODE_SCRIPT}"
    )


# The search runs over every node's compact record (not only the rows listed) and shows up to SHOWN matches;
# a `#node-NAME` that no listed row holds gets its row made from the record.
_NODE_SCRIPT = """<script>
(function () {
  var all = JSON.parse(document.getElementById("gnc-all-nodes").textContent), SHOWN = 500;
  var body = document.querySelector("#gnc-nodes tbody"), listed = body.innerHTML;
  var box = document.getElementById("gnc-find"), found = document.getElementById("gnc-found");
  function row(n) {
    var tr = document.createElement("tr"); tr.id = "node-" + n[0];
    n.forEach(function (v, i) {
      var td = document.createElement("td");
      if (i === 0) { var a = document.createElement("a"); a.href = "#node-" + v; a.textContent = v; td.appendChild(a); }
      else td.textContent = v;
      tr.appendChild(td);
    });
    return tr;
  }
  box.addEventListener("input", function () {
    var q = box.value.toLowerCase();
    if (!q) { body.innerHTML = listed; found.textContent = ""; return; }
    var words = q.split(/\\s+/).filter(Boolean);  // every word must occur
    var hits = all.filter(function (n) {
      var t = n.join(" ").toLowerCase();
      return words.every(function (w) { return t.indexOf(w) >= 0; });
    });
    body.textContent = "";
    hits.slice(0, SHOWN).forEach(function (n) { body.appendChild(row(n)); });
    found.textContent = hits.length === 0 ? "No node matches \u201c" + box.value + "\u201d (" + all.length + " nodes searched)"
      : hits.length + " node(s) match" + (hits.length > SHOWN ? "; the first " + SHOWN + " shown" : "");
  });
  function land() {
    var id = decodeURIComponent(location.hash.slice(1));
    if (id.indexOf("node-") !== 0 || document.getElementById(id)) return;
    var n = all.filter(function (x) { return "node-" + x[0] === id; })[0];
    if (!n) return;
    document.getElementById("gnc-every-node").open = true;
    var tr = row(n); body.insertBefore(tr, body.firstChild); tr.scrollIntoView({block: "center"});
  }
  window.addEventListener("hashchange", land); land();
})();
</script>"""
