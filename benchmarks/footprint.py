"""What one audit costs the node and the pod it audits (issue "The audit must not disturb what it audits").

Node: the collector, exactly as the local transport sends it (`sh -s -- ROOT MAX` with the script on stdin),
over a node laid out in a folder (tests/footprint_node.py): a quiet one (50 processes, 8 CPUs, 20 IRQs) and a
large one (5,000 processes, 384 CPUs, 2,000 IRQ folders), both with 8 GPUs. Pod: the exec script of the pod
checks (conformance.cluster.pods.INSIDE), run beside a process of THREADS threads. Each is printed with the
processes it creates (strace: fork, vfork and clone that is not a thread), the programs it runs, CPU and wall
time (the median of --runs runs) and the bytes it returns, beside the floor of `sh -c :` through the same path,
and with the collector of an earlier commit (--before REV) where asked.

    python -m benchmarks.footprint                 # after: this tree
    python -m benchmarks.footprint --before HEAD~3  # and the collector of another commit
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.cluster.pods import INSIDE
from conformance.collection.collect import collector_script
from tests.footprint_node import Footprint, build_node, measure

# a node's own PATH: the system's folders only. This machine's PATH puts pyenv's shims (a bash script that starts a
# dozen programs) in front of python3, which no GPU node has; figures before 2026-12-07's issue 60 row included them.
PLAIN = {**os.environ, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
NODES = {"quiet node": (50, 8, 20, 8), "large node": (5000, 384, 2000, 8)}
GOALS = {"processes per collection": 150, "CPU s, large node": 0.3, "processes per pod exec": 10, "CPU s, pod exec": 0.05}


def _row(name: str, f: Footprint) -> str:
    return f"{name:<34} {f.processes:>9} {f.programs:>8} {f.cpu_s:>8.3f} {f.wall_s:>8.3f} {f.output_bytes:>10}"


def _old_script(rev: str, tmp: Path) -> bytes:
    """The collector of another commit, built as that commit built it (its collect.collector_script)."""
    tree = tmp / "before"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
    try:
        code = (
            "import sys; from conformance.collection.collect import collector_script; sys.stdout.buffer.write(collector_script())"
        )
        return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, check=True).stdout
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False)


def _pod(tmp: Path, threads: int, runs: int) -> Footprint:
    """INSIDE (`sh -c INSIDE sh NAMES...`, as the exec runs it) beside a process of `threads` threads. On this
    machine every process shares the shell's cgroup, so all of them count as the container's: a harder case
    than a container, where only its own processes do."""
    code = (
        f"import threading, time\nfor _ in range({threads}): threading.Thread(target=time.sleep, args=(60,), daemon=True)"
        ".start()\ntime.sleep(60)"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(2)  # the threads start
        return measure(INSIDE.encode(), ["OMP_NUM_THREADS", "MKL_NUM_THREADS"], tmp / "pod.trace", PLAIN, runs)
    finally:
        worker.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example: python -m benchmarks.footprint")
    ap.add_argument("--before", help="also measure the collector of this git revision")
    ap.add_argument("--threads", type=int, default=1000, help="threads beside the pod exec (default 1000)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each, the median printed (default 5)")
    args = ap.parse_args()
    if not shutil.which("strace"):
        print("strace is needed (apt-get install strace)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="footprint-"))
    scripts = {"after": collector_script()}
    if args.before:
        scripts = {"before": _old_script(args.before, tmp), **scripts}
    print(f"{'':<34} {'processes':>9} {'programs':>8} {'CPU s':>8} {'wall s':>8} {'bytes':>10}")
    print(_row("floor: sh -c :", measure(b":\n", [], tmp / "floor.trace", PLAIN, args.runs)))
    for label, (procs, cpus, irqs, gpus) in NODES.items():
        root = build_node(tmp / label.replace(" ", "-"), procs, cpus, irqs, gpus)
        for which, script in scripts.items():
            print(
                _row(f"{label}, collector {which}", measure(script, [str(root), "4194304"], tmp / "node.trace", PLAIN, args.runs))
            )
    print(_row(f"pod exec, {args.threads} threads beside", _pod(tmp, args.threads, args.runs)))
    print("goals: " + "; ".join(f"{k} <= {v}" for k, v in GOALS.items()))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
