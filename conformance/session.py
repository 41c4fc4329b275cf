"""One audit run: the inventory, the profiles per node, the collected facts and the results."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conformance import __version__
from conformance.checks import BLOCKING, REGISTRY
from conformance.cluster import acceptance
from conformance.cluster.acceptance import AcceptancePod
from conformance.cluster.api import GPU_RESOURCE, api_client, configz, discover
from conformance.cluster.manifests import DEFAULT_IMAGE
from conformance.cluster.pods import ContainerRef, InsideFacts, PodInfo, exec_inside, gpu_pods
from conformance.collection.bundle import Bundle
from conformance.collection.collect import collect_all, stderr_progress
from conformance.config.inventory import Inventory, NodeSpec, load_inventory, local_inventory, merge_discovered
from conformance.config.profile import Profile, load_profile
from conformance.config.waivers import Waiver, load_waivers
from conformance.config.waivers import find as find_waivers
from conformance.errors import FactUnavailable, ParseError, UsageError
from conformance.facts.node_facts import NodeFacts
from conformance.measurements.gpu_measure import H2DMeasurement, measure_node
from conformance.measurements.latency import Endpoint, LatencyResult, measure

SCHEMA_VERSION = 1


class Run:
    def __init__(
        self,
        inventory: Inventory,
        profile_override: str | None = None,
        snapshot_dir: str | None = None,
        parallel: int = 16,
        timeout: float = 120.0,
        verbose: bool = False,
    ) -> None:
        self.inventory = inventory
        self._specs = {n.name: n for n in inventory.nodes}  # after discovery: the inventory is final here
        self.snapshot_dir = snapshot_dir
        self.parallel = parallel
        self.timeout = timeout
        self.verbose = verbose
        self.retries = 2
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.results: list[dict[str, Any]] = []
        self.interrupted = False
        self.diff: dict[str, Any] | None = None
        self.replay: dict[str, Any] | None = None
        self.replayed_nodes: dict[str, dict[str, Any]] = {}
        self._facts: dict[str, NodeFacts] | None = None
        self._lock = threading.Lock()
        self._latency: dict[tuple[str, str], LatencyResult] = {}
        self.pytest_config: pytest.Config | None = None
        self.kube_api: Any = None  # an ApiClient when the inventory configures the Kubernetes API
        self._pods: dict[str, list[PodInfo] | FactUnavailable] = {}
        self._inside: dict[str, InsideFacts | FactUnavailable] = {}
        self.acceptance_pod = False  # --acceptance-pod: create the test pod on every node
        self.xdist_worker = False  # a pytest-xdist worker: collects only its own nodes
        self.remote_collection: dict[str, dict[str, Any]] = {}  # under xdist, the workers' collection summaries
        self.acceptance: dict[str, AcceptancePod | FactUnavailable] | None = None
        self.measure = False  # --measure: H2D bandwidth on every node, whatever its profile says
        self._h2d: dict[str, H2DMeasurement | Exception] = {}
        self._h2d_lock = threading.Lock()  # taken before self._lock (measuring needs the facts)
        self._profiles: dict[str, Profile] = {}
        self.profile_names: dict[str, str] = {}
        self.profile_reasons: dict[str, str] = {}
        cache: dict[str | None, Profile] = {}
        for node in inventory.nodes:
            ref, why = (profile_override, "--profile") if profile_override else inventory.select_profile(node)
            if ref not in cache:
                cache[ref] = load_profile(ref)
            self._profiles[node.name] = cache[ref]
            self.profile_names[node.name] = cache[ref].name
            self.profile_reasons[node.name] = why
        self.waivers: list[Waiver] = []
        self.waivers_file: str | None = None
        self.today = datetime.now(UTC).date()
        self._waivers_matched: set[int] = set()
        self._snapshots: dict[str, Bundle] = {}
        if snapshot_dir:
            self._snapshots = load_snapshots(snapshot_dir)

    @classmethod
    def from_options(cls, config: pytest.Config) -> Run:
        opt = config.option
        if getattr(opt, "conformance_replay", None):
            return cls.from_results(opt.conformance_replay)
        snapshot = getattr(opt, "conformance_snapshot", None)
        kube_api = None
        if snapshot and not getattr(opt, "conformance_inventory", None):
            bundles = load_snapshots(snapshot)
            inv = Inventory(f"(snapshots in {snapshot})", [NodeSpec(name=n) for n in bundles])
        elif getattr(opt, "conformance_inventory", None):
            inv = load_inventory(opt.conformance_inventory)
            kube_api = discover_nodes(inv) if inv.kubernetes else None
        else:
            inv = local_inventory(getattr(opt, "conformance_host_root", "") or "")
        run = cls(
            inv,
            profile_override=getattr(opt, "conformance_profile", None),
            snapshot_dir=snapshot,
            parallel=getattr(opt, "conformance_parallel", 16),
            timeout=getattr(opt, "conformance_timeout", 120.0),
            verbose=config.option.verbose > 0,
        )
        run.retries = getattr(opt, "conformance_retries", 2)
        run.kube_api = kube_api
        run.pytest_config = config
        run.measure = bool(getattr(opt, "conformance_measure", False))
        run.acceptance_pod = bool(getattr(opt, "conformance_acceptance_pod", False))
        if getattr(opt, "conformance_waivers", None):
            run.load_waivers(opt.conformance_waivers)
        return run

    def load_waivers(self, path: str) -> None:
        self.waivers = load_waivers(path)
        self.waivers_file = path

    def apply_waivers(self, node: str, check: str, message: str) -> tuple[str, dict[str, Any] | None, str]:
        """(outcome, waiver json, message) for a failed result."""
        labels = self.spec(node).labels
        matches = find_waivers(self.waivers, node, check, labels)
        self._waivers_matched.update(w.index for w in matches)
        active = [w for w in matches if not w.expired(self.today)]
        if active:
            return "waived", active[0].to_json(self.today), message
        if matches:
            w = matches[0]
            note = f" [waiver #{w.index} expired on {w.expires.isoformat()}: {w.justification}]"
            return "failed", w.to_json(self.today), message + note
        return "failed", None, message

    def waivers_json(self) -> dict[str, Any] | None:
        if self.waivers_file is None:
            return None
        return {
            "file": self.waivers_file,
            "count": len(self.waivers),
            "unused": [w.to_json(self.today) for w in self.waivers if w.index not in self._waivers_matched],
        }

    @classmethod
    def from_results(cls, paths: list[str]) -> Run:
        from conformance.outputs.replay import inventory_of, merge_documents, register_checks

        doc = merge_documents(paths)
        register_checks(doc["checks"])
        run = cls(inventory_of(doc))
        run.replay = doc
        run.started_at = doc["started_at"]
        run.replayed_nodes = {n["name"]: n for n in doc["nodes"]}
        for n in doc["nodes"]:
            run.profile_names[n["name"]] = n.get("profile", "default")
            run.profile_reasons[n["name"]] = n.get("profile_reason", "")
        return run

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.inventory.nodes]

    def spec(self, node: str) -> NodeSpec:
        """The node's inventory entry (discovered nodes included)."""
        return self._specs[node]

    def profile_for(self, node: str) -> Profile:
        return self._profiles[node]

    def latency_for(self, node: str, endpoint: Endpoint) -> LatencyResult:
        key = (node, endpoint.name)
        if key not in self._latency:
            show = None
            if self.verbose or sys.stderr.isatty():

                def show(done: int, total: int) -> None:
                    if done == total or done % max(1, total // 20) == 0:
                        end = "\n" if done == total else ""
                        self.say(f"\rlatency {node}/{endpoint.name}: {done}/{total} requests\033[K{end}")

            self._latency[key] = measure(endpoint, show)
        return self._latency[key]

    def facts_for(self, node: str) -> NodeFacts:
        """One node's facts. Under pytest-xdist each worker collects only the nodes it runs (all of a
        node's checks stay in one worker); otherwise every node is collected at once, concurrently."""
        if not self.xdist_worker or self.snapshot_dir:
            return self.facts()[node]
        with self._lock:
            if self._facts is None:
                self._facts = {}
            if node not in self._facts:
                bundle = collect_all([self.spec(node)], 1, self.timeout, None, self.retries)[node]
                live = self._read_configz([node]) if self.kube_api is not None else {}
                self._facts[node] = NodeFacts(bundle, *live.get(node, (None, None)))
            return self._facts[node]

    def facts(self) -> dict[str, NodeFacts]:
        with self._lock:
            if self._facts is None:
                if self.snapshot_dir:
                    bundles = {}
                    for n in self.inventory.nodes:
                        if n.name not in self._snapshots:
                            raise UsageError(f"{self.snapshot_dir}: no snapshot for node {n.name}")
                        bundles[n.name] = self._snapshots[n.name]
                else:
                    progress = stderr_progress(self.verbose, self.say)
                    bundles = collect_all(self.inventory.nodes, self.parallel, self.timeout, progress, self.retries)
                live = self._read_configz(list(bundles)) if self.kube_api is not None and not self.snapshot_dir else {}
                self._facts = {name: NodeFacts(b, *live.get(name, (None, None))) for name, b in bundles.items()}
            return self._facts

    def _read_configz(self, nodes: list[str]) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
        """Each kubelet's live config through the API server, concurrently; a failure (403 on
        nodes/proxy, timeout) is kept as the reason the node's files decide instead."""
        spec = self.inventory.kubernetes
        if spec is None or not spec.configz:
            return {}

        def one(node: str) -> tuple[str, tuple[dict[str, Any] | None, str | None]]:
            try:
                return node, (configz(self.kube_api, node), None)
            except FactUnavailable as e:
                return node, (None, str(e))

        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(nodes) or 1))) as pool:
            return dict(pool.map(one, nodes))

    # -- pods ------------------------------------------------------------------------------------
    def pods_on(self, node: str) -> list[PodInfo]:
        """The node's GPU pods (from the API; listed once)."""
        if node not in self._pods:
            spec = self.inventory.kubernetes
            try:
                selector = self.profile_for(node).get("pods.selector")
                self._pods[node] = gpu_pods(self.kube_api, node, spec.gpu_resource if spec else GPU_RESOURCE, selector)
            except FactUnavailable as e:
                self._pods[node] = e
        got = self._pods[node]
        if isinstance(got, FactUnavailable):
            raise got
        return got

    def pod_targets(self, node: str) -> list[ContainerRef | str | None]:
        """What the pod checks run on for `node`: its GPU containers, or None (nothing to check), or
        the reason the pods could not be listed (the checks then report that error)."""
        if self.kube_api is None or self.snapshot_dir:
            return [None]
        self._ensure_acceptance_pods()
        problem = (self.acceptance or {}).get(node)
        try:
            pods = self.pods_on(node)
        except FactUnavailable as e:
            return [str(e)]
        refs: list[ContainerRef | str | None] = [
            ContainerRef(node, p.namespace, p.name, c["name"], p.uid)
            for p in pods
            for c in p.containers
            if c["gpus"] or c.get("selected")
        ]
        if isinstance(problem, FactUnavailable):
            refs.insert(0, str(problem))  # the node failed acceptance before any check: say so in the results
        return refs or [None]

    def wants_acceptance_pod(self, node: str) -> bool:
        return self.acceptance_pod or bool(self.profile_for(node).get("pods.acceptance_pod"))

    def _ensure_acceptance_pods(self) -> None:
        """Create (once, concurrently) the acceptance pod on every node that asks for one."""
        if self.acceptance is not None:
            return
        self.acceptance = {}
        nodes = [n for n in self.node_names if self.wants_acceptance_pod(n)]
        if not nodes:
            return
        spec = self.inventory.kubernetes
        assert spec is not None

        stop = threading.Event()

        def one(node: str) -> tuple[str, AcceptancePod | FactUnavailable]:
            prof = self.profile_for(node)
            image = prof.get("pods.acceptance_image") or DEFAULT_IMAGE
            cpus, sizing = acceptance.size_cpus(int(prof.get("pods.acceptance_cpus")), threads.get(node))
            body = acceptance.manifest(node, prof, spec.namespace, image, spec.gpu_resource, cpus)
            try:
                made = acceptance.create(self.kube_api, body, float(prof.get("pods.acceptance_timeout_s")), stop)
            except FactUnavailable as e:
                if isinstance(e, acceptance.AcceptanceFailed) and e.pod is not None:
                    e.pod.sizing = sizing
                return node, e
            made.sizing = sizing
            return node, made

        # The pod is sized from the node's threads per core (one collection first); the node is collected
        # again once its pod runs, so that the kubelet's state files show the pod's assignment.
        threads: dict[str, int | None] = {}
        for node in nodes:
            try:
                threads[node] = self.facts()[node].topology.threads_per_core
            except FactUnavailable:
                threads[node] = None
        self.say(f"creating the acceptance pod on {len(nodes)} node(s)\n")
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(nodes))))
        futures = [pool.submit(one, n) for n in nodes]
        try:
            pending = set(futures)
            while pending:  # wait in short steps: Ctrl-C reaches the main thread here
                done, pending = wait(pending, timeout=0.2)
                for f in done:
                    node, got = f.result()
                    self.acceptance[node] = got
        except BaseException:
            stop.set()  # the waiting workers delete their pods and return
            for f in futures:
                node, got = f.result()
                self.acceptance[node] = got
            raise
        finally:
            pool.shutdown(wait=True)
        self._recollect([n for n, got in self.acceptance.items() if isinstance(got, AcceptancePod)])

    def _recollect(self, nodes: list[str]) -> None:
        """Collect these nodes again (their state changed: an acceptance pod was admitted); the record
        counts both remote executions."""
        if not nodes:
            return
        bundles = collect_all([self.spec(n) for n in nodes], self.parallel, self.timeout, None, self.retries)
        live = self._read_configz(nodes) if self.kube_api is not None else {}
        with self._lock:
            assert self._facts is not None
            for name, b in bundles.items():
                b.executions += self._facts[name].bundle.executions
                b.notes = [*b.notes, "collected twice: once to size the acceptance pod, once after it ran"]
                self._facts[name] = NodeFacts(b, *live.get(name, (None, None)))

    def cleanup(self) -> None:
        """Delete every acceptance pod this run created (also after a failure or an interrupt)."""
        for pod in (self.acceptance or {}).values():
            if isinstance(pod, AcceptancePod):
                acceptance.delete(self.kube_api, pod)

    def pod(self, ref: ContainerRef) -> PodInfo:
        return next(p for p in self.pods_on(ref.node) if p.namespace == ref.namespace and p.name == ref.pod)

    def inside(self, ref: ContainerRef) -> InsideFacts:
        """The container's view, from one exec (taken once, whichever check asks first)."""
        if ref.id not in self._inside:
            variables = list(self.profile_for(ref.node).get("pods.thread_env"))
            try:
                timeout = float(self.profile_for(ref.node).get("pods.exec_timeout_s"))
                self._inside[ref.id] = exec_inside(self.kube_api, ref, variables, timeout)
            except FactUnavailable as e:
                self._inside[ref.id] = e
        got = self._inside[ref.id]
        if isinstance(got, FactUnavailable):
            raise got
        return got

    def say(self, text: str) -> None:
        """A progress line on stderr, also while a check runs (pytest captures output then)."""
        capman = self.pytest_config.pluginmanager.getplugin("capturemanager") if self.pytest_config else None
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            sys.stderr.write(text)
            sys.stderr.flush()

    def measuring(self, node: str) -> bool:
        return self.measure or bool(self.profile_for(node).get("gpu.measure_bandwidth"))

    def h2d(self, node: str) -> H2DMeasurement:
        """The node's H2D measurement. On first use, every node that asks for one is measured,
        concurrently across nodes (one GPU at a time within a node); under pytest-xdist, only the
        nodes this worker runs."""
        with self._h2d_lock:
            if node not in self._h2d:
                wanted = [node] if self.xdist_worker else [n for n in self.node_names if self.measuring(n)]
                self._h2d.update(self._measure([n for n in wanted if n not in self._h2d]))
        got = self._h2d.get(node)
        if got is None:
            raise FactUnavailable(f"node {node}: bandwidth was not measured")
        if isinstance(got, Exception):
            raise FactUnavailable(f"node {node}: bandwidth not measured: {got}")
        return got

    def _h2d_executions(self, node: str) -> int:
        got = self._h2d.get(node)
        return got.executions if isinstance(got, H2DMeasurement) else 0

    def _measure(self, nodes: list[str]) -> dict[str, H2DMeasurement | Exception]:
        todo: dict[str, Any] = {}
        out: dict[str, H2DMeasurement | Exception] = {}
        for name in nodes:
            f = self.facts_for(name)
            try:
                todo[name] = (self.spec(name), f.gpus, f.topology)
            except FactUnavailable as e:
                out[name] = e
                continue
            try:  # keep the probe off CPUs the CPU manager gave to pods exclusively
                state = f.cpu_manager_state
                exclusive = frozenset(c for entries in state.entries.values() for cpus in entries.values() for c in cpus)
            except FactUnavailable:
                exclusive = frozenset()
            try:  # and off GPUs the kubelet gave to pods
                assigned = f.device_assignments
            except FactUnavailable:
                assigned = {}
            todo[name] = (*todo[name], exclusive, assigned)
        show = self.verbose or sys.stderr.isatty()
        done = 0

        def one(name: str) -> tuple[str, H2DMeasurement]:
            spec, gpus, topology, exclusive, assigned = todo[name]
            return name, measure_node(spec, gpus, topology, self.profile_for(name).get("gpu"), exclusive, assigned)

        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(todo) or 1))) as pool:
            for name, m in pool.map(one, list(todo)):
                out[name] = m
                done += 1
                if show:
                    end = "\n" if done == len(todo) else ""
                    self.say(f"\rH2D bandwidth: {done}/{len(todo)} nodes measured ({name}: {len(m.gpus)} GPU(s))\033[K{end}")
        return out

    # -- verdicts ------------------------------------------------------------------------------
    def node_summary(self, node: str) -> dict[str, Any]:
        rows = [r for r in self.results if r["node"] == node]
        counts = {o: 0 for o in ("passed", "failed", "error", "skipped", "waived")}
        for r in rows:
            counts[r["outcome"]] += 1
        blocking = [r["check"] for r in rows if r["outcome"] in ("failed", "error") and r["severity"] in BLOCKING]
        collection = self.collection_of(node)
        if collection and collection.get("error_kind") == "missing":
            verdict = "incomplete"  # expected by `conformance merge --expect`, but no results came
        elif collection and collection.get("error"):
            verdict = "unreachable"
        elif not rows:
            verdict = "incomplete"
        elif blocking:
            verdict = "rejected"
        else:
            verdict = "accepted"
        spec = self.spec(node)
        out: dict[str, Any] = {
            "name": node,
            "verdict": verdict,
            "profile": self.profile_names[node],
            "profile_reason": self.profile_reasons[node],
            "transport": spec.transport,
            "labels": spec.labels,
            "discovered": spec.discovered,
            "counts": counts,
            "blocking": sorted(set(blocking)),
        }
        made = (self.acceptance or {}).get(node)
        if isinstance(made, AcceptancePod):
            out["acceptance_pod"] = made.to_json()
        elif made is not None:
            record = getattr(made, "pod", None)
            out["acceptance_pod"] = record.to_json() if record is not None else {"error": str(made)}
        facts = self._facts.get(node) if self._facts else None
        if facts is not None and self.kube_api is not None:
            out["kubelet_config_source"] = "configz" if facts.configz is not None else f"node files ({facts.configz_error})"
        if collection is not None:
            out["collection"] = collection
        return out

    def collection_of(self, node: str) -> dict[str, Any] | None:
        """How the node's facts were gathered: this process's bundle, a replayed run's record, or (under
        pytest-xdist) the summary the worker that collected it sent."""
        facts = self._facts.get(node) if self._facts else None
        if facts is None:
            return (self.replayed_nodes.get(node) or {}).get("collection") or self.remote_collection.get(node)
        b = facts.bundle
        return {
            "collected_at": b.collected_at,
            "duration_s": b.duration_s,
            "remote_executions": b.executions + self._h2d_executions(node),
            "error": b.error,
            "error_kind": b.error_kind,
            "notes": b.notes,
            "source": "snapshot" if self.snapshot_dir else "live",
        }

    def to_json(self) -> dict[str, Any]:
        used = sorted({r["check"] for r in self.results})
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "gpu-node-conformance", "version": __version__},
            "started_at": self.started_at,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "complete": not self.interrupted,
            "inventory": self.inventory.path,
            "nodes": [self.node_summary(n) for n in self.node_names],
            "checks": {cid: REGISTRY[cid].to_json() for cid in used if cid in REGISTRY},
            "waivers": self.waivers_json() if self.replay is None else self.replay.get("waivers"),
            "diff": self.diff,
            "results": self.results,
        }

    def write_results(self, path: str, doc: dict[str, Any] | None = None) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(doc or self.to_json(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(p)


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


def write_snapshots(bundles: dict[str, Bundle], folder: str) -> list[Path]:
    p = Path(folder)
    p.mkdir(parents=True, exist_ok=True)
    written = []
    for name, b in bundles.items():
        f = p / f"{name}.json"
        f.write_text(json.dumps(b.to_json(), indent=1) + "\n", encoding="utf-8")
        written.append(f)
    return written


def discover_nodes(inv: Inventory) -> Any:
    """Ask the Kubernetes API for the nodes to audit and merge them into the inventory. Returns the
    ApiClient (also used for configz)."""
    spec = inv.kubernetes
    assert spec is not None
    api = api_client(spec)
    if spec.discover:
        found = discover(api, spec)
        merge_discovered(inv, found)
        if not inv.nodes:
            what = f"label selector {spec.node_selector}" if spec.node_selector else f"{spec.gpu_resource} capacity"
            raise UsageError(f"{inv.path}: the Kubernetes API lists no node with {what}, and the inventory names none")
    return api
