"""The GPU pods of each node, as the API lists them and as their containers see themselves (one
exec each), and the acceptance pods this run creates (and deletes)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

from conformance.cluster import acceptance
from conformance.cluster.acceptance import AcceptancePod
from conformance.cluster.api import runtime_class_handlers
from conformance.cluster.dra import DraReader, NodeSlices
from conformance.cluster.manifests import DEFAULT_IMAGE
from conformance.cluster.pods import ContainerRef, InsideFacts, PodInfo, exec_inside, gpu_pods
from conformance.config.kubernetes import GPU_RESOURCE
from conformance.errors import FactUnavailable, remembered
from conformance.run.facts_store import FactStore
from conformance.run.fleet import Fleet


class PodView:
    def __init__(self, fleet: Fleet, store: FactStore, say: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.store = store
        self.say = say
        self.acceptance_pod = False  # --acceptance-pod: create the test pod on every node
        self.acceptance: dict[str, AcceptancePod | FactUnavailable] | None = None
        self._pods: dict[str, list[PodInfo] | FactUnavailable] = {}
        self._inside: dict[str, InsideFacts | FactUnavailable] = {}
        self._handlers: dict[str, str] | FactUnavailable | None = None
        self._dra: DraReader | None = None

    @property
    def dra(self) -> DraReader:
        """The run's reader of ResourceClaims and ResourceSlices (resource.k8s.io)."""
        if self._dra is None:
            self._dra = DraReader(self.store.kube_api)
        return self._dra

    def slices_on(self, node: str) -> NodeSlices | None:
        """The GPU devices the node's ResourceSlices publish (None: no API, or a snapshot replay)."""
        if self.store.kube_api is None or self.store.snapshot_dir:
            return None
        return self.dra.slices(node, tuple(self.fleet.profile_for(node).get("gpu.dra_drivers")))

    def pods_on(self, node: str) -> list[PodInfo]:
        """The node's GPU pods (from the API; listed once)."""

        def listed() -> list[PodInfo]:
            spec = self.fleet.inventory.kubernetes
            profile = self.fleet.profile_for(node)
            resource = spec.gpu_resource if spec else GPU_RESOURCE
            namespaces = profile.get("pods.namespaces") or None
            drivers, cpu = tuple(profile.get("gpu.dra_drivers")), tuple(profile.get("pods.dra_cpu_drivers"))
            return gpu_pods(self.store.kube_api, node, resource, profile.get("pods.selector"), namespaces, self.dra, drivers, cpu)

        return remembered(self._pods, node, listed)

    def pod_targets(self, node: str) -> list[ContainerRef | str | None]:
        """What the pod checks run on for `node`: its GPU containers, or None (nothing to check), or
        the reason the pods could not be listed (the checks then report that error)."""
        if self.store.kube_api is None or self.store.snapshot_dir:
            return [None]
        self.ensure_acceptance_pods()
        problem = (self.acceptance or {}).get(node)
        try:
            pods = self.pods_on(node)
        except FactUnavailable as e:
            return [str(e)]
        refs: list[ContainerRef | str | None] = [
            ContainerRef(node, p.namespace, p.name, c["name"], p.uid)
            for p in pods
            for c in p.containers
            if c["gpus"] or c["dra"].error or c.get("selected")
        ]
        if isinstance(problem, FactUnavailable):
            refs.insert(0, str(problem))  # the node failed acceptance before any check: say so in the results
        return refs or [None]

    def wants_acceptance_pod(self, node: str) -> bool:
        return self.acceptance_pod or bool(self.fleet.profile_for(node).get("pods.acceptance_pod"))

    def ensure_acceptance_pods(self) -> None:
        """Create (once, concurrently) the acceptance pod on every node that asks for one. The pod is
        sized from the node's threads per core (one collection first); the node is collected again once
        its pod runs, so that the kubelet's state files show the pod's assignment."""
        if self.acceptance is not None:
            return
        self.acceptance = {}
        nodes = [n for n in self.fleet.node_names if self.wants_acceptance_pod(n)]
        if not nodes:
            return
        threads: dict[str, int | None] = {}
        for node in nodes:
            try:
                threads[node] = self.store.facts()[node].topology.threads_per_core
            except FactUnavailable:
                # unknown, not 1: the pod is sized as the profile says and its sizing says why (size_cpus);
                # no verdict rests on it (the pod checks judge what the kubelet then gave the pod)
                threads[node] = None
        self.say(f"creating the acceptance pod on {len(nodes)} node(s)\n")
        self._create_all(nodes, threads)
        made = [n for n, got in self.acceptance.items() if isinstance(got, AcceptancePod)]
        self.store.recollect(made, "collected twice: once to size the acceptance pod, once after it ran")

    def _create_one(self, node: str, threads: int | None, stop: threading.Event) -> tuple[str, AcceptancePod | FactUnavailable]:
        spec = self.fleet.inventory.kubernetes
        assert spec is not None
        prof = self.fleet.profile_for(node)
        image = prof.get("pods.acceptance_image") or DEFAULT_IMAGE
        cpus, sizing = acceptance.size_cpus(int(prof.get("pods.acceptance_cpus")), threads)
        body = acceptance.manifest(node, prof, spec.namespace, image, spec.gpu_resource, cpus)
        try:
            made = acceptance.create(self.store.kube_api, body, float(prof.get("pods.acceptance_timeout_s")), stop)
        except FactUnavailable as e:
            if isinstance(e, acceptance.AcceptanceFailed) and e.pod is not None:
                e.pod.sizing = sizing
            return node, e
        made.sizing = sizing
        return node, made

    def _create_all(self, nodes: list[str], threads: dict[str, int | None]) -> None:
        assert self.acceptance is not None
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.store.options.parallel, len(nodes))))
        futures = [pool.submit(self._create_one, n, threads.get(n), stop) for n in nodes]
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

    def cleanup(self) -> None:
        """Delete every acceptance pod this run created (also after a failure or an interrupt)."""
        for pod in (self.acceptance or {}).values():
            if isinstance(pod, AcceptancePod):
                acceptance.delete(self.store.kube_api, pod)

    def runtime_handlers(self) -> dict[str, str]:
        """RuntimeClass name -> its handler, read once per run from the API."""
        if self._handlers is None:
            try:
                self._handlers = runtime_class_handlers(self.store.kube_api)
            except FactUnavailable as e:
                self._handlers = e
        if isinstance(self._handlers, FactUnavailable):
            raise self._handlers
        return self._handlers

    def pod(self, ref: ContainerRef) -> PodInfo:
        return next(p for p in self.pods_on(ref.node) if p.namespace == ref.namespace and p.name == ref.pod)

    def inside(self, ref: ContainerRef) -> InsideFacts:
        """The container's view, from one exec (taken once, whichever check asks first)."""
        if ref.id not in self._inside:
            profile = self.fleet.profile_for(ref.node)
            try:
                timeout = float(profile.get("pods.exec_timeout_s"))
                self._inside[ref.id] = exec_inside(self.store.kube_api, ref, list(profile.get("pods.thread_env")), timeout)
            except FactUnavailable as e:
                self._inside[ref.id] = e
        got = self._inside[ref.id]
        if isinstance(got, FactUnavailable):
            raise got
        return got
