"""NUMA topology as the kernel reports it, and NVMe I/O schedulers."""

from __future__ import annotations

import pytest

from conformance.checks import check
from conformance.facts.cpulist import format_cpulist


@check(
    "NODE-NUMA-TOPOLOGY",
    "high",
    title="NUMA nodes and SMT siblings are readable and consistent",
    rationale="""The kubelet's CPU, memory and topology managers decide from this map; if a CPU is in no
    node or two, or sibling lists disagree, every NUMA-aligned decision built on it is wrong.""",
    remediation="Check the BIOS NUMA/SNC settings and the kernel's NUMA support; compare "
    "/sys/devices/system/node/node*/cpulist with lscpu.",
    source="/sys/devices/system/node, /sys/devices/system/cpu/*/topology",
)
def test_numa_topology(node, topology, evidence):
    evidence.source = "sysfs"
    for n, cpus in sorted(topology.nodes.items()):
        evidence.add(f"node{n}: {format_cpulist(cpus)}")
    evidence.add(f"online: {format_cpulist(topology.online)}; {topology.threads_per_core} thread(s) per core")
    problems = topology.problems()
    evidence.add(*problems[:50])
    assert not problems, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")


@check(
    "NODE-NVME-SCHEDULER",
    "low",
    title="NVMe devices use the 'none' I/O scheduler",
    rationale="""NVMe devices have deep hardware queues; a software scheduler adds latency to model and
    dataset loading without benefit.""",
    remediation='Set the scheduler to none, e.g. a udev rule: ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", '
    'ATTR{queue/scheduler}="none".',
    source="/sys/block/nvme*/queue/scheduler",
)
def test_nvme_scheduler(node, nvme_schedulers, profile, evidence):
    if not nvme_schedulers:
        pytest.skip("no NVMe block devices on this node")
    want = profile.get("storage.nvme_scheduler")
    evidence.source = "/sys/block/nvme*/queue/scheduler"
    evidence.add(*(f"{d}: {s}" for d, s in sorted(nvme_schedulers.items())))
    wrong = {d: s for d, s in nvme_schedulers.items() if s != want}
    assert not wrong, ", ".join(f"{d} uses {s}" for d, s in sorted(wrong.items())) + f"; {want!r} expected"
