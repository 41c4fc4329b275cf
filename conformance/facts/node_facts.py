"""Typed facts of one node, parsed lazily from its bundle. Parse errors become FactUnavailable."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from conformance.collection.bundle import Bundle, Record
from conformance.errors import FactUnavailable, ParseError
from conformance.facts import kernel
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
from conformance.facts.cpulist import format_cpulist, parse_cpulist
from conformance.facts.gpu import GpuFacts, parse_nvml_probe, parse_pci_function, parse_smi_xml, parse_topo_matrix
from conformance.facts.gpu_health import parse_smi_nvlink
from conformance.facts.kubelet import (
    KubeletArgs,
    KubeletConfig,
    configz_config,
    effective_config,
    flags_to_config,
    k3s_kubelet_argv,
    load_config_document,
    parse_kubelet_args,
    split_cmdline,
    walk_order,
)
from conformance.facts.releases import Release, parse_release
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
from conformance.facts.system_cpus import (
    SYSTEMD_CONF_DIRS,
    SystemCpus,
    isolcpus_managed,
    parse_cpu_affinity,
    parse_irqs,
    parse_pid1,
    systemd_conf_files,
)
from conformance.facts.topology import Topology
from conformance.facts.xid import CONTROL, XID_LINES_KEPT, XidLog, XidRecordError, parse_xid_record

T = TypeVar("T")
# GPU daemons by the name the kernel keeps for them (comm: the first 15 characters of the program name)
GPU_DAEMONS = {"nvidia-fabricmanager": "nv-fabricmanage", "nvidia-persistenced": "nvidia-persiste"}
PCI_ATTRIBUTES = ("numa_node", "local_cpulist", "current_link_speed", "current_link_width", "max_link_speed", "max_link_width")


def fact(fn: Callable[[NodeFacts], T]) -> property:
    """A lazily computed fact; the value or the failure is computed once and remembered."""
    name = fn.__name__

    @functools.wraps(fn)
    def get(self: NodeFacts) -> T:
        if name not in self._memo:
            try:
                self._memo[name] = (True, fn(self))
            except ParseError as e:
                self._memo[name] = (False, FactUnavailable(str(e)))
            except FactUnavailable as e:
                self._memo[name] = (False, e)
        ok, value = self._memo[name]
        if not ok:
            raise value
        return value

    return property(get)


@dataclass
class Sysctls:
    tcp_tw_reuse: int
    somaxconn: int
    port_range: tuple[int, int]
    reserved_ports: set[int]


# what a bounded `--version` exit says: timeout(1) kills with SIGKILL (137), the shell's 126 and 127
VERSION_EXITS = {
    "137": "killed after 5 s",
    "126": "not permitted to run it: /proc/PID/exe needs the kubelet's own user or root",
    "127": "timeout(1) or the binary not found",
}


class NodeFacts:
    """All node-level facts of one node, each read on first use from the collected bundle."""

    def __init__(self, bundle: Bundle, configz: dict[str, Any] | None = None, configz_error: str | None = None) -> None:
        self.bundle = bundle
        self.name = bundle.node
        self.configz = configz  # the kubelet's live config from the API server, when it could be read
        self.configz_error = configz_error  # why not (no API configured: None)
        self._memo: dict[str, tuple[bool, Any]] = {}

    @property
    def reachable(self) -> bool:
        return self.bundle.error is None

    def require_reachable(self) -> None:
        if self.bundle.error is not None:
            raise FactUnavailable(f"node {self.name} {self.bundle.error_kind or 'unreachable'}: {self.bundle.error}")
        if not self.bundle.complete:
            raise FactUnavailable(f"node {self.name}: collection ended early (output incomplete)")

    # -- kubelet -------------------------------------------------------------------------------
    @fact
    def kubelet_pid(self) -> int:
        self.require_reachable()
        pids = self.bundle.processes("kubelet")
        if not pids:
            embedded = [(c, p) for c in ("k3s-server", "k3s-agent", "k3s") for p in self.bundle.processes(c)]
            if embedded:
                return embedded[0][1]  # k3s: the kubelet runs inside this process
            raise FactUnavailable(
                f"no process named kubelet runs on node {self.name}, nor k3s (whose process holds its kubelet); "
                "looked at the command name of every process in /proc. RKE2 runs a kubelet process of its own"
            )
        return pids[0]

    @fact
    def kubelet_args(self) -> KubeletArgs:
        pid = self.kubelet_pid
        argv = self._argv(pid, "the kubelet")
        if not self.bundle.processes("kubelet"):
            argv = k3s_kubelet_argv(argv, self._k3s_config_docs())
        return parse_kubelet_args(argv, cwd=self.bundle.link(f"/proc/{pid}/cwd"))

    def _argv(self, pid: int, who: str) -> list[str]:
        """A running process's command line. Never empty for a live process: /proc/PID/cmdline reads empty for
        a zombie (or a kernel thread), so an empty one says the flags are unknown, not that none were given."""
        rec = self.bundle.file(f"/proc/{pid}/cmdline")
        if rec is None or rec.status != "ok":
            raise FactUnavailable(f"node {self.name}: {who}'s command line (/proc/{pid}/cmdline) could not be read")
        argv = split_cmdline(rec.data)
        if not argv:
            raise FactUnavailable(
                f"node {self.name}: {who}'s command line (/proc/{pid}/cmdline) reads empty (a process that was "
                "ending): its flags are unknown"
            )
        return argv

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
        kubelet = bool(self.bundle.processes("kubelet")) or any(
            self.bundle.processes(c) for c in ("k3s-server", "k3s-agent", "k3s")
        )
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

    # -- runtime -------------------------------------------------------------------------------
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

    # -- kernel --------------------------------------------------------------------------------
    @fact
    def cgroup_version(self) -> int:
        self.require_reachable()
        rec = self.bundle.command("stat-cgroup")
        if rec.status != "0":
            raise FactUnavailable(f"stat -fc %t /sys/fs/cgroup failed (exit {rec.status}) on node {self.name}")
        return kernel.cgroup_version(rec.data.decode("utf-8", "replace"))

    @fact
    def kubepods_driver(self) -> tuple[str | None, str]:
        self.require_reachable()
        dirs = self.bundle.dirs()
        unseen = [d for d in kernel.KUBEPODS_DIRS if d not in dirs]
        if unseen:  # a layout not looked for is unknown, never "absent" (which would leave the kubelet config to decide)
            raise FactUnavailable(f"node {self.name}: whether {unseen[0]} exists was not looked at (an older snapshot)")
        return kernel.kubepods_driver(dirs)

    @fact
    def kubelet_cgroup_driver(self) -> tuple[str, str, str]:
        """(driver, the source that decided, how). Since Kubernetes 1.31 the kubelet takes the driver from the
        runtime, so the pod cgroup tree decides when it exists; the kubelet config otherwise."""
        driver, why = self.kubepods_driver
        if driver is not None:
            return driver, "pod cgroup tree", why
        s = self.kubelet_config.get("cgroupDriver")
        return str(s.value), "kubelet config cgroupDriver", f"{why}; {s.describe()}"

    @fact
    def sysctls(self) -> Sysctls:
        self.require_reachable()
        b = self.bundle
        return Sysctls(
            tcp_tw_reuse=kernel.parse_int_sysctl(b.text("/proc/sys/net/ipv4/tcp_tw_reuse"), "net.ipv4.tcp_tw_reuse"),
            somaxconn=kernel.parse_int_sysctl(b.text("/proc/sys/net/core/somaxconn"), "net.core.somaxconn"),
            port_range=kernel.parse_port_range(b.text("/proc/sys/net/ipv4/ip_local_port_range")),
            reserved_ports=kernel.parse_port_set(b.text("/proc/sys/net/ipv4/ip_local_reserved_ports")),
        )

    @fact
    def kubelet_version(self) -> Release:
        """The running kubelet's release, as its binary (/proc/PID/exe --version; k3s's for the kubelet it runs)
        reports it."""
        self.require_reachable()
        rec = self.bundle.optional_command("kubelet-version")
        if rec is None:
            raise FactUnavailable(f"node {self.name}: no kubelet process, or its release was not asked (an older snapshot)")
        if rec.status != "0":
            why = VERSION_EXITS.get(rec.status, "")
            raise FactUnavailable(f"the kubelet's --version exited {rec.status}{f' ({why})' if why else ''}: release unknown")
        return parse_release(rec.data.decode("utf-8", "replace"), "the kubelet's --version")

    @fact
    def kernel_release(self) -> Release:
        rec = self.bundle.command("uname")
        if rec.status != "0":
            raise FactUnavailable(f"uname -r exited {rec.status}: the kernel release is unknown")
        return parse_release(rec.data.decode("utf-8", "replace"), "uname -r")

    @fact
    def system_cpus(self) -> SystemCpus:
        """Where system services and device interrupts may run (conformance.facts.system_cpus)."""
        self.require_reachable()
        b = self.bundle

        def present(path: str) -> bool:
            rec = b.file(path)
            if rec is None:
                raise FactUnavailable(f"{path}: not collected from node {self.name} (an older snapshot)")
            return rec.status != "missing"

        effective = b.optional_text("/sys/fs/cgroup/system.slice/cpuset.cpus.effective")
        slice_cpus = (
            parse_cpulist(effective, what="system.slice cpuset.cpus.effective") if effective and effective.strip() else None
        )
        mains = {f"{d}/system.conf": present(f"{d}/system.conf") for d in SYSTEMD_CONF_DIRS}
        dropins = [p for d in SYSTEMD_CONF_DIRS for p in b.glob(f"{d}/system.conf.d/*.conf")]
        docs = [(p, b.text(p)) for p in systemd_conf_files(mains, dropins)]  # a /dev/null link reads empty: masked
        affinity, source = parse_cpu_affinity(docs)
        status = b.command("pid1-status")
        if status.status not in ("0", "missing"):
            raise FactUnavailable(f"/proc/1/status could not be read (exit {status.status}): where PID 1 runs is unknown")
        pid1 = parse_pid1(status.data.decode("utf-8", "replace")) if status.status == "0" else None
        isolated = isolcpus_managed(b.text("/proc/cmdline")) if present("/proc/cmdline") else None
        managed_rec = b.meta("managed-irqs")
        if managed_rec is None:
            raise FactUnavailable(f"node {self.name}: which IRQs are kernel-managed was not looked at (an older snapshot)")
        managed = None
        if managed_rec.status == "ok":
            managed = {int(x.rsplit("/", 1)[-1]) for x in managed_rec.data.decode().split() if x.rsplit("/", 1)[-1].isdigit()}
        action_dirs = b.meta_lines("irq-actions")
        if action_dirs is None:  # which IRQs have a handler is what makes one a device's: not looked at is unknown
            raise FactUnavailable(f"node {self.name}: the IRQs' handlers (/proc/irq/N/*/) were not listed (an older snapshot)")
        affinities = {p: b.text(p) for p in b.glob("/proc/irq/[0-9]*/smp_affinity_list")}
        effectives = {p: b.text(p) for p in b.glob("/proc/irq/[0-9]*/effective_affinity_list")}
        return SystemCpus(
            slice_cpus,
            affinity,
            source,
            pid1,
            parse_irqs(affinities, action_dirs, effectives, managed),
            "debugfs IRQD_AFFINITY_MANAGED" if managed is not None else "driver names (NVMe I/O queues); debugfs not readable",
            isolated,
        )

    @fact
    def topology(self) -> Topology:
        self.require_reachable()
        b = self.bundle
        online = parse_cpulist(b.text("/sys/devices/system/cpu/online"), what="/sys/devices/system/cpu/online")
        if not online:  # the boot CPU is always online: an empty list was read short
            raise FactUnavailable(f"node {self.name}: /sys/devices/system/cpu/online reads empty (read short)")
        nodes: dict[int, frozenset[int]] = {}
        for path in b.glob("/sys/devices/system/node/node[0-9]*/cpulist"):
            n = int(path.split("/")[-2][4:])
            nodes[n] = parse_cpulist(b.text(path), what=path)
        if not nodes:
            raise FactUnavailable(f"/sys/devices/system/node/node*/cpulist: none found on node {self.name}")
        # every online CPU belongs to one NUMA node, and a node's cpulist shows its online CPUs
        # (drivers/base/node.c node_read_cpulist: cpumask_of_node & cpu_online_mask): a CPU in no list was read short
        if lost := online - frozenset().union(*nodes.values()):
            raise FactUnavailable(
                f"node {self.name}: online CPUs {format_cpulist(lost)} are in no NUMA node's cpulist "
                "(/sys/devices/system/node/node*/cpulist read short)"
            )
        siblings: dict[int, frozenset[int]] = {}
        for path in b.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"):
            cpu = int(path.split("/")[-3][3:])
            siblings[cpu] = parse_cpulist(b.text(path), what=path)
        return Topology(online=online, nodes=nodes, siblings=siblings)

    @fact
    def nvme_schedulers(self) -> dict[str, str]:
        self.require_reachable()
        out = {}
        for path in self.bundle.glob("/sys/block/nvme*/queue/scheduler"):
            dev = path.split("/")[3]
            out[dev] = kernel.parse_scheduler(self.bundle.text(path), dev)
        return out

    # -- GPUs ----------------------------------------------------------------------------------
    @fact
    def gpus(self) -> GpuFacts:
        """GPUs from NVML (the probe), else nvidia-smi, joined with their PCI sysfs attributes."""
        self.require_reachable()
        b = self.bundle
        listed = b.meta_lines("gpus")
        if listed is None:
            raise FactUnavailable(f"node {self.name}: the collector did not list PCI GPUs (older snapshot?)")
        functions = sorted(listed)
        probe = b.optional_command("nvml-probe")
        notes: list[str] = []
        if probe is None and not functions:
            return GpuFacts(gpus=[], source="sysfs: no NVIDIA display-class PCI function", pci_functions=[])
        if probe is not None and probe.status == "0":
            facts = parse_nvml_probe(probe.data.decode("utf-8", "replace"))
        else:
            why = _probe_failure(probe)
            notes.append(f"NVML probe: {why}; using nvidia-smi")
            smi = b.optional_command("nvidia-smi-q")
            if smi is None or smi.status != "0":
                state = "not found on the node" if smi is None or smi.status == "127" else f"exited {smi.status}"
                raise FactUnavailable(f"node {self.name}: GPU facts unavailable: NVML probe: {why}; nvidia-smi: {state}")
            facts = parse_smi_xml(smi.data.decode("utf-8", "replace"))
            topo = b.optional_command("nvidia-smi-topo")
            if topo is not None and topo.status == "0":
                for index, (cpus, numa) in parse_topo_matrix(topo.data.decode("utf-8", "replace")).items():
                    for g in facts.gpus:
                        if g.index == index:
                            g.affinity_cpus = cpus
                            g.affinity_nodes = frozenset({numa}) if numa is not None else None
            else:
                notes.append("nvidia-smi topo -m failed: NVML affinity unknown")
            nvlink = b.optional_command("nvidia-smi-nvlink")
            if nvlink is not None and nvlink.status == "0":
                errs = b.optional_command("nvidia-smi-nvlink-errors")
                err_text = errs.data.decode("utf-8", "replace") if errs is not None and errs.status == "0" else ""
                why = (
                    "nvidia-smi nvlink -e was not run" if errs is None
                    else None if errs.status == "0"
                    else f"nvidia-smi nvlink -e failed (exit {errs.status})"
                )  # fmt: skip
                by_index = parse_smi_nvlink(nvlink.data.decode("utf-8", "replace"), err_text, why)
                for g in facts.gpus:
                    if g.index in by_index:
                        g.health.nvlinks = by_index[g.index]
                        g.health.unread.pop("nvlinks", None)
        for g in facts.gpus:
            attrs = {}
            for a in PCI_ATTRIBUTES:
                rec = b.file(f"/sys/bus/pci/devices/{g.bus_id}/{a}")
                if rec is not None and rec.status == "ok":
                    attrs[a] = rec.data.decode("utf-8", "replace")
            if attrs:
                g.pci = parse_pci_function(g.bus_id, attrs)
        facts.pci_functions = functions
        facts.notes = notes + facts.notes
        facts.nvswitches = sorted(b.meta_lines("nvswitches") or [])
        facts.daemons = {name: b.processes(comm) for name, comm in GPU_DAEMONS.items()}
        return facts

    @fact
    def xid_log(self) -> XidLog:
        """The NVIDIA driver's Xid events of this boot, from the kernel log the collector could read, with
        what it could not read: a log that does not reach back to this boot's start is incomplete."""
        self.require_reachable()
        b = self.bundle
        source, lines, tried_rec = b.meta("kernel-log"), b.optional_command("xid-lines"), b.meta("kernel-log-tried")
        if source is None or lines is None:
            raise FactUnavailable(f"node {self.name}: the collector read no kernel log (no GPU listed, or an older snapshot)")
        if source.status != "ok" or lines.status != "0":
            raise FactUnavailable(
                f"node {self.name}: the collector's kernel-log record could not be read ({source.status}/{lines.status})"
            )
        where = source.data.decode("utf-8", "replace")
        tried = "" if tried_rec is None or tried_rec.status != "ok" else tried_rec.data.decode("utf-8", "replace")
        tried = CONTROL.sub("?", tried.strip().rstrip(";"))[:600]
        if where == "none" or where.endswith(" denied"):
            why = "permission denied" if where.endswith(" denied") else "none found"
            raise FactUnavailable(
                f"node {self.name}: no kernel log could be read ({where}): tried /var/log/kern.log, /var/log/messages, "
                f"journalctl -k -b 0 and dmesg ({why}; dmesg needs CAP_SYSLOG where kernel.dmesg_restrict=1, and the "
                "files are readable by root or the adm group)" + (f"; {tried}" if tried else "")
            )
        try:
            events, counts, numbers = parse_xid_record(lines.data.decode("utf-8", "replace"))
        except XidRecordError as e:
            raise ParseError(f"node {self.name}: {e}") from None
        cap = re.search(r" read-last=(\d+)", where)
        size = re.search(r" size=(\d*) ", where)  # collectors before rotations were read
        files = re.search(r" files=(\d+) ", where)
        if "bytes" in numbers and cap:
            read = "read whole" if numbers["bytes"] < int(cap.group(1)) else f"the last {int(cap.group(1)) // 2**20} MiB read"
        elif size and cap and size.group(1) and int(size.group(1)) <= int(cap.group(1)):
            read = f"{size.group(1)} bytes, read whole"
        else:
            read = f"the last {int(cap.group(1)) // 2**20} MiB read" if cap else "read whole"
        complete = numbers["boot_line"] == 1
        if where.startswith("file "):
            n = int(files.group(1)) if files else 1
            what = "the file" if n == 1 else f"the file and {n - 1} rotation(s)"
            scope = "lines after this boot's first line" if complete else "this boot's first line not found"
            detail = f"{what}, {read}; {scope}"
        else:
            detail = "this boot only" + ("" if complete else ", its first line not found")
        gaps = []
        if not complete:
            gaps.append(
                "this boot's log not fully read: " + (tried or f"{where.split(' ')[0]} does not reach back to this boot's start")
            )
        if numbers.get("dropped"):
            gaps.append(f"{numbers['dropped']} Xid line(s) not counted: more than 1000 different (GPU, Xid) pairs")
        if counts is None and numbers["total"] > XID_LINES_KEPT:
            gaps.append(
                f"only the newest {XID_LINES_KEPT} of {numbers['total']} Xid lines were kept (a collector before per-Xid "
                "counts): older Xid numbers not read"
            )
        source_name = re.split(r" (?:size|files|read-last)=", where)[0]
        return XidLog(
            source=source_name, detail=detail, events=events, total=numbers["total"], counts=counts, complete=complete, gaps=gaps
        )


def _probe_failure(probe: Record | None) -> str:
    if probe is None:
        return "not run"
    if probe.status == "127":
        return "python3 not found on the node"
    text = probe.data.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and doc.get("nvml"):
            return str(doc["nvml"])[:300]
    except ValueError:
        pass
    return f"exited {probe.status}" + (f": {text[:200]}" if text else "")
