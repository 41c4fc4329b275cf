"""The results of one run as they come in, with the waivers applied to them, a baseline diff and,
for a replayed run, the document it came from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from conformance.config.waivers import Waiver, load_waivers
from conformance.config.waivers import find as find_waivers


class Ledger:
    def __init__(self) -> None:
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.results: list[dict[str, Any]] = []
        self.interrupted = False
        self.diff: dict[str, Any] | None = None
        self.replay: dict[str, Any] | None = None  # the results document a replayed run came from
        # a replay: when its documents' audits ran (the first start, the last finish) and when the replay began
        self.audits: tuple[str, str] | None = None
        self.replay_started_at = self.started_at
        self.replayed_nodes: dict[str, dict[str, Any]] = {}
        self.waivers: list[Waiver] = []
        self.waivers_file: str | None = None
        self.today = datetime.now(UTC).date()
        self._waivers_matched: set[int] = set()
        # node -> check -> the subjects ("namespace/pod/container") the run planned an item for: a check with
        # one item per container is judged on a node only when each of them has a row (issue 53.3)
        self.planned: dict[str, dict[str, list[str]]] = {}

    def load_waivers(self, path: str) -> None:
        self.waivers = load_waivers(path)
        self.waivers_file = path

    def apply_waivers(
        self, node: str, labels: dict[str, str], check: str, message: str
    ) -> tuple[str, dict[str, Any] | None, str]:
        """(outcome, waiver json, message) for a failed result."""
        matches = find_waivers(self.waivers, node, check, labels)
        self._waivers_matched.update(w.index for w in matches)
        active = [w for w in matches if not w.expired(self.today)]
        if active:
            return "waived", active[0].to_json(self.today), message
        if matches:
            w = matches[0]
            note = f" [waiver #{w.index} expired on {w.expires.isoformat()}: {w.justification}]"
            return "failed", w.to_json(self.today), message + note
        return "failed", None, message

    def waivers_json(self) -> dict[str, Any] | None:
        if self.waivers_file is None:
            return None
        return {
            "file": self.waivers_file,
            "count": len(self.waivers),
            "unused": [w.to_json(self.today) for w in self.waivers if w.index not in self._waivers_matched],
        }
