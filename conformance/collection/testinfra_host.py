"""testinfra's `host` for Python site checks, bound to the node through the suite's own transport:
the same SSH, OpenSSH or local connection, credentials, host-key verification and timeouts as the
collection. Every command is one more remote execution, counted in the node's collection record."""

from __future__ import annotations

import threading
from typing import Any

import testinfra.backend.base
import testinfra.host

from conformance.collection.transports.base import Transport
from conformance.errors import TransportError


class SuiteBackend(testinfra.backend.base.BaseBackend):
    """A testinfra backend that runs each command with `sh -c` over a conformance transport."""

    NAME = "conformance"

    def __init__(self, hostname: str, transport: Transport, timeout: float, **kwargs: Any) -> None:
        super().__init__(hostname, **kwargs)
        self.transport = transport
        self.timeout = timeout
        self.commands = 0
        self._lock = threading.Lock()

    def run(self, command: str, *args: str, **kwargs: Any) -> testinfra.backend.base.CommandResult:
        cmd = self.get_command(command, *args)
        with self._lock:  # one command at a time on the connection
            self.commands += 1
            next_command = getattr(self.transport, "next_command", None)
            if next_command is not None:
                next_command()
            try:
                r = self.transport.run(["sh", "-c", cmd], b"", self.timeout)
            except TransportError as e:
                raise TransportError(f"host.run({command!r}) on {self.hostname}: {e}", kind=e.kind) from None
        return self.result(r.exit_status, self.encode(cmd), r.stdout, r.stderr)


def host_over(hostname: str, transport: Transport, timeout: float) -> testinfra.host.Host:
    backend = SuiteBackend(hostname, transport, timeout)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host
