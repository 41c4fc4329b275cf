"""What the terminal prints after a run, a report or a merge: verdicts, roll-ups, the diff and where the
reports are; the exit code."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conformance.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE
from conformance.config.kubernetes import MISSING_FROM_AUDIT
from conformance.outputs import diff_lines, push_to_gateway

SUMMARY_NODES = 50
LISTED_MAX = 100


ROLLUP_SHOWN = 10


def rollup(not_accepted: list[dict[str, Any]], total: int) -> list[str]:
    """Many nodes failing alike, one line per cause: the checks that block most of the nodes where they were
    judged, and the nodes not reached, each once, under its cause without its own name or address (of the nodes
    the summary holds: all, or a merge's first ones)."""
    from conformance.config.verdict import cause, not_reached

    checks = Counter(c for n in not_accepted if not not_reached(n) for c in n.get("blocking") or [])
    reasons = Counter(cause(n) for n in not_accepted if not_reached(n))
    narrowed = sum(1 for n in not_accepted if n["verdict"] == "incomplete" and not not_reached(n))
    of = "" if len(not_accepted) == total else f" (of the first {len(not_accepted)} nodes not accepted)"
    lines = [f"blocking checks by nodes affected{of}:"] if checks else []
    lines += [f"  {check:<34} {k} node(s)" for check, k in checks.most_common(ROLLUP_SHOWN)]
    if len(checks) > ROLLUP_SHOWN:
        lines.append(f"  and {len(checks) - ROLLUP_SHOWN} more check(s): report.html ranks them all")
    if reasons:
        lines.append(f"not reached, by cause{of}:")
        lines += [f"  {k:>6} node(s): {why}" for why, k in reasons.most_common(ROLLUP_SHOWN)]
        if len(reasons) > ROLLUP_SHOWN:
            lines.append(f"  and {len(reasons) - ROLLUP_SHOWN} more cause(s): results.json names each node's")
    if narrowed:
        lines.append(f"  {narrowed:>6} node(s) reached but not judged on every check that blocks")
    return lines


def finish(rc: int, out: Path, pushgateway: str | None, verbose: int = 0) -> int:
    """Print the verdicts, the diff and where the reports are; map to the exit codes."""
    import pytest

    results = out / "results.json"
    if rc == pytest.ExitCode.USAGE_ERROR:
        return EXIT_USAGE
    if not results.is_file():
        print(f"error: pytest ended with exit code {rc} and wrote no results", file=sys.stderr)
        return EXIT_INTERRUPTED if rc == pytest.ExitCode.INTERRUPTED else EXIT_USAGE
    from conformance.config.verdict import attention_key, result_counts, verdict_counts, why_not_accepted
    from conformance.plugin import written_summary

    doc = written_summary(results) or _read_summary(results)
    print()
    listed = doc["nodes"]
    counts: dict[str, int] = doc.get("verdicts") or dict(Counter(n["verdict"] for n in listed))
    total = doc.get("node_count", len(listed))
    if verbose and len(listed) < total:  # a streamed merge keeps only its first nodes; -v lists every node
        listed = list(_nodes_of(results))
    if total > SUMMARY_NODES and not verbose:
        print(f"{total} nodes: {verdict_counts(counts)}")
        not_accepted = sum(v for k, v in counts.items() if k != "accepted")
        listed = sorted((n for n in listed if n["verdict"] != "accepted"), key=attention_key)
        for line in rollup(listed, not_accepted):
            print(line)
        if not_accepted > LISTED_MAX:
            print(f"the first {LISTED_MAX} of {not_accepted} nodes not accepted (report.html counts all, results.json lists "
                  "all; -v lists every node):")  # fmt: skip
            listed = listed[:LISTED_MAX]
    for n in sorted(listed, key=attention_key):
        c = n["counts"]
        badge = _coloured(n["verdict"], f"{n['verdict'].upper():<11}")
        line = (
            f"{n['name']:<24} {badge} {c['passed']} passed, {c['failed']} failed, "
            f"{c['error']} errors, {c['skipped']} skipped, {c['waived']} waived (profile {n['profile']})"
        )
        reason = why_not_accepted(n, 5).removeprefix("failed or errored: ")
        print(line + (f"  - {reason}" if n["verdict"] != "accepted" and reason else ""))
        for note in (n.get("collection") or {}).get("notes", []):
            print(f"{'':<24} note: {note}")
    if doc.get("waivers") and doc["waivers"]["unused"]:
        unused = ", ".join(f"#{w['index']} ({w['check']} on {w['nodes']})" for w in doc["waivers"]["unused"])
        print(f"waivers matching nothing: {unused}")
    if doc.get("diff"):
        print()
        print("\n".join(diff_lines(doc["diff"])))
    # one count, stated once: the nodes' verdicts and their results as results.json counts them (pytest's own
    # line is not printed: a live run's item holds a node's checks, so its numbers are not the results')
    shown = verdict_counts(counts)
    line = f"\n{total} node(s): {shown or 'none'}"
    if len(doc["nodes"]) == total:
        sums = Counter[str]()
        for n in doc["nodes"]:
            sums.update(n["counts"])
        line += f"; results: {result_counts(sums)}"
    print(line + ("" if doc.get("complete", True) else "; the run was interrupted: what was not collected is incomplete"))
    # GPU nodes the discovery could not rule out (ResourceSlices it could not list): the nodes audited may all be
    # accepted, but the fleet is not known to be; never a clean exit
    doubt = [a for a in doc.get("api_access") or [] if MISSING_FROM_AUDIT in a]
    for a in doubt:
        print(a.removeprefix("WARNING: "), file=sys.stderr)
    from conformance.outputs.markdown_summary import write_summary

    summary = write_summary(results, out, doc.get("markdown"))
    print(
        f"\nreport:     {_shown_path(out / 'report.html')}\nresults:    {_shown_path(results)}"
        f"\njunit:      {_shown_path(out / 'junit.xml')}\nprometheus: {_shown_path(out / 'results.prom')}"
        f"\nsummary:    {_shown_path(summary)} (Markdown: a CI job summary)"
    )
    if pushgateway:
        try:
            push_to_gateway(pushgateway, (out / "results.prom").read_text(encoding="utf-8"))
            print(f"pushed to {pushgateway}")
        except OSError as e:
            print(f"error: {e}", file=sys.stderr)
    if rc == pytest.ExitCode.INTERRUPTED or not doc.get("complete", True):
        return EXIT_INTERRUPTED
    if not total or doubt or any(v for k, v in counts.items() if k != "accepted"):
        return EXIT_REJECTED
    return EXIT_OK


_ANSI = {"accepted": "32", "rejected": "31;1", "unreachable": "33;1", "incomplete": "33"}


def _coloured(verdict: str, text: str) -> str:
    """The verdict in colour on a terminal (never in a pipe or a CI log file, nor with NO_COLOR set)."""
    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():
        return text
    return f"\033[{_ANSI.get(verdict, '0')}m{text}\033[0m"


def _shown_path(p: Path) -> str:
    """A path as the user would type it from where they stand: relative below the working folder, else absolute."""
    full = p.resolve()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def _read_summary(results: Path) -> dict[str, Any]:
    """The summary keys of a results.json written by another process, read part by part."""
    from conformance.outputs.documents import parts_of_file

    doc: dict[str, Any] = {"nodes": []}
    for kind, value in parts_of_file(results):
        if kind == "meta":
            doc.update(value)
        elif kind == "node":
            doc["nodes"].append(value)
        else:
            break  # the summary keys come before the results
    return doc


def _nodes_of(results: Path) -> Iterator[dict[str, Any]]:
    from conformance.outputs.documents import parts_of_file

    for kind, value in parts_of_file(results):
        if kind == "result":
            return
        if kind == "node":
            yield value


# The commands in the order `conformance --help` lists them; each one's table sits with its function above.
