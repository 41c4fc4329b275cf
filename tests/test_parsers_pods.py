"""What a container's exec prints, parsed: a real /proc status sample, a real /proc/<pid>/stat of this
process (field 39 after the command name, whatever the name holds), quantities, and redaction of
secret-looking environment values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.cluster.pods import last_cpu, parse_inside, selector_matches
from conformance.config.units import bytes_of, cpu_count
from conformance.errors import FactUnavailable
from tests.lab.nodes import SAMPLES

STATUS = (SAMPLES / "proc_pid_status.prometheus-procfs-fixture.txt").read_text()


def inside_output(extra_env: str = "") -> str:
    own = [ln for ln in STATUS.splitlines() if ln.startswith(("Cpus_allowed_list", "Mems_allowed_list"))]
    stat = Path("/proc/self/stat").read_text().strip()
    return "\n".join(
        ["@self", *own, "@shm", "2097152", "@dev", "0", "3", "@task 1 1", "Name:\tpython3", "Cpus_allowed_list:\t0-1",
         f"stat {stat}", "@task 1 7", "Name:\tworker", "Cpus_allowed_list:\t1", "@env 1", "OMP_NUM_THREADS=4", extra_env, "@end"]
    )  # fmt: skip


def test_parse_inside_with_a_real_status_sample():
    f = parse_inside(inside_output(), "pod x")
    assert f.cpus == frozenset(range(8)) and f.mems == frozenset({0})  # the sample's 0-7 and 0
    assert f.shm_bytes == 2 * 2**30 and f.gpu_minors == [0, 3]
    assert [(t.pid, t.tid, t.name) for t in f.tasks] == [(1, 1, "python3"), (1, 7, "worker")]
    assert f.tasks[0].last_cpu in range(os.cpu_count() or 1)  # this process's own stat, field 39
    assert f.env == {1: {"OMP_NUM_THREADS": "4"}}


def test_secret_looking_values_are_masked_even_when_listed():
    f = parse_inside(inside_output("HF_TOKEN=hf_abcdef"), "pod x")
    assert f.env[1]["HF_TOKEN"] == "<redacted>"


def test_an_exec_that_said_nothing_about_itself_is_an_error():
    with pytest.raises(FactUnavailable, match="pod x: /proc/self/status gave no Cpus_allowed_list"):
        parse_inside("@self\n@end\n", "pod x")


def test_last_cpu_survives_spaces_and_parentheses_in_the_name():
    fields = " ".join(["S", *["0"] * 35, "7", "0"])  # state, ..., field 39 = 7
    assert last_cpu(f"42 (a) b) (c) {fields}") == 7
    assert last_cpu("42 (short) S 1") is None


@pytest.mark.parametrize(("q", "cpus"), [("4", 4), ("500m", 0.5), (2, 2), ("1.5", 1.5), (None, None), ("x", None)])
def test_cpu_quantities(q, cpus):
    assert cpu_count(q) == cpus


def test_memory_quantities():
    assert bytes_of("1Gi") == 2**30 and bytes_of("512Mi") == 512 * 2**20 and bytes_of(None) is None


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [("app=llm", {"app": "llm"}, True), ("app=llm,tier!=batch", {"app": "llm", "tier": "batch"}, False),
     ("gpu", {"gpu": ""}, True), ("gpu", {}, False), (None, {"app": "llm"}, False)],
)  # fmt: skip
def test_profile_selector(selector, labels, want):
    assert selector_matches(selector, labels) is want


CGROUP_V2_INSIDE = """@self
Cpus_allowed_list:\t2-3
Mems_allowed_list:\t0
@sysctl
net/ipv4/tcp_tw_reuse=2
net/core/somaxconn=4096
net/ipv4/ip_local_port_range=32768\t60999
net/ipv4/ip_local_reserved_ports=
@cpu
v2 /sys/fs/cgroup/
max 200000 100000
stat usage_usec 5000000
stat nr_periods 120
stat nr_throttled 30
stat throttled_usec 1500000
@end
"""


def test_the_pods_own_sysctls_and_cgroup_v2_bandwidth():
    """cpu.max "QUOTA PERIOD" and cpu.stat as Documentation/admin-guide/cgroup-v2.rst describes them."""
    f = parse_inside(CGROUP_V2_INSIDE, "pod x")
    assert f.sysctls == {
        "net/ipv4/tcp_tw_reuse": "2",
        "net/core/somaxconn": "4096",
        "net/ipv4/ip_local_port_range": "32768 60999",
        "net/ipv4/ip_local_reserved_ports": "",
    }
    c = f.cfs
    assert (c.quota_us, c.period_us, c.nr_periods, c.nr_throttled, c.throttled_us) == (200000, 100000, 120, 30, 1500000)
    unlimited = parse_inside(CGROUP_V2_INSIDE.replace("max 200000 100000", "max max 100000"), "pod x")
    assert unlimited.cfs.quota_us is None


def test_cgroup_v1_bandwidth():
    """cpu.cfs_quota_us -1 is no quota; throttled_time is in nanoseconds (sched-bwc.rst)."""
    text = CGROUP_V2_INSIDE.split("@cpu")[0] + (
        "@cpu\nv1 /sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1\nquota 50000\nperiod 100000\n"
        "stat nr_periods 10\nstat nr_throttled 4\nstat throttled_time 2000000000\n@end\n"
    )
    c = parse_inside(text, "pod x").cfs
    assert (c.quota_us, c.nr_throttled, c.throttled_us) == (50000, 4, 2000000)
    assert parse_inside(text.replace("quota 50000", "quota -1"), "pod x").cfs.quota_us is None
    assert parse_inside(text.split("@cpu")[0] + "@cpu\n@end\n", "pod x").cfs is None


def test_kubelet_allowlist_of_unsafe_sysctls():
    from conformance.checks.sysctl_rules import allowlisted
    from conformance.facts.kubelet import flags_to_config, parse_kubelet_args

    args = parse_kubelet_args(["kubelet", "--allowed-unsafe-sysctls=net.core.*,kernel.msg*", "--allowed-unsafe-sysctls", "x.y"])
    allowed, source = flags_to_config(args.flags)["allowedUnsafeSysctls"]
    assert allowed == ["net.core.*", "kernel.msg*", "x.y"] and source == "flag --allowed-unsafe-sysctls"
    assert allowlisted("net.core.somaxconn", allowed) == "net.core.*"
    assert allowlisted("net.ipv4.tcp_tw_reuse", allowed) is None


def test_slash_form_entries_are_admitted_as_the_kubelet_normalises_them():
    """pkg/kubelet/sysctl/allowlist.go NewAllowlist converts each entry to dot form first
    (convertSysctlVariableToDotsSeparator: when '/' comes before any '.', '/' and '.' swap)."""
    from conformance.checks.sysctl_rules import allowlisted, dotted_sysctl

    assert dotted_sysctl("net/ipv4/conf/eno2.100/rp_filter") == "net.ipv4.conf.eno2/100.rp_filter"
    assert dotted_sysctl("net.ipv4.conf.eno2/100.rp_filter") == "net.ipv4.conf.eno2/100.rp_filter"
    assert allowlisted("net.core.somaxconn", ["net/core/somaxconn"]) == "net/core/somaxconn"
    assert allowlisted("net.ipv4.tcp_tw_reuse", ["net/ipv4/*"]) == "net/ipv4/*"
    assert allowlisted("net.ipv4.tcp_tw_reuse", ["net/core/*"]) is None


def test_the_acceptance_pod_sets_the_profiles_pod_sysctls():
    from conformance.cluster.acceptance import manifest
    from conformance.config.profile import load_profile

    pod = manifest("n1", load_profile(None), "gnc", "img", "nvidia.com/gpu")
    assert pod["spec"]["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.tcp_tw_reuse", "value": "1"},
        {"name": "net.core.somaxconn", "value": "65535"},
        {"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"},
        {"name": "net.ipv4.ip_local_reserved_ports", "value": "30000-32767"},
    ]


def test_the_nodeport_reservation_is_asked_only_on_the_nodes_network():
    from conformance.checks.sysctl_rules import port_range_problems
    from conformance.config.profile import load_profile

    profile = load_profile(None)
    wide = (1024, 65535)
    on_node = port_range_problems(wide, set(), profile)
    assert on_node == ["NodePort ports 30000-32767 are in the ephemeral range but not in ip_local_reserved_ports"]
    assert port_range_problems(wide, set(), profile, nodeports_here=False) == []  # a pod's own namespace
    assert port_range_problems((32768, 60999), set(), profile, nodeports_here=False) == [
        "ip_local_port_range is 32768-60999; it should cover 1024-65535"
    ]


def test_unread_bandwidth_values_are_named_never_zero():
    """Issue 53.4: an absent counter or a garbled quota is unread, never 0 and never "no quota"."""
    no_stat = parse_inside(CGROUP_V2_INSIDE.replace("stat nr_throttled 30\n", ""), "pod x").cfs
    assert no_stat.nr_throttled is None and no_stat.unread == ("/sys/fs/cgroup//cpu.stat nr_throttled",)
    garbled = parse_inside(CGROUP_V2_INSIDE.replace("max 200000 100000", "max 2e5 100000"), "pod x").cfs
    assert garbled.quota_us is None and garbled.unread == ("/sys/fs/cgroup//cpu.max quota '2e5'",)
