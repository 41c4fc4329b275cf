"""The fleet's identity: each node's identity record (conformance.facts.identity) read once, its profile's
fleet settings, and FLEET-CONSISTENT judged over the node summaries of the whole run
(conformance.checks.fleet_drift). One part beside the run's others (fleet, facts, ledger)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.checks.fleet_drift import FLEET_CHECK, cannot_group, drift_results
from conformance.errors import FactUnavailable
from conformance.facts.identity import identity
from conformance.run.facts_store import FactStore
from conformance.run.fleet import Fleet
from conformance.run.ledger import Ledger


class FleetIdentity:
    """Identity records and drift judging for one run."""

    def __init__(self, fleet: Fleet, store: FactStore, ledger: Ledger) -> None:
        self.fleet = fleet
        self.store = store
        self.ledger = ledger
        self._identities: dict[str, dict[str, Any]] = {}  # node -> its identity record, once read

    def fleet_settings(self, node: str) -> dict[str, Any] | None:
        """The node's fleet settings (its profile's `fleet:`, which FLEET-CONSISTENT judges by), as results.json
        records them: from the profile in a live run; in a replay, as the node's record has them, else from the
        bundled profile the record names; None where neither says (a custom profile in an older record)."""
        if node in self.fleet.recorded_fleet:
            return self.fleet.recorded_fleet[node]
        p = self.fleet.profile_for(node)
        return {k: p.get(f"fleet.{k}") for k in ("severity", "attributes", "pin")}

    def fleet_setting(self, node: str, key: str) -> Any:
        """One fleet setting (`fleet.severity`, `fleet.attributes`, `fleet.pin`) for the drift check."""
        settings = self.fleet_settings(node)
        if settings is None:
            name = self.fleet.profile_names.get(node, "?")
            raise FactUnavailable(
                f"node {node}'s fleet settings: its record names profile {name}, which is not bundled, and carries no "
                "fleet settings (a results.json from an older release); re-run the node's audit to judge it"
            )
        return settings.get(key.removeprefix("fleet."))

    def identity_of(self, node: str) -> dict[str, Any]:
        """{"identity": ..., "identity_errors": ...} of a node: from its facts, a replayed record, or the xdist
        worker that collected it; {} when there is none (not collected)."""
        if node in self._identities:
            return self._identities[node]
        got: dict[str, Any] = {}
        facts = self.store.collected(node)
        replayed = self.ledger.replayed_nodes.get(node)
        if facts is not None and facts.reachable:
            values, errors = identity(facts)
            got = {"identity": values, **({"identity_errors": errors} if errors else {})}
        elif replayed is not None and "identity" in replayed:
            got = {k: replayed[k] for k in ("identity", "identity_errors") if k in replayed}
        elif node in self.store.remote.identity:
            got = self.store.remote.identity[node]
        if facts is not None or replayed is not None or node in self.store.remote.identity:
            self._identities[node] = got
        return got

    def judge(self, summaries: Callable[[], list[dict[str, Any]]], wanted_label: str | None) -> None:
        """FLEET-CONSISTENT for every node, from the node records of the whole run (conformance.checks.fleet_drift);
        a replayed document's own drift results are judged again over the nodes merged here."""
        results = self.ledger.results
        results[:] = [r for r in results if r["check"] != FLEET_CHECK.id]
        if self.fleet.unlabelled:  # snapshots from before they carried labels: the pools are not known
            rows = [
                cannot_group(n, f"the snapshots of {len(self.fleet.unlabelled)} node(s) carry no labels (taken by an older "
                             "release), so the replay cannot group nodes into pools as a live run does; replay with "
                             "--inventory, or take the snapshots again", self.fleet_setting)
                for n in self.fleet.node_names
            ]  # fmt: skip
            results.extend(rows)
            return
        rows = drift_results(summaries(), self.fleet_setting, wanted_label)
        for r in rows:
            if r["outcome"] == "failed" and self.ledger.waivers:
                spec = self.fleet.spec(r["node"])
                r["outcome"], r["waiver"], r["message"] = self.ledger.apply_waivers(
                    r["node"], spec.labels, r["check"], r["message"]
                )
        results.extend(rows)

    def forget(self, node: str) -> None:
        """Drop what was kept of a node once its summary is written (a streamed replay)."""
        self._identities.pop(node, None)
