"""Hostile input for every parser: whatever a node returns, only the parser's own error escapes."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.collection.bundle import Bundle, parse_wire
from conformance.collection.redact import redact_text
from conformance.config.endpoints import parse_endpoints
from conformance.config.inventory import parse_inventory
from conformance.config.units import parse_duration, parse_quantity
from conformance.errors import ParseError, UsageError
from conformance.facts import kernel
from conformance.facts.checkpoints import parse_cpu_manager_state, parse_memory_manager_state
from conformance.facts.cpulist import parse_cpulist
from conformance.facts.kubelet import effective_config, flags_to_config, load_config_document, parse_kubelet_args
from conformance.facts.runtime import (
    EVERY_RULES,
    RULES_2_0,
    ContainerdMerge,
    _merge_1x,
    _merge_20,
    _merge_23,
    containerd_runtime,
    crio_runtime,
    load_toml,
    merge_containerd,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
# documents shaped like the real ones, with hostile values in the places that matter
cpu_state_like = st.fixed_dictionaries(
    {},
    optional={
        "policyName": json_values,
        "defaultCpuSet": json_values | st.text(alphabet="0123456789-, ", max_size=12),
        "entries": json_values | st.dictionaries(st.text(max_size=8), st.dictionaries(st.text(max_size=8), json_values)),
        "checksum": json_values,
    },
)
runtime_like = st.fixed_dictionaries(
    {},
    optional={
        "version": json_values | st.sampled_from([1, 2, 3]),
        "plugins": json_values
        | st.fixed_dictionaries(
            {
                "io.containerd.grpc.v1.cri": json_values
                | st.fixed_dictionaries(
                    {
                        "containerd": json_values
                        | st.fixed_dictionaries({"runtimes": json_values, "default_runtime_name": json_values})
                    }
                )
            }
        ),
        "imports": json_values,
    },
)


def only_parse_errors(fn, *args):
    with contextlib.suppress(ParseError):
        fn(*args)


@FAST
@given(st.text(max_size=60))
def test_text_parsers(text):
    for fn in (
        parse_cpulist,
        parse_duration,
        parse_quantity,
        kernel.parse_port_range,
        kernel.parse_port_set,
        kernel.cgroup_version,
    ):
        only_parse_errors(fn, text)
    only_parse_errors(kernel.parse_int_sysctl, text, "net.core.somaxconn")
    only_parse_errors(kernel.parse_scheduler, text, "nvme0n1")
    only_parse_errors(load_config_document, text, "/etc/k.yaml")
    only_parse_errors(parse_cpu_manager_state, text)
    only_parse_errors(parse_memory_manager_state, text)
    only_parse_errors(load_toml, text, "/etc/containerd/config.toml")
    only_parse_errors(crio_runtime, [("/etc/crio/crio.conf", text)])
    assert isinstance(redact_text(text)[0], str)


@FAST
@given(cpu_state_like)
def test_checkpoint_shaped_documents(doc):
    only_parse_errors(parse_cpu_manager_state, json.dumps(doc))
    only_parse_errors(parse_memory_manager_state, json.dumps({"policyName": "Static", "machineState": doc}))


@FAST
@given(runtime_like)
def test_containerd_shaped_documents(doc):
    merges = {"1.x": _merge_1x, "2.0-2.2": _merge_20, "2.3": _merge_23}
    for rules in EVERY_RULES:

        def judge(d, r=rules):
            return containerd_runtime(ContainerdMerge(*merges[r.family]([("/c.toml", d)], r), ["/c.toml"], r))

        only_parse_errors(judge, doc)


@FAST
@given(st.dictionaries(st.text(max_size=20), json_values, max_size=6))
def test_kubelet_documents_and_flags(doc):
    with contextlib.suppress(ParseError):
        cfg = effective_config(("/etc/k.yaml", doc), [("/d/1.conf", doc)], {})
        for key in ("cpuManagerPolicy", "reservedMemory", "cpuManagerPolicyOptions"):
            assert cfg.get(key).key == key


@FAST
@given(st.lists(st.text(max_size=20), max_size=10))
def test_kubelet_command_lines(argv):
    args = parse_kubelet_args(["kubelet", *argv])
    only_parse_errors(flags_to_config, args.flags)


@FAST
@given(st.binary(max_size=300))
def test_collector_wire_format(raw):
    only_parse_errors(parse_wire, "n", raw, 100)


@FAST
@given(json_values)
def test_snapshots(doc):
    only_parse_errors(Bundle.from_json, doc)


@FAST
@given(json_values)
def test_inventory_documents(doc):
    with contextlib.suppress(UsageError):
        parse_inventory(doc, "inv.yaml")
    errors: list[str] = []
    parse_endpoints(doc, "nodes[0].endpoints", errors)


@pytest.mark.parametrize("depth", [1000, 100000])
def test_deeply_nested_documents(depth):
    deep_json = "[" * depth + "]" * depth
    for fn in (parse_cpu_manager_state, parse_memory_manager_state):
        with pytest.raises(ParseError):
            fn(deep_json)
    with pytest.raises(ParseError):
        load_config_document("a: " + "[" * depth + "]" * depth, "/etc/k.yaml")
    with pytest.raises(ParseError):
        load_toml("a = " + "[" * depth + "]" * depth, "/etc/containerd/config.toml")


def test_containerd_imports_loop_terminates():
    files = {"/a.toml": 'imports = ["/b.toml"]\n', "/b.toml": 'imports = ["/a.toml"]\n'}
    assert merge_containerd("/a.toml", files.get, lambda _, p: [p], RULES_2_0).files == ["/a.toml", "/b.toml"]


def test_secrets_are_redacted_by_name_and_by_shape():
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXBhcnQ"
    text = (
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."r".auth]\n  password = "p1"\n  auth = "YTpi"\n'
        f'note = "{jwt}"\nkey_id = AKIAABCDEFGHIJKLMNOP\n'
        "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----\n"
        "authentication:\n  anonymous:\n    enabled: false\ncpuManagerPolicy: static\n"
    )
    out, n = redact_text(text)
    for secret in ("p1", "YTpi", jwt, "AKIAABCDEFGHIJKLMNOP", "MIIabc"):
        assert secret not in out
    assert n == 5
    assert "cpuManagerPolicy: static" in out and "authentication:\n  anonymous:\n    enabled: false" in out


def test_one_line_text_records():
    from conformance.errors import FactUnavailable

    raw = (
        b"M =version ok MQ==\n"
        b"T =/sys/devices/system/node/node0/cpulist ok 0-3,8-11\n"
        b"T =/sys/devices/system/node/node1/cpulist ok \n"
        b"T =/sys/devices/system/cpu/cpu3/topology/thread_siblings_list unreadable \n"
    )
    b = parse_wire("n", raw, 100)
    assert b.text("/sys/devices/system/node/node0/cpulist") == "0-3,8-11\n"
    assert b.text("/sys/devices/system/node/node1/cpulist") == "\n"  # a memory-only NUMA node
    with pytest.raises(FactUnavailable, match="not one line of plain text"):
        b.text("/sys/devices/system/cpu/cpu3/topology/thread_siblings_list")
    with pytest.raises(ParseError):
        parse_wire("n", b"M =version ok MQ==\nT nameless\n", 100)


def test_k3s_config_files_are_untrusted_input_too():
    from conformance.facts.kubelet import k3s_kubelet_argv

    depth = 10000
    with pytest.raises(ParseError, match=r"nested too deeply|not valid YAML"):
        k3s_kubelet_argv(["k3s", "server"], [("/etc/rancher/k3s/config.yaml", "a: " + "[" * depth + "]" * depth)])
    with pytest.raises(ParseError, match="expected a mapping of k3s flags, got list"):
        k3s_kubelet_argv(["k3s", "server"], [("/etc/rancher/k3s/config.yaml", "- kubelet-arg\n")])


def test_online_cpus_that_no_numa_node_lists_are_what_the_kernel_shows():
    """Issue 53.15: firmware can leave online CPUs in no proximity domain (hwloc's R630 topology): the error says
    what the kernel shows (online CPUs no node lists), not that a file was read short; which node they are on
    stays unknown (an emptied cpulist record looks the same, and unknown is never a pass)."""
    import base64

    from conformance.facts.node_facts import NodeFacts

    def glob(pattern: str, paths: list[str]) -> bytes:
        name = base64.b64encode(pattern.encode()).decode()
        return f"G {name} ok {base64.b64encode(chr(10).join(paths).encode()).decode()}\n".encode()

    nodes = [f"/sys/devices/system/node/node{n}/cpulist" for n in (0, 1)]
    sibs = [f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list" for c in range(4)]
    raw = (
        b"M =version ok MQ==\n"
        + f"F =/sys/devices/system/cpu/online ok {base64.b64encode(b'0-3').decode()}\n".encode()
        + glob("/sys/devices/system/node/node[0-9]*/cpulist", nodes)
        + b"T =/sys/devices/system/node/node0/cpulist ok 0-1\n"
        + b"T =/sys/devices/system/node/node1/cpulist ok 2\n"
        + glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list", sibs)
        + b"".join(f"T ={p} ok {c}\n".encode() for c, p in enumerate(sibs))
        + b"M =end ok \n"
    )
    from conformance.errors import FactUnavailable

    with pytest.raises(FactUnavailable, match=r"online CPUs 3 are listed by no NUMA node's cpulist .*the kernel places"):
        NodeFacts(parse_wire("n", raw, 100)).topology  # noqa: B018
