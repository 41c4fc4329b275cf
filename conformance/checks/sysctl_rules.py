"""The network sysctl rules, shared by the node checks (the host's network namespace) and the pod
checks (each pod's own). Every network namespace starts from the kernel's defaults, not the host's
values (net/ipv4/tcp_ipv4.c tcp_sk_init: tcp_tw_reuse = 2; net/core/net_namespace.c: somaxconn =
SOMAXCONN, 4096 since Linux 5.4; net/ipv4/af_inet.c inet_init_net: ip_local_port_range 32768-60999),
so a pod without hostNetwork sees those unless it sets its own.

Which of them a pod may set (securityContext.sysctls): the kubelet's safe set
(pkg/kubelet/sysctl/safe_sysctls.go) holds net.ipv4.ip_local_port_range (always) and
net.ipv4.ip_local_reserved_ports (since Kubernetes 1.27, kernel 3.16+); net.ipv4.tcp_tw_reuse and
net.core.somaxconn are not in it in any release, so a pod that sets them needs the kubelet's
allowedUnsafeSysctls (exact names or patterns ending in `*`, matched as prefixes:
pkg/kubelet/sysctl/allowlist.go), or the values come from a CNI tuning plugin. A hostNetwork pod
shares the host's values and may not set net.* sysctls at all."""

from __future__ import annotations

from typing import Any

from conformance.facts.cpulist import format_cpulist

# sysctl -> (the Kubernetes release from which the kubelet counts it safe, the kernel it needs), None: never
# safe / any kernel. ip_local_reserved_ports: kubernetes PR 115374 (1.27), kernel 3.16 (where Linux commit
# 122ff243f5f1 made it per namespace); the kubelet leaves it out of its safe set on older kernels
# (pkg/kubelet/sysctl/safe_sysctls.go getSafeSysctlAllowlist).
POD_SYSCTLS: dict[str, tuple[str | None, str | None]] = {
    "net.ipv4.tcp_tw_reuse": (None, None),
    "net.core.somaxconn": (None, None),
    "net.ipv4.ip_local_port_range": ("1.0", None),
    "net.ipv4.ip_local_reserved_ports": ("1.27", "3.16"),
}
KERNEL_DEFAULTS = {"net.ipv4.tcp_tw_reuse": "2", "net.core.somaxconn": "4096", "net.ipv4.ip_local_port_range": "32768 60999"}


def tw_reuse_problem(value: int, profile: Any) -> str | None:
    want = profile.get("sysctl.tcp_tw_reuse")
    return None if value == want else f"net.ipv4.tcp_tw_reuse is {value}; {want} expected"


def somaxconn_problem(value: int, profile: Any) -> str | None:
    want = profile.get("sysctl.min_somaxconn")
    return None if value >= want else f"net.core.somaxconn is {value}; at least {want} expected"


# Where NodePorts and ephemeral ports can meet. NodePort traffic is handled in the node's network namespace
# only: kube-proxy's KUBE-NODEPORTS rules in its nat table, its IPVS services, or a CNI's eBPF program on
# the node's devices. Ephemeral ports are drawn per network namespace (net/ipv4/inet_hashtables.c
# __inet_hash_connect: the bind hash is keyed by the namespace, and inet_is_local_reserved_port reads the
# namespace's own ip_local_reserved_ports). So a socket of the node, or of a hostNetwork pod, that takes a
# NodePort as its source port has its replies taken by the Service (kubernetes issue 111682; the
# apiserver's --service-node-port-range must not overlap the nodes' ephemeral range, PR 111697), while a
# pod in its own namespace reaches the node's only through NAT, whose conntrack entry owns the replies:
# its ephemeral ports cannot collide with a NodePort, and reserving them there changes nothing.


def port_range_problems(port_range: tuple[int, int], reserved: set[int], profile: Any, nodeports_here: bool = True) -> list[str]:
    """`nodeports_here`: the namespace is the node's (the node itself, a hostNetwork pod), where NodePorts
    inside the ephemeral range must be reserved."""
    lo, hi = port_range
    want_lo, want_hi = profile.get("sysctl.local_port_range")
    np_lo, np_hi = profile.get("sysctl.nodeport_range")
    problems = []
    if lo > want_lo or hi < want_hi:
        problems.append(f"ip_local_port_range is {lo}-{hi}; it should cover {want_lo}-{want_hi}")
    unreserved = set(range(max(lo, np_lo), min(hi, np_hi) + 1)) - reserved if nodeports_here else set()
    if unreserved:
        problems.append(
            f"NodePort ports {format_cpulist(unreserved)} are in the ephemeral range but not in ip_local_reserved_ports"
        )
    return problems


def dotted_sysctl(name: str) -> str:
    """A sysctl name as the kubelet normalises it: written with '/' separators (net/ipv4/tcp_tw_reuse), its
    '/' and '.' are swapped (pkg/kubelet/sysctl allowlist.go NewAllowlist, convertSysctlVariableToDotsSeparator;
    component-helpers node/util/sysctl NormalizeName in later releases): net/ipv4/conf/eno2.100/rp_filter is
    net.ipv4.conf.eno2/100.rp_filter."""
    for c in name:
        if c == ".":
            return name
        if c == "/":
            return name.translate(str.maketrans("./", "/."))
    return name


def allowlisted(name: str, allowed: list[str]) -> str | None:
    """The allowedUnsafeSysctls entry that admits `name` (exact, or a pattern ending in `*`, each in dot or
    slash form), if any."""
    for entry in allowed:
        dotted = dotted_sysctl(entry)
        if dotted == name or (dotted.endswith("*") and name.startswith(dotted[:-1])):
            return entry
    return None
