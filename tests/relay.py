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


class HoldingRelay:
    """Forwards 127.0.0.1:<port> to `target` until the client has sent `hold_after` bytes (0: at once),
    then forwards nothing more in either direction until release(): a network path that stalls at a
    known point of the conversation, without depending on how fast this machine is."""

    def __init__(self, target: tuple[str, int], hold_after: int) -> None:
        self.target = target
        self.hold_after = hold_after
        self.sent_by_client = 0
        self.holding = threading.Event()  # set once the relay holds: the stall has begun
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        if hold_after == 0:
            self.holding.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
                self._sockets += [client, upstream]
                threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
                threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        with contextlib.suppress(OSError):
            while True:
                if self.holding.is_set():
                    self._released.wait()
                data = src.recv(4096)
                if not data:
                    break
                if from_client:
                    with self._lock:
                        room = self.hold_after - self.sent_by_client
                        self.sent_by_client += len(data)
                    if 0 <= room < len(data) and not self.holding.is_set():
                        dst.sendall(data[:room])
                        self.holding.set()
                        self._released.wait()
                        data = data[room:]
                elif self.holding.is_set():
                    self._released.wait()
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        self.server.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it; close() alone would not
            s.close()
