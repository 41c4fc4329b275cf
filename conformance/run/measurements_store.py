"""What this run measures: H2D bandwidth per node (once, all nodes that ask, concurrently) and the
latency of each configured endpoint."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.config.endpoints import Endpoint
from conformance.errors import FactUnavailable, ParseError
from conformance.facts.checkpoints import KubeletAssignments
from conformance.measurements.gpu_measure import H2DMeasurement, measure_node
from conformance.measurements.latency import LatencyResult, measure
from conformance.run.facts_store import FactStore
from conformance.run.fleet import Fleet


class MeasurementStore:
    def __init__(self, fleet: Fleet, store: FactStore, say: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.store = store
        self.say = say
        self.measure = False  # --measure: H2D bandwidth on every node, whatever its profile says
        self._h2d: dict[str, H2DMeasurement | Exception] = {}
        self._h2d_lock = threading.Lock()  # taken before the fact store's lock (measuring needs the facts)
        self._latency: dict[tuple[str, str], LatencyResult] = {}

    def _show(self) -> bool:
        return self.store.options.verbose or sys.stderr.isatty()

    def latency_for(self, node: str, endpoint: Endpoint) -> LatencyResult:
        key = (node, endpoint.name)
        if key not in self._latency:
            show = None
            if self._show():

                def show(done: int, total: int) -> None:
                    if done == total or done % max(1, total // 20) == 0:
                        end = "\n" if done == total else ""
                        self.say(f"\rlatency {node}/{endpoint.name}: {done}/{total} requests\033[K{end}")

            self._latency[key] = measure(endpoint, show)
        return self._latency[key]

    def measuring(self, node: str) -> bool:
        return self.measure or bool(self.fleet.profile_for(node).get("gpu.measure_bandwidth"))

    def h2d(self, node: str) -> H2DMeasurement:
        """The node's H2D measurement. On first use, every node that asks for one is measured,
        concurrently across nodes (one GPU at a time within a node); under pytest-xdist, only the
        nodes this worker runs."""
        with self._h2d_lock:
            if node not in self._h2d:
                wanted = [node] if self.store.xdist_worker else [n for n in self.fleet.node_names if self.measuring(n)]
                self._h2d.update(self._measure([n for n in wanted if n not in self._h2d]))
        got = self._h2d.get(node)
        if got is None:
            raise FactUnavailable(f"node {node}: bandwidth was not measured")
        if isinstance(got, Exception):
            raise FactUnavailable(f"node {node}: bandwidth not measured: {got}")
        return got

    def executions(self, node: str) -> int:
        got = self._h2d.get(node)
        return got.executions if isinstance(got, H2DMeasurement) else 0

    def _plan(self, name: str) -> tuple[Any, ...]:
        """What measuring a node needs: its spec and GPU facts, and what the probe must stay off: CPUs
        the CPU manager gave to pods exclusively, GPUs the kubelet gave to pods. Assignments that cannot be
        established close the gate (every GPU skipped with the reason): unknown is never "free"."""
        f = self.store.facts_for(name)
        gpus, topology = f.gpus, f.topology  # FactUnavailable: the node is not measured, with the reason
        try:
            assignments: KubeletAssignments | str = f.kubelet_assignments
        except (FactUnavailable, ParseError) as e:
            assignments = str(e)
        return self.fleet.spec(name), gpus, topology, self.fleet.profile_for(name).get("gpu"), assignments

    def _measure(self, nodes: list[str]) -> dict[str, H2DMeasurement | Exception]:
        todo: dict[str, tuple[Any, ...]] = {}
        out: dict[str, H2DMeasurement | Exception] = {}
        for name in nodes:
            try:
                todo[name] = self._plan(name)
            except FactUnavailable as e:
                out[name] = e
        with ThreadPoolExecutor(max_workers=max(1, min(self.store.options.parallel, len(todo) or 1))) as pool:
            measured = zip(todo, pool.map(lambda args: measure_node(*args), todo.values()), strict=True)
            for done, (name, m) in enumerate(measured, start=1):
                out[name] = m
                if self._show():
                    end = "\n" if done == len(todo) else ""
                    self.say(f"\rH2D bandwidth: {done}/{len(todo)} nodes measured ({name}: {len(m.gpus)} GPU(s))\033[K{end}")
        return out
