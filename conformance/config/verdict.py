"""The verdict rule, in one place: how a node's results become accepted, rejected, unreachable or
incomplete. The live run, replays and merges write it into results.json; the gate reads it, and decides
again from the document's own rows, so a document that says more than its rows show accepts no node.

- **rejected**: a check that blocks (critical or high) failed or errored, unwaived. A known failure stands
  however much else was judged.
- **unreachable**: the node could not be collected (its checks report `error` with the cause).
- **incomplete**: the node's results never came (an interrupted collection, a node `merge --expect` names
  that sent nothing), or a check that blocks was not judged on it: a run narrowed with `--select`, `-k` or
  `-m`, a re-render with `--select`, a run stopped by Ctrl-C or `-x`. The node's entry names those checks.
- **accepted**: every check that blocks was judged on the node (passed, waived, or skipped as not applying)
  and none failed or errored.

Which checks must be judged (`required_checks`) and what a node's summary holds (`node_summary`) are decided
here too; the run hands in what its parts know (the collection record, the profile, the checks that block)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from conformance.config.check_contract import BLOCKING

INTERRUPTED = "interrupted"  # a collection's error kind when the run was stopped under it
MISSING = "missing"  # a node `merge --expect` names whose results never came
VERDICTS = ("accepted", "rejected", "unreachable", "incomplete")
ATTENTION_ORDER = ("rejected", "unreachable", "incomplete", "accepted")  # what needs attention first
ATTENTION_RANK = {v: i for i, v in enumerate(ATTENTION_ORDER)}


def attention_key(summary: dict[str, Any]) -> tuple[int, int, str]:
    """The one order of nodes wherever they are listed (the scope list, the verdicts, the fleet view, summary.md,
    the terminal): rejected and unreachable before incomplete before accepted; within a verdict, a node with a
    check that blocks failing or erroring before one without; then by name."""
    return ATTENTION_RANK.get(summary["verdict"], len(ATTENTION_ORDER)), 0 if summary.get("blocking") else 1, summary["name"]


def not_reached(summary: dict[str, Any]) -> bool:
    """Whether the node's collection failed (unreachable, interrupted, or it sent nothing): its errors are that
    one cause, counted once under it, never as so many checks' findings."""
    return summary["verdict"] in ("unreachable", "incomplete") and bool((summary.get("collection") or {}).get("error"))


_ADDRESS = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-fA-F:.]+\](?::\d+)?")


def cause(summary: dict[str, Any]) -> str:
    """Why the node was not reached, in one line without the node's own name and address, so that nodes failing
    alike share one line ("ssh to <address>: Connection refused (after 3 attempts)")."""
    text = " ".join(str((summary.get("collection") or {}).get("error") or "no reason recorded").split())
    name = str(summary.get("name") or "")
    if name:
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "<node>", text)
    text = re.sub(r"\bssh to [^\s:]+:\d+", "ssh to <address>", _ADDRESS.sub("<address>", text))
    return text[:160]


RESULT_WORDS = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped", "waived": "waived"}


def result_counts(counts: Mapping[str, int]) -> str:
    """Every outcome's count of results in one line, zeros too ("3 passed, 1 failed, 0 errors, ...")."""
    return ", ".join(f"{counts.get(k, 0)} {w}" for k, w in RESULT_WORDS.items())


def verdict_counts(counts: Mapping[str, int], form: str = "{n} {v}") -> str:
    """The verdict counts in one line, what needs attention first, the verdicts no node has left out."""
    return ", ".join(form.format(n=counts[v], v=v) for v in ATTENTION_ORDER if counts.get(v))


def blocking_failures(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The checks that block and failed or errored (unwaived) among a node's rows."""
    return sorted({r["check"] for r in rows if r["outcome"] in ("failed", "error") and r["severity"] in BLOCKING})


def subject_id(subject: dict[str, Any] | None) -> str:
    """A result's subject as one string: `namespace/pod/container` for a pod check's, "" for a node's own."""
    if not subject or not subject.get("pod"):
        return ""
    return "/".join(str(subject.get(k) or "") for k in ("namespace", "pod", "container"))


def not_judged(rows: Iterable[dict[str, Any]], required: Iterable[str], planned: dict[str, list[str]] | None = None) -> list[str]:
    """The checks in `required` (those that block for the node's profile) without a row for the node, and those
    with one item per container (`planned`: check -> the containers the run planned it for) missing the row of
    any container: narrowed with -k, or interrupted between two containers, a check is judged on none."""
    rows = list(rows)
    have = {r["check"] for r in rows}
    missing = set(required) - have
    judged = {(r["check"], subject_id(r.get("subject"))) for r in rows}
    for check, subjects in (planned or {}).items():
        if check in set(required) and any((check, s) not in judged for s in subjects):
            missing.add(check)
    return sorted(missing)


def verdict(rows: list[dict[str, Any]], collection: dict[str, Any] | None, unjudged: list[str]) -> str:
    if collection and collection.get("error_kind") in (MISSING, INTERRUPTED):
        return "incomplete"
    if collection and collection.get("error"):
        return "unreachable"
    if not rows:
        return "incomplete"
    if blocking_failures(rows):
        return "rejected"
    return "incomplete" if unjudged else "accepted"


def gate_verdict(summary: dict[str, Any], rows: list[dict[str, Any]], required: Iterable[str]) -> tuple[str, list[str]]:
    """The verdict the gate acts on: the document's, unless its own rows for the node say less (a check that
    blocks has no row, or a row for some of the containers it was planned for, or failed): (verdict, the checks
    not judged)."""
    unjudged = sorted(set(not_judged(rows, required, summary.get("planned"))) | set(summary.get("not_judged") or []))
    again = verdict(rows, summary.get("collection"), unjudged)
    said = summary.get("verdict", "incomplete")
    if said != "accepted":
        return said, unjudged
    return again, unjudged


def why_not_accepted(summary: dict[str, Any], listed: int = 6) -> str:
    """Why a node summary (results.json nodes[]) is not accepted, in one line: what stopped its collection,
    else the checks that block it, else the checks not judged (the first `listed` of them); "" when accepted."""
    col = summary.get("collection") or {}
    if summary["verdict"] in ("unreachable", "incomplete") and col.get("error"):
        return str(col["error"])
    if summary.get("blocking"):
        return "failed or errored: " + ", ".join(summary["blocking"])
    if summary.get("not_judged"):
        more = len(summary["not_judged"]) - listed
        return "not judged: " + ", ".join(summary["not_judged"][:listed]) + (f" and {more} more" if more > 0 else "")
    return ""


def required_checks(
    builtin_blocking: set[str],
    site_blocking: set[str],
    replay_checks: set[str] | None = None,
    recorded_unjudged: list[str] | None = None,
) -> list[str]:
    """The checks that must be judged on a node before it can be accepted: every built-in check that blocks
    (FLEET-CONSISTENT at its profile's fleet.severity), the profile's site rules that block, and in a replay
    whatever the replayed entry already lacked. A replay asks for the checks its documents knew (a document of
    another suite, or of a release without some check, is not incomplete for lacking them); what a live run left
    out, its records name."""
    ids = set(builtin_blocking)
    if replay_checks is not None:
        ids &= replay_checks
    ids |= site_blocking
    ids |= set(recorded_unjudged or [])
    return sorted(ids)


def node_summary(
    name: str, rows: list[dict[str, Any]], collection: dict[str, Any] | None, required: list[str], **about: Any
) -> dict[str, Any]:
    """A node's entry in results.json: its verdict from its rows, its collection and the checks it needed,
    the counts, the checks that block it and those not judged; `about` (profile, profile_reason, transport,
    labels, discovered) as the run knows the node."""
    counts = {o: 0 for o in ("passed", "failed", "error", "skipped", "waived")}
    for r in rows:
        counts[r["outcome"]] += 1
    planned = about.pop("planned", None) or {}
    unjudged = not_judged(rows, required, planned)
    out: dict[str, Any] = {"name": name, "verdict": verdict(rows, collection, unjudged), **about, "counts": counts,
                           "blocking": blocking_failures(rows)}  # fmt: skip
    if planned:
        out["planned"] = planned
    if unjudged:
        out["not_judged"] = unjudged
    return out
