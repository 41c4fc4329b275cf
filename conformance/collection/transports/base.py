"""The transport interface: run one read-only program, given on stdin, and return its output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The most a node's collection may return (issue 59): far above what a node holds (each file is read up to 4 MiB; a
# node with 5,000 processes and 384 CPUs returns 0.6 MB), so that no node can make the runner hold without limit.
OUTPUT_CAP = 64 * 1024 * 1024


def over_cap(where: str, got: int) -> str:
    return (f"{where}: the node's output passed {OUTPUT_CAP // (1024 * 1024)} MiB ({got} bytes when it was cut): the "
            "collection was stopped, nothing of it is judged (a file or listing far larger than any node's)")  # fmt: skip


@dataclass
class ExecResult:
    exit_status: int
    stdout: bytes
    stderr: bytes


class Transport(Protocol):
    """Runs `argv` on the node with `stdin` as its standard input. Raises TransportError."""

    description: str

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult: ...

    def close(self) -> None: ...
