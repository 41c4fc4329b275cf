"""How long a command takes and how much it holds under /tmp at its peak: README command 2 (the whole test suite),
or the fast tier (issue 60).

The command runs in its own process group; every SECONDS the bytes under /tmp that were not there before it started
are summed (a walk of /tmp, files counted once by inode, what was there at the start left out), and the peak is kept.
Prints the wall time, the CPU time of the command and everything it started, the peak, what /tmp holds after it, and
the command's last lines.

    python -m benchmarks.suite -- .venv/bin/pytest                 # README command 2's test run
    python -m benchmarks.suite -- .venv/bin/pytest -m "not lab"    # a subset
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path


def _files(top: Path) -> dict[tuple[int, int], int]:
    """(device, inode) -> bytes allocated, for every file under `top` (what vanishes mid-walk is skipped)."""
    out: dict[tuple[int, int], int] = {}
    for folder, _, names in os.walk(top, onerror=lambda e: None):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            out[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return out


def main() -> int:
    example = "example: python -m benchmarks.suite -- .venv/bin/pytest"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=example)
    ap.add_argument("--every", type=float, default=2.0, metavar="SECONDS", help="how often /tmp is measured (default 2)")
    ap.add_argument("--tmp", default="/tmp", help="the folder to watch (default /tmp)")
    ap.add_argument("--log", help="also write the command's whole output to this file")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to measure after --")
    top = Path(args.tmp)
    before = set(_files(top))
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            held = sum(b for k, b in _files(top).items() if k not in before)
            peak[0] = max(peak[0], held)
            done.wait(args.every)

    watcher = threading.Thread(target=watch, daemon=True)
    t0 = time.monotonic()
    watcher.start()
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert p.stdout is not None
    tail: list[str] = []
    log = open(args.log, "w") if args.log else None  # noqa: SIM115 - closed below, written line by line
    for line in p.stdout:
        tail = [*tail[-19:], line.rstrip("\n")]
        if log is not None:
            log.write(line)
    if log is not None:
        log.close()
    rc = p.wait()
    wall = time.monotonic() - t0
    done.set()
    watcher.join()
    after = sum(b for k, b in _files(top).items() if k not in before)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("\n".join(tail))
    print(f"command: {' '.join(command)}")
    print(f"exit {rc}; wall {wall:.0f} s ({wall / 60:.1f} min); CPU {usage.ru_utime + usage.ru_stime:.0f} s "
          f"(user {usage.ru_utime:.0f}, system {usage.ru_stime:.0f}); CPUs here {os.cpu_count()}")  # fmt: skip
    print(f"/tmp: peak {peak[0] / 2**20:.0f} MiB beyond what was there before (measured every {args.every:g} s); "
          f"left after {after / 2**20:.0f} MiB")  # fmt: skip
    return rc


if __name__ == "__main__":
    sys.exit(main())
