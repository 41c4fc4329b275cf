"""The local transport: the suite runs on the node itself (optionally with the host root at /host)."""

from __future__ import annotations

import subprocess

from conformance.collection.transports.base import ExecResult
from conformance.errors import TransportError


class LocalTransport:
    def __init__(self, host_root: str = "") -> None:
        self.host_root = host_root
        self.description = "local" + (f" (host root {host_root})" if host_root else "")

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult:
        try:
            p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            err = TransportError(f"local collection did not finish within {timeout:g} s", kind="timeout")
            err.partial = e.stdout or b""
            raise err from None
        except OSError as e:
            raise TransportError(f"cannot run {argv[0]} locally: {e}", kind="error") from e
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def close(self) -> None:
        pass
