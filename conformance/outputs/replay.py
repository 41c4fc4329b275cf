"""Replay: results.json files become a pytest session again, so re-rendered and merged reports come
from the same report code as live runs (HTML, JUnit, Prometheus, results.json).

Several files merge by node (conformance.run.node_spool): for a node present in more than one, the run
that finished last wins (a rerun replaces an earlier attempt)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.checks import REGISTRY
from conformance.config.check_contract import CheckSpec
from conformance.config.fleet import FLEET_CHECK_ID
from conformance.config.inventory import Inventory, NodeSpec
from conformance.errors import FactUnavailable


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


def safe_id(text: Any) -> str:
    # pytest-html writes test ids into the page unescaped; a results.json is data, so keep ids plain
    return re.sub(r"[^A-Za-z0-9._:=/-]", "_", str(text))


class NodeReplayItem(pytest.Item):
    """All recorded results of one node, replayed as one pytest item: merging and re-rendering a large
    fleet pay pytest's per-item cost per node, not per result. The results recorded, and so results.json,
    JUnit and Prometheus, are the same as with one item per result (the per-result test ids are kept)."""

    def __init__(self, *, results: list[dict[str, Any]], total: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.results = results  # the replayed document's own dicts: no copy of 500,000 results
        self.total = len(results) if total is None else total  # a streamed replay gives the failing ones only
        for r in self.results:
            if "test" not in r:  # a live run's results carry their own test id
                r["test"] = result_id(r)

    def runtest(self) -> None:
        failing = [r for r in self.results if r["outcome"] in ("failed", "error")]
        if failing:
            raise AssertionError(node_summary_message(failing))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[str, int, str]:
        return "replay", 0, self.name


def node_summary_message(failing: list[dict[str, Any]]) -> str:
    checks = ", ".join(dict.fromkeys(r["check"] for r in failing))
    return f"{len(failing)} failed or errored result(s): {checks}"


# Above this many results a replay is streamed node by node, with an item per node of the report's table
# (conformance.run.streamed): RESULT_ROWS_MAX x ~1.5 ms of pytest per item, and the results held in memory.
RESULT_ROWS_MAX = 20_000


def result_id(r: dict[str, Any]) -> str:
    """The test id a replayed result gets when its document has none (a live run records its own)."""
    sub = "".join(f"[{safe_id(k)}={safe_id(v)}]" for k, v in sorted((r.get("subject") or {}).items()))
    return f"{safe_id(r['node'])}::{safe_id(r['check'])}{sub}"


def make_items(session: pytest.Session, doc: dict[str, Any]) -> list[pytest.Item]:
    """Replay items, one per result of a document held in memory. The drift check's results are left out: the
    run judges them again over the nodes it replays (Run.judge_fleet)."""
    return [ReplayItem.from_parent(session, name=result_id(r), result=r) for r in doc["results"] if r["check"] != FLEET_CHECK_ID]
