"""`conformance merge`: results from many places (results.json files, folders of them, pod logs with
framed results) into one document set; nodes that were expected but sent nothing are marked."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.cluster.manifests import results_in_log
from conformance.errors import UsageError
from conformance.outputs.documents import NotResults, Part, parts_of_file, parts_of_text

MISSING = "missing"


def sources(paths: list[str], cuts: dict[str, str] | None = None) -> Iterator[tuple[str, Iterator[Part]]]:
    """Every results document under `paths`, each with its parts (conformance.outputs.documents), read as it
    is consumed: results.json files (JSON files in folders that are not results documents, such as
    snapshots, are passed over), and the framed blocks of pod logs (named `LOG#N`). A pod log's block cut
    short goes into `cuts`: node (or "" when its text names none) -> where it was cut."""
    found = 0
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UsageError(f"{p}: no such file or folder")
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.suffix in (".log", ".txt"):
                cut: list[tuple[int, str | None]] = []
                try:
                    blocks = results_in_log(f.read_text(encoding="utf-8", errors="replace"), cut)
                except ValueError as e:
                    raise UsageError(f"{f}: the pod log's results are cut short: {e}; fetch the whole log again") from None
                for n, node in cut if cuts is not None else []:
                    cuts.setdefault(node or "", f"{f}: results block {n} was cut short (another block begins before it ends)")
                for i, block in enumerate(blocks):
                    where = f"{f}: results block {i + 1}"
                    try:
                        parts = parts_of_text(block, where)
                        first = next(parts)
                    except UsageError as e:
                        raise UsageError(f"{f}: results block {i + 1} is not a results.json: {e}") from None
                    found += 1
                    yield f"{f}#{i + 1}", chain([first], parts)
            elif f.suffix == ".json" or not p.is_dir():
                parts = parts_of_file(f)
                try:
                    first = next(parts)
                except NotResults:
                    if p.is_dir():
                        continue  # snapshots and other JSON files in the same folder
                    raise
                found += 1
                yield str(f), chain([first], parts)
    if not found:
        raise UsageError(f"no results found in {', '.join(paths)} (results.json files, or pod logs with framed results)")


def missing_document(seen: set[str], expected: list[str], cuts: dict[str, str] | None = None) -> dict[str, Any] | None:
    """A results document marking the expected nodes that no source reported, or None; a node whose block in a
    pod log was cut short (`cuts`, from sources) is named as such."""
    cuts = cuts or {}
    absent = [n for n in expected if n not in seen]

    def why(n: str) -> str:
        if n in cuts:
            return f"no results: {cuts[n]}; fetch that pod's own log again"
        if "" in cuts:
            return (f"no results: its audit Job did not finish, or its log was not collected; or it is the node of "
                    f"{cuts['']}, whose text names no node")  # fmt: skip
        return "no results: its audit Job did not finish, or its log was not collected"

    if not absent:
        return None
    now = datetime.now(UTC).isoformat(timespec="seconds")
    doc: dict[str, Any] = {
        "schema_version": 1,
        "tool": {"name": "gpu-node-conformance", "version": __version__},
        "started_at": now,
        "finished_at": "",  # older than any real run: a node's real results replace this entry
        "complete": True,  # the merge is complete; the node's own verdict says what is missing
        "inventory": "(expected nodes)",
        "nodes": [
            {
                "name": n,
                "verdict": "incomplete",
                "profile": "-",
                "profile_reason": "",
                "transport": "local",
                "labels": {},
                "counts": dict.fromkeys(("passed", "failed", "error", "skipped", "waived"), 0),
                "blocking": [],
                "collection": {
                    "error": why(n),
                    "error_kind": MISSING,
                    "notes": [],
                },
            }
            for n in absent
        ],
        "checks": {},
        "results": [],
    }
    return doc


def expected_from(values: list[str]) -> list[str]:
    """Node names from `--expect` values: names, comma lists, or @FILE with one name per line."""
    names: list[str] = []
    for v in values:
        if v.startswith("@"):
            try:
                text = Path(v[1:]).read_text(encoding="utf-8")
            except OSError as e:
                raise UsageError(f"--expect {v}: {e.strerror}") from None
            names += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        else:
            names += [x.strip() for x in v.split(",") if x.strip()]
    return names
