"""How `conformance merge` and the report scale to a fleet: N nodes' results, shaped like what the
in-cluster audit pods print (one framed results.json per node in `kubectl logs` output, 100 pods per
log file, with the pods' own progress lines around them), merged into one report set.

    python -m benchmarks.merge_scale [--nodes 10000] [--render-nodes 1000] [--no-browser]

Failure rates (seeded, per node): 84 % conformant, 10 % with one or two failed checks, 3 % with an
errored check (a fact that could not be read), 1 % whose SSH collection failed (every check errors),
2 % that never sent results (named with --expect). Every built-in check is one result per node.

Prints, in one run: merge wall time and peak memory (the merge process's maxrss), output sizes,
Prometheus series, JUnit validity against the Jenkins xUnit junit-10.xsd (tests/samples), when
headless Chromium paints the fleet's verdict counts (Element Timing) and when the page answers
scripts again (pytest-html's table built), and the time `conformance
report` takes to render --render-nodes nodes x all checks. Issue 16's goals: merge <= 60 s and <= 2 GiB
at 10,000 nodes; report opens in <= 3 s and stays under 20 MB; 1,000 nodes render in <= 10 s."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report_scale import browser_time, paint_times

ROOT = Path(__file__).resolve().parent.parent
POOLS = ("h100-a", "h100-b", "h200-a", "a100-train", "l40s-infer")


def node_document(name: str, pool: str, specs: dict, kind: str, rng: random.Random) -> dict:
    """One node's results.json as its audit pod prints it."""
    results = []
    bad = set(rng.sample(sorted(specs), 2 if rng.random() < 0.3 else 1)) if kind in ("failed", "error") else set()
    for cid, spec in sorted(specs.items()):
        outcome, message = "passed", ""
        if kind == "unreachable":
            outcome, message = "error", f"collection failed: ssh {name}: connection timed out after 120 s"
        elif cid in bad:
            outcome = "failed" if kind == "failed" else "error"
            message = f"{cid} on {name}: expected the profile's value, found another (synthetic)"
        elif spec["family"] in ("gpu", "pods") and rng.random() < 0.5:
            outcome, message = "skipped", "no GPU pods on this node"
        results.append({
            "node": name, "check": cid, "subject": {}, "severity": spec["severity"], "outcome": outcome,
            "message": message, "evidence": [f"{cid} evidence line 1", "evidence line 2"], "source": spec["source"][:80],
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


def write_logs(folder: Path, nodes: int, seed: int = 7) -> tuple[list[str], int]:
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
        kind = "unreachable" if x < 0.03 else "error" if x < 0.06 else "failed" if x < 0.16 else "ok"
        if i % 100 == 0:
            if log:
                log.close()
            log = (folder / f"pods-{i // 100:03d}.log").open("w", encoding="utf-8")
        doc = node_document(name, POOLS[i % len(POOLS)], specs, kind, rng)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--render-nodes", type=int, default=1000)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gnc-merge-bench-") as tmp:
        root = Path(tmp)
        t = time.monotonic()
        names, written = write_logs(root / "logs", args.nodes)
        (root / "nodes.txt").write_text("\n".join(names) + "\n")
        files = list((root / "logs").iterdir())
        size = sum(f.stat().st_size for f in files) / 1e6
        took = time.monotonic() - t
        print(f"{args.nodes} nodes, {written} results in {len(files)} log files ({size:.0f} MB), written in {took:.1f} s")
        out = root / "merged"
        argv = [sys.executable, "-m", "conformance", "merge", str(root / "logs"), "--expect", f"@{root / 'nodes.txt'}",
                "--output", str(out)]  # fmt: skip
        wall, peak, p = timed(argv, root / "merge-output")
        if not (out / "report.html").is_file():
            print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
            return 1
        doc = json.loads((out / "results.json").read_text())
        verdicts: dict[str, int] = {}
        for n in doc["nodes"]:
            verdicts[n["verdict"]] = verdicts.get(n["verdict"], 0) + 1
        print(f"conformance merge: {wall:.1f} s, peak memory {peak:.0f} MiB (exit {p.returncode}); nodes {verdicts}")
        for f in ("results.json", "junit.xml", "results.prom", "report.html"):
            print(f"  {f}: {(out / f).stat().st_size / 1e6:.1f} MB")
        prom = (out / "results.prom").read_text().splitlines()
        series = [line for line in prom if line and not line.startswith("#")]
        print(f"  Prometheus: {len(series)} series ({sum(s.startswith('gpu_node_conformance_check_result') for s in series)} "
              "check_result)")  # fmt: skip
        print(f"  JUnit against junit-10.xsd: {junit_valid(out / 'junit.xml')}")
        if not args.no_browser:
            painted = paint_times(out / "report.html", ("gnc-fleet-total",))
            shown = browser_time(out / "report.html", "none", (".gnc span.verdict", ".gnc table.fleet"))
            if painted is not None and shown is not None:
                at = painted.get("gnc-fleet-total")
                print(f"  headless Chromium: the fleet's verdict counts painted {at / 1000 if at else float('nan'):.2f} s after "
                      f"navigation; page scriptable (pytest-html's table built) after {shown:.1f} s")  # fmt: skip
        # render N nodes x all checks from the merged results
        subset = dict(doc, nodes=doc["nodes"][: args.render_nodes])
        keep = {n["name"] for n in subset["nodes"]}
        subset["results"] = [r for r in doc["results"] if r["node"] in keep]
        (root / "subset.json").write_text(json.dumps(subset))
        wall, peak, p = timed([sys.executable, "-m", "conformance", "report", str(root / "subset.json"), "--output",
                               str(root / "subset")], root / "report-output")  # fmt: skip
        html = (root / "subset" / "report.html").stat().st_size / 1e6
        print(f"conformance report, {len(keep)} nodes x {len(doc['checks'])} checks ({len(subset['results'])} results): "
              f"{wall:.1f} s, peak {peak:.0f} MiB, report.html {html:.1f} MB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
