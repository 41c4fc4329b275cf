"""Results documents read as a stream of their parts: the metadata, each node record, each result, in the
order the file holds them. A results.json in the layout this tool writes (conformance.outputs.streaming:
metadata indented, one node or result per line) is read line by line, so a merged document of 50,000
nodes is never one object in memory; any other JSON (a file pretty-printed by jq, a pod log's one-line
block) is parsed whole, as it is small or was made so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conformance.errors import UsageError

Part = tuple[str, Any]  # ("meta", {key: value}), ("node", record) or ("result", result)
NOT_RESULTS = "not a gpu-node-conformance results.json (schema_version 1)"


class NotResults(UsageError):
    """A JSON file that is not a results document (a snapshot, a profile): merge passes over it."""


def parts_of_document(doc: Any, where: str) -> Iterator[Part]:
    """The parts of a parsed document, in results.json's key order."""
    if not isinstance(doc, dict) or doc.get("schema_version") != 1 or not isinstance(doc.get("results"), list):
        raise NotResults(f"{where}: {NOT_RESULTS}")
    nodes = doc.get("nodes") or []
    if not isinstance(nodes, list):
        raise UsageError(f"{where}: nodes: not a list")
    for key, value in doc.items():
        if key == "nodes":
            yield from (("node", n) for n in nodes)
        elif key == "results":
            yield from (("result", r) for r in value)
        else:
            yield "meta", {key: value}


def parts_of_text(text: str, where: str) -> Iterator[Part]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{where}: not a readable results.json: {e}") from None
    return parts_of_document(doc, where)


def parts_of_file(path: Path) -> Iterator[Part]:
    """The parts of a results.json file: line by line in this tool's layout, else parsed whole."""
    try:
        f = path.open(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{path}: not a readable results.json: {e.strerror}") from None
    with f:
        head = f.readline(), f.readline()
        if head[0] != "{\n" or not head[1].startswith('  "schema_version": '):
            try:
                rest = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise UsageError(f"{path}: not a readable results.json: {e}") from None
            yield from parts_of_text(head[0] + head[1] + rest, str(path))
            return
        if head[1].strip().rstrip(",") != '"schema_version": 1':
            raise NotResults(f"{path}: {NOT_RESULTS}")
        yield "meta", {"schema_version": 1}
        yield from _lines(f, path)


def _lines(f: Any, path: Path) -> Iterator[Part]:
    """The rest of a document in this tool's layout, from its third line: `  "key": value` (a value may go on
    over lines indented further, to a closing line at two spaces), or a list with one item per line."""
    number = 2
    listing: str | None = None
    pending: tuple[str, list[str]] | None = None
    saw_results = False
    for line in f:
        number += 1
        try:
            if listing is not None:
                if line.startswith("  ]"):
                    listing = None
                    continue
                yield ("node" if listing == "nodes" else "result"), json.loads(line.rstrip().rstrip(","))
                continue
            if pending is not None:
                pending[1].append(line)
                if line.startswith(("  }", "  ]")):
                    yield "meta", {pending[0]: json.loads("".join(pending[1]).rstrip().rstrip(","))}
                    pending = None
                continue
            if line in ("}\n", "}"):
                if not saw_results:
                    raise NotResults(f"{path}: {NOT_RESULTS}")
                return
            key_text, sep, value = line[2:].partition(": ")
            key = json.loads(key_text)
            if not sep or not line.startswith('  "'):
                raise ValueError("expected a key")
            value = value.rstrip("\n")
            if key in ("nodes", "results") and value == "[":
                listing, saw_results = key, saw_results or key == "results"
            elif value.rstrip(",") in ("{", "["):
                pending = (key, [value + "\n"])
            else:
                got = json.loads(value.rstrip(","))
                if key == "results" and not isinstance(got, list):
                    raise NotResults(f"{path}: {NOT_RESULTS}")
                saw_results = saw_results or key == "results"
                if key in ("nodes", "results"):
                    continue  # an empty list
                yield "meta", {key: got}
        except NotResults:
            raise
        except (ValueError, UnicodeDecodeError) as e:
            raise UsageError(f"{path}, line {number}: not a readable results.json: {e}") from None
    raise UsageError(f"{path}: not a readable results.json: it ends before its closing brace (cut short?)")
