"""A replay streamed node by node (conformance.run.streamed: merges and re-renders of any fleet size)
writes the files the in-memory replay writes for the same documents, also where documents overlap (the
later run wins), come from pod logs, or miss an expected node; its page keeps bounded lists and says what it
leaves out; results documents read back part by part are the documents written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cluster.manifests import RESULTS_BEGIN, RESULTS_END
from conformance.errors import UsageError
from conformance.outputs import junit_xml, write_json_document
from conformance.outputs import streaming as streaming_module
from conformance.outputs.documents import NotResults, parts_of_file
from conformance.outputs.fleet_view import MATRIX_MAX_NODES, MESSAGES_SHOWN, NODE_LIST_MAX
from conformance.run.streamed import TABLE_NODES_MAX
from tests.test_fleet_report import fleet
from tests.test_replay_equals_live import check_series


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=600)


def part_of(doc: dict, names: set[str], finished_at: str) -> dict:
    """The document with only these nodes and their results, finished at another time."""
    return dict(
        doc,
        finished_at=finished_at,
        nodes=[n for n in doc["nodes"] if n["name"] in names],
        results=[r for r in doc["results"] if r["node"] in names],
    )


def sources(tmp: Path, nodes: int) -> tuple[Path, list[str]]:
    """A folder of results documents that overlap: nodes 0-399 finished first, 300-699 later (so that their
    later run replaces 300-399), and a pod log whose block reruns node 5 with its failure fixed."""
    doc = fleet(nodes)
    names = [n["name"] for n in doc["nodes"]]
    folder = tmp / "sources"
    folder.mkdir()
    write_json_document(folder / "a.json", part_of(doc, set(names[:400]), "2026-12-03T10:01:00+00:00"))
    later = part_of(doc, set(names[300:]), "2026-12-03T11:00:00+00:00")
    for r in later["results"]:
        if r["node"] == names[350] and r["check"] == "X-0":
            r["outcome"], r["message"] = "failed", "failed in the later run"
    (folder / "b.json").write_text(json.dumps(later, indent=4))  # not this tool's layout: parsed whole
    rerun = part_of(doc, {names[7]}, "2026-12-03T12:00:00+00:00")
    for r in rerun["results"]:
        r["outcome"], r["message"] = "passed", ""
    rerun["nodes"][0].update(verdict="accepted", blocking=[])
    log = f"progress...\n{RESULTS_BEGIN}\n{json.dumps(rerun, separators=(',', ':'))}\n{RESULTS_END}\nmore progress\n"
    (folder / "pod-1.log").write_text(log)
    (folder / "snapshot.json").write_text(json.dumps({"format": 1, "node": "x"}))  # passed over
    return folder, names


def outputs(out: Path) -> tuple:
    doc = json.loads((out / "results.json").read_text())
    meta = {k: v for k, v in doc.items() if k not in ("finished_at", "replayed_at")}  # when each merge ran
    return meta, (out / "junit.xml").read_bytes(), check_series(out / "results.prom")


@pytest.mark.slow  # merges of a fleet end to end, both ways
def test_a_streamed_merge_writes_what_the_in_memory_merge_writes(tmp_path):
    folder, names = sources(tmp_path, 700)
    got = {}
    for items in ("result", "node"):
        out = tmp_path / items
        p = conformance("merge", str(folder), "--expect", f"{names[0]},never-sent", "--items", items, "--output", str(out))
        assert p.returncode == 1 and (out / "results.json").is_file(), p.stdout + p.stderr
        got[items] = outputs(out)
    assert got["result"] == got["node"]
    doc = got["node"][0]
    outcome = {(r["node"], r["check"]): r["outcome"] for r in doc["results"]}
    assert outcome[(names[350], "X-0")] == "failed" and outcome[(names[7], "X-1")] == "passed"  # the later runs won
    order = [n["name"] for n in doc["nodes"]]
    assert order[0] == "never-sent" and order[1:] == names  # the expected node's marker first, then the first places
    assert {n["name"]: n["verdict"] for n in doc["nodes"]}["never-sent"] == "incomplete"
    assert {r["check"] for r in doc["results"]} == {"X-0", "X-1", "FLEET-CONSISTENT"}


def test_the_fleet_page_keeps_bounded_lists_and_says_what_it_leaves_out(tmp_path):
    n = 3600  # 515 nodes fail X-1: more than the table's and the failing list's bounds; more nodes than the list's
    doc = fleet(n)
    write_json_document(tmp_path / "results.json", doc)
    p = conformance("report", str(tmp_path / "results.json"), "--output", str(tmp_path / "out"))
    assert p.returncode == 1, p.stderr[-2000:]
    html = (tmp_path / "out" / "report.html").read_text()
    failing = sum(1 for i in range(n) if i % 7 == 0 or i == 3)
    assert failing > TABLE_NODES_MAX and failing > MESSAGES_SHOWN and n > NODE_LIST_MAX
    assert f"the first {NODE_LIST_MAX} listed here, results.json lists all {n}" in html
    judged = failing - 1  # node 3 is unreachable: its errors count once, under its cause, not in X-1's row
    # each node's message is its own (it names the node): the check's row lists MESSAGES_SHOWN and counts the rest
    assert f"and {judged - MESSAGES_SHOWN} more failing result(s) with other messages" in html
    # every node has the drift check's error (these synthetic records have no identity record): all in the table's count
    assert f"lists the first {TABLE_NODES_MAX} nodes with a failed or errored result; {n - TABLE_NODES_MAX} more" in html
    assert f"{n} nodes: <span class='verdict v-accepted'>{n - failing} accepted</span>" in html
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    # every result, the drift check's too
    assert len(written["nodes"]) == n and len(written["results"]) == len(doc["results"]) + n
    assert f"{n} nodes: " in p.stdout and "the first 100 of" in p.stdout  # the command line: counts and the first nodes


def meta_rich(doc: dict) -> dict:
    return dict(
        doc,
        waivers={"file": "w.yaml", "count": 1, "unused": [{"index": 1, "check": "X-0", "nodes": "*"}]},
        diff={"new_failures": [], "fixed": [{"node": "a", "note": "line\nbreak"}], "identity_changes": []},
        api_access=["nodes: get, list", "nodes/proxy: get"],
    )


def reassembled(path: Path) -> dict:
    doc: dict = {}
    for kind, value in parts_of_file(path):
        if kind == "meta":
            doc.update(value)
        else:
            doc.setdefault("nodes" if kind == "node" else "results", []).append(value)
    return doc


def test_results_documents_read_part_by_part_are_the_documents_written(tmp_path):
    doc = meta_rich(fleet(5))
    write_json_document(tmp_path / "r.json", doc)
    assert reassembled(tmp_path / "r.json") == doc
    empty = dict(doc, nodes=[], results=[])
    write_json_document(tmp_path / "e.json", empty)
    assert {**reassembled(tmp_path / "e.json"), "nodes": [], "results": []} == empty
    (tmp_path / "pretty.json").write_text(json.dumps(doc, indent=4))  # another layout: parsed whole
    assert reassembled(tmp_path / "pretty.json") == doc
    text = (tmp_path / "r.json").read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    with pytest.raises(UsageError, match=r"cut\.json.*(line \d+|cut short)"):
        reassembled(tmp_path / "cut.json")
    (tmp_path / "snap.json").write_text(json.dumps({"format": 1, "node": "x"}))
    with pytest.raises(NotResults):
        reassembled(tmp_path / "snap.json")


def test_spools_that_move_to_disk_write_the_same_bytes(monkeypatch):
    doc = fleet(50, checks=5)
    in_memory = junit_xml(doc)
    monkeypatch.setattr(streaming_module, "SPILL_CHARS", 100)
    assert junit_xml(doc) == in_memory


def test_a_streamed_and_an_in_memory_merge_say_the_same_scope_title_and_totals(tmp_path):
    """Issue 54 item 1: the first line of a fleet page is the whole run's, whatever part of it the page keeps. The same
    400 nodes merged streamed (the default above 300 nodes) and in memory (--items result) give one scope, title
    and totals."""
    import re

    doc = fleet(400, checks=3)
    (tmp_path / "results.json").write_text(json.dumps(doc))
    pages = {}
    for how, extra in (("streamed", []), ("in-memory", ["--items", "result"])):
        conformance("merge", str(tmp_path / "results.json"), *extra, "--output", str(tmp_path / how))
        html = (tmp_path / how / "report.html").read_text()
        scope = re.search(r"<p class='gnc-totals'>(.*?)</p>", html, re.S).group(1)
        facts = re.search(r"checks judged: ([^;]*);", html).group(1)
        title = re.search(r"<title[^>]*>(.*?)</title>", html, re.S).group(1)
        pages[how] = (re.sub(r"<[^>]+>", "", scope), facts, title)
    assert pages["streamed"] == pages["in-memory"], pages
    assert pages["streamed"][0].startswith("400 node(s):")


def test_summary_md_made_in_the_pass_is_the_one_read_from_results_json(tmp_path):
    """Issue 60: a merge makes summary.md as it writes results.json (a 10,000-node merge no longer reads 600 MB
    back) and a live run from its document in memory; each is what reading the written results.json gives."""
    from conformance.outputs.markdown_summary import summary_markdown
    from tests.check_fleet import fleet_snapshots

    doc = fleet(MATRIX_MAX_NODES + 40)  # streamed, with a fleet view
    write_json_document(tmp_path / "results.json", doc)
    p = conformance("merge", str(tmp_path / "results.json"), "--output", str(tmp_path / "merged"))
    assert p.returncode == 1, p.stderr[-2000:]
    merged = tmp_path / "merged"
    assert (merged / "summary.md").read_text() == summary_markdown(merged / "results.json")
    assert "## Not accepted" in (merged / "summary.md").read_text()
    folder = fleet_snapshots(tmp_path, 3)
    live = tmp_path / "live"
    p = conformance("run", "--snapshot", str(folder), "--output", str(live))
    assert p.returncode == 1, p.stderr[-2000:]
    assert (live / "summary.md").read_text() == summary_markdown(live / "results.json")
