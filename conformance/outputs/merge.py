"""`conformance merge`: results from many places (results.json files, folders of them, pod logs with
framed results) into one document set; nodes that were expected but sent nothing are marked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.cluster.manifests import results_in_log
from conformance.errors import UsageError
from conformance.outputs import load_results, results_from_text

MISSING = "missing"


def gather(paths: list[str]) -> list[tuple[Path, dict[str, Any]]]:
    """Every results document under `paths`: results.json files, and the framed blocks of pod logs
    (named `LOG#N`), each with its parsed content."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UsageError(f"{p}: no such file or folder")
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.suffix == ".json":
                try:
                    found.append((f, load_results(f)))
                except UsageError:
                    continue  # snapshots and other JSON files in the same folder
            elif f.suffix in (".log", ".txt"):
                for i, doc in enumerate(results_in_log(f.read_text(encoding="utf-8", errors="replace"))):
                    try:  # parsed once, here; the block's path names it in messages
                        found.append((Path(f"{f}#{i + 1}"), results_from_text(doc, f"{f}: results block {i + 1}")))
                    except UsageError as e:
                        raise UsageError(f"{f}: results block {i + 1} is not a results.json: {e}") from None
    if not found:
        raise UsageError(f"no results found in {', '.join(paths)} (results.json files, or pod logs with framed results)")
    return found


def missing_nodes(found: list[tuple[Path, dict[str, Any]]], expected: list[str]) -> dict[str, Any] | None:
    """A results document marking the expected nodes that no source reported, or None."""
    seen = {n["name"] for _, doc in found for n in doc["nodes"]}
    absent = [n for n in expected if n not in seen]
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
                    "error": "no results: its audit Job did not finish, or its log was not collected",
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


def merged_document(docs: list[dict[str, Any]], sources: list[str]) -> dict[str, Any]:
    """One results.json holding every node's latest run from `docs` (as `conformance report` of all of
    them would replay them), named after the merge's sources."""
    from conformance.outputs.replay import merge_parsed

    m = merge_parsed(docs, sources)
    finished = max((d.get("finished_at") or "" for d in docs), default="")
    return {
        "schema_version": 1,
        "tool": {"name": "gpu-node-conformance", "version": __version__},
        "started_at": m["started_at"],
        "finished_at": finished,
        "complete": m["complete"],
        "inventory": f"merged from {len(docs)} document(s) in {', '.join(sources)}",
        "nodes": m["nodes"],
        "checks": m["checks"],
        "results": m["results"],
        **({"waivers": m["waivers"]} if m.get("waivers") is not None else {}),
        **({"api_access": m["api_access"]} if m.get("api_access") else {}),
    }
