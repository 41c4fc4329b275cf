"""Waivers (fixed clock), diffs, Prometheus text (parsed back with prometheus_client) and JUnit per node."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from conformance.config.waivers import find, lint, parse_waivers
from conformance.outputs import diff, diff_lines, junit_case_details, junit_xml, prometheus_text

TODAY = dt.date(2026, 12, 2)


def result(node, check, outcome, severity="high", subject=None, message="m"):
    return {
        "node": node,
        "check": check,
        "subject": subject or {},
        "severity": severity,
        "outcome": outcome,
        "message": message,
        "evidence": ["line"],
        "source": "s",
        "waiver": None,
        "duration_s": 0.01,
    }


def doc(nodes, results, started="2026-12-02T10:00:00+00:00"):
    return {
        "schema_version": 1,
        "started_at": started,
        "finished_at": "2026-12-02T10:00:07+00:00",
        "complete": True,
        "nodes": [{"name": n, "verdict": v, "profile": "default"} for n, v in nodes.items()],
        "results": results,
    }


WAIVERS = {
    "waivers": [
        {
            "check": "SYSCTL-*",
            "nodes": "gpu-*",
            "justification": "tuning rolls out in Q1",
            "owner": "net",
            "ticket": "https://t/1",
            "expires": dt.date(2026, 12, 2),
        },
        {
            "check": "KUBELET-CPU-RECONCILE",
            "selector": {"pool": "train"},
            "justification": "vendor default",
            "expires": "2026-12-01",
        },
    ]
}


def test_waiver_matching_by_glob_selector_and_expiry():
    ws, problems = parse_waivers(WAIVERS, "w.yaml")
    assert problems == []
    (w,) = find(ws, "gpu-node-07", "SYSCTL-SOMAXCONN", {})
    assert not w.expired(TODAY)  # holds through its expiry day
    assert w.expired(TODAY + dt.timedelta(days=1))
    assert find(ws, "cpu-node-1", "SYSCTL-SOMAXCONN", {}) == []
    assert find(ws, "n", "KUBELET-CPU-RECONCILE", {"pool": "infer"}) == []
    (old,) = find(ws, "n", "KUBELET-CPU-RECONCILE", {"pool": "train"})
    assert old.expired(TODAY)


def test_waiver_problems_name_entry_and_field(tmp_path):
    _, problems = parse_waivers({"waivers": [{"check": "X", "expires": "soon"}, "x"]}, "w.yaml")
    assert "w.yaml: waivers[0].justification: required" in problems[0]
    assert any("waivers[0].expires: required, a date as YYYY-MM-DD (got 'soon')" in p for p in problems)
    assert any("waivers[1]: must be a mapping" in p for p in problems)
    f = tmp_path / "w.yaml"
    f.write_text("waivers:\n  - check: NOPE-*\n    justification: j\n    expires: 2020-01-01\n")
    found = lint(f, {"SYSCTL-SOMAXCONN"}, TODAY)
    assert any("matches no known check id" in p for p in found)
    assert any("2020-01-01 is past" in p for p in found)
    assert any(".owner: missing" in p for p in found) and any(".ticket: missing" in p for p in found)


def test_diff_categories():
    a = doc(
        {"n1": "rejected", "n2": "accepted", "gone": "accepted"},
        [
            result("n1", "A", "failed"),
            result("n1", "B", "failed"),
            result("n2", "C", "passed"),
            result("n2", "L", "passed", subject={"endpoint": "e1"}),
        ],
    )
    b = doc(
        {"n1": "rejected", "n2": "rejected", "new": "rejected"},
        [
            result("n1", "A", "failed"),
            result("n1", "B", "passed"),
            result("n2", "C", "error"),
            result("n2", "L", "failed", subject={"endpoint": "e1"}),
            result("new", "A", "failed"),
        ],
    )
    d = diff(a, b)
    assert [(r["node"], r["check"], r["was"]) for r in d["new_failures"]] == [("n2", "C", "passed"), ("n2", "L", "passed")]
    assert [(r["node"], r["check"]) for r in d["fixed"]] == [("n1", "B")]
    assert [(r["node"], r["check"]) for r in d["still_failing"]] == [("n1", "A")]
    assert d["new_nodes"] == ["new"] and d["vanished_nodes"] == ["gone"]
    text = "\n".join(diff_lines(d))
    assert "2 new failure(s), 1 fixed, 1 still failing, 1 new node(s), 1 vanished node(s)" in text
    assert "NEW    n2 L endpoint=e1: passed -> failed" in text


def test_prometheus_text_parses_back():
    d = doc(
        {"n1": "rejected", 'we"ird\\node': "accepted"},
        [
            result("n1", "A", "failed", severity="critical"),
            result("n1", "L", "passed", subject={"endpoint": "e1"}),
            result('we"ird\\node', "A", "passed"),
        ],
    )
    families = {f.name: f for f in text_string_to_metric_families(prometheus_text(d))}
    checks = families["gpu_node_conformance_check_result"].samples
    assert len(checks) == 3
    assert {"node": "n1", "check": "A", "subject": "", "severity": "critical", "outcome": "failed"} in [s.labels for s in checks]
    assert any(s.labels["subject"] == "endpoint=e1" for s in checks)
    accepted = {s.labels["node"]: s.value for s in families["gpu_node_conformance_node_accepted"].samples}
    assert accepted == {"n1": 0.0, 'we"ird\\node': 1.0}
    assert families["gpu_node_conformance_run_duration_seconds"].samples[0].value == 7
    assert families["gpu_node_conformance_run_timestamp_seconds"].samples[0].value == pytest.approx(1796205600)


def test_junit_has_one_suite_per_node_and_cases_named_by_check():
    d = doc(
        {"n1": "rejected", "n2": "accepted"},
        [
            result("n1", "A", "failed"),
            result("n1", "B", "error"),
            result("n1", "L", "passed", subject={"endpoint": "e"}),
            result("n2", "A", "passed"),
            result("n2", "B", "skipped"),
            {**result("n2", "C", "waived"), "waiver": {"expires": "2027-01-01", "justification": "j"}},
        ],
    )
    root = ET.fromstring(junit_xml(d))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["n1", "n2"]
    assert (suites[0].get("tests"), suites[0].get("failures"), suites[0].get("errors")) == ("3", "1", "1")
    assert [c.get("name") for c in suites[0].findall("testcase")] == ["A", "B", "L [endpoint=e]"]
    assert suites[1].get("skipped") == "2"
    waived = suites[1].findall("testcase")[2].find("skipped")
    assert waived is not None and "waived until 2027-01-01" in waived.get("message")


JUNIT_10 = xmlschema.XMLSchema(str(Path(__file__).parent / "samples" / "junit-10.xsd"))


def test_junit_is_valid_for_strict_consumers_and_keeps_every_detail():
    """Validated with xmlschema against the Jenkins xUnit plugin's junit-10.xsd (tests/samples/README.md)."""
    d = doc(
        {"n1": "rejected", "n2": "accepted"},
        [
            {**result("n1", "A", "failed"), "evidence": ["<b>&'\"", "line 2"]},
            result("n1", "B", "error"),
            result("n1", "L", "passed", subject={"endpoint": "e"}),
            result("n2", "B", "skipped"),
            {**result("n2", "C", "waived"), "waiver": {"expires": "2027-01-01", "justification": "j"}},
        ],
    )
    xml = junit_xml(d)
    JUNIT_10.validate(xml.decode())
    root = ET.fromstring(xml)
    details = [junit_case_details(c) for c in root.iter("testcase")]
    assert [(x["node"], x["check"], x["outcome"]) for x in details] == [
        ("n1", "A", "failed"), ("n1", "B", "error"), ("n1", "L", "passed"), ("n2", "B", "skipped"), ("n2", "C", "waived"),
    ]  # fmt: skip
    assert details[2]["subject"] == "endpoint=e" and details[0]["evidence"] == "<b>&'\""


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=60))
def test_xml_safe_is_its_pattern_whatever_the_text(text):
    """The fast path (clean ASCII, checked by bytes.translate) gives what the pattern alone gives (issue 60)."""
    from conformance.outputs.safe_text import _NOT_XML, xml_safe

    def visible(m):
        return f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"

    by_pattern = _NOT_XML.sub(visible, text)
    assert xml_safe(text) == by_pattern
    every_ascii = "".join(chr(c) for c in range(128))
    assert xml_safe(every_ascii) == _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", every_ascii)
