"""The live run's two item modes on the same nodes: one pytest item per check against one per node
(conformance.run.check_items), from snapshots (no SSH, so that the runner's own work is all there is),
for several fleet sizes, in alternating rounds. Prints per size and mode the median CPU (user + system)
and wall time of `conformance run --snapshot`, what a node costs on top of the run's fixed start-up, and
what the node mode saves: the measured basis for NODE_ITEMS_FROM, the size from which `--items auto`
uses one item per node.

    python -m benchmarks.check_items [--sizes 1,5,10,20,100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.run.check_items import NODE_ITEMS_FROM
from tests.check_fleet import fleet_snapshots


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s: user + system of the process)."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(p.pid, 0)
    return time.monotonic() - t, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,5,10,20,100")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="gnc-items-") as tmp_s:
        tmp = Path(tmp_s)
        cpu: dict[tuple[int, str], list[float]] = {}
        wall: dict[tuple[int, str], list[float]] = {}
        for n in sizes:
            snaps = fleet_snapshots(tmp / f"n{n}", n)
            for r in range(args.repeat):
                for mode in ("check", "node") if r % 2 == 0 else ("node", "check"):
                    argv = [sys.executable, "-m", "conformance", "run", "--snapshot", str(snaps), f"--items={mode}",
                            "--output", str(tmp / f"out-{n}-{mode}-{r}")]  # fmt: skip
                    w, c = timed(argv)
                    cpu.setdefault((n, mode), []).append(c)
                    wall.setdefault((n, mode), []).append(w)
        med = statistics.median
        base = {mode: med(cpu[(sizes[0], mode)]) for mode in ("check", "node")}
        print(f"{'nodes':>6} {'per check: CPU s':>17} {'per node: CPU s':>16} {'wall s (check/node)':>20} "
              f"{'CPU ms per added node (check/node)':>35} {'saved':>8}")  # fmt: skip
        for n in sizes:
            c, nd = med(cpu[(n, "check")]), med(cpu[(n, "node")])
            added = n - sizes[0]
            per = [(med(cpu[(n, m)]) - base[m]) / added * 1000 if added else float("nan") for m in ("check", "node")]
            print(f"{n:>6} {c:>17.2f} {nd:>16.2f} {med(wall[(n, 'check')]):>9.2f}/{med(wall[(n, 'node')]):<10.2f} "
                  f"{per[0]:>17.1f}/{per[1]:<17.1f} {c - nd:>7.2f}s")  # fmt: skip
        print(
            f"(medians of {args.repeat} rounds; one snapshot of the sample host root per node, 53 checks each; "
            f"--items auto uses one item per node from {NODE_ITEMS_FROM} nodes on)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
