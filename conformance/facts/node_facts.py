"""Typed facts of one node, parsed lazily from its bundle; parse errors become FactUnavailable. One class per
domain (the kubelet, the runtime, CPUs and topology, GPUs, the system), composed here behind the names checks
use (`facts.kubelet_config`, `facts.gpus`, ...)."""

from __future__ import annotations

from conformance.facts.cpu_facts import CpuFacts
from conformance.facts.gpu_node_facts import GpuNodeFacts
from conformance.facts.kubelet_facts import KubeletFacts
from conformance.facts.runtime_facts import RuntimeFacts
from conformance.facts.system_facts import SystemFacts


class NodeFacts(KubeletFacts, RuntimeFacts, CpuFacts, GpuNodeFacts, SystemFacts):
    """All node-level facts of one node, each read on first use from the collected bundle."""
