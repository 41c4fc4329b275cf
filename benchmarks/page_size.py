"""How large a live run's report.html is at fleet size, section by section (issue 60 item 6).

One snapshot of this machine (`conformance collect`, the local transport: a failing node, since this machine runs no
kubelet) copied to N node names, judged by `conformance run --snapshot` (the live path), and its page measured: the
whole page, pytest-html's results table (its JSON blob), and each of the tool's sections.

    python -m benchmarks.page_size                  # 1,000 nodes
    python -m benchmarks.page_size --nodes 3000 --snapshot some-node.json
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# where each section of the page starts (the tool's sections, in page order, then pytest-html's own)
MARKS = (
    ("scope and verdicts", "<section aria-label='Scope and verdicts'"),
    ("fleet overview and counts", "<h2>Fleet overview</h2>"),
    ("not reached, by cause", "<h3>Not reached, by cause</h3>"),
    ("failed or errored checks by group", "<h3>Failed or errored checks by group</h3>"),
    ("fleet drift", "<h3 id='gnc-drift'>"),
    ("every node (list and search data)", "<h3>Every node</h3>"),
    ("node verdicts", "<h2>Node verdicts</h2>"),
    ("findings", "<section aria-label='Findings'"),
    ("pytest-html's results table and the rest", '<table id="results-table"'),
)


def sections(page: str) -> list[tuple[str, int]]:
    """(section, bytes) in page order: each from its mark to the next one found."""
    found = sorted((i, name) for name, mark in MARKS for i in [page.find(mark)] if i >= 0)
    out = []
    for (start, name), (end, _) in zip(found, [*found[1:], (len(page), "")], strict=True):
        out.append((name, len(page[start:end].encode())))
    return out


def main() -> int:
    example = "example: python -m benchmarks.page_size --nodes 1000"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=example)
    ap.add_argument("--nodes", type=int, default=1000, help="copies of the snapshot (default 1000)")
    ap.add_argument("--snapshot", help="a snapshot to copy (default: collect this machine)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="page-size-"))
    try:
        if args.snapshot:
            doc = json.loads(Path(args.snapshot).read_text())
        else:
            subprocess.run([sys.executable, "-m", "conformance", "collect", "--output", str(tmp / "one")], check=True,
                           capture_output=True)  # fmt: skip
            doc = json.loads(next((tmp / "one").glob("*.json")).read_text())
        fleet = tmp / "fleet"
        fleet.mkdir()
        for i in range(args.nodes):
            doc["node"] = f"gpu-node-{i:04d}"
            (fleet / f"{doc['node']}.json").write_text(json.dumps(doc))
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "conformance", "run", "--snapshot", str(fleet), "--output", str(tmp / "out")],
                           capture_output=True, text=True)  # fmt: skip
        took = time.monotonic() - t0
        page = (tmp / "out" / "report.html").read_text()
        results = json.loads((tmp / "out" / "results.json").read_text())["results"]
        blob = re.search(r'data-jsonblob="([^"]*)"', page)
        table = json.loads(html.unescape(blob.group(1))) if blob else {"tests": {}}
        rows = sum(len(v) for v in table["tests"].values())
        print(f"{args.nodes} nodes, {len(results)} results, run exit {p.returncode} in {took:.0f} s")
        print(f"report.html: {len(page.encode()) / 1e6:.2f} MB")
        blob_mb = len(blob.group(0).encode()) / 1e6 if blob else 0
        print(f"  pytest-html's results table (its JSON blob, inside the last section): {blob_mb:.2f} MB, {rows} rows")
        for name, size in sections(page):
            print(f"  {name}: {size / 1e6:.2f} MB")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
