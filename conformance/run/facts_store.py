"""The facts of every node: collected live (all nodes at once, or under pytest-xdist only the
worker's own), or read from a snapshot, with the kubelet's live config from the API beside them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from conformance.cluster.api import configz
from conformance.cluster.kubelet_access import KubeletEndpoint, configz_from_kubelet, kubelet_endpoint
from conformance.collection.bundle import Bundle
from conformance.collection.collect import collect_all, stderr_progress
from conformance.errors import FactUnavailable, UsageError
from conformance.facts.node_facts import NodeFacts
from conformance.run.fleet import Fleet


@dataclass
class CollectOptions:
    parallel: int = 16
    timeout: float = 120.0
    retries: int = 2
    verbose: bool = False
    site: str = ""  # what the site rules read (their "KIND PATH" lines), in the same collection


class FactStore:
    def __init__(self, fleet: Fleet, options: CollectOptions, say: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.options = options
        self.say = say
        self.snapshot_dir: str | None = None
        self.snapshots: dict[str, Bundle] = {}
        self.kube_api: Any = None  # an ApiClient when the inventory configures the Kubernetes API
        self.kubelet_endpoints: dict[str, KubeletEndpoint] = {}  # from discovery; other nodes are looked up
        self.xdist_worker = False  # a pytest-xdist worker: collects only its own nodes
        self.remote_collection: dict[str, dict[str, Any]] = {}  # under xdist, the workers' collection summaries
        self._facts: dict[str, NodeFacts] | None = None
        self._lock = threading.Lock()

    def collected(self, node: str) -> NodeFacts | None:
        """The node's facts if they were gathered in this process (none are gathered here)."""
        return self._facts.get(node) if self._facts else None

    def facts_for(self, node: str) -> NodeFacts:
        """One node's facts. Under pytest-xdist each worker collects only the nodes it runs (all of a
        node's checks stay in one worker); otherwise every node is collected at once, concurrently."""
        if not self.xdist_worker or self.snapshot_dir:
            return self.facts()[node]
        with self._lock:
            if self._facts is None:
                self._facts = {}
            if node not in self._facts:
                o = self.options
                bundle = collect_all([self.fleet.spec(node)], 1, o.timeout, None, o.retries, o.site)[node]
                live = self.read_configz([node]) if self.kube_api is not None else {}
                self._facts[node] = NodeFacts(bundle, *live.get(node, (None, None)))
            return self._facts[node]

    def facts(self) -> dict[str, NodeFacts]:
        with self._lock:
            if self._facts is None:
                if self.snapshot_dir:
                    bundles = {}
                    for n in self.fleet.inventory.nodes:
                        if n.name not in self.snapshots:
                            raise UsageError(f"{self.snapshot_dir}: no snapshot for node {n.name}")
                        bundles[n.name] = self.snapshots[n.name]
                else:
                    o = self.options
                    progress = stderr_progress(o.verbose, self.say)
                    bundles = collect_all(self.fleet.inventory.nodes, o.parallel, o.timeout, progress, o.retries, o.site)
                live = self.read_configz(list(bundles)) if self.kube_api is not None and not self.snapshot_dir else {}
                self._facts = {name: NodeFacts(b, *live.get(name, (None, None))) for name, b in bundles.items()}
            return self._facts

    def read_configz(self, nodes: list[str]) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
        """Each kubelet's live config, concurrently: from the kubelet itself (get nodes/configz) or
        through the API server's node proxy (get nodes/proxy), as the inventory says; a failure (403,
        an untrusted certificate, a timeout) is kept as the reason the node's files decide instead."""
        spec = self.fleet.inventory.kubernetes
        if spec is None or spec.configz == "off":
            return {}

        def one(node: str) -> tuple[str, tuple[dict[str, Any] | None, str | None]]:
            try:
                if spec.configz == "proxy":
                    return node, (configz(self.kube_api, node), None)
                endpoint = self.kubelet_endpoints.get(node) or kubelet_endpoint(self.kube_api, node)
                return node, (configz_from_kubelet(self.kube_api, endpoint, spec.kubelet_ca), None)
            except FactUnavailable as e:
                return node, (None, str(e))

        with ThreadPoolExecutor(max_workers=max(1, min(self.options.parallel, len(nodes) or 1))) as pool:
            return dict(pool.map(one, nodes))

    def recollect(self, nodes: list[str], why: str) -> None:
        """Collect these nodes again (their state changed); the record counts both remote executions."""
        if not nodes:
            return
        o = self.options
        bundles = collect_all([self.fleet.spec(n) for n in nodes], o.parallel, o.timeout, None, o.retries, o.site)
        live = self.read_configz(nodes) if self.kube_api is not None else {}
        with self._lock:
            assert self._facts is not None
            for name, b in bundles.items():
                b.executions += self._facts[name].bundle.executions
                b.notes = [*b.notes, why]
                self._facts[name] = NodeFacts(b, *live.get(name, (None, None)))

    def collection_record(self, node: str, extra_executions: int, replayed: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """How the node's facts were gathered: this process's bundle, a replayed run's record, or (under
        pytest-xdist) the summary the worker that collected it sent."""
        facts = self.collected(node)
        if facts is None:
            return (replayed.get(node) or {}).get("collection") or self.remote_collection.get(node)
        b = facts.bundle
        return {
            "collected_at": b.collected_at,
            "duration_s": b.duration_s,
            "remote_executions": b.executions + extra_executions,
            "error": b.error,
            "error_kind": b.error_kind,
            "notes": b.notes,
            "source": "snapshot" if self.snapshot_dir else "live",
        }
