"""How many NUMA nodes the kubelet's Topology Manager accepts (Grace machines, issue 51).

pkg/kubelet/cm/topologymanager/topology_manager.go NewManager: with a policy other than `none`, a machine with
more NUMA nodes than `max-allowable-numa-nodes` (a topologyManagerPolicyOptions key, default 8; KEP-4622, beta in
1.31, GA in 1.35) makes the kubelet exit at start ("unsupported on machines with more than %v NUMA Nodes").
cadvisor counts every /sys/devices/system/node/node* (CPU-less and memory-less ones too): a GH200 has 9 (its
CPUs, its GPU's HBM, seven empty), a GB200 tray 34. With the option raised, pod admission enumerates the
NUMA affinity masks of all of them: kubernetes/kubernetes #135541 reports admission stalling on GB200 trays
before the fix of #138244 in 1.36; the rule names it where a node has more than STALL_NODES."""

from __future__ import annotations

from typing import Any

from conformance.errors import FactUnavailable, ParseError
from conformance.facts.daemon_release import Release, Span, as_span

DEFAULT_MAX_NUMA_NODES = 8
STALL_NODES = 16  # 2^16 affinity masks per hint provider: a GH200's 9 nodes admit as usual, a GB200's 34 do not
STALL_FIXED = (1, 36)


def max_allowable(options: Any) -> tuple[int, str]:
    """(the limit, where it came from) from topologyManagerPolicyOptions."""
    value = (options or {}).get("max-allowable-numa-nodes") if isinstance(options, dict) else None
    if value is None:
        return (
            DEFAULT_MAX_NUMA_NODES,
            f"the default {DEFAULT_MAX_NUMA_NODES} (topologyManagerPolicyOptions sets no max-allowable-numa-nodes)",
        )
    try:
        limit = int(str(value))
    except ValueError:
        raise ParseError(
            f"topologyManagerPolicyOptions max-allowable-numa-nodes is {value!r}, not a number: the kubelet does not start"
        ) from None
    return limit, f"topologyManagerPolicyOptions max-allowable-numa-nodes={limit}"


def numa_limit_problems(
    policy: str, options: Any, nodes: list[int], release: Span | Release | None
) -> tuple[list[str], list[str]]:
    """(problems, evidence) of the Topology Manager's NUMA node limit on this machine; FactUnavailable where the
    verdict needs the kubelet's release (more than STALL_NODES nodes) and the releases it may be disagree."""
    span = as_span(release)
    fixed = span.at_least((*STALL_FIXED, 0))
    count = len(nodes)
    limit, where = max_allowable(options)
    lines = [f"NUMA nodes on the machine: {count} (/sys/devices/system/node/node*, as cadvisor counts them); limit {where}"]
    if policy == "none":
        return [], [*lines, "topologyManagerPolicy none: the limit does not apply"]
    if count > limit:
        return [
            f"the machine has {count} NUMA nodes and topologyManagerPolicy {policy} allows {limit} ({where}): the kubelet "
            f'exits at start ("unsupported on machines with more than {limit} NUMA Nodes"); set '
            f'topologyManagerPolicyOptions max-allowable-numa-nodes: "{count}"'
        ], lines
    if count > STALL_NODES and fixed is None:
        # whether pod admission stalls depends on the kubelet's release: unknown is never a pass
        known = f"known only as {span}" if span.known else "unknown"
        raise FactUnavailable(
            f"{count} NUMA nodes with topologyManagerPolicy {policy}: pod admission stalls on kubelets before 1.36 "
            f"(kubernetes/kubernetes #135541), and the kubelet's release is {known}: whether it is 1.36 or later decides"
        )
    if count > STALL_NODES and fixed is False:
        return [
            f"{count} NUMA nodes with topologyManagerPolicy {policy} on kubelet {span}: pod "
            "admission enumerates the affinity masks of every node and stalls (kubernetes/kubernetes #135541, fixed by "
            "#138244 in 1.36); run kubelet 1.36 or later on this machine"
        ], lines
    return [], lines


def live_kubelet_within_limit(policy: str, options: Any, release: Span | Release | None) -> list[str] | None:
    """Evidence that the limit holds, from a kubelet that serves configz, where the machine's NUMA nodes were not
    read; None when that does not decide it. cmd/kubelet/app/server.go run() creates the container manager (and in
    it the Topology Manager, which refuses too many NUMA nodes) before RunKubelet starts the server that answers
    /configz: a kubelet that answers has passed the limit. Admission stalls only above STALL_NODES nodes, before
    STALL_FIXED: a limit at or below it, or a release with the fix, rules that out too."""
    limit, where = max_allowable(options)
    if policy != "none" and limit > STALL_NODES and as_span(release).at_least((*STALL_FIXED, 0)) is not True:
        return None
    return [
        f"NUMA nodes on the machine: not read; the live kubelet answers configz, so it started with topologyManagerPolicy "
        f"{policy}: the machine has at most {limit} ({where})"
    ]
