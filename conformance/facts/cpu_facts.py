"""The CPUs' facts of one node: where system services and device interrupts may run, and the CPU and NUMA
topology."""

from __future__ import annotations

import re

from conformance.errors import FactUnavailable
from conformance.facts.cpulist import format_cpulist, parse_cpulist
from conformance.facts.node_base import FactsBase, fact
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

# what the collector's globs match (sysfs names: drivers/base/node.c "node%d", drivers/base/cpu.c "cpu%d")
NODE_CPULIST = re.compile(r"/sys/devices/system/node/node(\d+)/cpulist")
CPU_SIBLINGS = re.compile(r"/sys/devices/system/cpu/cpu(\d+)/topology/thread_siblings_list")


class CpuFacts(FactsBase):
    """The CPUs' facts, each read on first use from the collected bundle."""

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
        nodes = {
            int(n): parse_cpulist(b.text(path), what=path)
            for n, path in self.listed("/sys/devices/system/node/node[0-9]*/cpulist", NODE_CPULIST, "a NUMA node's cpulist")
        }
        if not nodes:
            raise FactUnavailable(f"/sys/devices/system/node/node*/cpulist: none found on node {self.name}")
        # Every online CPU is in one node's cpulist (drivers/base/node.c node_read_cpulist: cpumask_of_node &
        # cpu_online_mask) unless the firmware's ACPI SRAT leaves it out of every proximity domain (hwloc's R630
        # topology). Which node such a CPU is on is unknown, and so is every verdict that places CPUs on nodes: an
        # error naming what the kernel shows, never a guess (a cut cpulist record looks the same).
        if lost := online - frozenset().union(*nodes.values()):
            raise FactUnavailable(
                f"node {self.name}: online CPUs {format_cpulist(lost)} are listed by no NUMA node's cpulist "
                "(/sys/devices/system/node/node*/cpulist): the kernel places them in no node, which the firmware's "
                "ACPI SRAT does when it gives them no proximity domain; which node they are on is unknown"
            )
        siblings = {
            int(c): parse_cpulist(b.text(path), what=path)
            for c, path in self.listed(
                "/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list", CPU_SIBLINGS, "a CPU's siblings file"
            )
        }
        return Topology(online=online, nodes=nodes, siblings=siblings)
