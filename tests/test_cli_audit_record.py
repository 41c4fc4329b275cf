"""Profiles, waivers, baseline diff, Prometheus and JUnit from the `conformance` command."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakeroot import make_host_root

SYSCTLS = {
    "/proc/sys/net/ipv4/tcp_tw_reuse": "1\n",
    "/proc/sys/net/ipv4/ip_local_port_range": "1024 65535\n",
    "/proc/sys/net/ipv4/ip_local_reserved_ports": "\n",
}


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=120)


def host(tmp_path, name, somaxconn):
    return make_host_root(
        tmp_path / name,
        ["--config", "/k.yaml"],
        {"/k.yaml": "kind: KubeletConfiguration\n", "/proc/sys/net/core/somaxconn": f"{somaxconn}\n", **SYSCTLS},
    )


def outcomes(path):
    return {(r["node"], r["check"]): r for r in json.loads(path.read_text())["results"]}


def test_waivers_cover_expire_and_report_unused(tmp_path):
    today = dt.date.today()
    w = tmp_path / "waivers.yaml"
    w.write_text(
        "waivers:\n"
        "  - {check: SYSCTL-SOMAXCONN, justification: raised in the next image, owner: net, ticket: T-1,\n"
        f"     expires: {today + dt.timedelta(days=9)}}}\n"
        f"  - {{check: SYSCTL-PORT-RANGE, justification: old, expires: {today - dt.timedelta(days=1)}}}\n"
        f"  - {{check: NODE-NVME-*, nodes: 'other-*', justification: unused, expires: {today + dt.timedelta(days=9)}}}\n"
    )
    h = host(tmp_path, "h", 4096)
    p = conformance("run", "--host-root", str(h), "--output", str(tmp_path / "out"), "--waivers", str(w))
    r = outcomes(tmp_path / "out" / "results.json")
    node = next(iter(r))[0]
    waived = r[(node, "SYSCTL-SOMAXCONN")]
    assert waived["outcome"] == "waived" and waived["waiver"]["justification"] == "raised in the next image"
    expired = r[(node, "SYSCTL-PORT-RANGE")]
    assert expired["outcome"] == "failed" and f"expired on {today - dt.timedelta(days=1)}" in expired["message"]
    assert expired["waiver"]["expired"] is True
    assert "waivers matching nothing: #2 (NODE-NVME-* on other-*)" in p.stdout
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["nodes"][0]["counts"]["waived"] == 1
    junit = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    case = next(c for c in junit.iter("testcase") if c.get("name") == "SYSCTL-SOMAXCONN")
    assert "waived until" in case.find("skipped").get("message")
    lint = conformance("waivers", "lint", str(w))
    assert lint.returncode == 1 and "waivers[1].expires" in lint.stdout and "waivers[1].owner: missing" in lint.stdout
    good = tmp_path / "good.yaml"
    good.write_text(f"waivers:\n  - {{check: KUBELET-*, justification: j, owner: o, ticket: t, expires: {today}}}\n")
    assert conformance("waivers", "lint", str(good)).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("waivers:\n  - {check: X}\n")
    p = conformance("run", "--host-root", str(h), "--output", str(tmp_path / "o2"), "--waivers", str(bad))
    assert p.returncode == 4 and "waivers[0].justification: required" in p.stderr + p.stdout


def test_baseline_diff_prometheus_and_diff_command(tmp_path):
    before = tmp_path / "a"
    after = tmp_path / "b"
    conformance("run", "--host-root", str(host(tmp_path, "h1", 4096)), "--output", str(before))
    p = conformance(
        "run", "--host-root", str(host(tmp_path, "h2", 65535)), "--output", str(after), "--baseline", str(before / "results.json")
    )
    assert "1 fixed" in p.stdout and "FIXED" in p.stdout and "SYSCTL-SOMAXCONN: failed -> passed" in p.stdout
    doc = json.loads((after / "results.json").read_text())
    assert [r["check"] for r in doc["diff"]["fixed"]] == ["SYSCTL-SOMAXCONN"]
    assert "Changes since the baseline run" in (after / "report.html").read_text()
    d = conformance("diff", str(after / "results.json"), str(before / "results.json"))
    assert d.returncode == 1 and "1 new failure(s)" in d.stdout  # reversed: the fix is a new failure
    assert conformance("diff", str(before / "results.json"), str(after / "results.json")).returncode == 0
    fams = {f.name: f for f in text_string_to_metric_families((after / "results.prom").read_text())}
    assert len(fams["gpu_node_conformance_check_result"].samples) == len(doc["results"])
    bad = conformance("run", "--output", str(tmp_path / "c"), "--baseline", str(tmp_path / "nope.json"))
    assert bad.returncode == 4


def test_profile_selection_by_rule_label_and_node(tmp_path):
    h = host(tmp_path, "h", 65535)
    custom = tmp_path / "profiles" / "tight.yaml"
    custom.parent.mkdir()
    custom.write_text("sysctl: {min_somaxconn: 100000}\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "defaults: {profile: relaxed-reconcile}\n"
        "profile_rules:\n"
        "  - {nodes: 'a100-*', profile: a100-training}\n"
        "  - {labels: {pool: tight}, profile: profiles/tight.yaml}\n"
        "nodes:\n"
        f"  - {{name: a100-1, transport: local, host_root: {h}}}\n"
        f"  - {{name: h100-1, transport: local, host_root: {h}, labels: {{pool: tight}}}}\n"
        f"  - {{name: own, transport: local, host_root: {h}, profile: h100-h200-inference, labels: {{pool: tight}}}}\n"
        f"  - {{name: plain, transport: local, host_root: {h}}}\n"
    )
    conformance("run", "--inventory", str(inv), "--output", str(tmp_path / "out"))
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    got = {n["name"]: (n["profile"], n["profile_reason"]) for n in doc["nodes"]}
    assert got == {
        "a100-1": ("a100-training", "profile_rules[0]: name matches 'a100-*'"),
        "h100-1": ("tight", "profile_rules[1]: label pool=tight"),
        "own": ("h100-h200-inference", "set on the node"),
        "plain": ("relaxed-reconcile", "inventory defaults"),
    }
    r = outcomes(tmp_path / "out" / "results.json")
    assert r[("h100-1", "SYSCTL-SOMAXCONN")]["outcome"] == "failed"  # the tight profile's threshold
    assert r[("plain", "SYSCTL-SOMAXCONN")]["outcome"] == "passed"


@pytest.mark.parametrize("name", ["default", "a100-training", "h100-h200-inference"])
def test_profiles_show(name):
    p = conformance("profiles", "show", name)
    assert p.returncode == 0 and "kubelet:" in p.stdout and "cpu_manager_policy: static" in p.stdout


def test_shipped_waivers_example_lints_clean():
    p = conformance("waivers", "lint", "inventory/waivers.example.yaml")
    assert p.returncode == 0, p.stdout
