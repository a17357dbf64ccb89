"""The OTLP/gRPC port, bound at start; grpcio (some 11 MB and 7 threads) loaded at its first
connection.

:class:`LazyGrpc` listens on ``otlp_grpc_address`` from the start, so the port is held (and a
port in use refused) exactly when the other listeners are. The first connection loads grpcio
and starts two gRPC servers (:func:`watchdog.shell.receivers.otlp_grpc.create_server`, every
service installed in each): one on the public port itself, beside the listener (both sockets
have ``SO_REUSEPORT``; a second watchdog is still refused: its start-up probe binds without
it), after which the listener takes what it has accepted and closes, so later connections reach
grpcio directly; and one on a port of 127.0.0.1 that the system chooses, for the connections
the listener accepted: each is joined to one of its own, bytes passed on both ways as they come.
That server tells its clients to reconnect after ``JOINED_AGE`` seconds (an HTTP/2 GOAWAY,
which gRPC clients follow without failing a call), so a long-lived channel, such as an
exporter's, moves to the public server too. gRPC itself (HTTP/2, compression, limits, status
codes, keepalive) is grpcio's, as before: a client sees the same server; the first connection
waits for the load (some 0.1-0.3 s), once.

Where grpcio cannot bind beside the listener, the listener stays and every connection is joined
(the log says so). Back-pressure carries through a join: when one side's transport buffers past
its high-water mark, the other side stops reading until it drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("watchdog.otlp_grpc")

LOOPBACK = "127.0.0.1"
BACKLOG = 128
JOINED_AGE = 60.0  # seconds a joined connection lives before its server sends GOAWAY
JOINED_GRACE = 30.0  # seconds its calls in flight then get

# (address, grpcio options) -> the server (not started) bound to the address, and its port
Build = Callable[[str, Sequence[tuple[str, int]]], "tuple[grpc.aio.Server, int]"]


class _End(asyncio.Protocol):
    """One socket of a joined pair: what it reads is written to the other's transport (held
    until the other is there)."""

    def __init__(self, joins: set[_End]) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _End | None = None
        self._early: list[bytes] = []
        self._joins = joins
        self._ended = False  # this socket's peer sent its end (FIN)

    def join(self, other: _End) -> None:
        self.other, other.other = other, self
        for end in (self, other):  # what either read before the other was there
            assert end.other is not None and end.other.transport is not None
            for data in end._early:
                end.other.transport.write(data)
            end._early.clear()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._joins.add(self)

    def data_received(self, data: bytes) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)
        else:
            self._early.append(data)  # gRPC's first SETTINGS, before the client's end is made

    def eof_received(self) -> bool:
        self._ended = True
        other = self.other.transport if self.other is not None else None
        if other is None or other.is_closing() or not other.can_write_eof():
            return False
        if self.other is not None and self.other._ended:  # both ways are done: close both
            other.close()  # (what it still holds is written first)
            return False
        other.write_eof()
        return True  # half-closed: the other way may still carry the answer

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


class LazyGrpc:
    """The public gRPC port, and the gRPC servers ``build`` makes at its first connection."""

    def __init__(self, build: Build) -> None:
        self._build = build
        self._sockets: list[socket.socket] = []
        self._public = ""
        self._joins: set[_End] = set()
        self._starting: asyncio.Task[int] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.servers: list[grpc.aio.Server] = []

    async def listen(self, host: str, port: int) -> int:
        """Bind ``host:port`` (every address it resolves to that binds, as grpcio does) and
        listen; the bound port. Raises OSError when none binds."""
        loop = asyncio.get_running_loop()
        self._sockets = bind(host, port)
        for sock in self._sockets:
            sock.listen(BACKLOG)
            loop.add_reader(sock.fileno(), self._accept, sock)
        bound = int(self._sockets[0].getsockname()[1])
        self._public = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        return bound

    def _accept(self, sock: socket.socket) -> None:
        """Take every connection waiting on ``sock``, each to be joined."""
        while True:
            try:
                conn, _peer = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: the client retries
                log.warning("OTLP/gRPC: accepting a connection failed: %s", exc)
                return
            conn.setblocking(False)
            task = asyncio.get_running_loop().create_task(self._join(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _started(self) -> int:
        """The joining server's port; the servers are made and started at the first call."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> int:
        try:
            public, _port = self._build(self._public, (("grpc.so_reuseport", 1),))
        except RuntimeError as exc:  # it cannot bind beside the listener: all is joined
            log.info("OTLP/gRPC: grpcio cannot listen beside the port's listener (%s); every "
                     "connection is passed on to it", exc)
            joined, port = self._build(f"{LOOPBACK}:0", ())
            await joined.start()
            self.servers.append(joined)
            return port
        joined, port = self._build(f"{LOOPBACK}:0", (
            ("grpc.max_connection_age_ms", int(JOINED_AGE * 1000)),
            ("grpc.max_connection_age_grace_ms", int(JOINED_GRACE * 1000))))
        await joined.start()
        self.servers.append(joined)
        await public.start()
        self.servers.append(public)
        self._close_listener()  # what it accepted is joined; grpcio takes the rest
        log.info("OTLP/gRPC: grpcio loaded at the first connection")
        return port

    def _close_listener(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())
            self._accept(sock)
            sock.close()
        self._sockets = []

    async def _join(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            port = await self._started()
            _transport, inner = await loop.create_connection(lambda: _End(self._joins),
                                                             LOOPBACK, port)
        except Exception:  # the client sees its connection closed; the log says why
            log.exception("OTLP/gRPC: the gRPC server could not take a connection")
            if not self.servers:  # the next connection tries again
                self._starting = None
            conn.close()
            return
        try:
            _transport, outer = await loop.connect_accepted_socket(lambda: _End(self._joins),
                                                                   conn)
        except OSError:  # the client left meanwhile
            conn.close()
            _transport.close()
            return
        inner.join(outer)

    async def stop(self, grace: float) -> None:
        """No new connection; gRPC's in-flight calls get ``grace`` seconds; then all close."""
        for sock in self._sockets:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._sockets = []
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await self._starting
        await asyncio.gather(*(server.stop(grace) for server in self.servers))
        for task in list(self._pending):
            task.cancel()
        for end in list(self._joins):
            if end.transport is not None:
                end.transport.close()


def listen_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo`` for a TCP listener (``AI_PASSIVE``). A str host is encoded with
    the IDNA codec there; an ASCII host is passed as its ASCII bytes, which is what that codec
    gives it, so the codec and its tables (``encodings.idna``, ``stringprep``: 0.1 MB) load only
    for a host that is not ASCII. (A name the codec refuses, a label empty or over 63
    characters, is then refused by the resolver: an OSError, as an unknown name is.)"""
    name: str | bytes = host.encode("ascii") if host.isascii() else host
    return socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)


def bind(host: str, port: int) -> list[socket.socket]:
    """Unlistening sockets, ``SO_REUSEPORT`` set (grpcio binds beside them later), for every
    address ``host`` resolves to that binds (a port 0 bound first is used for the rest), each
    as grpcio binds it: an IPv4 address on a dual-stack IPv6 socket where the system has IPv6.
    OSError when none binds."""
    infos = listen_addresses(host, port)
    sockets: list[socket.socket] = []
    failure: OSError | None = None
    for family, kind, proto, _name, address in infos:
        if sockets and port == 0:
            address = (address[0], sockets[0].getsockname()[1], *address[2:])
        try:
            sockets.append(_bound(family, kind, proto, address))
        except OSError as exc:
            failure = failure or exc
    if not sockets:
        raise failure or OSError(f"{host!r} resolves to no address")
    return sockets


def _bound(family: int, kind: int, proto: int, address: tuple[object, ...]) -> socket.socket:
    if family == socket.AF_INET and socket.has_ipv6:  # as grpcio: v4-mapped, dual-stack
        mapped = "::" if address[0] == "0.0.0.0" else f"::ffff:{address[0]}"
        with contextlib.suppress(OSError):
            return _bound(socket.AF_INET6, kind, proto, (mapped, address[1]))
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:  # "[::]" takes IPv4 too, as grpcio's does
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
