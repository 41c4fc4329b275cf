"""A TCP relay on loopback in front of a lab node's sshd, to inject faults into a live session."""

from __future__ import annotations

import contextlib
import socket
import threading


class ResettingRelay:
    """Forwards 127.0.0.1:<port> to `target`; once `limit` bytes have come back from the server,
    it cuts both connections, as a network fault in the middle of a collection."""

    def __init__(self, target: tuple[str, int], limit: int, faulty: int | None = None) -> None:
        self.target = target
        self.limit = limit
        self.faulty = faulty  # cut only the first N connections (None: all)
        self.connections = 0
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.resets = 0
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(self.target, timeout=5)
            self.connections += 1
            limit = self.limit if self.faulty is None or self.connections <= self.faulty else None
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(4096)
                if not data:
                    break
                if limit is not None and sent + len(data) > limit:
                    self.resets += 1
                    for s in (src, dst):
                        # RST where the kernel can send it; shutdown wakes the other direction's recv
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                        with contextlib.suppress(OSError):
                            s.shutdown(socket.SHUT_RDWR)
                        s.close()
                    return
                dst.sendall(data)
                sent += len(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self.server.close()
