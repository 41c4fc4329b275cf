"""Where a container's memory may live, and what the Memory Manager reserves, on machines with NUMA nodes that
hold memory but no CPUs (Grace: the GPUs' HBM; CXL expanders), issue 51 item 4.

What the kernel and the kubelet do, and so what a correctly placed pod shows:
- A task may allocate on the nodes of its cpuset's `cpuset.mems.effective` (/proc/<pid>/status
  Mems_allowed_list). A cgroup that sets no `cpuset.mems` inherits its parent's, and the root's is every node
  with memory, N_MEMORY (kernel/cgroup/cpuset.c, cpuset_init_smp: top_cpuset.effective_mems =
  node_states[N_MEMORY]; Documentation/admin-guide/cgroup-v2.rst, cpuset.mems.effective).
- In the driver's NUMA mode a Grace GPU's HBM is onlined as system memory of its own CPU-less node, so that node
  is N_MEMORY; in the coherent driver-based mode (CDMM, NVreg_CoherentGPUMemoryMode=driver) the driver keeps the
  HBM and the node has no system memory (NVIDIA, "Coherent Driver-Based Memory Management" in the Grace
  Blackwell and GPU Operator documentation). Empty nodes (a GB200 tray's 28) are never N_MEMORY.
- The kubelet's Memory Manager (Static) writes `cpuset.mems` as the NUMA affinity it allocated from
  (pkg/kubelet/cm/memorymanager/policy_static.go, memory_manager.go GetMemoryNUMANodes); with policy None the
  kubelet leaves cpuset.mems unset and the container inherits N_MEMORY.
- cadvisor lists CPU-less nodes with their memory (utils/sysinfo/sysinfo.go GetNodesInfo: "Found node without
  any CPU", node.Memory from the node's meminfo), so in NUMA mode the Memory Manager counts each HBM node as
  allocatable memory, and can group it with a CPU node for a pod whose memory outgrows that node.

So a correctly placed container's Mems_allowed_list is exactly the NUMA nodes of its CPUs. A memory-only node in
it means its pages may land in GPU memory (NUMA mode, or a Memory Manager group that spans an HBM node); it
appears without the Memory Manager only in NUMA mode, never in CDMM. And a reservedMemory entry on a CPU-less
node protects nothing of the memory the system's daemons use on the CPU nodes, while the kubelet's sum rule
takes it from their reservation."""

from __future__ import annotations

from collections.abc import Iterable

from conformance.facts.cpulist import format_cpulist


def mems_problem(mems: Iterable[int], cpu_nodes: Iterable[int | None], cpuless: Iterable[int]) -> str | None:
    """Why a container's Mems_allowed_list is not its CPUs' NUMA nodes, or None when it is."""
    allowed, want = set(mems), {n for n in cpu_nodes if n is not None}
    if allowed == want:
        return None
    memory_only = allowed & set(cpuless)
    other_cpu_nodes = allowed - want - memory_only
    parts = [f"memory allowed on NUMA node(s) {format_cpulist(frozenset(allowed)) or '(none)'}, CPUs on {sorted(want)}"]
    if memory_only:
        parts.append(
            f"node(s) {format_cpulist(frozenset(memory_only))} hold memory and no CPUs (on a Grace node a GPU's HBM, "
            "system memory in the driver's NUMA mode): the container's pages may land in GPU memory"
        )
    if other_cpu_nodes:
        parts.append(
            f"node(s) {format_cpulist(frozenset(other_cpu_nodes))} are another CPU node's memory, across the socket link"
        )
    if want - allowed:
        parts.append(f"its CPUs' node(s) {sorted(want - allowed)} are not allowed at all")
    return "; ".join(parts)


def reserved_off_cpu_nodes(reserved_nodes: Iterable[object], cpuless: Iterable[int]) -> str | None:
    """The reservedMemory entries on CPU-less NUMA nodes, said as a problem, or None."""
    off = sorted({n for n in reserved_nodes if isinstance(n, int)} & set(cpuless))
    if not off:
        return None
    return (
        f"reservedMemory reserves memory on NUMA node(s) {off}, which have no CPUs (on a Grace node a GPU's HBM, or an "
        "empty node): the system's daemons run on the CPU nodes and use their memory, and the kubelet's sum rule "
        "takes this amount from those nodes' reservation; reserve on the nodes with CPUs"
    )
