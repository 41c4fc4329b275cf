"""A TCP delay line on loopback: every chunk is released `delay` seconds after it arrived, in each
direction, so a round trip costs 2 x delay while throughput is not throttled; a new connection
waits one round trip before data flows (as a TCP handshake over such a link would). Used in front of
lab nodes' sshd because many CI kernels lack the netem qdisc."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable


class DelayLines:
    """Relays 127.0.0.1:<port> -> target for each target, all on one asyncio loop in a thread."""

    def __init__(self, targets: list[tuple[str, int]], delay: float = 0.025) -> None:
        self.delay = delay
        self.ports: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        # The event loop holds its tasks weakly, and a relay's task is otherwise only reachable from the
        # streams it waits on: without a strong reference the garbage collector can destroy it mid-
        # relay ("Task was destroyed but it is pending"), and that connection then hangs.
        self._relays: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        for t in targets:
            server = asyncio.run_coroutine_threadsafe(self._listen(t), self._loop).result(10)
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    async def _listen(self, target: tuple[str, int]) -> asyncio.base_events.Server:
        return await asyncio.start_server(lambda r, w: self._handle(r, w, target), "127.0.0.1", 0, backlog=512)

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter, target: tuple[str, int]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)
        await asyncio.sleep(2 * self.delay)  # the handshake's round trip
        try:
            ur, uw = await asyncio.open_connection(*target)
        except OSError:
            cw.close()
            return
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                writer.write(data)
                with contextlib.suppress(OSError):
                    await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + self.delay, data))
        except OSError:
            pass
        queue.put_nowait((loop.time() + self.delay, b""))
        with contextlib.suppress(OSError):
            await sender

    def close(self) -> None:
        async def shutdown() -> None:
            for s in self._servers:
                s.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def measure_round_trip(make_lines: Callable[[list[tuple[str, int]]], DelayLines], samples: int = 10) -> list[float]:
    """Ping-pong over a delay line to a loopback echo server: the round trips, in seconds."""
    import socket
    import time

    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(1)

    def serve() -> None:
        conn, _ = echo.accept()
        while data := conn.recv(64):
            conn.sendall(data)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    lines = make_lines([echo.getsockname()])
    try:
        c = socket.create_connection(("127.0.0.1", lines.ports[0]))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        for _ in range(samples):
            t = time.perf_counter()
            c.sendall(b"ping")
            c.recv(64)
            out.append(time.perf_counter() - t)
        c.close()
        return out
    finally:
        lines.close()
        echo.close()
