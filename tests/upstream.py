"""A real OTLP/HTTP receiver for the pass-through tests: an aiohttp server on 127.0.0.1 in its
own thread and event loop that records every request it gets, as a Collector's would arrive.

It can be taken down and brought back on the same port (``stop``/``start``), told what to
answer next (``answer``), or made to hold every request unanswered until ``release``.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field

from aiohttp import web

from tests.ports import free_port


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes  # as sent on the wire
    at: float  # monotonic seconds

    @property
    def payload(self) -> bytes:
        """The body without its content coding."""
        coding = self.headers.get("Content-Encoding", "")
        if coding == "gzip":
            return gzip.decompress(self.body)
        if coding == "deflate":
            return zlib.decompress(self.body)
        return self.body


@dataclass
class Upstream:
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list, repr=False)  # in arrival order
    answered: int = 0  # requests answered (any status)

    def __post_init__(self) -> None:
        self._answers: deque[tuple[int, dict[str, str]]] = deque()
        self._held: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-upstream",
                                        daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [request.path for request in self.received]

    def answer(self, status: int, headers: dict[str, str] | None = None) -> None:
        """The next request (in order of arrival) gets ``status``; later ones 200."""
        self._answers.append((status, headers or {}))

    def hold(self) -> None:
        """Record requests as they arrive but answer none until :meth:`release`."""
        self._call(self._hold)

    def release(self) -> None:
        self._call(self._release)

    def start(self) -> Upstream:
        self._call(self._start)
        return self

    def stop(self) -> None:
        self._call(self._stop)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, fn: object) -> None:
        async def run() -> None:
            result = fn()  # type: ignore[operator]
            if asyncio.iscoroutine(result):
                await result

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    async def _hold(self) -> None:
        self._held = asyncio.Event()

    async def _release(self) -> None:
        if self._held is not None:
            self._held.set()
            self._held = None

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{path:.*}", self._handle)
        # auto_decompress=False: bodies are kept as sent, so the test sees the content coding.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=0.1, auto_decompress=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _stop(self) -> None:
        await self._release()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.received.append(Received("/" + request.match_info["path"], dict(request.headers),
                                      body, time.monotonic()))
        if self._held is not None:
            await self._held.wait()
        status, headers = self._answers.popleft() if self._answers else (200, {})
        self.answered += 1
        return web.Response(status=status, headers=headers, body=b"",
                            content_type="application/x-protobuf")

