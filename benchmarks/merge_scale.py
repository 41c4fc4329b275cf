"""How `conformance merge` and the report scale to a fleet: N nodes' results, shaped like what the
in-cluster audit pods print (one framed results.json per node in `kubectl logs` output, 100 pods per
log file, with the pods' own progress lines around them), merged into one report set.

    python -m benchmarks.merge_scale [--nodes 10000] [--render-nodes 1000] [--no-browser]

Failure rates (seeded, per node): 84 % conformant, 10 % with one or two failed checks, 3 % with an
errored check (a fact that could not be read), 1 % whose SSH collection failed (every check errors),
2 % that never sent results (named with --expect). Every built-in check is one result per node.

Prints, in one run, for each size: merge wall time and peak memory (the merge process's maxrss), what it
left in the temporary directory, output sizes,
Prometheus series, JUnit validity against the Jenkins xUnit junit-10.xsd (tests/samples), when
headless Chromium paints the fleet's verdict counts (Element Timing) and when the page answers
scripts again (pytest-html's table built), and the time `conformance
report` takes to render --render-nodes nodes x all checks. Issue 30's goals: merge <= 60 s and <= 512 MiB
at 10,000 nodes, <= 5 min and <= 512 MiB at 50,000; the fleet view painted in <= 3 s at 50,000 nodes."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report_scale import browser_time, paint_times

ROOT = Path(__file__).resolve().parent.parent
POOLS = ("h100-a", "h100-b", "h200-a", "a100-train", "l40s-infer")


def node_document(name: str, pool: str, specs: dict, kind: str, rng: random.Random, shape: Shape) -> dict:
    """One node's results.json as its audit pod prints it."""
    results = []
    pick = sorted(c for c, s in specs.items() if s["severity"] in ("critical", "high")) if kind in ("failed", "error") else []
    bad = set(rng.sample(pick, 2 if rng.random() < 0.3 else 1)) if pick else set()
    for cid, spec in sorted(specs.items()):
        outcome, message = "passed", ""
        if kind == "unreachable":
            outcome, message = "error", f"collection failed: ssh {name}: connection timed out after 120 s"
        elif cid in bad:
            outcome = "failed" if kind == "failed" else "error"
            message = f"{cid} on {name}: expected the profile's value, found another (synthetic)"
            message += " " + "the node's value and the profile's value differ; see the evidence. " * (shape.message // 64)
        elif spec["family"] in ("gpu", "pods") and rng.random() < 0.5:
            outcome, message = "skipped", "no GPU pods on this node"
        results.append({
            "node": name, "check": cid, "subject": {}, "severity": spec["severity"], "outcome": outcome,
            "message": message, "evidence": [f"{cid} evidence line {k}: " + "x" * 60 for k in range(shape.evidence)],
            "source": spec["source"][:80],
            "waiver": None, "duration_s": 0.002, "test": f"suites/test_x.py::test_{cid.lower()}[{name}]",
        })  # fmt: skip
    counts = dict.fromkeys(("passed", "failed", "error", "skipped", "waived"), 0)
    for r in results:
        counts[r["outcome"]] += 1
    bad_outcomes, blocking_severities = ("failed", "error"), ("critical", "high")
    blocking = sorted({r["check"] for r in results if r["outcome"] in bad_outcomes and r["severity"] in blocking_severities})
    verdict = "unreachable" if kind == "unreachable" else "rejected" if blocking else "accepted"
    down = kind == "unreachable"
    collection = {"collected_at": "2026-12-03T10:00:00+00:00", "duration_s": 1.2, "remote_executions": 1,
                  "error": results[0]["message"] if down else None, "error_kind": "unreachable" if down else None,
                  "notes": [], "source": "live"}  # fmt: skip
    node = {"name": name, "verdict": verdict, "profile": "default", "profile_reason": "default", "transport": "local",
            "labels": {"pool": pool}, "discovered": "", "counts": counts, "blocking": blocking,
            "collection": collection}  # fmt: skip
    return {"schema_version": 1, "tool": {"name": "gpu-node-conformance", "version": "bench"},
            "started_at": "2026-12-03T10:00:00+00:00", "finished_at": "2026-12-03T10:00:05+00:00", "complete": True,
            "inventory": f"(in-cluster {name})", "nodes": [node], "checks": specs, "results": results}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """How the synthetic fleet fails: the share of nodes with a failed or errored blocking check, and how
    long a failing message and a result's evidence are."""

    rejected: float = 0.75
    message: int = 600
    evidence: int = 8


def write_logs(folder: Path, nodes: int, shape: Shape, seed: int = 7) -> tuple[list[str], int]:
    """Log files of the audit pods; returns (expected node names, results written)."""
    from conformance.checks import load_builtin
    from conformance.cluster.manifests import RESULTS_BEGIN, RESULTS_END

    specs = {cid: s.to_json() for cid, s in sorted(load_builtin().items()) if s.origin == "built-in"}
    rng = random.Random(seed)
    names, written, log = [], 0, None
    folder.mkdir(parents=True)
    for i in range(nodes):
        name = f"gpu-{POOLS[i % len(POOLS)]}-{i:05d}"
        names.append(name)
        x = rng.random()
        if x < 0.02:
            continue  # its Job never finished: only --expect knows it
        errored = 0.03 + shape.rejected * 0.2  # a fifth of the rejected nodes have an errored check, the rest a failed one
        kind = "unreachable" if x < 0.03 else "error" if x < errored else "failed" if x < 0.03 + shape.rejected else "ok"
        if i % 100 == 0:
            if log:
                log.close()
            log = (folder / f"pods-{i // 100:03d}.log").open("w", encoding="utf-8")
        doc = node_document(name, POOLS[i % len(POOLS)], specs, kind, rng, shape)
        written += len(doc["results"])
        assert log is not None
        log.write(f"collecting {name} ...\n{'.' * len(doc['results'])} [100%]\n")
        log.write(f"{RESULTS_BEGIN}\n{json.dumps(doc, separators=(',', ':'))}\n{RESULTS_END}\n")
    if log:
        log.close()
    return names, written


def timed(argv: list[str], logs: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, peak RSS MiB of that process alone, the result); its output goes to files under `logs`."""
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "stdout").open("w") as out, (logs / "stderr").open("w") as err:
        t = time.monotonic()
        p = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    done = subprocess.CompletedProcess(argv, p.returncode, (logs / "stdout").read_text(), (logs / "stderr").read_text())
    return wall, usage.ru_maxrss / 1024, done


def junit_valid(path: Path) -> str:
    try:
        import xmlschema
    except ImportError:
        return "not checked (xmlschema missing)"
    schema = xmlschema.XMLSchema(str(ROOT / "tests" / "samples" / "junit-10.xsd"))
    errors = list(schema.iter_errors(xmlschema.XMLResource(str(path), lazy=True)))  # lazy: no element limit
    return "valid" if not errors else f"{len(errors)} errors, first: {errors[0].reason}"


def node_verdicts(results: Path) -> dict[str, int]:
    """The verdict counts of a results.json, read part by part up to its results (it may hold 50,000 nodes)."""
    from conformance.outputs.documents import parts_of_file

    verdicts: dict[str, int] = {}
    for kind, value in parts_of_file(results):
        if kind == "result":
            break
        if kind == "node":
            verdicts[value["verdict"]] = verdicts.get(value["verdict"], 0) + 1
    return verdicts


VALIDATE_NODES_MAX = 10_000  # xmlschema reads about 4 MB/s: the 3 GB junit.xml of 50,000 nodes would take 15 minutes


def merge_once(root: Path, nodes: int, shape: Shape, browser: bool) -> None:
    t = time.monotonic()
    names, written = write_logs(root / "logs", nodes, shape)
    (root / "nodes.txt").write_text("\n".join(names) + "\n")
    files = list((root / "logs").iterdir())
    size = sum(f.stat().st_size for f in files) / 1e6
    took = time.monotonic() - t
    print(f"{nodes} nodes, {written} results in {len(files)} log files ({size:.0f} MB), written in {took:.1f} s", flush=True)
    out = root / "merged"
    argv = [sys.executable, "-m", "conformance", "merge", str(root / "logs"), "--expect", f"@{root / 'nodes.txt'}",
            "--output", str(out)]  # fmt: skip
    tmp_before = set(Path(tempfile.gettempdir()).iterdir())
    wall, peak, p = timed(argv, root / "merge-output")
    if not (out / "report.html").is_file():
        print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
        raise SystemExit(1)
    left = sorted(str(x) for x in set(Path(tempfile.gettempdir()).iterdir()) - tmp_before if "gnc-merge-bench" not in x.name)
    verdicts = node_verdicts(out / "results.json")
    print(f"conformance merge: {wall:.1f} s, peak memory {peak:.0f} MiB (exit {p.returncode}); nodes {verdicts}; "
          f"left in the temporary directory: {left or 'nothing'}")  # fmt: skip
    for f in ("results.json", "junit.xml", "results.prom", "report.html"):
        print(f"  {f}: {(out / f).stat().st_size / 1e6:.1f} MB")
    prom = (out / "results.prom").read_text().splitlines()
    series = [line for line in prom if line and not line.startswith("#")]
    print(f"  Prometheus: {len(series)} series ({sum(s.startswith('gpu_node_conformance_check_result') for s in series)} "
          "check_result)")  # fmt: skip
    valid = junit_valid(out / "junit.xml") if nodes <= VALIDATE_NODES_MAX else f"not validated above {VALIDATE_NODES_MAX} nodes"
    print(f"  JUnit against junit-10.xsd: {valid}", flush=True)
    if browser:
        painted = paint_times(out / "report.html", ("gnc-fleet-total",))
        shown = browser_time(out / "report.html", "none", (".gnc span.verdict", ".gnc table.fleet"))
        if painted is not None and shown is not None:
            at = painted.get("gnc-fleet-total")
            print(f"  headless Chromium: the fleet's verdict counts painted {at / 1000 if at else float('nan'):.2f} s after "
                  f"navigation; the page takes input (scripts answer, pytest-html's table built) after {shown:.1f} s",
                  flush=True)  # fmt: skip


def report_once(root: Path, nodes: int, shape: Shape) -> None:
    """`conformance report` of a results.json of `nodes` nodes x all checks (a merge of that many makes it)."""
    logs, out = root / "report-logs", root / "report-source"
    names, written = write_logs(logs, nodes, shape, seed=11)
    timed([sys.executable, "-m", "conformance", "merge", str(logs), "--output", str(out)], root / "report-merge")
    wall, peak, _ = timed([sys.executable, "-m", "conformance", "report", str(out / "results.json"), "--output",
                           str(root / "report")], root / "report-output")  # fmt: skip
    html = (root / "report" / "report.html").stat().st_size / 1e6
    print(f"conformance report, {len(names)} nodes ({written} results): {wall:.1f} s, peak {peak:.0f} MiB, "
          f"report.html {html:.1f} MB", flush=True)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="10000,50000", help="fleet sizes merged, comma-separated")
    ap.add_argument("--render-nodes", type=int, default=1000)
    ap.add_argument("--rejected", type=float, default=0.75, help="share of nodes with a failed or errored blocking check")
    ap.add_argument("--message-chars", type=int, default=600, help="length of a failing result's message")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    shape = Shape(args.rejected, args.message_chars)
    print(f"failure shape: {shape.rejected:.0%} of the nodes rejected (a fifth of them by an errored check), 1 % "
          f"unreachable, 2 % sent nothing; failing messages of about {shape.message} characters, {shape.evidence} "
          "evidence lines per result")  # fmt: skip
    for n in [int(x) for x in args.nodes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="gnc-merge-bench-") as tmp:
            merge_once(Path(tmp), n, shape, not args.no_browser)
    if args.render_nodes:
        with tempfile.TemporaryDirectory(prefix="gnc-merge-bench-") as tmp:
            report_once(Path(tmp), args.render_nodes, shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
