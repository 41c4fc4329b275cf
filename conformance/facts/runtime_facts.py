"""The container runtime's facts of one node: which runtime (containerd or CRI-O), its configuration as the
running daemon reads it, and its release."""

from __future__ import annotations

from conformance.errors import FactUnavailable
from conformance.facts.daemon_release import DaemonRelease, Source, Span, decide, release_in
from conformance.facts.kubelet import parse_kubelet_args, walk_order
from conformance.facts.node_base import FactsBase, fact
from conformance.facts.runtime import (
    CRIO_CONFIG,
    CRIO_CONFIG_DIR,
    DOCKER_CONFIG,
    ContainerdRelease,
    RuntimeConfig,
    RuntimeRefused,
    containerd_config,
    crio_command_line,
    crio_runtime,
    docker_runtime,
    path_glob_match,
)

CONTAINERD_DEFAULT_CONFIG = "/etc/containerd/config.toml"  # containerd(8) --config's default


class RuntimeFacts(FactsBase):
    """The runtime's facts, each read on first use from the collected bundle (the endpoint from the kubelet's
    configuration, where NodeFacts has it)."""

    @fact
    def runtime_name(self) -> tuple[str, str]:
        """(containerd | cri-o, how it was decided)."""
        self.require_reachable()
        try:
            endpoint = self.kubelet_config.get("containerRuntimeEndpoint")
        except FactUnavailable:
            endpoint = None  # the kubelet's configuration unread: the running runtime decides below
        if endpoint is not None and endpoint.value:
            named = None
            if "cri-dockerd" in endpoint.value or "dockershim" in endpoint.value:
                named = "docker", f"{endpoint.describe()}: cri-dockerd serves Docker's containers"
            elif "containerd" in endpoint.value:
                named = "containerd", endpoint.describe()
            elif "crio" in endpoint.value:
                named = "cri-o", endpoint.describe()
            if named is not None:
                self._runs_as_named(named[0], endpoint.describe())
                return named
        for comm, name in (("containerd", "containerd"), ("crio", "cri-o")):
            if self.daemon_pid((comm,), name) is not None:
                return name, f"{name} runs (pid {self.daemon_pid((comm,), name)})"
        if self.bundle.optional_text("/etc/containerd/config.toml") is not None:
            return "containerd", "/etc/containerd/config.toml exists"
        dropins = f"walk-all:{CRIO_CONFIG_DIR}" if self.bundle.listed(f"walk-all:{CRIO_CONFIG_DIR}") else f"{CRIO_CONFIG_DIR}/*"
        if self.bundle.optional_text(CRIO_CONFIG) is not None or self.bundle.glob(dropins):
            return "cri-o", "CRI-O configuration exists"
        raise FactUnavailable(f"no container runtime (containerd or CRI-O) found on node {self.name}")

    def _runs_as_named(self, runtime: str, endpoint: str) -> None:
        """The runtime the kubelet's endpoint names must be the one that runs (issue 59): a runtime that is not found is
        never judged by its defaults or its leftover files. Docker is judged by defaults alone, so no dockerd is
        unknown; for containerd and CRI-O a node with no runtime process at all keeps its files as the witness (a
        snapshot, a host root laid out in a folder), and one where another runtime runs is a borrowed configuration or
        a half-finished migration."""
        comms = {"docker": ("dockerd", "dockerd"), "containerd": ("containerd", "containerd"), "cri-o": ("crio", "CRI-O")}
        comm, who = comms[runtime]
        if self.daemon_pid((comm,), who) is not None:
            return
        running = []
        for other, (c, name) in comms.items():
            if other == runtime:
                continue
            try:
                pid = self.daemon_pid((c,), name)
            except FactUnavailable:
                continue
            if pid is not None:
                running.append(f"{name} (pid {pid})")
        if runtime == "docker" or running:
            what = ", ".join(running) or "no container runtime"
            raise FactUnavailable(
                f"node {self.name}: the kubelet's {endpoint} names {who if runtime != 'docker' else 'cri-dockerd (Docker)'}, "
                f"and no {who} runs on the node; what runs: {what}. The runtime that serves the kubelet is unknown, and a "
                "runtime that does not run is not judged by its defaults"
            )

    @fact
    def runtime_config(self) -> RuntimeConfig:
        runtime, _ = self.runtime_name
        if runtime == "containerd":
            main = self._containerd_main()
            read = self._collected_text
            builtin = self._containerd_given_config() is None and read(main) is None
            if builtin:
                # containerd(8) reads /etc/containerd/config.toml when it exists, and starts on its built-in
                # defaults when it does not and no --config was given (cmd/containerd/command/main.go: LoadConfig
                # only `if !os.IsNotExist(err) || cliContext.IsSet("config")`): a known configuration, not an error
                def read(path: str) -> str | None:
                    return "" if path == main else self._collected_text(path)

            rc = containerd_config(main, read, self._expand_import, self.containerd_span, self._containerd_cwd())
            if builtin:
                rc.files = [f"containerd's built-in defaults ({main} does not exist)"]
                for h in rc.handlers.values():
                    h.source = f"containerd's built-in default ({main} does not exist)"
            return rc
        if runtime == "docker":
            return self._docker_config()
        return self._crio_config()

    def _docker_config(self) -> RuntimeConfig:
        """Docker as the running dockerd reads itself: its --config-file (default /etc/docker/daemon.json) and
        --exec-opt flags; a file the collector did not return is unknown, a missing default file is none."""
        path, exec_opts = DOCKER_CONFIG, []
        pid = self.daemon_pid(("dockerd",), "dockerd")
        if pid is not None:
            args = parse_kubelet_args(self._argv(pid, "dockerd"), cwd=self.bundle.link(f"/proc/{pid}/cwd"))
            if args.flags.get("config-file") and args.flags["config-file"][-1]:
                path = str(args.flags["config-file"][-1])
            exec_opts = [str(v) for v in args.flags.get("exec-opt", []) if v]
        if self.bundle.file(path) is None:
            raise FactUnavailable(f"node {self.name}: Docker's config file {path} was not collected")
        text = self.bundle.optional_text(path)
        try:
            return docker_runtime(path, text, exec_opts, self.cgroup_version)
        except RuntimeRefused as e:
            return RuntimeConfig("docker", "", {}, [path], refused=str(e))

    def _collected_text(self, path: str) -> str | None:
        """A runtime config file's text, None where the node has no such file. A file the collector did not
        return at all (an import deeper than it follows, an `imports` it could not read) is unknown, an error,
        never "missing", which would read as containerd refusing to start."""
        if self.bundle.file(path) is None:
            raise FactUnavailable(
                f"node {self.name}: {path} was not collected (an import deeper than the collector follows, or an "
                "`imports` form it did not read): its content is unknown"
            )
        return self.bundle.optional_text(path)

    def _crio_config(self) -> RuntimeConfig:
        """CRI-O's configuration as the running CRI-O reads it: its command line and environment name the main
        file and the drop-in folder (defaults /etc/crio/crio.conf, /etc/crio/crio.conf.d) and may override
        settings; every file below the folder counts, in filepath.Walk order. What was not collected is unknown
        (FactUnavailable), never an absent file."""
        b = self.bundle
        argv: list[str] = []
        env: dict[str, str] = {}
        pid = self.daemon_pid(("crio",), "CRI-O")
        if pid is not None:
            argv = self._argv(pid, "CRI-O")
            envrec = b.optional_command("crio-environ")
            if envrec is not None and envrec.status != "0":
                raise FactUnavailable(f"node {self.name}: CRI-O's environment (/proc/{pid}/environ) could not be read")
            if envrec is not None:
                env = dict(line.split("=", 1) for line in envrec.data.decode("utf-8", "replace").splitlines() if "=" in line)
        given = crio_command_line(argv, env)
        main = str(given["config"][0]) if "config" in given else CRIO_CONFIG
        folder = str(given["config_dir"][0]) if "config_dir" in given else CRIO_CONFIG_DIR
        docs = []
        if main:  # --config "" skips the file (criocli mergeConfigFiles)
            text = b.optional_text(main)
            if text is None:
                if b.file(main) is None:
                    raise FactUnavailable(f"node {self.name}: CRI-O's config file {main} was not collected")
                if "config" in given:  # an explicit file that does not exist: CRI-O does not start
                    return RuntimeConfig("cri-o", "", {}, [main], refused=f"{main} ({given['config'][1]}) does not exist")
            else:
                docs.append((main, text))
        if not b.listed(f"walk-all:{folder}") and folder == CRIO_CONFIG_DIR and b.listed(f"{CRIO_CONFIG_DIR}/*"):
            found = b.glob(f"{CRIO_CONFIG_DIR}/*")  # a snapshot of an older collector: the folder's own files
        else:
            found = b.glob(f"walk-all:{folder}")
        for path in walk_order(folder, found):
            docs.append((path, b.text(path)))
        return crio_runtime(docs, given, self.crio_release)

    @fact
    def runtime_release(self) -> DaemonRelease:
        """What is known of the running runtime's release, and from where: the Node's nodeInfo, the package of its
        running file, the platform's records (CRI-O's version file), the journal (daemon_release). Nothing the
        process table names is ever run (issue 50)."""
        runtime, _ = self.runtime_name
        comm, who = {"containerd": ("containerd", "containerd"), "cri-o": ("crio", "CRI-O")}.get(runtime, ("", runtime))
        if not comm:
            return DaemonRelease(who, Span.any(), "", [Source("its release", "", None, f"{who}'s release is not read")])
        pid = self.daemon_pid((comm,), who)
        if pid is None:
            return DaemonRelease(who, Span.any(), "", [Source("its process", "", None, f"no {who} process runs")])
        daemon = next(d for d in self.bundle.daemons(comm) if d.pid == pid)
        old = self.bundle.optional_command(f"{comm}-version")  # a collector before issue 50 asked the binary
        if old is not None and self.bundle.optional_command(f"{comm}-package") is None:
            text = old.data.decode("utf-8", "replace") if old.status == "0" else ""
            found = release_in(text.split("Version:", 1)[-1] if "Version:" in text else text)
            return decide(who, [Source("its --version answer (a snapshot of a collector before issue 50)",
                                       text.strip()[:80], Span.exact(found) if found else None,
                                       "" if found else "no release in it")])  # fmt: skip
        return decide(who, self.release_sources(comm, daemon, "containerRuntimeVersion", runtime))

    @property
    def containerd_span(self) -> Span:
        """The releases the running containerd may be (every release where it is not known)."""
        try:
            rel = self.runtime_release
        except FactUnavailable:
            return Span.any()
        return rel.span if rel.daemon == "containerd" else Span.any()

    @property
    def containerd_release(self) -> ContainerdRelease | None:
        """The running containerd's release where it is known to be one release (None: not known)."""
        r = self.containerd_span.release
        return ContainerdRelease(*r) if r is not None else None

    @property
    def containerd_release_unknown(self) -> str:
        """Why the running containerd's release is not known (for messages where it is needed)."""
        try:
            return self.runtime_release.why_unknown() or "it is known"
        except FactUnavailable as e:
            return str(e)

    @property
    def crio_release(self) -> str | None:
        """The running CRI-O's release where it is known to be one release (None: not known)."""
        try:
            rel = self.runtime_release
        except FactUnavailable:
            return None
        if rel.daemon != "CRI-O" or rel.release is None:
            return None
        return ".".join(map(str, rel.release))

    def _containerd_given_config(self) -> str | None:
        """The running containerd's --config/-c (None: not given); an unread command line is unknown."""
        pid = self.daemon_pid(("containerd",), "containerd")
        if pid is not None:
            args = parse_kubelet_args(self._argv(pid, "containerd"), cwd=self.bundle.link(f"/proc/{pid}/cwd"))
            for flag in ("config", "c"):
                if args.flags.get(flag) and args.flags[flag][-1]:
                    return str(args.flags[flag][-1])
        return None

    def _containerd_main(self) -> str:
        return self._containerd_given_config() or CONTAINERD_DEFAULT_CONFIG

    def _containerd_cwd(self) -> str | None:
        """The running containerd's working directory (where 1.x before 1.6.29/1.7.16 matches a relative
        import glob); None when no containerd runs, it is not known which one does, or the link was not read."""
        try:
            pid = self.daemon_pid(("containerd",), "containerd")
        except FactUnavailable:
            return None
        if pid is None:
            return None
        try:
            return self.bundle.link(f"/proc/{pid}/cwd")
        except FactUnavailable:
            return None

    def _expand_import(self, importer: str, pattern: str) -> list[str]:
        # The collector expanded the importing file's globs on the node (against the file's folder and the
        # daemon's working directory); match its list as Go's filepath.Match does ('*' never crosses a '/').
        return sorted({p for p in self.bundle.import_matches(importer) if path_glob_match(pattern, p)})
