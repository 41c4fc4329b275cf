"""Time a full node-level audit of the lab (5 simulated nodes, one down) and print the numbers.

Run as root from the repository root:  python -m benchmarks.lab_audit [--repeat 3]
It builds the same lab as the integration tests (network namespaces, real sshd), runs the real
`conformance run` against it and prints wall time, per-node collection time and remote executions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import specs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="audits to time (default 3)")
    args = ap.parse_args()
    reason = lab_available()
    if reason:
        print(f"cannot build the lab: {reason}", file=sys.stderr)
        return 4
    with tempfile.TemporaryDirectory(prefix="gnc-bench-") as tmp:
        t0 = time.monotonic()
        lab = Lab(Path(tmp) / "lab")
        for s in specs():
            lab.add(s)
        try:
            lab.start()
            setup = time.monotonic() - t0
            inv = Path(tmp) / "inventory.yaml"
            inv.write_text(lab.inventory())
            walls = []
            doc: dict = {}
            for i in range(args.repeat):
                out = Path(tmp) / f"run{i}"
                t = time.monotonic()
                subprocess.run(
                    [sys.executable, "-m", "conformance", "run", "--inventory", str(inv), "--output", str(out)],
                    capture_output=True,
                    check=False,
                )
                walls.append(time.monotonic() - t)
                doc = json.loads((out / "results.json").read_text())
        finally:
            lab.stop()
    print(f"lab setup ({len(specs())} nodes, real sshd in namespaces): {setup:.2f} s")
    print(
        f"conformance run wall time over {args.repeat} runs: median {statistics.median(walls):.2f} s "
        f"(min {min(walls):.2f}, max {max(walls):.2f}), including Python start-up and report writing"
    )
    for n in doc["nodes"]:
        c = n["collection"]
        print(
            f"  {n['name']:<12} {n['verdict']:<11} collection {c['duration_s']:.3f} s, remote executions {c['remote_executions']}"
        )
    print(f"results: {len(doc['results'])} check results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
