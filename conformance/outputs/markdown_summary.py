"""summary.md: the run in a page of Markdown, for a CI job summary (GitHub Actions: append it to
$GITHUB_STEP_SUMMARY) or a ticket. Totals, nodes per profile and per pool, the nodes not accepted with why, the checks that
block the most nodes with their remediation, and what changed since the baseline. Read from results.json part
by part (conformance.outputs.documents), so a 50,000-node document costs its results' counts, not its size."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from conformance.config.check_contract import SEVERITY_RANK
from conformance.config.fleet import GROUP_LABELS, most_carried
from conformance.config.kubernetes import MISSING_FROM_AUDIT
from conformance.config.verdict import (
    ATTENTION_ORDER,
    attention_key,
    cause,
    not_reached,
    result_counts,
    verdict_counts,
    why_not_accepted,
)
from conformance.outputs.documents import parts_of_file
from conformance.outputs.fleet_view import Smallest

NODES_LISTED = 30
CHECKS_LISTED = 10
DIFF_LISTED = 20


def cell(text: Any) -> str:
    """One Markdown table cell: one line, pipes escaped, HTML not interpreted."""
    s = " ".join(str(text).split())
    s = s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return s[:300] + ("…" if len(s) > 300 else "")


class Tally:
    """What summary.md says, gathered from a results document's parts in one pass: summary_markdown reads them
    from results.json; a streamed merge feeds them as it writes that file, so that 600 MB are not read back (3 s of
    a 10,000-node merge, issue 60)."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.verdicts: Counter[str] = Counter()
        self.per_profile: dict[str, Counter[str]] = defaultdict(Counter)
        # per pool label the fleet view groups by (conformance.config.fleet.GROUP_LABELS), counted in the one pass;
        # the label most nodes carry is chosen afterwards, as group_label chooses it
        self.per_label: dict[str, dict[str, Counter[str]]] = {k: defaultdict(Counter) for k in GROUP_LABELS}
        self.first = Smallest(NODES_LISTED)  # the nodes not accepted, the first in attention order (config.verdict)
        self.causes: Counter[str] = Counter()  # nodes not reached, once each, under their cause
        self.unreached: set[str] = set()
        self.failing: dict[str, set[str]] = defaultdict(set)  # check -> nodes where it failed
        self.erroring: dict[str, set[str]] = defaultdict(set)  # check -> nodes where it errored (not reached: its cause)
        self.outcomes: Counter[str] = Counter()

    def add(self, kind: str, value: dict[str, Any]) -> None:
        """One part: "meta" (the document's other keys), "node" (a node's summary) or "result"."""
        if kind == "meta":
            self.meta.update(value)
        elif kind == "node":
            self.verdicts[value["verdict"]] += 1
            self.per_profile[value.get("profile", "default")][value["verdict"]] += 1
            labels = value.get("labels") or {}
            for key in GROUP_LABELS:
                if key in labels:
                    self.per_label[key][str(labels[key])][value["verdict"]] += 1
            if not_reached(value):
                self.unreached.add(value["name"])
                self.causes[cause(value)] += 1
            if value["verdict"] != "accepted":
                self.first.add(attention_key(value), value)
        elif kind == "result":
            self.outcomes[value.get("outcome", "?")] += 1
            if value.get("outcome") in ("failed", "error") and not value.get("waiver"):
                (self.failing if value["outcome"] == "failed" else self.erroring)[value["check"]].add(value["node"])


def summary_markdown(results: Path) -> str:
    tally = Tally()
    for kind, value in parts_of_file(results):
        tally.add(kind, value)
    return tally_markdown(tally)


def document_markdown(doc: dict[str, Any]) -> str:
    """summary.md of a whole document in memory (a live run's), as summary_markdown reads it from its file."""
    tally = Tally()
    tally.add("meta", {k: v for k, v in doc.items() if k not in ("nodes", "results")})
    for n in doc.get("nodes") or []:
        tally.add("node", n)
    for r in doc.get("results") or []:
        tally.add("result", r)
    return tally_markdown(tally)


def tally_markdown(t: Tally) -> str:
    meta, verdicts, per_profile, per_label, first = t.meta, t.verdicts, t.per_profile, t.per_label, t.first
    causes, unreached, failing, erroring, outcomes = t.causes, t.unreached, t.failing, t.erroring, t.outcomes
    not_accepted = first.kept()
    # per check, the nodes where it was judged and failed or errored: a node not reached counts under its cause
    blocking_nodes = {c: failing.get(c, set()) | (erroring.get(c, set()) - unreached) for c in {*failing, *erroring}}
    blocking_nodes = {c: ns for c, ns in blocking_nodes.items() if ns}
    checks = meta.get("checks") or {}
    total = sum(verdicts.values())
    day = str(meta.get("started_at") or "")[:10]
    lines = [f"# GPU node conformance {day}".rstrip(), ""]
    shown = verdict_counts(verdicts, "**{n} {v}**")
    state = "complete" if meta.get("complete", True) else "**interrupted**: what was not collected is incomplete"
    lines += [f"{total} node(s): {shown or 'none'}; run {state}."]
    lines += [f"\n**{cell(a)}**" for a in meta.get("api_access") or [] if MISSING_FROM_AUDIT in a]
    lines += ["", f"Results: {result_counts(outcomes)}.", ""]
    if len(per_profile) > 1 or any(p != "default" for p in per_profile):
        lines += ["| profile | " + " | ".join(ATTENTION_ORDER) + " |", "|---|" + "---:|" * len(ATTENTION_ORDER)]
        for profile, c in sorted(per_profile.items()):
            lines.append(f"| {cell(profile)} | " + " | ".join(str(c[v]) for v in ATTENTION_ORDER) + " |")
        lines.append("")
    label = most_carried({k: sum(sum(c.values()) for c in per_label[k].values()) for k in GROUP_LABELS}, total)
    if label is not None:
        lines += [f"| pool (`{cell(label)}`) | " + " | ".join(ATTENTION_ORDER) + " |", "|---|" + "---:|" * len(ATTENTION_ORDER)]
        for pool, c in sorted(per_label[label].items()):
            lines.append(f"| {cell(pool)} | " + " | ".join(str(c[v]) for v in ATTENTION_ORDER) + " |")
        lines.append("")
    if not_accepted:
        count = total - verdicts["accepted"]
        more = f" (the first {len(not_accepted)} of {count}; results.json lists all)" if count > len(not_accepted) else ""
        lines += [f"## Not accepted{more}", "", "| node | verdict | why |", "|---|---|---|"]
        lines += [f"| {cell(n['name'])} | {n['verdict']} | {cell(why_not_accepted(n, 5))} |" for n in not_accepted]
        lines.append("")
    if causes:
        lines += ["## Not reached, by cause", "", "| nodes | cause |", "|---:|---|"]
        lines += [f"| {k} | {cell(why)} |" for why, k in causes.most_common(CHECKS_LISTED)]
        if len(causes) > CHECKS_LISTED:
            lines.append(f"| {sum(causes.values()) - sum(k for _, k in causes.most_common(CHECKS_LISTED))} | "
                         f"{len(causes) - CHECKS_LISTED} more cause(s): results.json names each node's |")  # fmt: skip
        lines.append("")
    if blocking_nodes:

        def rank(check: str) -> tuple[int, int, str]:
            severity = str((checks.get(check) or {}).get("severity", "low"))
            return SEVERITY_RANK.get(severity, 9), -len(blocking_nodes[check]), check

        top = sorted(blocking_nodes, key=rank)[:CHECKS_LISTED]
        lines += ["## Checks that fail or error, by severity then nodes", "",
                  "Nodes where the check was judged; a node not reached counts once, under its cause.", "",
                  "| check | severity | nodes | remediation |", "|---|---|---:|---|"]  # fmt: skip
        for c in top:
            spec = checks.get(c) or {}
            severity, remedy = cell(spec.get("severity", "?")), cell(spec.get("remediation", ""))
            lines.append(f"| {cell(c)} | {severity} | {len(blocking_nodes[c])} | {remedy} |")
        if len(blocking_nodes) > len(top):
            lines.append(f"\nand {len(blocking_nodes) - len(top)} more check(s): report.html ranks them all")
        lines.append("")
    diff = meta.get("diff")
    if diff:
        new = diff.get("new_failures") or []
        fixed, came, went = (len(diff.get(k) or []) for k in ("fixed", "new_nodes", "vanished_nodes"))
        lines += [f"## Since the baseline ({cell(diff.get('baseline_started_at'))})", "",
                  f"{len(new)} new failure(s), {fixed} fixed, {came} new node(s), {went} vanished.", ""]  # fmt: skip
        lines += [f"- NEW {cell(r['node'])} {cell(r['check'])}: {r['was']} → {r['outcome']}" for r in new[:DIFF_LISTED]]
        if len(new) > DIFF_LISTED:
            lines.append(f"- and {len(new) - DIFF_LISTED} more (results.json `diff`)")
        lines.append("")
    lines.append("The full record: report.html (open it in a browser), results.json, junit.xml.")
    return "\n".join(lines) + "\n"


def write_summary(results: Path, out: Path, text: str | None = None) -> Path:
    """summary.md beside results.json: `text` where the run that wrote results.json made it, else read from it."""
    path = out / "summary.md"
    path.write_text(text if text is not None else summary_markdown(results), encoding="utf-8")
    return path
