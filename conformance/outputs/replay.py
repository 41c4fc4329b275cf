"""Replay: results.json files become a pytest session again, so re-rendered and merged reports come
from the same report code as live runs (HTML, JUnit, Prometheus, results.json).

Several files merge by node: for a node present in more than one, the run that finished last wins
(a rerun replaces an earlier attempt)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.checks import REGISTRY, CheckSpec
from conformance.config.inventory import Inventory, NodeSpec
from conformance.errors import FactUnavailable
from conformance.outputs import load_results


def merge_documents(paths: list[str]) -> dict[str, Any]:
    docs = sorted((load_results(p) for p in paths), key=lambda d: d.get("finished_at") or "")
    nodes: dict[str, dict[str, Any]] = {}
    results: dict[str, list[dict[str, Any]]] = {}
    checks: dict[str, Any] = {}
    for d in docs:  # later runs replace earlier ones, node by node
        checks.update(d.get("checks") or {})
        for n in d["nodes"]:
            nodes[n["name"]] = n
            results[n["name"]] = [r for r in d["results"] if r["node"] == n["name"]]
    return {
        "sources": list(paths),
        "started_at": min((d.get("started_at") or "" for d in docs), default=""),
        "complete": all(d.get("complete", True) for d in docs),
        "inventory": ", ".join(d.get("inventory", "") for d in docs),
        "nodes": list(nodes.values()),
        "checks": checks,
        "results": [r for name in nodes for r in results[name]],
        "waivers": docs[-1].get("waivers") if docs else None,
    }


def register_checks(checks: dict[str, Any]) -> None:
    for cid, c in checks.items():
        if cid not in REGISTRY:
            REGISTRY[cid] = CheckSpec(cid, c["severity"], c["title"], c["rationale"], c["remediation"], c["source"], c["family"])


def inventory_of(doc: dict[str, Any]) -> Inventory:
    return Inventory(
        f"(replayed from {', '.join(doc['sources'])})",
        [NodeSpec(name=n["name"], transport=n.get("transport", "ssh"), labels=n.get("labels") or {}) for n in doc["nodes"]],
    )


class ReplayItem(pytest.Item):
    """One recorded result, replayed with its outcome and message."""

    def __init__(self, *, result: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.result = dict(result)

    def setup(self) -> None:
        if self.result["outcome"] == "error":
            raise FactUnavailable(self.result["message"])

    def runtest(self) -> None:
        outcome, message = self.result["outcome"], self.result["message"]
        if outcome == "failed":
            raise AssertionError(message)
        if outcome == "skipped":
            pytest.skip(message)
        if outcome == "waived":
            pytest.xfail(f"waived: {(self.result.get('waiver') or {}).get('justification', '')}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        # the recorded message is the whole story; no traceback to format (that costs ~0.2 s each)
        r = self.result
        return f"{r['outcome'].upper()} [{r['check']}] {r['node']}: {r['message']}"

    def reportinfo(self) -> tuple[str, int, str]:
        return "replay", 0, f"{self.result['node']}::{self.result['check']}"


def _safe(text: Any) -> str:
    # pytest-html writes test ids into the page unescaped; a results.json is data, so keep ids plain
    return re.sub(r"[^A-Za-z0-9._:=/-]", "_", str(text))


def make_items(session: pytest.Session, doc: dict[str, Any]) -> list[ReplayItem]:
    items = []
    for r in doc["results"]:
        sub = "".join(f"[{_safe(k)}={_safe(v)}]" for k, v in sorted((r.get("subject") or {}).items()))
        items.append(ReplayItem.from_parent(session, name=f"{_safe(r['node'])}::{_safe(r['check'])}{sub}", result=r))
    return items
