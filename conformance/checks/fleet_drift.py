"""FLEET-CONSISTENT: a node that runs something else than its peers (another driver, kernel, kubelet or
runtime configuration) is what no single-node check sees and what slows or hangs a multi-node job.

Judged over the node records of a whole run (each node's identity record, conformance.facts.identity),
the same way for a live run, a replay of snapshots, `report` and `merge`: within each group of nodes
(conformance.config.fleet), an attribute's reference is the value a strict majority of the nodes with a
known value have, or the profile's `fleet.pin`. A node whose value differs fails; a group without a
majority (a rollout half done) is said, not failed; an attribute the node's record does not know is an
error."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from conformance.checks import REGISTRY
from conformance.config.check_contract import CheckSpec
from conformance.config.fleet import FLEET_CHECK_ID, Pool, pools
from conformance.errors import FactUnavailable, clipped

FLEET_CHECK = CheckSpec(
    id=FLEET_CHECK_ID,
    severity="medium",
    title="The node runs what its peers in the pool run",
    rationale=(
        "A pool is only as fast as its slowest rank: one node with another driver, kernel, kubelet or runtime "
        "configuration than its peers is the classic cause of collective hangs and slow ranks, and no check of "
        "that node alone can see it. Each attribute of the node's identity record is compared with its pool's "
        "majority (or the profile's pin)."
    ),
    remediation="Bring the node to its pool's value (the evidence names the attribute, the node's value and the "
    "majority's), or pin the intended value in the profile (fleet.pin) during a rollout.",
    source="the nodes' identity records (results.json nodes[].identity), grouped as the fleet view groups them",
    family="fleet",
)
REGISTRY.setdefault(FLEET_CHECK.id, FLEET_CHECK)
SHOWN = 60  # characters of a value shown in a message


_short = functools.partial(clipped, limit=SHOWN)


def drift_results(
    nodes: list[dict[str, Any]], setting: Callable[[str, str], Any], wanted_label: str | None = None
) -> list[dict[str, Any]]:
    """One FLEET-CONSISTENT result per node of `nodes` (node summaries as results.json holds them).
    `setting(node, key)` reads the node's profile (fleet.severity, fleet.attributes, fleet.pin)."""
    judge = DriftJudge(nodes, setting, wanted_label)
    return [judge.result(name) for name in judge.order()]


class DriftJudge:
    """The pools of a whole fleet, made once; then any node's FLEET-CONSISTENT result, in any order (a merge
    streams its nodes), and the order drift_results gives them in (pool by pool)."""

    def __init__(self, nodes: list[dict[str, Any]], setting: Callable[[str, str], Any], wanted_label: str | None) -> None:
        label, self.groups = pools(nodes, wanted_label)
        where = f"{label} {{}}" if label else "{}"
        self.setting = setting
        self._of = {n["name"]: (n, pool, where.format(pool.name)) for pool in self.groups.values() for n in pool.members}

    def order(self) -> list[str]:
        return [n["name"] for pool in self.groups.values() for n in pool.members]

    def result(self, name: str) -> dict[str, Any]:
        n, pool, group = self._of[name]
        return _judge(n, pool, group, self.setting)


def _judge(n: dict[str, Any], pool: Pool, group: str, setting: Callable[[str, str], Any]) -> dict:
    name, size = n["name"], len(pool.members)
    identity = n.get("identity")
    errors = n.get("identity_errors") or {}
    problems, unknown, notes, evidence = [], [], [], []
    compared, alone = 0, []  # attributes compared with peers or a pin; those no peer knows
    if identity is None:
        why = (n.get("collection") or {}).get("error")
        unknown.append(
            f"no identity record: node {name} was not collected ({why})"
            if why
            else "no identity record (a document from a release before identity records)"
        )
    try:
        severity = setting(name, "fleet.severity") or FLEET_CHECK.severity
        pins = setting(name, "fleet.pin") or {}
        attributes = setting(name, "fleet.attributes") or []
    except FactUnavailable as e:
        # unknown settings (a node that sent nothing has no known profile): an error at the check's declared severity,
        # which only a profile that applies to the node may change (issue 54: it ranked as a blocking check of the fleet)
        return _result(name, "error", "; ".join(unknown) if unknown else str(e), [], FLEET_CHECK.severity)
    if size < 2 and not pins:
        # a fleet of one (README command 1 audits this one machine): no peer to compare with and nothing pinned
        return _result(name, "skipped", f"the only node in {group} and no attribute pinned (fleet.pin): a fleet of one "
                       "has no peer to drift from", evidence, severity)  # fmt: skip
    for attr in attributes:
        value = None if identity is None else identity.get(attr)
        if identity is None:
            break
        spread = ", ".join(f"{_short(v)} on {c}" for v, c in pool.values.get(attr, Counter()).most_common(5))
        evidence.append(f"{attr}: {_short(value)} (in {group}: {spread or 'no known value'})")
        if value is None:
            unknown.append(f"{attr} is unknown ({errors.get(attr, 'not in the record')})")
            continue
        if attr in pins:
            compared += 1
            if str(value) != str(pins[attr]):
                problems.append(f"{attr} {_short(value)}, while the profile pins {_short(pins[attr])}")
            continue
        top, top_count, total = pool.majority(attr)
        if total < 2:
            alone.append(attr)
            continue
        if top is not None and reading(value) != reading(top) and bare(value) != bare(top):
            # both readings are normalised to one effective configuration (conformance.facts.kubelet_effective),
            # but the files' defaults are one kubelet release's while configz shows the running release's: a
            # difference across readings may be a default, so it is not a failure
            unknown.append(f"{attr} was read from the node's {reading(value)}, while {top_count} of {total} nodes in {group} "
                           f"were read from {reading(top)}, and the two effective configurations differ: a real "
                           "difference or a default of another kubelet release; read the node's configz to compare "
                           "(`kubernetes.configz`)")  # fmt: skip
            continue
        compared += 1
        if top is None:
            notes.append(f"no majority for {attr} in {group} ({spread})")
        elif bare(value) != bare(top):  # one configuration read either way is the same value
            problems.append(f"{attr} {_short(value)}, while {top_count} of {total} nodes in {group} run {_short(top)}")
    if problems:
        outcome, message = "failed", "; ".join(problems)
    elif unknown:
        outcome, message = "error", "; ".join(unknown)
    elif size < 2 and not compared:
        outcome, message = "passed", f"the only node in {group}: no peer to compare with"
    elif not compared:
        # peers there are, but none has a known value to compare with: nothing was judged (their own records
        # say why, as their errors); never "as its peers"
        outcome, message = "skipped", (f"nothing could be compared: none of its {size - 1} peer(s) in {group} has a known "
                                       f"value of {', '.join(alone)}")  # fmt: skip
    else:
        outcome, message = "passed", f"as its {size - 1} peer(s) in {group} on {compared} attribute(s)"
        if alone:
            message += f"; not compared (no peer's value known): {', '.join(alone)}"
        if notes:
            message += f"; {'; '.join(notes)}"
    if problems and notes:
        message += f"; {'; '.join(notes)}"
    return _result(name, outcome, message, evidence, severity)


def reading(value: Any) -> str:
    """Where an identity value was read from, for the values that say so ("configz:DIGEST", "files:DIGEST");
    "" for the others, and for the records of releases that did not say."""
    head, sep, _ = str(value).partition(":")
    return head if sep and head in ("configz", "files") else ""


def bare(value: Any) -> str:
    """An identity value without the reading it says it is of: one configuration read either way."""
    return str(value).partition(":")[2] if reading(value) else str(value)


def cannot_group(name: str, why: str, setting: Callable[[str, str], Any]) -> dict[str, Any]:
    """The node's FLEET-CONSISTENT result when the run cannot form the pools: an error saying why."""
    try:
        severity = setting(name, "fleet.severity") or FLEET_CHECK.severity
    except FactUnavailable:
        severity = "high"
    return _result(name, "error", why, [], severity)


def _result(name: str, outcome: str, message: str, evidence: list[str], severity: str) -> dict[str, Any]:
    return {
        "node": name,
        "check": FLEET_CHECK.id,
        "subject": {},
        "severity": severity,
        "outcome": outcome,
        "message": message,
        "evidence": evidence[:200],
        "source": FLEET_CHECK.source,
        "waiver": None,
        "duration_s": 0.0,
        "test": f"fleet::{FLEET_CHECK_ID}[{name}]",
    }
