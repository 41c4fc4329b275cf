"""Where system services and device interrupts may run: the system.slice cpuset (cgroup v2
`cpuset.cpus.effective`), systemd's `CPUAffinity=` (systemd-system.conf(5): a list of CPU indices or
ranges separated by whitespace or commas; it applies to PID 1 and every process it starts; drop-ins in
system.conf.d/*.conf are read after system.conf, a later assignment wins and an empty one resets it),
and each IRQ's `smp_affinity_list` (proc(5): the CPUs the interrupt may be delivered to) with the names
of its handlers (the subfolders of /proc/irq/<N>, named after the device's action)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_cpulist


@dataclass
class SystemCpus:
    slice_cpus: frozenset[int] | None  # system.slice cpuset.cpus.effective; None: no cpuset there
    affinity: frozenset[int] | None  # systemd CPUAffinity=; None: not set
    affinity_source: str = ""
    irqs: dict[int, tuple[frozenset[int], list[str]]] = field(default_factory=dict)  # IRQ -> (CPUs, handlers)


def parse_cpu_affinity(docs: list[tuple[str, str]]) -> tuple[frozenset[int] | None, str]:
    """The effective CPUAffinity= of systemd's [Manager] section over system.conf and its drop-ins."""
    value: frozenset[int] | None = None
    source = ""
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
                value, source = None, f"{path} (reset)"
                continue
            cpus: set[int] = set()
            for item in re.split(r"[\s,]+", val):
                if item:
                    cpus |= parse_cpulist(item, what=f"{path} CPUAffinity")
            value, source = frozenset(cpus), path
    return value, source


def parse_irqs(affinities: dict[str, str], action_dirs: list[str]) -> dict[int, tuple[frozenset[int], list[str]]]:
    """IRQ number -> (smp_affinity_list, handler names), from /proc/irq/<N>/smp_affinity_list texts."""
    actions: dict[int, list[str]] = {}
    for d in action_dirs:
        m = re.fullmatch(r"/proc/irq/(\d+)/([^/]+)/?", d.strip())
        if m:
            actions.setdefault(int(m.group(1)), []).append(m.group(2))
    out = {}
    for path, text in affinities.items():
        m = re.fullmatch(r"/proc/irq/(\d+)/smp_affinity_list", path)
        if not m:
            raise ParseError(f"{path}: not an IRQ affinity file")
        irq = int(m.group(1))
        out[irq] = (parse_cpulist(text, what=path), sorted(actions.get(irq, [])))
    return out
