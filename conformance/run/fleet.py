"""The nodes of one run and the profile each one is judged by."""

from __future__ import annotations

from typing import Any

from conformance.config.inventory import Inventory, NodeSpec
from conformance.config.profile import Profile, bundled_names, load_profile


class Fleet:
    def __init__(self, inventory: Inventory, profile_override: str | None = None) -> None:
        self.inventory = inventory
        self._specs = {n.name: n for n in inventory.nodes}  # after discovery: the inventory is final here
        self._bundled: dict[str, Profile] = {}
        self._profiles: dict[str, Profile] = {}
        self.profile_names: dict[str, str] = {}
        self.profile_reasons: dict[str, str] = {}
        self.recorded_fleet: dict[str, dict[str, Any] | None] = {}  # a replay: the fleet settings its records hold
        self.unlabelled: list[str] = []  # a snapshot replay: nodes whose snapshots carry no labels (pools unknown)
        cache: dict[str | None, Profile] = {}
        for node in inventory.nodes:
            ref, why = (profile_override, "--profile") if profile_override else inventory.select_profile(node)
            if ref not in cache:
                cache[ref] = load_profile(ref)
            self._profiles[node.name] = cache[ref]
            self.profile_names[node.name] = cache[ref].name
            self.profile_reasons[node.name] = why

    def adopt(self, node: str, profile: str, reason: str, fleet: dict[str, Any] | None) -> None:
        """A replayed node's profile as its record names it, and the fleet settings the record carries. A record
        without them (an older release) is judged by the bundled profile of that name; where there is none, the
        settings are unknown (None)."""
        self.profile_names[node] = profile
        self.profile_reasons[node] = reason
        if fleet is not None:
            self.recorded_fleet[node] = fleet
        elif profile in bundled_names():
            if profile not in self._bundled:
                self._bundled[profile] = load_profile(profile)
            self._profiles[node] = self._bundled[profile]
        else:
            self.recorded_fleet[node] = None

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.inventory.nodes]

    def spec(self, node: str) -> NodeSpec:
        """The node's inventory entry (discovered nodes included)."""
        return self._specs[node]

    def profile_for(self, node: str) -> Profile:
        return self._profiles[node]

    def pod_namespaces(self) -> list[str]:
        """The namespaces the pod checks are limited to (profiles' `pods.namespaces`); [] when any profile
        in use looks in every namespace."""
        scopes = [self._profiles[n].get("pods.namespaces") or [] for n in self.node_names]
        if not scopes or any(not s for s in scopes):
            return []
        return sorted({ns for s in scopes for ns in s})
