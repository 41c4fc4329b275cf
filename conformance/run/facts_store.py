"""The facts of every node: gathered live in the background as the run starts (under pytest-xdist,
each worker its own nodes) or read from a snapshot, with the kubelet's live config from the API beside
them. A check waits for its own node's facts only, so checks run while later nodes are on their way."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from conformance.cluster.api import configz, node_status
from conformance.cluster.kubelet_access import KubeletEndpoint, configz_from_kubelet, kubelet_endpoint
from conformance.collection.bundle import Bundle, Record
from conformance.collection.cancel import Cancel
from conformance.collection.collect import MAX_BYTES, collect_all, collect_node, stderr_progress
from conformance.errors import FactUnavailable, UsageError
from conformance.facts.node_facts import NodeFacts
from conformance.run.fleet import Fleet

INTERRUPT_SETTLE_S = 30.0  # how long an interrupted run waits for its cut collections to end (each ends in ~1 s)


@dataclass
class WorkerReports:
    """What pytest-xdist workers report of the nodes they gathered: collection summaries, identity records."""

    collection: dict[str, dict[str, Any]] = field(default_factory=dict)
    identity: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class CollectOptions:
    parallel: int = 16
    timeout: float = 120.0
    retries: int = 2
    verbose: bool = False
    site: str = ""  # what the site rules read (their "KIND PATH" lines), in the same collection
    tty: bool = False  # stderr is a terminal (asked before pytest captures it): show progress


class InFlight:
    """Nodes being gathered in the background, at most `workers` at once, each a future; the order in
    which they arrived is kept for the progress line."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="collect")
        self.futures: dict[str, Future[NodeFacts]] = {}
        self.arrived: queue.SimpleQueue[tuple[str, Future[NodeFacts]]] = queue.SimpleQueue()
        self.shown = 0  # how many arrivals the progress line has counted
        self.checks_began = False  # a check has had its facts (pytest's own progress is on the terminal)

    def submit(self, node: str, gather: Callable[[str], NodeFacts]) -> None:
        self.futures[node] = future = self.pool.submit(gather, node)
        future.add_done_callback(lambda done: self.arrived.put((node, done)))


class FactStore:
    def __init__(self, fleet: Fleet, options: CollectOptions, say: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.options = options
        self.say = say
        self.snapshot_dir: str | None = None
        self.snapshots: dict[str, Bundle] = {}
        self.kube_api: Any = None  # an ApiClient when the inventory configures the Kubernetes API
        self.kubelet_endpoints: dict[str, KubeletEndpoint] = {}  # from discovery; other nodes are looked up
        self.xdist_worker = False  # a pytest-xdist worker: gathers only the nodes it runs
        self.remote = WorkerReports()  # under xdist, what the workers report of their nodes
        self._facts: dict[str, NodeFacts] = {}  # gathered (or read from a snapshot), by node
        self._inflight: InFlight | None = None  # the nodes being gathered in the background
        self._cancel = Cancel()  # cuts the collections under way (the run was interrupted)
        self._lock = threading.Lock()

    def start(self, nodes: Iterable[str]) -> None:
        """Begin gathering these nodes in the background, in this order, at most `parallel` at a time.
        The checks of the first nodes run while later nodes are still being gathered: facts_for waits
        for its own node only. A node already gathered, or on its way, is not gathered again."""
        if self.snapshot_dir:
            return
        with self._lock:
            if self._inflight is None:
                self._inflight = InFlight(max(1, min(self.options.parallel, len(self.fleet.inventory.nodes))))
            for node in dict.fromkeys(nodes):
                if node not in self._facts and node not in self._inflight.futures:
                    self._inflight.submit(node, self._gather)

    def close(self) -> None:
        """Start no more collections, and cut those under way (the run is over, or was interrupted):
        the process ends now, not when a hanging node reaches its --timeout."""
        with self._lock:
            if self._inflight is not None:
                self._inflight.pool.shutdown(wait=False, cancel_futures=True)
        self._cancel.cancel()

    def interrupt(self, settle_s: float = INTERRUPT_SETTLE_S) -> None:
        """The run was interrupted: cut every collection under way and wait (at most `settle_s`) until
        each has ended, so that its record says it was interrupted (its node's verdict: incomplete)
        rather than missing, or judged from whatever came before the cut."""
        self.close()
        with self._lock:
            futures = list(self._inflight.futures.values()) if self._inflight is not None else []
        wait(futures, timeout=settle_s)

    def collected(self, node: str) -> NodeFacts | None:
        """The node's facts if they were gathered in this process (none are gathered here)."""
        with self._lock:
            got, future = self._facts.get(node), self._inflight and self._inflight.futures.get(node)
        if got is None and future is not None and future.done() and not future.cancelled() and future.exception() is None:
            got = future.result()
        return got

    def facts_for(self, node: str) -> NodeFacts:
        """One node's facts, gathered on first use if nothing asked for them before (under pytest-xdist
        each worker gathers only its own nodes: all of a node's checks stay in one worker)."""
        if self.snapshot_dir:
            return self.facts()[node]
        self.start([node])
        return self._wait(node)

    def facts(self) -> dict[str, NodeFacts]:
        """Every node's facts: read from the snapshot, or gathered (all nodes at once, concurrently)."""
        if self.snapshot_dir:
            with self._lock:
                if not self._facts:
                    for n in self.fleet.inventory.nodes:
                        if n.name not in self.snapshots:
                            raise UsageError(f"{self.snapshot_dir}: no snapshot for node {n.name}")
                    self._facts = {n.name: NodeFacts(self.snapshots[n.name]) for n in self.fleet.inventory.nodes}
                return self._facts
        names = [n.name for n in self.fleet.inventory.nodes]
        self.start(names)
        return {name: self._wait(name) for name in names}

    def _gather(self, node: str) -> NodeFacts:
        """Runs in a collection thread: the node's one remote execution, then its kubelet's live config."""
        o = self.options
        bundle = collect_node(self.fleet.spec(node), o.timeout, MAX_BYTES, o.retries, 0.5, o.site, self._cancel)
        self._node_status(node, bundle)
        return NodeFacts(bundle, *self._configz(node))

    def _node_status(self, node: str, bundle: Bundle) -> None:
        """What the API says of the node's daemons (its status.nodeInfo, Ready heartbeat and Lease), kept in the
        bundle beside what the node said, so that a snapshot replays the same releases (issue 58)."""
        if self.kube_api is None or self.fleet.inventory.kubernetes is None:
            return
        try:
            doc = node_status(self.kube_api, node)
        except FactUnavailable as e:
            bundle.add(Record("A", "node-status", "error", str(e).encode()))
            return
        bundle.add(Record("A", "node-status", "ok", json.dumps(doc, sort_keys=True).encode()))

    def _wait(self, node: str) -> NodeFacts:
        with self._lock:
            got, inflight = self._facts.get(node), self._inflight
        if got is not None:
            return got
        assert inflight is not None, node
        future = inflight.futures[node]
        verbose = self.options.verbose
        progress = stderr_progress(verbose, self.say, self.options.tty) if not self.xdist_worker else None
        if progress is not None and not future.done() and (verbose or not inflight.checks_began):
            # While the node is on its way, the progress line counts the nodes that arrived (an event
            # each, in the order they came), from this thread only. On a terminal only before the first
            # check: from then on pytest's own progress is on that line.
            while True:
                name, done = inflight.arrived.get()
                inflight.shown += 1
                if not done.cancelled() and done.exception() is None:
                    progress(inflight.shown, len(inflight.futures), done.result().bundle)
                if name == node:
                    break
            if not verbose and inflight.shown < len(inflight.futures):
                self.say("\n")
        inflight.checks_began = True
        facts = future.result()
        with self._lock:
            return self._facts.setdefault(node, facts)

    def _configz(self, node: str) -> tuple[dict[str, Any] | None, str | None]:
        """The kubelet's live config: from the kubelet itself (get nodes/configz) or through the API
        server's node proxy (get nodes/proxy), as the inventory says; a failure (403, an untrusted
        certificate, a timeout) is kept as the reason the node's files decide instead."""
        spec = self.fleet.inventory.kubernetes
        if self.kube_api is None or spec is None or spec.configz == "off":
            return None, None
        try:
            if spec.configz == "proxy":
                return configz(self.kube_api, node), None
            endpoint = self.kubelet_endpoints.get(node) or kubelet_endpoint(self.kube_api, node)
            return configz_from_kubelet(self.kube_api, endpoint, spec.kubelet_ca), None
        except FactUnavailable as e:
            return None, str(e)

    def recollect(self, nodes: list[str], why: str) -> None:
        """Collect these nodes again (their state changed); the record counts both remote executions."""
        if not nodes:
            return
        o = self.options
        before = {n: self.facts_for(n) for n in nodes}
        bundles = collect_all([self.fleet.spec(n) for n in nodes], o.parallel, o.timeout, None, o.retries, o.site)
        for name, b in bundles.items():
            self._node_status(name, b)
        with ThreadPoolExecutor(max_workers=max(1, min(o.parallel, len(nodes)))) as pool:
            live = dict(zip(nodes, pool.map(self._configz, nodes), strict=True))
        with self._lock:
            for name, b in bundles.items():
                b.executions += before[name].bundle.executions
                b.notes = [*b.notes, why]
                self._facts[name] = NodeFacts(b, *live[name])

    def collection_record(self, node: str, extra_executions: int, replayed: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """How the node's facts were gathered: this process's bundle, a replayed run's record, or (under
        pytest-xdist) the summary the worker that collected it sent."""
        facts = self.collected(node)
        if facts is None:
            return (replayed.get(node) or {}).get("collection") or self.remote.collection.get(node)
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
