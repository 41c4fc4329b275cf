"""Where system services and device interrupts may run.

- Services: what PID 1 runs with (`Cpus_allowed_list` in /proc/1/status, proc(5)). Every process systemd
  starts inherits it unless its unit sets its own CPUAffinity=, so it is the effective default, whatever
  the files say now. systemd sets it from `CPUAffinity=` in its [Manager] section (systemd-system.conf(5)):
  the main file is the first of /etc/systemd/, /run/systemd/, /usr/local/lib/systemd/, /usr/lib/systemd/
  system.conf; then the system.conf.d/*.conf drop-ins of those folders, sorted by file name, a name in an
  earlier folder hiding the same name in a later one, an empty file or a link to /dev/null masking it.
  The option "may be specified more than once, in which case the specified CPU affinity masks are
  merged. If the empty string is assigned, the mask is reset". systemd applies it at boot and on
  daemon-reload (src/core/main.c update_cpu_affinity); processes started before keep theirs. The
  system.slice cpuset (cgroup v2 `cpuset.cpus.effective`, AllowedCPUs=) bounds every service in it.
- Interrupts: each IRQ's `effective_affinity_list` (the CPUs the interrupt controller really targets,
  Documentation/core-api/irq/irq-affinity.rst), else `smp_affinity_list` (proc(5)), and the names of its
  handlers (the subfolders of /proc/irq/<N>). A kernel-managed interrupt (IRQD_AFFINITY_MANAGED: NVMe
  and other multi-queue drivers spread their queues over the CPUs with pci_alloc_irq_vectors_affinity)
  cannot be moved through /proc/irq: writing its smp_affinity_list fails (kernel/irq/proc.c
  write_irq_affinity, irq_can_set_affinity_usr). Only the kernel parameter isolcpus=managed_irq,<CPUs>
  keeps them off CPUs, where their mask holds another online CPU (kernel/irq/manage.c
  irq_do_set_affinity; Documentation/admin-guide/kernel-parameters.txt "managed_irq").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_cpulist

# systemd-system.conf(5) "Configuration Directories and Precedence", highest priority first
SYSTEMD_CONF_DIRS = ("/etc/systemd", "/run/systemd", "/usr/local/lib/systemd", "/usr/lib/systemd")
# drivers/nvme/host/pci.c: queue 0 (admin) is a pre_vector, the I/O queues (nvme<N>q<M>, M >= 1) are managed
NVME_IO_QUEUE = re.compile(r"nvme\d+q[1-9]\d*")


@dataclass(frozen=True)
class Irq:
    cpus: frozenset[int]  # where it is delivered: effective_affinity_list, else smp_affinity_list
    handlers: list[str]
    effective: bool  # cpus came from effective_affinity_list
    managed: bool | None  # kernel-managed affinity; None: cannot tell
    configured: frozenset[int] = frozenset()  # smp_affinity_list: where it may be delivered (the kernel picks in it)


@dataclass
class SystemCpus:
    slice_cpus: frozenset[int] | None  # system.slice cpuset.cpus.effective; None: no cpuset there
    affinity: frozenset[int] | None  # systemd CPUAffinity= from its files; None: not set
    affinity_source: str = ""
    pid1: tuple[str, frozenset[int]] | None = None  # PID 1's name and Cpus_allowed_list; None: not visible
    irqs: dict[int, Irq] = field(default_factory=dict)
    managed_source: str = ""  # how managed IRQs were told apart
    isolated_managed: frozenset[int] | None = None  # isolcpus=managed_irq,<CPUs>; None: the command line unread


def systemd_conf_files(mains: dict[str, bool], dropins: list[str]) -> list[str]:
    """The files systemd reads, in order: the first main file present, then the drop-ins by name (an
    earlier folder's file hides a later folder's of the same name). `mains`: path -> present, in
    SYSTEMD_CONF_DIRS order; `dropins`: every *.conf found in the system.conf.d folders."""
    order = []
    main = next((p for p in (f"{d}/system.conf" for d in SYSTEMD_CONF_DIRS) if mains.get(p)), None)
    if main:
        order.append(main)
    by_name: dict[str, str] = {}
    for d in SYSTEMD_CONF_DIRS:
        for p in dropins:
            if p.startswith(f"{d}/system.conf.d/"):
                by_name.setdefault(p.rsplit("/", 1)[1], p)
    return order + [by_name[n] for n in sorted(by_name)]


def parse_cpu_affinity(docs: list[tuple[str, str]]) -> tuple[frozenset[int] | None, str]:
    """The CPUAffinity= of systemd's [Manager] section over its files in reading order: assignments merge,
    an empty one resets (systemd-system.conf(5)). Returns (CPUs or None when unset, the files that set it)."""
    value: frozenset[int] | None = None
    sources: list[str] = []
    reset = ""
    for path, text in docs:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]").strip()
                continue
            key, eq, val = line.partition("=")
            if section != "Manager" or not eq or key.strip() != "CPUAffinity":
                continue
            val = val.strip()
            if not val:
                value, sources, reset = None, [], path
                continue
            cpus: set[int] = set()
            for item in re.split(r"[\s,]+", val):
                if item:
                    cpus |= parse_cpulist(item, what=f"{path} CPUAffinity")
            value = (value or frozenset()) | cpus
            if path not in sources:
                sources.append(path)
    if value is not None:
        return value, ", ".join(sources)
    return None, (f"{reset} (reset)" if reset else "")


def parse_pid1(status: str) -> tuple[str, frozenset[int]]:
    """(Name, Cpus_allowed_list) of /proc/1/status."""
    name = re.search(r"^Name:\s*(.*)$", status, re.M)
    cpus = re.search(r"^Cpus_allowed_list:\s*(.*)$", status, re.M)
    if not cpus:
        raise ParseError("/proc/1/status: no Cpus_allowed_list line")
    return (name.group(1).strip() if name else "?"), parse_cpulist(cpus.group(1), what="/proc/1/status Cpus_allowed_list")


def isolcpus_managed(cmdline: str) -> frozenset[int]:
    """The CPUs of isolcpus=[flags,]<cpu-list> when its flags include managed_irq (kernel-parameters.txt);
    the last isolcpus= counts, as the kernel parses it again for each occurrence."""
    cpus: frozenset[int] = frozenset()
    for param in cmdline.split():
        name, _, value = param.partition("=")
        if name.replace("-", "_") != "isolcpus":
            continue
        parts = value.split(",")
        flags = []
        while parts and re.fullmatch(r"[a-z_]+", parts[0]):
            flags.append(parts.pop(0))
        cpus = parse_cpulist(",".join(parts), what="isolcpus=") if "managed_irq" in flags and parts else frozenset()
    return cpus


def parse_irqs(
    affinities: dict[str, str],
    action_dirs: list[str],
    effective: dict[str, str] | None = None,
    managed: set[int] | None = None,
) -> dict[int, Irq]:
    """IRQ number -> Irq, from /proc/irq/<N>/smp_affinity_list (and effective_affinity_list) texts.
    `managed`: the IRQs debugfs marks IRQD_AFFINITY_MANAGED; None when debugfs was not readable, where an
    NVMe I/O queue is known managed by its driver and other IRQs are not told apart (None)."""
    actions: dict[int, list[str]] = {}
    for d in action_dirs:
        m = re.fullmatch(r"/proc/irq/(\d+)/([^/]+)/?", d.strip())
        if m:
            actions.setdefault(int(m.group(1)), []).append(m.group(2))
    eff: dict[int, frozenset[int]] = {}
    for path, text in (effective or {}).items():
        m = re.fullmatch(r"/proc/irq/(\d+)/effective_affinity_list", path)
        if not m:
            raise ParseError(f"{path}: not an IRQ effective affinity file")
        eff[int(m.group(1))] = parse_cpulist(text, what=path) if text.strip() else frozenset()
    out = {}
    for path, text in affinities.items():
        m = re.fullmatch(r"/proc/irq/(\d+)/smp_affinity_list", path)
        if not m:
            raise ParseError(f"{path}: not an IRQ affinity file")
        irq = int(m.group(1))
        names = sorted(actions.get(irq, []))
        if managed is not None:
            is_managed: bool | None = irq in managed
        else:
            is_managed = True if any(NVME_IO_QUEUE.fullmatch(n) for n in names) else None
        configured = parse_cpulist(text, what=path)
        cpus = eff.get(irq, configured)
        out[irq] = Irq(cpus, names, irq in eff, is_managed, configured)
    return out
