"""Network sysctls of the host network namespace."""

from __future__ import annotations

from conformance.checks import check
from conformance.checks.sysctl_rules import port_range_problems, somaxconn_problem, tw_reuse_problem
from conformance.facts.cpulist import format_cpulist

SOURCE = "/proc/sys/net (host network namespace)"


@check(
    "SYSCTL-TCP-TW-REUSE",
    "medium",
    title="net.ipv4.tcp_tw_reuse = 1",
    rationale="""Inference gateways open many short outgoing connections; without TIME_WAIT reuse for
    outgoing connections, ephemeral ports run out under load.""",
    remediation="sysctl -w net.ipv4.tcp_tw_reuse=1 and persist it in /etc/sysctl.d/.",
    source=SOURCE,
)
def test_tcp_tw_reuse(node, sysctls, profile, evidence):
    evidence.source = "/proc/sys/net/ipv4/tcp_tw_reuse"
    evidence.add(f"net.ipv4.tcp_tw_reuse = {sysctls.tcp_tw_reuse}")
    problem = tw_reuse_problem(sysctls.tcp_tw_reuse, profile)
    assert problem is None, problem


@check(
    "SYSCTL-SOMAXCONN",
    "medium",
    title="net.core.somaxconn is large enough",
    rationale="""A small accept backlog drops connection bursts to model servers before they are accepted,
    which shows up as connect timeouts and retries at P99.""",
    remediation="sysctl -w net.core.somaxconn=65535 and persist it in /etc/sysctl.d/.",
    source=SOURCE,
)
def test_somaxconn(node, sysctls, profile, evidence):
    evidence.source = "/proc/sys/net/core/somaxconn"
    evidence.add(f"net.core.somaxconn = {sysctls.somaxconn}")
    problem = somaxconn_problem(sysctls.somaxconn, profile)
    assert problem is None, problem


@check(
    "SYSCTL-PORT-RANGE",
    "medium",
    title="Ephemeral port range is wide and keeps off the NodePort range",
    rationale="""A wide ephemeral range avoids port exhaustion; where it overlaps the NodePort range, those
    ports must be reserved or an outgoing connection can take a NodePort a Service needs.""",
    remediation="sysctl -w net.ipv4.ip_local_port_range='1024 65535' and "
    "net.ipv4.ip_local_reserved_ports=30000-32767; persist both in /etc/sysctl.d/.",
    source=SOURCE,
)
def test_port_range(node, sysctls, profile, evidence):
    lo, hi = sysctls.port_range
    evidence.source = "/proc/sys/net/ipv4/ip_local_port_range, ip_local_reserved_ports"
    evidence.add(
        f"net.ipv4.ip_local_port_range = {lo} {hi}",
        f"net.ipv4.ip_local_reserved_ports = {format_cpulist(sysctls.reserved_ports) or '(empty)'}",
    )
    problems = port_range_problems(sysctls.port_range, sysctls.reserved_ports, profile)
    assert not problems, "; ".join(problems)
