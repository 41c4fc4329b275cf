"""A node is accepted only when every check that blocks was judged on it, and a merge of a partial rerun
keeps what the earlier run judged: real runs of the local transport over a sample host root, narrowed with
--select and -k, re-rendered, merged, and pod logs cut short."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cluster.manifests import RESULTS_BEGIN, RESULTS_END
from tests.test_cli_local import sample_host_root


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=600)


def node_of(out: Path) -> tuple[dict, list[dict]]:
    doc = json.loads((out / "results.json").read_text())
    (node,) = doc["nodes"]
    return node, doc["results"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A full run of the sample node (rejected on its real failures), and a rerun of one family only."""
    d = tmp_path_factory.mktemp("partial")
    root = sample_host_root(d / "root")
    full = conformance("run", "--host-root", str(root), "--output", str(d / "monday"))
    assert full.returncode == 1, full.stdout + full.stderr
    rerun = conformance("run", "--host-root", str(root), "--select", "gpu_health", "--output", str(d / "rerun"))
    keyword = conformance("run", "--host-root", str(root), "--output", str(d / "keyword"), "--", "-k", "test_sysctl")
    return d, rerun, keyword


def test_a_run_narrowed_with_select_or_k_is_incomplete_and_names_what_was_not_judged(runs):
    d, rerun, keyword = runs
    for out, p in ((d / "rerun", rerun), (d / "keyword", keyword)):
        node, rows = node_of(out)
        if node["blocking"]:  # a failure it did judge rejects the node whatever else was left out
            assert node["verdict"] == "rejected"
        else:
            assert node["verdict"] == "incomplete", node
        assert "KUBELET-CPU-POLICY" in node["not_judged"] and "KUBELET-CPU-POLICY" not in {r["check"] for r in rows}
        assert p.returncode == 1
    node, _ = node_of(d / "rerun")
    assert node["verdict"] == "incomplete"  # the sample node's GPU health checks skip: nothing blocking failed
    assert "not judged: " in rerun.stdout


def test_a_full_run_judges_every_check_that_blocks(runs):
    d, _, _ = runs
    node, _ = node_of(d / "monday")
    assert "not_judged" not in node and node["verdict"] == "rejected"


def test_a_rerender_with_select_is_incomplete(runs, tmp_path):
    d, _, _ = runs
    p = conformance("report", str(d / "monday" / "results.json"), "--select", "KUBELET-CPU-POLICY", "--output", str(tmp_path))
    node, _ = node_of(tmp_path)
    assert node["verdict"] in ("incomplete", "rejected") and node["not_judged"], p.stdout + p.stderr
    assert "GPU-COUNT" in node["not_judged"]


def test_merging_a_partial_rerun_keeps_the_earlier_runs_other_checks(runs, tmp_path):
    d, _, _ = runs
    monday, _ = node_of(d / "monday")
    _, monday_rows = node_of(d / "monday")
    p = conformance("merge", str(d / "monday" / "results.json"), str(d / "rerun" / "results.json"), "--output", str(tmp_path))
    node, rows = node_of(tmp_path)
    assert node["verdict"] == monday["verdict"] == "rejected", p.stdout + p.stderr
    assert node["blocking"] == monday["blocking"] and "not_judged" not in node
    assert {r["check"] for r in rows} == {r["check"] for r in monday_rows}
    assert [r["source"] for r in node["runs"]] == [str(d / "rerun" / "results.json"), str(d / "monday" / "results.json")]
    rerun_ids = {r["check"] for r in node_of(d / "rerun")[1]}
    rerun_test_ids = {r["test"] for r in node_of(d / "rerun")[1]}
    assert {r["test"] for r in rows if r["check"] in rerun_ids} == rerun_test_ids  # those came from the rerun


def test_a_pod_log_cut_short_is_an_error_naming_the_log(runs, tmp_path):
    d, _, _ = runs
    text = (d / "monday" / "results.json").read_text()
    block = json.dumps(json.loads(text), separators=(",", ":"))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-a.log").write_text(f"starting\n{RESULTS_BEGIN}\n{block[: len(block) // 2]}")  # truncated
    p = conformance("merge", str(logs), "--output", str(tmp_path / "out"))
    assert p.returncode == 4 and "node-a.log: the pod log's results are cut short" in p.stderr, p.stdout + p.stderr
    (logs / "node-a.log").write_text(f"{block[len(block) // 2 :]}\n{RESULTS_END}\n")  # its start rotated away
    p = conformance("merge", str(logs), "--output", str(tmp_path / "out2"))
    assert p.returncode == 4 and "beginning is not in it" in p.stderr


def test_results_before_nodes_in_a_hand_edited_document_are_read(runs, tmp_path):
    d, _, _ = runs
    doc = json.loads((d / "monday" / "results.json").read_text())
    edited = {k: v for k, v in doc.items() if k != "nodes"}
    edited["nodes"] = doc["nodes"]  # now after "results"
    (tmp_path / "edited.json").write_text(json.dumps(edited, indent=1))
    conformance("report", str(tmp_path / "edited.json"), "--output", str(tmp_path / "out"))
    node, rows = node_of(tmp_path / "out")
    assert len(rows) == len(doc["results"]) and node["verdict"] == doc["nodes"][0]["verdict"]


def test_control_characters_from_nodes_leave_every_output_valid(runs, tmp_path):
    """An os-release PRETTY_NAME with an escape byte, a message with a NUL: junit.xml stays parseable XML (XML 1.0
    forbids those characters even escaped), the report's own markup holds none, and they are shown, not lost."""
    import xml.etree.ElementTree as ET

    d, _, _ = runs
    doc = json.loads((d / "monday" / "results.json").read_text())
    doc["nodes"][0].setdefault("identity", {})["os"] = "Evil\x1b[31mLinux\x00"
    doc["results"][0]["message"] = "bad \x1b[2J value\x07 here"
    doc["results"][0]["evidence"] = ["line with \x0c form feed"]
    (tmp_path / "ctl.json").write_text(json.dumps(doc))
    conformance("report", str(tmp_path / "ctl.json"), "--output", str(tmp_path / "out"))
    junit = (tmp_path / "out" / "junit.xml").read_bytes()
    ET.fromstring(junit)  # parses
    assert b"bad \\x1b[2J value\\x07 here" in junit
    html = (tmp_path / "out" / "report.html").read_text()
    assert "\x1b" not in html and "\x07" not in html and "\x00" not in html


def test_containerd_imports_match_dotfiles_as_go_does(tmp_path):
    """containerd expands `imports` with Go's filepath.Glob, whose '*' matches a leading dot: a hidden drop-in that
    switches runc to cgroupfs is applied by the daemon, so it must be collected and judged (the shell glob of the
    collector skipped it, and RUNTIME-SYSTEMD-CGROUP passed). '.' and '..' are never imports."""
    root = sample_host_root(tmp_path / "host")
    cfg = root / "etc" / "containerd" / "config.toml"
    cfg.write_text('imports = ["/etc/containerd/conf.d/*.toml"]\n' + cfg.read_text())
    (root / "etc" / "containerd" / "conf.d").mkdir()
    (root / "etc" / "containerd" / "conf.d" / ".99-cgroupfs.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = false\n'
    )
    conformance("run", "--host-root", str(root), "--output", str(tmp_path / "out"), "--", "-k", "test_runtime_systemd")
    (r,) = [
        r
        for r in json.loads((tmp_path / "out" / "results.json").read_text())["results"]
        if r["check"] == "RUNTIME-SYSTEMD-CGROUP"
    ]
    assert r["outcome"] == "failed", r["message"]
    assert ".99-cgroupfs.toml" in json.dumps(r)


def test_host_root_containerd_config_links_resolve_inside_the_root(tmp_path):
    """In-cluster (host root /host): Flatcar's /etc/containerd/config.toml is an absolute link into /usr/share, and
    its imports name folders through links too. They resolve inside the root as on the node, so the imports are
    followed and judged (they were not: the link resolved in the pod's own filesystem, and no import was read)."""
    root = sample_host_root(tmp_path / "host")
    real = root / "usr" / "share" / "containerd"
    real.mkdir(parents=True)
    cfg = root / "etc" / "containerd" / "config.toml"
    (real / "config.toml").write_text('imports = ["/etc/containerd/conf.d/*.toml"]\n' + cfg.read_text())
    cfg.unlink()
    cfg.symlink_to("/usr/share/containerd/config.toml")
    (real / "drop-ins").mkdir()
    (root / "etc" / "containerd" / "conf.d").symlink_to("/usr/share/containerd/drop-ins")
    (real / "drop-ins" / "99-cgroupfs.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = false\n'
    )
    conformance("run", "--host-root", str(root), "--output", str(tmp_path / "out"), "--", "-k", "test_runtime_systemd")
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    (r,) = [r for r in rows if r["check"] == "RUNTIME-SYSTEMD-CGROUP"]
    assert r["outcome"] == "failed" and "/etc/containerd/conf.d/99-cgroupfs.toml" in json.dumps(r), r


def test_the_report_opens_with_its_scope_and_the_nodes_not_accepted(runs, tmp_path):
    """A run narrowed with --select says so first: totals, the node not accepted and why (the checks not judged), how
    many checks were judged out of how many, complete or interrupted; the tab's title carries the date and counts."""
    d, _, _ = runs
    html = (d / "rerun" / "report.html").read_text()
    scope = html[html.index("<section aria-label='Scope and verdicts'") :]
    scope = scope[: scope.index("</section>")]
    assert html.index("Scope and verdicts") < html.index("Node verdicts")
    first = json.loads((d / "rerun" / "results.json").read_text())["nodes"][0]["not_judged"][0]
    assert "1 incomplete" in scope and f"not judged: {first}, " in scope
    assert "checks judged: " in scope and "of the " in scope and "built-in checks" in scope and "run: complete" in scope
    day = json.loads((d / "rerun" / "results.json").read_text())["started_at"][:10]
    assert f">GPU node conformance report {day}: 1 incomplete</title>" in html
    doc = json.loads((d / "monday" / "results.json").read_text())
    doc["complete"] = False
    (tmp_path / "cut.json").write_text(json.dumps(doc))
    conformance("report", str(tmp_path / "cut.json"), "--output", str(tmp_path / "out"))
    cut = (tmp_path / "out" / "report.html").read_text()
    assert "interrupted (Ctrl-C or SIGTERM)" in cut
    # issue 54 item 9: the title and the verdict block say it too, not only a sentence of the scope
    assert re.search(r"<title[^>]*>GPU node conformance report [\d-]+ \(INTERRUPTED\): ", cut)
    assert "<p class='gnc-interrupted' role='alert'><b>This run was interrupted</b>" in cut
    # a replay says when its audits ran and how long the replay took, not the span from the audit to the replay
    assert f"audits ran from {doc['started_at']} to {doc['finished_at']}; merged " in cut
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["audits"] == {"started_at": doc["started_at"], "finished_at": doc["finished_at"]}
    assert written["replayed_at"] <= written["finished_at"]


def test_the_terminal_and_ci_get_one_count_and_a_markdown_summary(runs):
    """The terminal states one count (the tool's, not pytest's items), paths as typed from where the user
    stands, and summary.md holds totals, the node not accepted with why, and the blocking checks with their
    remediation, ranked by severity."""
    d, rerun, _ = runs
    full = json.loads((d / "monday" / "results.json").read_text())
    sums = {k: sum(n["counts"][k] for n in full["nodes"]) for k in ("passed", "failed", "error", "skipped", "waived")}
    assert " in 0." not in rerun.stdout and " errors in " not in rerun.stdout  # pytest's own line is not printed
    assert "1 node(s): 1 incomplete; results: " in rerun.stdout
    assert "summary:    " in rerun.stdout and "(Markdown: a CI job summary)" in rerun.stdout
    md = (d / "monday" / "summary.md").read_text()
    assert md.startswith(f"# GPU node conformance {full['started_at'][:10]}\n")
    assert "1 node(s): **1 rejected**; run complete." in md
    assert "## Not accepted" in md and "failed or errored: " in md
    table = md[md.index("| check | severity | nodes | remediation |") :].splitlines()[2:]
    severities = [row.split(" | ")[1] for row in table if row.startswith("| ")]
    rank = {"critical": 0, "high": 1, "medium": 2, "low": 3}
    assert severities and [rank[s] for s in severities] == sorted(rank[s] for s in severities)
    blocking = {r["check"] for r in full["results"] if r["outcome"] in ("failed", "error")}
    assert len(severities) == min(10, len(blocking))
    assert sum(1 for r in full["results"] if r["outcome"] == "failed") == sums["failed"]
    rerun_md = (d / "rerun" / "summary.md").read_text()
    assert "**1 incomplete**" in rerun_md and "not judged: " in rerun_md
