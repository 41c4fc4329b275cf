"""Reading a child process's output line by line as it comes, without blocking the test."""

from __future__ import annotations

import queue
import subprocess
import threading


def lines_of(proc: subprocess.Popen) -> queue.Queue[str | None]:
    """Each line of the process's stdout as it is written, then None at its end (a reader thread)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def default_sigint() -> None:
    """preexec_fn for a child that a test interrupts with SIGINT: the default disposition. A shell that starts
    jobs in the background (`nohup pytest &`, CI runners) starts them with SIGINT ignored, which its children
    inherit; Python then installs no KeyboardInterrupt handler, and the test's SIGINT would be lost."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
