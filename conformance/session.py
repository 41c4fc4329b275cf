"""One audit run: the inventory, the profiles per node, the collected facts and the results."""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conformance import __version__
from conformance.checks import REGISTRY, blocking_builtin_ids, selects
from conformance.checks.fleet_drift import FLEET_CHECK
from conformance.cluster.acceptance import AcceptancePod
from conformance.cluster.api import api_client, discover
from conformance.cluster.kubelet_access import KubeletEndpoint, access_report
from conformance.collection.bundle import Bundle
from conformance.config import verdict as verdicts
from conformance.config.check_contract import BLOCKING
from conformance.config.inventory import Inventory, NodeSpec, load_inventory, local_inventory, merge_discovered
from conformance.config.profile import Profile
from conformance.errors import ParseError, UsageError
from conformance.run.facts_store import CollectOptions, FactStore
from conformance.run.fleet import Fleet
from conformance.run.identities import FleetIdentity
from conformance.run.ledger import Ledger
from conformance.run.measurements_store import MeasurementStore
from conformance.run.pod_view import PodView
from conformance.run.site_checks import SiteChecks

SCHEMA_VERSION = 1


class Run:
    """One audit run, composed of objects with one job each: the fleet (nodes and profiles), the fact
    store (collection, snapshots, xdist), the pod view (pods, exec, acceptance pods), the measurements
    (H2D, latency) and the ledger (results, waivers, diff, replay)."""

    def __init__(
        self,
        inventory: Inventory,
        profile_override: str | None = None,
        snapshot_dir: str | None = None,
        parallel: int = 16,
        timeout: float = 120.0,
        verbose: bool = False,
    ) -> None:
        self.pytest_config: pytest.Config | None = None
        self.fleet = Fleet(inventory, profile_override)
        self.store = FactStore(self.fleet, CollectOptions(parallel, timeout, 2, verbose, tty=sys.stderr.isatty()), self.say)
        self.store.snapshot_dir = snapshot_dir
        if snapshot_dir:
            self.store.snapshots = load_snapshots(snapshot_dir)
        self.pods = PodView(self.fleet, self.store, self.say)
        self.measurements = MeasurementStore(self.fleet, self.store, self.say)
        self.site = SiteChecks(self.fleet, timeout)
        self.ledger = Ledger()
        self.api_access: list[str] = []  # the API grants the run relies on, as the API server answered
        self.identities = FleetIdentity(self.fleet, self.store, self.ledger)
        self.streamed: Any = None  # a replay's NodeSpool, where it is streamed (conformance.run.streamed)
        self.shown: Any = None  # what that streamed pass left for the report and the command line

    @classmethod
    def from_options(cls, config: pytest.Config) -> Run:
        opt = config.option
        if getattr(opt, "conformance_replay", None):
            replay = cls.from_results(
                opt.conformance_replay,
                opt.conformance_replay_items,
                opt.conformance_replay_expect,
                opt.conformance_select,
                config.option.verbose > 0,
            )
            replay.pytest_config = config
            return replay
        snapshot = getattr(opt, "conformance_snapshot", None)
        kube_api, endpoints = None, {}
        if snapshot and not getattr(opt, "conformance_inventory", None):
            bundles = load_snapshots(snapshot)
            inv = Inventory(
                f"(snapshots in {snapshot})", [NodeSpec(name=n, labels=dict(b.labels or {})) for n, b in bundles.items()]
            )
        elif getattr(opt, "conformance_inventory", None):
            inv = load_inventory(opt.conformance_inventory)
            kube_api, endpoints = discover_nodes(inv) if inv.kubernetes else (None, {})
        else:
            inv = local_inventory(getattr(opt, "conformance_host_root", "") or "")
        unlabelled = (
            sorted(n for n, b in bundles.items() if b.labels is None) if snapshot and not opt.conformance_inventory else []
        )
        run = cls(
            inv,
            profile_override=getattr(opt, "conformance_profile", None),
            snapshot_dir=snapshot,
            parallel=getattr(opt, "conformance_parallel", 16),
            timeout=getattr(opt, "conformance_timeout", 120.0),
            verbose=config.option.verbose > 0,
        )
        run.fleet.unlabelled = unlabelled
        run.store.options.retries = getattr(opt, "conformance_retries", 2)
        run.site.load(getattr(opt, "conformance_checks", None) or [])
        run.store.options.site = run.site.needs()
        run.store.kube_api = kube_api
        run.store.kubelet_endpoints = endpoints
        if kube_api is not None and inv.kubernetes is not None:
            run.api_access = access_report(kube_api, inv.kubernetes.configz, run.fleet.pod_namespaces())
        run.pytest_config = config
        run.measurements.measure = bool(getattr(opt, "conformance_measure", False))
        run.pods.acceptance_pod = bool(getattr(opt, "conformance_acceptance_pod", False))
        if getattr(opt, "conformance_waivers", None):
            run.ledger.load_waivers(opt.conformance_waivers)
        return run

    @classmethod
    def from_results(
        cls,
        paths: list[str],
        per: str = "auto",
        expect: list[str] | None = None,
        select: list[str] | None = None,
        verbose: bool = False,
    ) -> Run:
        """A replay of results documents (files, folders of them, pod logs): merged by node in a spool, then
        held in memory as one document (one pytest item per result) up to RESULT_ROWS_MAX results and
        MATRIX_MAX_NODES nodes, else (or where items per node are asked for) streamed node by node
        (conformance.run.streamed)."""
        from conformance.outputs.fleet_view import MATRIX_MAX_NODES
        from conformance.outputs.merge import expected_from
        from conformance.outputs.replay import RESULT_ROWS_MAX, inventory_of, register_checks
        from conformance.run.merging import Ticker, spool_sources

        spool = spool_sources(paths, expected_from(expect or []), Ticker(verbose))
        names = spool.names()
        meta = spool.meta
        register_checks(meta.checks_json())
        if select and (bad := [p for p in select if not any(selects([p], c) for c in [*meta.checks, FLEET_CHECK.id])]):
            spool.close()
            raise UsageError(f"--select {', '.join(bad)}: matches no check id or family of the documents' checks")
        lights = [spool.entries[n].light for n in names]
        run = cls(inventory_of({"sources": paths, "nodes": lights}))
        run.ledger.started_at = meta.started_at or ""
        run.api_access = meta.api_access_json()
        for n in lights:
            run.fleet.adopt(n["name"], n.get("profile", "default"), n.get("profile_reason", ""), n.get("fleet"))
        head = {
            "sources": list(paths),
            "started_at": run.ledger.started_at,
            "complete": meta.complete,
            "checks": meta.checks_json(),
        }
        head["waivers"] = meta.waivers[1] if meta.waivers is not None else None
        large = spool.count_results() > RESULT_ROWS_MAX or len(names) > MATRIX_MAX_NODES  # the fleet view's size
        if per == "node" or (per == "auto" and large):
            run.streamed = spool
            run.ledger.replay = dict(head, nodes=[], results=[])
            return run
        records = [spool.record(n) for n in names]
        results = [r for n in names for r in spool.results_of(n)]
        spool.close()
        run.ledger.replay = dict(head, nodes=records, results=results)
        run.ledger.replayed_nodes = {n["name"]: n for n in records}
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
        """A progress line on stderr, also while a check runs (pytest captures output then)."""
        capman = self.pytest_config.pluginmanager.getplugin("capturemanager") if self.pytest_config else None
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            sys.stderr.write(text)
            sys.stderr.flush()

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
            discovered=spec.discovered,
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
        }

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


def load_snapshots(folder: str) -> dict[str, Bundle]:
    p = Path(folder)
    if not p.is_dir():
        raise UsageError(f"--snapshot {folder}: not a folder")
    out: dict[str, Bundle] = {}
    for f in sorted(p.glob("*.json")):
        try:
            b = Bundle.from_json(json.loads(f.read_text(encoding="utf-8")), str(f))
        except (ValueError, ParseError) as e:
            raise UsageError(f"{f}: not a readable snapshot: {e}") from None
        out[b.node] = b
    if not out:
        raise UsageError(f"--snapshot {folder}: no snapshot files (*.json) in it; make them with 'conformance collect'")
    return out


def write_snapshots(bundles: dict[str, Bundle], folder: str, labels: dict[str, dict[str, str]] | None = None) -> list[Path]:
    """One file per node; with the node's labels, so that a replay without the inventory groups the nodes into
    the pools a live run would (FLEET-CONSISTENT, the fleet view)."""
    p = Path(folder)
    p.mkdir(parents=True, exist_ok=True)
    written = []
    for name, b in bundles.items():
        if labels is not None and name in labels:
            b.labels = dict(labels[name])
        f = p / f"{name}.json"
        f.write_text(json.dumps(b.to_json(), indent=1) + "\n", encoding="utf-8")
        written.append(f)
    return written


def discover_nodes(inv: Inventory) -> tuple[Any, dict[str, KubeletEndpoint]]:
    """Ask the Kubernetes API for the nodes to audit and merge them into the inventory. Returns the
    ApiClient (also used for configz) and the discovered nodes' kubelet endpoints."""
    spec = inv.kubernetes
    assert spec is not None
    api = api_client(spec)
    endpoints: dict[str, KubeletEndpoint] = {}
    if spec.discover:
        found = discover(api, spec)
        merge_discovered(inv, found)
        endpoints = {d.name: d.kubelet for d in found if d.kubelet is not None}
        if not inv.nodes:
            what = f"label selector {spec.node_selector}" if spec.node_selector else f"{spec.gpu_resource} capacity"
            raise UsageError(f"{inv.path}: the Kubernetes API lists no node with {what}, and the inventory names none")
    return api, endpoints
