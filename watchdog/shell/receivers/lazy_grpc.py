"""The OTLP/gRPC port, bound at start; grpcio (some 11 MB and 7 threads) loaded at its first
connection.

:class:`LazyGrpc` listens on ``otlp_grpc_address`` from the start, so the port is held (and a
port in use refused) exactly when the other listeners are. The first connection starts the gRPC
server (:func:`watchdog.shell.receivers.otlp_grpc.create_server`, with every service installed)
on a port of 127.0.0.1 that the system chooses; each connection accepted on the public port is
joined to one of its own to that server, bytes passed on both ways as they come. gRPC itself
(HTTP/2, compression, limits, status codes, keepalive) is grpcio's, as before: a client sees the
same server; the first connection waits for the load (some 0.1-0.3 s), once.

Back-pressure carries through: when one side's transport buffers past its high-water mark, the
other side stops reading until it drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("watchdog.otlp_grpc")

LOOPBACK = "127.0.0.1"


class _End(asyncio.Protocol):
    """One socket of a joined pair: what it reads is written to the other's transport."""

    def __init__(self, joins: set[_End]) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _End | None = None
        self._joins = joins

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._joins.add(self)

    def data_received(self, data: bytes) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)

    def eof_received(self) -> bool:
        other = self.other.transport if self.other is not None else None
        if other is not None and other.can_write_eof() and not other.is_closing():
            other.write_eof()
            return True  # half-closed: the other way may still carry the answer
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._joins.discard(self)
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()


class _Accepted(_End):
    """A connection to the public port: it reads nothing until it is joined to gRPC's."""

    def __init__(self, joins: set[_End],
                 join: Callable[[_Accepted], Coroutine[None, None, None]]) -> None:
        super().__init__(joins)
        self._join = join
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self._task = asyncio.get_running_loop().create_task(self._join(self))


class LazyGrpc:
    """The public gRPC port; ``build(address)`` makes the gRPC server (not started) bound to
    ``address`` and returns it with its port, at the first connection."""

    def __init__(self, build: Callable[[str], tuple[grpc.aio.Server, int]]) -> None:
        self._build = build
        self._listeners: list[asyncio.Server] = []
        self._joins: set[_End] = set()
        self._starting: asyncio.Task[int] | None = None
        self.server: grpc.aio.Server | None = None

    async def listen(self, host: str, port: int) -> int:
        """Bind ``host:port`` (every address it resolves to that binds, as grpcio does) and
        listen; the bound port. Raises OSError when none binds."""
        loop = asyncio.get_running_loop()
        for sock in bind(host, port):
            self._listeners.append(await loop.create_server(
                lambda: _Accepted(self._joins, self._joined), sock=sock))
        return int(self._listeners[0].sockets[0].getsockname()[1])

    async def _started(self) -> int:
        """The private port of the gRPC server, started at the first call."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> int:
        server, port = self._build(f"{LOOPBACK}:0")
        await server.start()
        self.server = server
        log.info("OTLP/gRPC: grpcio loaded at the first connection")
        return port

    async def _joined(self, accepted: _Accepted) -> None:
        loop = asyncio.get_running_loop()
        try:
            port = await self._started()
            joined, end = await loop.create_connection(lambda: _End(self._joins),
                                                           LOOPBACK, port)
        except Exception:  # the client sees its connection closed; the log says why
            log.exception("OTLP/gRPC: the gRPC server could not take a connection")
            if self.server is None:  # the next connection tries again
                self._starting = None
            if accepted.transport is not None:
                accepted.transport.close()
            return
        if accepted.transport is None or accepted.transport.is_closing():  # the client left
            joined.close()
            return
        end.other, accepted.other = accepted, end
        accepted.transport.resume_reading()

    async def stop(self, grace: float) -> None:
        """No new connection; gRPC's in-flight calls get ``grace`` seconds; then all close."""
        for listener in self._listeners:
            listener.close()
        for listener in self._listeners:
            await listener.wait_closed()
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await self._starting
        if self.server is not None:
            await self.server.stop(grace)
        for end in list(self._joins):
            if end.transport is not None:
                end.transport.close()


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening-ready sockets for every address ``host`` resolves to that binds (a port 0
    bound first is used for the rest); OSError when none does."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    failure: OSError | None = None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # "[::]" takes IPv4 too, as grpcio's does
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            if sockets and port == 0:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
        except OSError as exc:
            sock.close()
            failure = failure or exc
            continue
        sock.setblocking(False)
        sockets.append(sock)
    if not sockets:
        raise failure or OSError(f"{host!r} resolves to no address")
    return sockets
