"""One audit run: the inventory, the profiles per node, the collected facts and the results."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from conformance import __version__
from conformance.checks import REGISTRY, blocking_builtin_ids
from conformance.cluster.acceptance import AcceptancePod
from conformance.config import verdict as verdicts
from conformance.config.check_contract import BLOCKING
from conformance.config.inventory import NodeSpec
from conformance.config.profile import Profile
from conformance.run.console import Console
from conformance.run.facts_store import FactStore
from conformance.run.fleet import Fleet
from conformance.run.identities import FleetIdentity
from conformance.run.ledger import Ledger
from conformance.run.measurements_store import MeasurementStore
from conformance.run.parts import RunParts
from conformance.run.pod_view import PodView
from conformance.run.site_checks import SiteChecks

SCHEMA_VERSION = 1


class Run:
    """One audit run, composed of the objects it is given, each with one job: the fleet (nodes and profiles),
    the fact store (collection, snapshots, xdist), the pod view (pods, exec, acceptance pods), the measurements
    (H2D, latency), the site checks, the ledger (results, waivers, diff, replay), the fleet's identity (identity
    records, drift) and the console (progress lines). How a run starts (live, from snapshots, replaying results
    documents, streamed) is conformance.run.starts; how a node's verdict is reached, conformance.config.verdict."""

    def __init__(
        self,
        fleet: Fleet,
        store: FactStore,
        pods: PodView,
        measurements: MeasurementStore,
        site: SiteChecks,
        ledger: Ledger,
        identities: FleetIdentity,
        console: Console,
    ) -> None:
        self.fleet = fleet
        self.store = store
        self.pods = pods
        self.measurements = measurements
        self.site = site
        self.ledger = ledger
        self.identities = identities
        self.console = console
        self.api_access: list[str] = []  # the API grants the run relies on, as the API server answered
        self.streamed: Any = None  # a replay's NodeSpool, where it is streamed (conformance.run.streamed)
        self.shown: Any = None  # what that streamed pass left for the report and the command line

    @classmethod
    def of(cls, parts: RunParts) -> Run:
        """The run that composes the parts a start built (conformance.run.starts)."""
        run = cls(parts.fleet, parts.store, parts.pods, parts.measurements, parts.site, parts.ledger, parts.identities,
                  parts.console)  # fmt: skip
        run.api_access = list(parts.api_access)
        run.streamed = parts.streamed
        return run

    # -- shortcuts for what most callers ask; everything else is asked of the part that knows --------
    inventory = property(lambda self: self.fleet.inventory)
    node_names = property(lambda self: self.fleet.node_names)
    snapshot_dir = property(lambda self: self.store.snapshot_dir)
    kube_api = property(lambda self: self.store.kube_api)
    results = property(lambda self: self.ledger.results)

    def spec(self, node: str) -> NodeSpec:
        return self.fleet.spec(node)

    def profile_for(self, node: str) -> Profile:
        return self.fleet.profile_for(node)

    def apply_waivers(self, node: str, check: str, message: str) -> tuple[str, dict[str, Any] | None, str]:
        return self.ledger.apply_waivers(node, self.fleet.spec(node).labels, check, message)

    def say(self, text: str) -> None:
        self.console.say(text)

    @property
    def pytest_config(self) -> pytest.Config | None:
        return self.console.config

    @pytest_config.setter
    def pytest_config(self, config: pytest.Config | None) -> None:
        self.console.config = config

    # -- verdicts ------------------------------------------------------------------------------
    def collection_of(self, node: str) -> dict[str, Any] | None:
        extra = self.measurements.executions(node) + self.site.executions(node)
        return self.store.collection_record(node, extra, self.ledger.replayed_nodes)

    def node_summaries(self) -> list[dict[str, Any]]:
        """Every node's summary, its results picked out in one pass (not one pass per node)."""
        rows: dict[str, list[dict[str, Any]]] = {n: [] for n in self.node_names}
        for r in self.results:
            rows.setdefault(r["node"], []).append(r)
        return [self.node_summary(n, rows[n]) for n in self.node_names]

    def node_summary(self, node: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        collection = self.collection_of(node)
        spec = self.spec(node)
        out = verdicts.node_summary(
            node, rows, collection, self.required_checks(node), profile=self.fleet.profile_names[node],
            profile_reason=self.fleet.profile_reasons[node], transport=spec.transport, labels=spec.labels,
            discovered=spec.discovered, planned=self.ledger.planned.get(node),
        )  # fmt: skip
        runs = (self.ledger.replayed_nodes.get(node) or {}).get("runs")
        if runs:
            out["runs"] = runs  # a merge: the runs its results came from, newest first
        made = (self.pods.acceptance or {}).get(node)
        if isinstance(made, AcceptancePod):
            out["acceptance_pod"] = made.to_json()
        elif made is not None:
            record = getattr(made, "pod", None)
            out["acceptance_pod"] = record.to_json() if record is not None else {"error": str(made)}
        facts = self.store.collected(node)
        if facts is not None and self.store.kube_api is not None:
            k8s = self.inventory.kubernetes
            via = "the kubelet" if k8s is not None and k8s.configz == "kubelet" else "the API proxy"
            live = facts.configz is not None
            out["kubelet_config_source"] = f"configz (from {via})" if live else f"node files ({facts.configz_error})"
        if collection is not None:
            out["collection"] = collection
        out.update(self.identity_of(node))
        settings = self.fleet_settings(node)
        if settings is not None:
            out["fleet"] = settings
        return out

    def required_checks(self, node: str) -> list[str]:
        """The checks that must be judged on `node` before it can be accepted (conformance.config.verdict)."""
        replayed = self.ledger.replayed_nodes.get(node) or {}
        return verdicts.required_checks(
            blocking_builtin_ids(self.fleet.profile_for(node).get("fleet.severity")),
            {r.spec.id for r in self.site.rules_for(node) if r.spec.severity in BLOCKING},
            set(self.ledger.replay.get("checks") or {}) if self.ledger.replay is not None else None,
            replayed.get("not_judged"),
        )

    # -- the fleet's identity (conformance.run.identities) ---------------------------------------
    def fleet_settings(self, node: str) -> dict[str, Any] | None:
        return self.identities.fleet_settings(node)

    def fleet_setting(self, node: str, key: str) -> Any:
        return self.identities.fleet_setting(node, key)

    def identity_of(self, node: str) -> dict[str, Any]:
        return self.identities.identity_of(node)

    def judge_fleet(self, wanted_label: str | None) -> None:
        self.identities.judge(self.node_summaries, wanted_label)

    def forget(self, node: str) -> None:
        self.identities.forget(node)

    def document_head(self) -> dict[str, Any]:
        """results.json's keys before its nodes."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "gpu-node-conformance", "version": __version__},
            "started_at": self.ledger.started_at,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            # a replay of an interrupted run stays incomplete: what it did not collect is still missing
            "complete": not self.ledger.interrupted and bool((self.ledger.replay or {}).get("complete", True)),
            "inventory": self.inventory.path,
            **self._replay_times(),
        }

    def _replay_times(self) -> dict[str, Any]:
        """A replay or merge: when the audits it holds ran, and when it began (finished_at is when it ended)."""
        if self.ledger.audits is None:
            return {}
        first, last = self.ledger.audits
        return {"audits": {"started_at": first, "finished_at": last}, "replayed_at": self.ledger.replay_started_at}

    def document_tail(self, diff: dict[str, Any] | None) -> dict[str, Any]:
        """results.json's keys between its checks and its results."""
        return {
            "waivers": self.ledger.waivers_json() if self.ledger.replay is None else self.ledger.replay.get("waivers"),
            "diff": diff,
            **({"api_access": self.api_access} if self.api_access else {}),
        }

    def to_json(self) -> dict[str, Any]:
        used = sorted({r["check"] for r in self.results})
        return {
            **self.document_head(),
            "nodes": self.node_summaries(),
            "checks": {cid: REGISTRY[cid].to_json() for cid in used if cid in REGISTRY},
            **self.document_tail(self.ledger.diff),
            "results": self.results,
        }

    def write_results(self, path: str, doc: dict[str, Any] | None = None) -> None:
        from conformance.outputs import write_json_document

        write_json_document(path, doc or self.to_json())


RUN_KEY = pytest.StashKey[Run]()
