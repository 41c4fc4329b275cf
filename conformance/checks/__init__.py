"""The check contract: id, severity, title, rationale, remediation and source, next to the assertion.

@check("KUBELET-CPU-POLICY", "critical", title=..., rationale=..., remediation=..., source=...)
def test_cpu_manager_policy(kubelet_config, profile, evidence): ...
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from conformance.config.check_contract import BLOCKING, SEVERITIES, SITE_PREFIX, CheckSpec
from conformance.config.fleet import FLEET_CHECK_ID
from conformance.errors import FactUnavailable

F = TypeVar("F", bound=Callable[..., Any])


REGISTRY: dict[str, CheckSpec] = {}
# The modules of suites/ that declare the built-in checks (imported by name: checks never import a suite).
SUITE_MODULES = (
    "test_kubelet",
    "test_cgroup_runtime",
    "test_sysctl",
    "test_node_hardware",
    "test_gpu",
    "test_gpu_health",
    "test_pods",
    "test_latency",
    "test_site",
)


def load_builtin() -> dict[str, CheckSpec]:
    """Import every suite so the registry holds every built-in check; returns the registry."""
    for mod in SUITE_MODULES:
        importlib.import_module(f"suites.{mod}")
    importlib.import_module("conformance.checks.fleet_drift")  # judged over the whole run, not by a suite
    return REGISTRY


def builtin_ids() -> set[str]:
    return {cid for cid, spec in load_builtin().items() if spec.origin == "built-in"}


def blocking_builtin_ids(fleet_severity: str | None) -> set[str]:
    """The built-in checks that block (critical, high) a node's acceptance, FLEET-CONSISTENT at the severity
    of the node's profile (fleet.severity; unknown: counted as blocking, so it is never left out)."""
    out = set()
    for cid, spec in load_builtin().items():
        severity = (fleet_severity or "high") if cid == FLEET_CHECK_ID else spec.severity
        if spec.origin == "built-in" and severity in BLOCKING:
            out.add(cid)
    return out


def required_of(summary: dict[str, Any]) -> set[str]:
    """The checks that must have been judged on a node of a results document (its entry) before it can be
    accepted: the built-in checks that block at its profile's fleet severity, and those its entry already
    names as not judged (site rules among them)."""
    return blocking_builtin_ids((summary.get("fleet") or {}).get("severity")) | set(summary.get("not_judged") or [])


def check(id: str, severity: str, *, title: str, rationale: str, remediation: str, source: str) -> Callable[[F], F]:
    """Declare a pytest test function as the check `id`."""
    if severity not in SEVERITIES:
        raise ValueError(f"check {id}: severity {severity!r} is not one of {SEVERITIES}")

    def deco(fn: F) -> F:
        family = fn.__module__.rsplit(".", 1)[-1].removeprefix("test_")
        origin = "built-in"
        if not fn.__module__.startswith("suites."):  # a Python site check: an operator's file
            origin = str(getattr(sys.modules.get(fn.__module__), "__file__", None) or fn.__module__)
            if not id.startswith(SITE_PREFIX):
                raise ValueError(f"{origin}: check {id}: a site check's id starts with {SITE_PREFIX} (built-in ids never do)")
        spec = CheckSpec(id, severity, title, " ".join(rationale.split()), " ".join(remediation.split()), source, family, origin)
        other = REGISTRY.get(id)
        if other is not None and (other.id, other.origin, other.title) != (spec.id, spec.origin, spec.title):
            where = "a built-in check" if other.origin == "built-in" else other.origin
            raise ValueError(f"{origin}: check id {id} is already declared by {where}")
        REGISTRY[id] = spec
        fn._conformance_check = spec  # type: ignore[attr-defined]
        return fn

    return deco


def selects(patterns: list[str], check_id: str) -> bool:
    """Whether `--select` patterns (globs over check ids and family names) take a check; none: every check."""
    if not patterns:
        return True
    spec = REGISTRY.get(check_id)
    family = spec.family if spec is not None else ""
    return any(fnmatch.fnmatchcase(check_id, p) or fnmatch.fnmatchcase(family, p) for p in patterns)


def unmatched(patterns: list[str]) -> list[str]:
    """The patterns that select no known check (a typo would silently select nothing)."""
    return [p for p in patterns if not any(selects([p], cid) for cid in REGISTRY)]


def spec_of(obj: Any) -> CheckSpec | None:
    return getattr(obj, "_conformance_check", None)


@dataclass
class Evidence:
    """What a check looked at: where the fact came from and the raw lines that decided it."""

    source: str | None = None
    lines: list[str] = field(default_factory=list)
    metrics: dict[str, Any] | None = None  # measured numbers, kept in results.json

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def from_setting(self, setting: Any) -> None:
        self.source = setting.source
        self.lines.append(setting.describe())


def conclude(problems: list[str], unknowns: list[str]) -> None:
    """How every check that judges several parts settles (issue 59): a definite failure is failed whatever else is
    unknown, its message naming the failures first and then what could not be judged; only unknowns make an error;
    neither, a pass. (An unknown that could change nothing is not an unknown: the check leaves it out.)"""
    if problems:
        tail = f"; also not judged: {'; '.join(unknowns)}" if unknowns else ""
        raise AssertionError("; ".join(problems) + tail)
    if unknowns:
        raise FactUnavailable("; ".join(unknowns))
