"""How a run starts: live over an inventory (discovered through the Kubernetes API or not), on this machine,
from snapshots, or replaying results documents (in memory, or streamed node by node). Each way builds the run's
parts (conformance.run.parts); `Run` (conformance.session), a stage above, composes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.checks import selects
from conformance.checks.fleet_drift import FLEET_CHECK
from conformance.cluster.api import api_client, discover
from conformance.cluster.kubelet_access import KubeletEndpoint, access_report
from conformance.collection.bundle import Bundle
from conformance.config.inventory import Inventory, NodeSpec, load_inventory, local_inventory, merge_discovered
from conformance.errors import ParseError, UsageError
from conformance.run.console import Console
from conformance.run.facts_store import CollectOptions, FactStore
from conformance.run.fleet import Fleet
from conformance.run.identities import FleetIdentity
from conformance.run.ledger import Ledger
from conformance.run.measurements_store import MeasurementStore
from conformance.run.parts import RunParts
from conformance.run.pod_view import PodView
from conformance.run.site_checks import SiteChecks


def compose(
    inventory: Inventory,
    profile_override: str | None = None,
    snapshot_dir: str | None = None,
    parallel: int = 16,
    timeout: float = 120.0,
    verbose: bool = False,
) -> RunParts:
    """A run's parts, made for an inventory (and the snapshots it replays)."""
    console = Console()
    fleet = Fleet(inventory, profile_override)
    store = FactStore(fleet, CollectOptions(parallel, timeout, 2, verbose, tty=sys.stderr.isatty()), console.say)
    store.snapshot_dir = snapshot_dir
    if snapshot_dir:
        store.snapshots = load_snapshots(snapshot_dir)
    ledger = Ledger()
    return RunParts(
        fleet,
        store,
        PodView(fleet, store, console.say),
        MeasurementStore(fleet, store, console.say),
        SiteChecks(fleet, timeout),
        ledger,
        FleetIdentity(fleet, store, ledger),
        console,
    )


def from_options(config: pytest.Config) -> RunParts:
    opt = config.option
    if getattr(opt, "conformance_replay", None):
        replay = from_results(
            opt.conformance_replay,
            opt.conformance_replay_items,
            opt.conformance_replay_expect,
            opt.conformance_select,
            config.option.verbose > 0,
        )
        return replay
    snapshot = getattr(opt, "conformance_snapshot", None)
    kube_api, endpoints = None, {}
    warnings: list[str] = []
    if snapshot and not getattr(opt, "conformance_inventory", None):
        bundles = load_snapshots(snapshot)
        inv = Inventory(f"(snapshots in {snapshot})", [NodeSpec(name=n, labels=dict(b.labels or {})) for n, b in bundles.items()])
    elif getattr(opt, "conformance_inventory", None):
        inv = load_inventory(opt.conformance_inventory)
        kube_api, endpoints = discover_nodes(inv, warnings) if inv.kubernetes else (None, {})
        for w in warnings:
            print(w, file=sys.stderr)
    else:
        inv = local_inventory(getattr(opt, "conformance_host_root", "") or "")
    unlabelled = sorted(n for n, b in bundles.items() if b.labels is None) if snapshot and not opt.conformance_inventory else []
    run = compose(
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
        run.api_access = warnings + access_report(kube_api, inv.kubernetes.configz, run.fleet.pod_namespaces())
    run.measurements.measure = bool(getattr(opt, "conformance_measure", False))
    run.pods.acceptance_pod = bool(getattr(opt, "conformance_acceptance_pod", False))
    if getattr(opt, "conformance_waivers", None):
        run.ledger.load_waivers(opt.conformance_waivers)
    return run


def from_results(
    paths: list[str],
    per: str = "auto",
    expect: list[str] | None = None,
    select: list[str] | None = None,
    verbose: bool = False,
) -> RunParts:
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
    run = compose(inventory_of({"sources": paths, "nodes": lights}))
    run.ledger.replay_started_at = run.ledger.started_at
    run.ledger.started_at = meta.started_at or ""
    run.ledger.audits = (meta.started_at or "", meta.finished_at or "")
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


def discover_nodes(inv: Inventory, warnings: list[str] | None = None) -> tuple[Any, dict[str, KubeletEndpoint]]:
    """Ask the Kubernetes API for the nodes to audit and merge them into the inventory. Returns the
    ApiClient (also used for configz) and the discovered nodes' kubelet endpoints; what discovery could not
    ask goes in `warnings`."""
    spec = inv.kubernetes
    assert spec is not None
    api = api_client(spec)
    endpoints: dict[str, KubeletEndpoint] = {}
    if spec.discover:
        found = discover(api, spec, warnings)
        merge_discovered(inv, found)
        endpoints = {d.name: d.kubelet for d in found if d.kubelet is not None}
        if not inv.nodes:
            what = f"label selector {spec.node_selector}" if spec.node_selector else f"{spec.gpu_resource} capacity"
            raise UsageError(f"{inv.path}: the Kubernetes API lists no node with {what}, and the inventory names none")
    return api, endpoints
