"""The transport interface: run one read-only program, given on stdin, and return its output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
