"""An operator's site checks in one run: the declarative rules (which node each applies to, with its
profile's thresholds) and the testinfra hosts Python site checks use (one connection per node, its
commands counted)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import testinfra.host

from conformance.checks import REGISTRY, builtin_ids
from conformance.collection.collect import transport_for
from conformance.collection.testinfra_host import SuiteBackend, host_over
from conformance.config.site_rules import SiteRule, apply_overrides, load_rules, needs_section
from conformance.errors import UsageError
from conformance.run.fleet import Fleet


class SiteChecks:
    def __init__(self, fleet: Fleet, timeout: float) -> None:
        self.fleet = fleet
        self.timeout = timeout
        self.common: list[SiteRule] = []  # from --checks and the inventory: every node
        self.by_profile: dict[str, list[SiteRule]] = {}  # from a profile's site_checks: its nodes only
        self._hosts: dict[str, testinfra.host.Host] = {}
        self._lock = threading.Lock()

    def load(self, paths: list[str]) -> None:
        """Read the rule files named on the command line, in the inventory and in the nodes' profiles."""
        builtin = builtin_ids()
        inv = self.fleet.inventory
        self.common = load_rules([*paths, *inv.site_checks], builtin)
        taken = {r.spec.id: r.origin for r in self.common}
        profiles = {self.fleet.profile_names[n]: self.fleet.profile_for(n) for n in self.fleet.node_names}
        for profile_name, profile in sorted(profiles.items()):
            files = profile.get("site_checks") or []
            base = Path(profile.source).parent if Path(profile.source).is_file() else Path.cwd()
            rules = load_rules([str(base / f) for f in files], builtin)
            for r in rules:
                if r.spec.id in taken and taken[r.spec.id] != r.origin:
                    raise UsageError(f"{r.origin}: {r.spec.id}: id already declared in {taken[r.spec.id]}")
                taken[r.spec.id] = r.origin
            self.by_profile[profile_name] = rules
        for r in self.all_rules():
            REGISTRY[r.spec.id] = r.spec
        for node in self.fleet.node_names:  # a profile's thresholds that do not fit the rule: a usage error now
            for r in self.rules_for(node):
                self.params(r, node)

    def all_rules(self) -> list[SiteRule]:
        seen: dict[str, SiteRule] = {r.spec.id: r for r in self.common}
        for rules in self.by_profile.values():
            for r in rules:
                seen.setdefault(r.spec.id, r)
        return list(seen.values())

    def rules_for(self, node: str) -> list[SiteRule]:
        return [*self.common, *self.by_profile.get(self.fleet.profile_names.get(node, ""), [])]

    def needs(self) -> str:
        return needs_section(self.all_rules())

    def params(self, rule: SiteRule, node: str) -> dict[str, Any]:
        """The rule's matcher with the node's profile's thresholds (`site: {ID: {...}}`) laid over it."""
        profile = self.fleet.profile_for(node)
        overrides = (profile.get("site") or {}).get(rule.spec.id) or {}
        if not isinstance(overrides, dict):
            raise UsageError(f"{profile.source}: site.{rule.spec.id}: must be a mapping of the rule's {rule.kind} fields")
        return apply_overrides(rule, overrides, profile.source)

    # -- testinfra hosts for Python site checks ------------------------------------------------------
    def host_for(self, node: str) -> testinfra.host.Host:
        with self._lock:
            if node not in self._hosts:
                spec = self.fleet.spec(node)
                self._hosts[node] = host_over(spec.address or spec.name, transport_for(spec), self.timeout)
            return self._hosts[node]

    def executions(self, node: str) -> int:
        host = self._hosts.get(node)
        return host.backend.commands if host is not None and isinstance(host.backend, SuiteBackend) else 0

    def close(self) -> None:
        with self._lock:
            for host in self._hosts.values():
                host.backend.transport.close()
            self._hosts.clear()
