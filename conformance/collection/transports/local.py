"""The local transport: the suite runs on the node itself (optionally with the host root at /host)."""

from __future__ import annotations

from conformance.collection.transports.base import ExecResult
from conformance.collection.transports.child import Child
from conformance.errors import TransportError


class LocalTransport:
    def __init__(self, host_root: str = "") -> None:
        self.host_root = host_root
        self.description = "local" + (f" (host root {host_root})" if host_root else "")
        self._child = Child(self.description, lambda t: f"local collection did not finish within {t:g} s")

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult:
        try:
            status, out, err = self._child.run(argv, stdin, timeout)
        except OSError as e:
            raise TransportError(f"cannot run {argv[0]} locally: {e}", kind="error") from e
        return ExecResult(status, out, err)

    def abort(self) -> None:
        """Kill the program under way (the run was interrupted)."""
        self._child.abort()

    def close(self) -> None:
        pass
