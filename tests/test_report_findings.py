"""The report's findings (conformance.outputs.findings) and its bounds: an unreachable node's identical errors
fold into one row that keeps each check's permalink, what blocks comes first, and a live run over more nodes
than the matrix shows writes a page bounded as a merge's is. Rendered by the real `conformance report` and
`conformance run --snapshot`; the browser tests (test_report_browser) drive the filters and links."""

from __future__ import annotations

import html as htmllib
import json
import re
import subprocess
import sys

import pytest

from conformance.outputs.fleet_view import MATRIX_MAX_NODES, NAMES_SHOWN
from conformance.outputs.html_report import TABLE_RESULTS_MAX
from conformance.outputs.safe_text import e
from tests.check_fleet import fleet_snapshots
from tests.test_fleet_report import fleet


def render(tmp_path, doc: dict) -> str:
    (tmp_path / "results.json").write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert (tmp_path / "out" / "report.html").is_file(), p.stderr[-2000:]
    return (tmp_path / "out" / "report.html").read_text()


def test_an_unreachable_nodes_identical_errors_fold_into_one_row_after_the_failures(tmp_path):
    doc = fleet(8, checks=36)
    for r in doc["results"]:
        if r["node"] == "gpu-0003":
            r["message"] = "ssh: connect to host 10.0.0.3 port 22: Connection refused"
    html = render(tmp_path, doc)
    section = re.search(r"<section aria-label='Findings' id='gnc-findings'>(.*?)</section>", html, re.S).group(1)
    rows = re.findall(r"<tr[^>]* data-node='([^']*)' data-check='([^']*)'[^>]*>(.*?)</tr>", section, re.S)
    down = [r for r in rows if r[0] == "gpu-0003" and r[1] != "FLEET-CONSISTENT"]  # the drift check errs apart
    assert len(down) == 1 and len(down[0][1].split()) == 36 and "36 checks, one error: ssh: connect" in down[0][2]
    assert all(f"id='gpu-0003/X-{c}'" in down[0][2] for c in range(36))  # each folded check keeps its permalink
    # the rejected nodes' failures (X-1 on nodes 0 and 7) come before the unreachable node's row
    order = [r[0] for r in rows]
    assert order.index("gpu-0003") > max(order.index("gpu-0000"), order.index("gpu-0007"))
    total = sum(len(r[1].split()) for r in rows)
    assert f"{total} result(s) in {len(rows)} row(s)" in section
    # the matrix links each finding's cell to its row
    assert "<a href='#gpu-0007/X-1'" in html


@pytest.mark.slow  # a live run over 320 snapshots
def test_a_live_run_above_the_matrix_size_writes_a_bounded_page(tmp_path):
    """A live run (over snapshots: the live path, one item per node) of MATRIX_MAX_NODES + 20 nodes: pytest-html's
    table holds the failing rows of the first nodes only (about TABLE_RESULTS_MAX), the page says how many it
    leaves out, and those counts add up to results.json's."""
    n = MATRIX_MAX_NODES + 20
    folder = fleet_snapshots(tmp_path, n)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "conformance", "run", "--snapshot", str(folder), "--output", str(out)],
                   capture_output=True, text=True, timeout=900)  # fmt: skip
    doc = json.loads((out / "results.json").read_text())
    # the drift check is judged over the whole fleet after the nodes' checks: the fleet view shows it, not the table
    failing = [r for r in doc["results"] if r["outcome"] in ("failed", "error") and r["check"] != "FLEET-CONSISTENT"]
    per_node = len(failing) // n
    page = (out / "report.html").read_text()
    blob = json.loads(htmllib.unescape(re.search(r'data-jsonblob="([^"]*)"', page).group(1)))
    rows = sum(len(v) for v in blob["tests"].values())
    assert rows <= TABLE_RESULTS_MAX + per_node
    if len(failing) > TABLE_RESULTS_MAX + per_node:
        left = re.search(r"lists the first (\d+) nodes with a failed or errored result; (\d+) more nodes and their (\d+) "
                         r"failed or errored results are left out here", page)  # fmt: skip
        assert left, "the page must say what it leaves out"
        shown_nodes, more_nodes, more_results = map(int, left.groups())
        assert shown_nodes + more_nodes == len({r["node"] for r in failing})
        assert rows + more_results == len(failing)
    assert len(page) < 5 * 1000 * 1000  # issue 60: every section bounded by bytes (8.97 MB at 1,000 such nodes before)
    # one finding on every node (they are copies of one node) is one row that says on how many and names the first
    # NAMES_SHOWN of them, each a link, and the permalinks (#NODE/CHECK) of those named land on that row
    nodes_of: dict[tuple, set[str]] = {}
    for r in doc["results"]:
        if r["outcome"] in ("failed", "error", "waived"):
            nodes_of.setdefault((r["check"], r["outcome"], r["message"]), set()).add(r["node"])
    section = page[page.index("<section aria-label='Findings'") :]
    section = section[: section.index("</section>")]
    rows = re.findall(r"<tr[ >].*?</tr>", section, re.S)[1:]
    assert len(rows) == len(nodes_of), (len(rows), len(nodes_of))  # every finding once, none crowded out
    everywhere = [k for k, v in nodes_of.items() if len(v) == n]
    assert everywhere
    for check, _, message in everywhere:
        (row,) = [r for r in rows if f"data-check='{check}'" in r and e(message)[:40] in r]
        assert f"<b>{n} nodes</b>: " in row and f" and {n - NAMES_SHOWN} more" in row
        named = re.findall(r"<a href='#node-(node-\d+)'>", row)
        assert named == sorted(named) and len(named) == NAMES_SHOWN
        assert all(f"id='{x}/{check}'" in row for x in named)
    first = next(r for r in failing if (r["check"], r["outcome"], r["message"]) in everywhere)
    # the check-by-group lists fold the same way: one line per message, on how many nodes
    assert f"<li><b>{n} node(s)</b> {first['outcome']}: " in page


def test_a_streamed_pages_filter_bar_counts_every_result(tmp_path):
    """A merge above the matrix size is streamed and its page holds few results: pytest-html's filter bar still
    counts every result of results.json, as the scope section and the terminal do."""
    html = render(tmp_path, fleet(MATRIX_MAX_NODES + 30))
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    for outcome, label in (("passed", "Passed"), ("failed", "Failed"), ("error", "Errors")):
        n = sum(r["outcome"] == outcome for r in doc["results"])
        assert f'<span class="{outcome}">{n} {label},</span>' in html, (outcome, n)


def test_two_containers_failing_one_pod_check_have_their_own_rows_and_permalinks(tmp_path):
    """Issue 53.12: pod checks give one result per container; each row names namespace/pod/container and has a
    permalink of its own (#NODE/CHECK/NAMESPACE/POD/CONTAINER); #NODE/CHECK still lands on the first one."""
    doc = fleet(2, checks=2)
    base = next(r for r in doc["results"] if r["node"] == "gpu-0000")
    for container in ("app", "sidecar"):
        doc["results"].append({**base, "check": "POD-CPUS-EXCLUSIVE", "outcome": "failed", "severity": "high",
                               "message": f"{container}: 2 CPUs shared", "evidence": [],
                               "subject": {"namespace": "inference", "pod": "llm-0", "container": container}})  # fmt: skip
    html = render(tmp_path, doc)
    section = re.search(r"<section aria-label='Findings' id='gnc-findings'>(.*?)</section>", html, re.S).group(1)
    ids = re.findall(r"id='(gpu-0000/POD-CPUS-EXCLUSIVE[^']*)'", section)
    assert "gpu-0000/POD-CPUS-EXCLUSIVE/inference/llm-0/app" in ids
    assert "gpu-0000/POD-CPUS-EXCLUSIVE/inference/llm-0/sidecar" in ids
    assert "gpu-0000/POD-CPUS-EXCLUSIVE" in ids and len(ids) == len(set(ids)) == 3
    assert "href='#'" not in section
    assert "inference/llm-0/app" in section and "inference/llm-0/sidecar" in section


def test_findings_put_what_blocks_first_and_show_the_waiver(tmp_path):
    """Issue 54 items 2 and 4: blocking first (critical, high), then severity, then outcome; a waived row shows its
    justification, owner, ticket and expiry; an error row its remediation as a failed row does."""
    doc = fleet(3, checks=1)
    node = doc["results"][0]["node"]
    add = [
        ("M-FAIL", "medium", "failed", None),
        ("C-ERR", "critical", "error", None),
        ("H-WAIVED", "high", "waived", {"justification": "vendor firmware fix pending", "owner": "gpu-team",
                                        "ticket": "OPS-1234", "expires": "2027-01-31"}),
    ]  # fmt: skip
    for check, severity, outcome, waiver in add:
        doc["results"].append({**doc["results"][0], "check": check, "severity": severity, "outcome": outcome,
                               "message": f"{check} message", "waiver": waiver})  # fmt: skip
        doc["checks"][check] = dict(doc["checks"]["X-0"], id=check)
    html = render(tmp_path, doc)
    section = re.search(r"<section aria-label='Findings' id='gnc-findings'>(.*?)</section>", html, re.S).group(1)
    order = re.findall(r"data-node='[^']*' data-check='([^']*)'", section)
    assert order.index("C-ERR") < order.index("M-FAIL") and order.index("H-WAIVED") > order.index("C-ERR"), order
    waived = section[section.index("H-WAIVED message") :]
    assert "vendor firmware fix pending" in waived and "gpu-team" in waived and "OPS-1234" in waived
    assert "2027-01-31" in waived
    assert node
