"""The kubelet's facts of one node: its process, command line, effective configuration (configz or its files
and flags), checkpoints (CPU, memory, device and DRA managers) and release."""

from __future__ import annotations

from conformance.errors import FactUnavailable
from conformance.facts.checkpoints import (
    CpuManagerState,
    DraPrepared,
    KubeletAssignments,
    MemoryManagerState,
    parse_cpu_manager_state,
    parse_device_grants,
    parse_dra_checkpoint,
    parse_memory_manager_state,
)
from conformance.facts.daemon_release import DaemonRelease, Source, Span, decide, release_in
from conformance.facts.kubelet import (
    KubeletArgs,
    KubeletConfig,
    configz_config,
    effective_config,
    flags_to_config,
    k3s_kubelet_argv,
    load_config_document,
    parse_kubelet_args,
    walk_order,
)
from conformance.facts.node_base import FactsBase, fact
from conformance.facts.releases import Release


class KubeletFacts(FactsBase):
    """The kubelet's facts, each read on first use from the collected bundle."""

    @fact
    def kubelet_pid(self) -> int:
        """The kubelet's process: the one verified process named kubelet, else k3s's (the kubelet runs inside it).
        A process a user named kubelet (another uid, a file a user could write, a container's) is no kubelet: on a
        k3s node it leaves k3s's kubelet to be judged (issue 58), and elsewhere is named with why it is not one."""
        self.require_reachable()
        return self._kubelet_daemon[0]

    @property
    def _kubelet_daemon(self) -> tuple[int, bool]:
        """(pid, whether it is k3s's process)."""
        named = self.bundle.daemons("kubelet")
        k3s = ("k3s-server", "k3s-agent", "k3s")
        if named and not any(d.trusted for d in named) and all(d.ruled_out for d in named):
            pid = self.daemon_pid(k3s, "k3s (whose process holds its kubelet)")
            if pid is not None:
                return pid, True
        pid = self.daemon_pid(("kubelet",), "the kubelet")
        if pid is not None:
            return pid, False
        pid = self.daemon_pid(k3s, "k3s (whose process holds its kubelet)")
        if pid is None:
            raise FactUnavailable(
                f"no process named kubelet runs on node {self.name}, nor k3s (whose process holds its kubelet); "
                "looked at the command name of every process in /proc. RKE2 runs a kubelet process of its own"
            )
        return pid, True

    @property
    def _embedded_kubelet(self) -> bool:
        """Whether the kubelet is k3s's (no verified kubelet process of its own)."""
        return self._kubelet_daemon[1]

    @fact
    def kubelet_args(self) -> KubeletArgs:
        pid = self.kubelet_pid
        argv = self._argv(pid, "the kubelet")
        if self._embedded_kubelet:
            argv = k3s_kubelet_argv(argv, self._k3s_config_docs())
        return parse_kubelet_args(argv, cwd=self.bundle.link(f"/proc/{pid}/cwd"))

    def _k3s_config_docs(self) -> list[tuple[str, str]]:
        """k3s's config file and its drop-ins, in the order k3s applies them."""
        docs = []
        main = self.bundle.optional_text("/etc/rancher/k3s/config.yaml")
        if main is not None:
            docs.append(("/etc/rancher/k3s/config.yaml", main))
        # an unlistable drop-in folder is unknown, never "no drop-ins": one may set a kubelet-arg
        docs += [(p, self.bundle.text(p)) for p in self.bundle.glob("/etc/rancher/k3s/config.yaml.d/*.yaml")]
        return docs

    @fact
    def kubelet_config(self) -> KubeletConfig:
        """The live config (configz) when the API gave it, compared with the node's files; else the files."""
        if self.configz is not None:
            try:
                files, why = self.kubelet_file_config, None
            except FactUnavailable as e:
                files, why = None, str(e)
            return configz_config(self.configz, files, why)
        cfg = self.kubelet_file_config
        if self.configz_error:
            cfg.layers.append(f"configz not used: {self.configz_error}")
            cfg.origins = {k: f"{v} [fallback: configz unavailable]" for k, v in cfg.origins.items()}
        return cfg

    @fact
    def kubelet_file_config(self) -> KubeletConfig:
        """The kubelet's --config file, --config-dir drop-ins and flags, as read from the node."""
        args = self.kubelet_args
        file_doc = None
        if args.config:
            text = self.bundle.text(args.config, f"kubelet --config {args.config}")
            file_doc = (args.config, load_config_document(text, args.config))
        dropins = []
        if args.config_dir:
            try:
                found = self.bundle.glob(f"walk:{args.config_dir}")
            except FactUnavailable:  # a snapshot taken before drop-ins were walked recursively
                found = self.bundle.glob(f"{args.config_dir}/*.conf")
            for path in walk_order(args.config_dir, found):
                dropins.append((path, load_config_document(self.bundle.text(path), path)))
        return effective_config(file_doc, dropins, flags_to_config(args.flags))

    @fact
    def cpu_manager_state(self) -> CpuManagerState:
        self.require_reachable()
        path = self._state_path("cpu_manager_state")
        return parse_cpu_manager_state(self.bundle.text(path), path)

    @fact
    def memory_manager_state(self) -> MemoryManagerState:
        self.require_reachable()
        path = self._state_path("memory_manager_state")
        return parse_memory_manager_state(self.bundle.text(path), path)

    @fact
    def dra_prepared(self) -> list[DraPrepared]:
        """The ResourceClaims the kubelet prepared on the node (its DRA checkpoint); [] when the file does not
        exist (no claim was ever prepared here: the kubelet writes it with its first one)."""
        self.require_reachable()
        path = self._state_path("dra_manager_state")
        if self.bundle.file(path) is None:
            raise FactUnavailable(f"node {self.name}: {path} was not collected (an older collector, or another root folder)")
        text = self.bundle.optional_text(path)
        return [] if text is None else parse_dra_checkpoint(text, path)

    @fact
    def kubelet_assignments(self) -> KubeletAssignments:
        """What the kubelet gave to pods: exclusive CPUs, devices, GPU DRA drivers. It fails closed: a
        checkpoint that could not be read or parsed, a kubelet whose root folder is unknown, or records the
        collector did not return raise FactUnavailable (the H2D probe then touches no GPU), and only files
        the collector found missing read as "nothing assigned"."""
        self.require_reachable()
        kubelet = any(self.bundle.processes(c) for c in ("kubelet", "k3s-server", "k3s-agent", "k3s"))
        # the kubelet's root folder (FactUnavailable: where its checkpoints are is unknown); when no kubelet
        # runs, the state files it left (its containers may still run) at the default
        root = (self.kubelet_args.root_dir if kubelet else "/var/lib/kubelet").rstrip("/")
        cpu_path, dev_path = f"{root}/cpu_manager_state", f"{root}/device-plugins/kubelet_internal_checkpoint"
        for path in (cpu_path, dev_path):
            if self.bundle.file(path) is None:
                raise FactUnavailable(f"node {self.name}: {path} was not collected (an older collector, or another root folder)")
        cpu_text = self.bundle.optional_text(cpu_path)
        if cpu_text is None and kubelet:
            # every CPU manager policy keeps this checkpoint (pkg/kubelet/cm/cpumanager/state/state_checkpoint.go)
            raise FactUnavailable(f"node {self.name}: {cpu_path} does not exist although a kubelet runs")
        exclusive = frozenset()
        if cpu_text is not None:
            state = parse_cpu_manager_state(cpu_text, cpu_path)
            exclusive = frozenset(c for entries in state.entries.values() for cpus in entries.values() for c in cpus)
        dev_text = self.bundle.optional_text(dev_path)  # missing: no device plugin ever registered
        grants = tuple(parse_device_grants(dev_text, dev_path)) if dev_text is not None else ()
        registry = f"{root}/plugins_registry/*"
        try:
            sockets = self.bundle.glob(registry)
        except FactUnavailable as e:
            raise FactUnavailable(f"node {self.name}: the kubelet's plugin registry could not be listed ({e})") from None
        # DRA drivers register NAME-reg.sock there (pkg/kubelet/pluginmanager; the NVIDIA DRA driver: gpu.nvidia.com)
        names = {s.rsplit("/", 1)[-1].removesuffix(".sock").removesuffix("-reg") for s in sockets}
        dra = tuple(sorted(n for n in names if "gpu" in n.lower()))
        where = f"{cpu_path}, {dev_path}, {registry}"
        return KubeletAssignments(exclusive=exclusive, grants=grants, dra_drivers=dra, source=where)

    def _state_path(self, name: str) -> str:
        try:
            root = self.kubelet_args.root_dir
        except FactUnavailable:
            root = "/var/lib/kubelet"
        return f"{root.rstrip('/')}/{name}"

    @fact
    def kubelet_release(self) -> DaemonRelease:
        """What is known of the running kubelet's release (k3s's for the kubelet it runs), and from where: the
        Node's nodeInfo, the package of the running file, the platform's records, the journal (daemon_release)."""
        self.require_reachable()
        pid = self.kubelet_pid
        b = self.bundle
        daemon = next(d for c in ("kubelet", "k3s-server", "k3s-agent", "k3s") for d in b.daemons(c) if d.pid == pid)
        old = b.optional_command("kubelet-version")  # a collector before issue 50 asked the binary
        if old is not None and b.optional_command("kubelet-package") is None:
            found = release_in(old.data.decode("utf-8", "replace")) if old.status == "0" else None
            source = Source(
                "its --version answer (a snapshot of a collector before issue 50)",
                old.data.decode("utf-8", "replace").strip()[:80],
                Span.exact(found) if found else None,
                "" if found else "no release in it",
            )
            return decide("the kubelet", [source])
        return decide("the kubelet", self.release_sources("kubelet", daemon, "kubeletVersion", None))

    @fact
    def kubelet_version(self) -> Release:
        """The running kubelet's release where it is known to be one release (kubelet_release: what is known and
        from where); FactUnavailable naming every source looked at and why none decided."""
        known = self.kubelet_release
        if known.release is None:
            raise FactUnavailable(f"node {self.name}: {known.why_unknown()}")
        return known.release
