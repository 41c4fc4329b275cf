"""How the HTML report scales: results for N nodes x M checks, rendered through `conformance report`,
then opened in headless Chromium (Debian's chromium + chromium-driver, via Selenium).

    python -m benchmarks.report_scale [--nodes 1000] [--checks 30] [--passed auto|rows|matrix]

Prints the render time, the HTML size and the time from navigation until the verdict banner and
the node x check matrix are displayed. Goal (issue 5): under 5 s and under 25 MB at 1000 x 30.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEVERITIES = ("critical", "high", "medium", "low")


def synthesize(nodes: int, checks: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    ids = [f"FAMILY{c % 6}-CHECK-{c:02d}" for c in range(checks)]
    spec = {
        cid: {
            "id": cid,
            "severity": SEVERITIES[i % 4],
            "title": f"synthetic check {i}",
            "rationale": "r",
            "remediation": "fix it",
            "source": "synthetic",
            "family": f"family{i % 6}",
        }
        for i, cid in enumerate(ids)
    }
    results, node_rows = [], []
    for n in range(nodes):
        name = f"gpu-node-{n:04d}"
        counts = dict.fromkeys(("passed", "failed", "error", "skipped", "waived"), 0)
        for cid in ids:
            x = rng.random()
            outcome = "failed" if x < 0.04 else "error" if x < 0.05 else "skipped" if x < 0.07 else "passed"
            counts[outcome] += 1
            msg = "" if outcome == "passed" else f"synthetic {outcome} of {cid} on {name}: expected x, found y"
            results.append(
                {
                    "node": name,
                    "check": cid,
                    "subject": {},
                    "severity": spec[cid]["severity"],
                    "outcome": outcome,
                    "message": msg,
                    "evidence": ["line 1", "line 2"],
                    "source": "synthetic",
                    "waiver": None,
                    "duration_s": 0.001,
                }
            )
        blocking = sorted(
            {
                r["check"]
                for r in results[-checks:]
                if r["outcome"] in ("failed", "error") and r["severity"] in ("critical", "high")
            }
        )
        node_rows.append(
            {
                "name": name,
                "verdict": "rejected" if blocking else "accepted",
                "profile": "default",
                "transport": "ssh",
                "labels": {},
                "counts": counts,
                "blocking": blocking,
            }
        )
    return {
        "schema_version": 1,
        "tool": {"name": "gpu-node-conformance", "version": "bench"},
        "started_at": "2026-12-02T10:00:00+00:00",
        "finished_at": "2026-12-02T10:05:00+00:00",
        "complete": True,
        "inventory": "synthetic",
        "nodes": node_rows,
        "checks": spec,
        "results": results,
    }


def _driver(strategy: str = "normal"):  # headless Chromium through chromedriver; None when either is missing
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        print("no chromium/chromedriver: browser timing skipped", file=sys.stderr)
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    opts.page_load_strategy = strategy
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)


def paint_times(html: Path, identifiers: tuple[str, ...]) -> dict[str, float] | None:
    """Milliseconds from navigation until the browser painted each element marked `elementtiming=ID`
    (Element Timing API: text in the viewport when it is first painted), read after the page loaded."""
    d = _driver()
    if d is None:
        return None
    try:
        d.set_page_load_timeout(300)
        d.get(html.as_uri())
        entries = d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "new PerformanceObserver(l => done(l.getEntries().map(e => [e.identifier, e.renderTime])))"
            ".observe({type: 'element', buffered: true});"
            "setTimeout(() => done([]), 5000);"
        )
        got = {name: float(t) for name, t in entries}
        return {i: got[i] for i in identifiers if i in got}
    finally:
        d.quit()


def browser_time(html: Path, strategy: str, shown: tuple[str, ...] = (".gnc span.verdict", ".gnc table.m")) -> float | None:
    """Seconds from navigation until every CSS selector in `shown` matches a displayed element (asked
    through WebDriver, so it also waits for the page's scripts to let go of the main thread)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = _driver(strategy)  # "none": time what a reader sees, not the end of all scripts
    if d is None:
        return None
    d.set_page_load_timeout(300)
    try:
        t = time.monotonic()
        d.get(html.as_uri())

        def usable(x: object) -> bool:
            found = [d.find_elements(By.CSS_SELECTOR, sel) for sel in shown]
            return all(f and f[0].is_displayed() for f in found)

        WebDriverWait(d, 300, poll_frequency=0.05).until(usable)
        return time.monotonic() - t
    finally:
        d.quit()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--checks", type=int, default=30)
    ap.add_argument("--passed", choices=("auto", "rows", "matrix"), default="auto")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gnc-report-") as tmp:
        src = Path(tmp) / "results.json"
        src.write_text(json.dumps(synthesize(args.nodes, args.checks)))
        out = Path(tmp) / "out"
        t = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "conformance", "report", str(src), "--output", str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTEST_ADDOPTS": f"--html-passed={args.passed}"},
        )
        render = time.monotonic() - t
        html = out / "report.html"
        if not html.is_file():
            print(p.stdout[-2000:], p.stderr[-2000:], file=sys.stderr)
            return 1
        size = html.stat().st_size
        shown = browser_time(html, "none")
        loaded = browser_time(html, "normal")
    n = args.nodes * args.checks
    print(f"{args.nodes} nodes x {args.checks} checks = {n} results, passed results: {args.passed}")
    print(f"render (conformance report, pytest session + pytest-html): {render:.1f} s")
    print(f"report.html: {size / 1e6:.1f} MB")
    if shown is not None:
        print(
            f"headless Chromium: verdicts and matrix displayed {shown:.1f} s after navigation; "
            f"page fully loaded (pytest-html's table built) after {loaded:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
