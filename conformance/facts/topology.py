"""NUMA nodes and SMT siblings, from sysfs files."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.facts.cpulist import format_cpulist


@dataclass
class Topology:
    """CPUs per NUMA node and SMT sibling sets, as the kernel reports them."""

    online: frozenset[int]
    nodes: dict[int, frozenset[int]]
    siblings: dict[int, frozenset[int]]

    def problems(self) -> list[str]:
        """Inconsistencies: a CPU in no node or in two, asymmetric sibling lists."""
        out: list[str] = []
        seen: dict[int, int] = {}
        for node, cpus in sorted(self.nodes.items()):
            for cpu in sorted(cpus):
                if cpu in seen:
                    out.append(f"cpu{cpu} is in node{seen[cpu]} and in node{node}")
                else:
                    seen[cpu] = node
        missing = sorted(self.online - set(seen))
        if missing:
            out.append(
                f"online CPUs {format_cpulist(set(missing))} are listed by no NUMA node's cpulist: the kernel places "
                "them in no node (the firmware's ACPI SRAT gives them no proximity domain)"
            )
        for cpu in sorted(self.online):
            sib = self.siblings.get(cpu)
            if sib is None:
                out.append(f"cpu{cpu}: no topology/thread_siblings_list")
                continue
            if cpu not in sib:
                out.append(f"cpu{cpu}: thread_siblings_list {format_cpulist(sib)} does not contain itself")
            for other in sorted(sib - {cpu}):
                theirs = self.siblings.get(other)
                if other in self.online and theirs is not None and theirs != sib:
                    out.append(
                        f"cpu{cpu} lists cpu{other} as sibling ({format_cpulist(sib)}) but cpu{other} "
                        f"lists {format_cpulist(theirs)}"
                    )
        return out

    def node_of(self, cpu: int) -> int | None:
        for node, cpus in self.nodes.items():
            if cpu in cpus:
                return node
        return None

    @property
    def cpu_nodes(self) -> list[int]:
        """NUMA nodes that have CPUs. Memory-only nodes (CXL expanders, a Grace Hopper GPU's HBM exposed
        as a NUMA node) need no CPU reservation, hold no pinned CPUs and are never a GPU's local CPU node."""
        return sorted(n for n, cpus in self.nodes.items() if cpus)

    @property
    def cpuless_nodes(self) -> list[int]:
        return sorted(n for n, cpus in self.nodes.items() if not cpus)

    @property
    def threads_per_core(self) -> int:
        return max((len(s) for s in self.siblings.values()), default=1)

    def whole_cores(self, cpus: frozenset[int]) -> list[frozenset[int]]:
        """The physical cores all of whose SMT siblings are in `cpus`. Only online CPUs count: an offline CPU's
        topology folder is removed by the kernel (and a CPU that does not exist has none), so it is no core."""
        cores = {self.siblings.get(c, frozenset({c})) for c in cpus & self.online if c in self.siblings}
        return sorted((c for c in cores if c <= cpus), key=min)
