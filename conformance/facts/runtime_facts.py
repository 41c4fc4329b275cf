"""The container runtime's facts of one node: which runtime (containerd or CRI-O), its configuration as the
running daemon reads it, and its release."""

from __future__ import annotations

import re

from conformance.errors import FactUnavailable
from conformance.facts.kubelet import parse_kubelet_args, walk_order
from conformance.facts.node_base import FactsBase, fact
from conformance.facts.runtime import (
    CRIO_CONFIG,
    CRIO_CONFIG_DIR,
    ContainerdRelease,
    RuntimeConfig,
    containerd_config,
    crio_command_line,
    crio_runtime,
    parse_containerd_version,
    path_glob_match,
)


class RuntimeFacts(FactsBase):
    """The runtime's facts, each read on first use from the collected bundle (the endpoint from the kubelet's
    configuration, where NodeFacts has it)."""

    @fact
    def runtime_name(self) -> tuple[str, str]:
        """(containerd | cri-o, how it was decided)."""
        self.require_reachable()
        try:
            endpoint = self.kubelet_config.get("containerRuntimeEndpoint")
            if endpoint.value:
                if "containerd" in endpoint.value:
                    return "containerd", endpoint.describe()
                if "crio" in endpoint.value:
                    return "cri-o", endpoint.describe()
        except FactUnavailable:
            pass
        for comm, name in (("containerd", "containerd"), ("crio", "cri-o")):
            if self.bundle.processes(comm):
                return name, f"a process named {comm} runs"
        if self.bundle.optional_text("/etc/containerd/config.toml") is not None:
            return "containerd", "/etc/containerd/config.toml exists"
        dropins = f"walk-all:{CRIO_CONFIG_DIR}" if self.bundle.listed(f"walk-all:{CRIO_CONFIG_DIR}") else f"{CRIO_CONFIG_DIR}/*"
        if self.bundle.optional_text(CRIO_CONFIG) is not None or self.bundle.glob(dropins):
            return "cri-o", "CRI-O configuration exists"
        raise FactUnavailable(f"no container runtime (containerd or CRI-O) found on node {self.name}")

    @fact
    def runtime_config(self) -> RuntimeConfig:
        runtime, _ = self.runtime_name
        if runtime == "containerd":
            main = self._containerd_main()
            return containerd_config(
                main, self._collected_text, self._expand_import, self.containerd_release, self._containerd_cwd()
            )
        return self._crio_config()

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
        pids = b.processes("crio")
        if pids:
            argv = self._argv(pids[0], "CRI-O")
            envrec = b.optional_command("crio-environ")
            if envrec is not None and envrec.status != "0":
                raise FactUnavailable(f"node {self.name}: CRI-O's environment (/proc/{pids[0]}/environ) could not be read")
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
        return crio_runtime(docs, given)

    @property
    def containerd_release(self) -> ContainerdRelease | None:
        """The running containerd's release, from its own `--version` (None: not asked, or no answer)."""
        rec = self.bundle.optional_command("containerd-version")
        if rec is None or rec.status != "0":
            return None
        return parse_containerd_version(rec.data.decode("utf-8", "replace"))

    @fact
    def crio_release(self) -> str | None:
        """The running CRI-O's release, from its own `--version` (None: not asked, or no answer). CRI-O prints
        `crio version 1.30.4` on its first line and `Version: 1.30.4` below it (internal/version/version.go)."""
        rec = self.bundle.optional_command("crio-version")
        if rec is None or rec.status != "0":
            return None
        text = rec.data.decode("utf-8", "replace")
        m = re.search(r"^(?:crio version|Version:)\s*v?(\d+\.\d+\.\d+\S*)", text, re.M)
        return m.group(1) if m else None

    def _containerd_main(self) -> str:
        # the running daemon's --config; an unread command line is unknown, never the default path
        for pid in self.bundle.processes("containerd")[:1]:
            args = parse_kubelet_args(self._argv(pid, "containerd"), cwd=self.bundle.link(f"/proc/{pid}/cwd"))
            for flag in ("config", "c"):
                if args.flags.get(flag) and args.flags[flag][-1]:
                    return str(args.flags[flag][-1])
        return "/etc/containerd/config.toml"

    def _containerd_cwd(self) -> str | None:
        """The running containerd's working directory (where 1.x before 1.6.29/1.7.16 matches a relative
        import glob); None when no containerd runs or the link was not read."""
        for pid in self.bundle.processes("containerd"):
            try:
                return self.bundle.link(f"/proc/{pid}/cwd")
            except FactUnavailable:
                return None
        return None

    def _expand_import(self, importer: str, pattern: str) -> list[str]:
        # The collector expanded the importing file's globs on the node (against the file's folder and the
        # daemon's working directory); match its list as Go's filepath.Match does ('*' never crosses a '/').
        return sorted({p for p in self.bundle.import_matches(importer) if path_glob_match(pattern, p)})
