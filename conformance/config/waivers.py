"""Waivers: a known failure, accepted for a while with a justification, shown as `waived`.

A waiver covers a failed result (never an error) when its check id or glob, node-name glob and
label selector all match and it has not expired. An expired waiver covers nothing, and the failure
says so. Waivers that match no result are listed, so stale ones get removed.

    waivers:
      - check: KUBELET-CPU-RECONCILE      # id or glob (KUBELET-*)
        nodes: "gpu-node-*"               # node-name glob, default "*"
        selector: {pool: inference}       # node labels that must all match (optional)
        justification: vendor image pins 30s until the Q1 rebuild   # required
        owner: platform-team
        ticket: https://tracker.example.com/PLAT-123
        expires: 2027-03-31               # required, YYYY-MM-DD (the waiver holds through that day)
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.config.validation import read_yaml, unknown_fields
from conformance.errors import UsageError

KEYS = {"check", "nodes", "selector", "justification", "owner", "ticket", "expires"}


@dataclass
class Waiver:
    index: int
    check: str
    justification: str
    expires: dt.date
    nodes: str = "*"
    selector: dict[str, str] = field(default_factory=dict)
    owner: str | None = None
    ticket: str | None = None

    def matches(self, node: str, check: str, labels: dict[str, str]) -> bool:
        return (
            fnmatch.fnmatchcase(check, self.check)
            and fnmatch.fnmatchcase(node, self.nodes)
            and all(labels.get(k) == v for k, v in self.selector.items())
        )

    def expired(self, today: dt.date) -> bool:
        return today > self.expires

    def to_json(self, today: dt.date) -> dict[str, Any]:
        return {
            "index": self.index,
            "check": self.check,
            "nodes": self.nodes,
            "selector": dict(self.selector),
            "justification": self.justification,
            "owner": self.owner,
            "ticket": self.ticket,
            "expires": self.expires.isoformat(),
            "expired": self.expired(today),
        }


def _date(v: Any) -> dt.date | None:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        try:
            return dt.date.fromisoformat(v.strip())
        except ValueError:
            return None
    return None


def parse_waivers(doc: Any, source: str) -> tuple[list[Waiver], list[str]]:
    """Waivers and the problems found (each naming the entry and the field)."""
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("waivers"), list):
        return [], [f"{source}: expected a mapping with a 'waivers' list"]
    out = []
    for i, w in enumerate(doc["waivers"]):
        where = f"{source}: waivers[{i}]"
        if not isinstance(w, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        unknown_fields(w, KEYS, where, problems)
        check = w.get("check")
        if not isinstance(check, str) or not check:
            problems.append(f"{where}.check: required, a check id or glob")
        just = w.get("justification")
        if not isinstance(just, str) or not just.strip():
            problems.append(f"{where}.justification: required, say why this failure is accepted")
        expires = _date(w.get("expires"))
        if expires is None:
            problems.append(f"{where}.expires: required, a date as YYYY-MM-DD (got {w.get('expires')!r})")
        nodes = w.get("nodes", "*")
        if not isinstance(nodes, str):
            problems.append(f"{where}.nodes: must be a node-name glob")
        selector = w.get("selector", {})
        if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
            problems.append(f"{where}.selector: must map label names to values")
            selector = {}
        for k in ("owner", "ticket"):
            if w.get(k) is not None and not isinstance(w.get(k), str):
                problems.append(f"{where}.{k}: must be text")
        if isinstance(check, str) and isinstance(just, str) and expires is not None and isinstance(nodes, str):
            out.append(Waiver(i, check, just.strip(), expires, nodes, dict(selector), w.get("owner"), w.get("ticket")))
    return out, problems


def load_waivers(path: str | Path) -> list[Waiver]:
    p = Path(path)
    doc = read_yaml(p, "waivers file")
    waivers, problems = parse_waivers(doc, str(p))
    if problems:
        raise UsageError("invalid waivers:\n  " + "\n  ".join(problems))
    return waivers


def lint(path: str | Path, known_checks: set[str], today: dt.date) -> list[str]:
    """Problems a reviewer should fix: malformed entries, unknown check ids, past expiry."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        return [f"{p}: cannot read: {e}"]
    waivers, problems = parse_waivers(doc, str(p))
    for w in waivers:
        where = f"{p}: waivers[{w.index}]"
        if not any(fnmatch.fnmatchcase(c, w.check) for c in known_checks):
            problems.append(f"{where}.check: {w.check!r} matches no known check id (see 'conformance checks')")
        if w.expired(today):
            problems.append(f"{where}.expires: {w.expires.isoformat()} is past; renew it with a new justification or remove it")
        if not w.owner:
            problems.append(f"{where}.owner: missing; name who answers for this waiver")
        if not w.ticket:
            problems.append(f"{where}.ticket: missing; link the issue that tracks the fix")
    return problems


def find(waivers: list[Waiver], node: str, check: str, labels: dict[str, str]) -> list[Waiver]:
    return [w for w in waivers if w.matches(node, check, labels)]
