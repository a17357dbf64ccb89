"""The OTLP/gRPC port bound at start with grpcio loaded at its first connection
(watchdog/shell/receivers/lazy_grpc.py), driven by real grpcio clients against a real grpcio
server behind it on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence

import grpc
import pytest

from tests.harness import eventually
from watchdog.shell.receivers import lazy_grpc
from watchdog.shell.receivers.lazy_grpc import LazyGrpc, _End

METHOD = "/test.Echo/Call"


def echo_server(address: str, options: Sequence[tuple[str, int]] = ()
                ) -> tuple[grpc.aio.Server, int]:
    """A gRPC server answering ``METHOD`` with the request's bytes reversed."""

    async def call(body: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return body[::-1]

    server = grpc.aio.server(handlers=(grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}),),
        options=tuple({"grpc.so_reuseport": 0, **dict(options)}.items()))
    return server, server.add_insecure_port(address)


class Builds:
    """``build`` for :class:`LazyGrpc` that counts its calls and can be made to fail."""

    def __init__(self, fail: int = 0, beside: bool = True) -> None:
        self.calls = 0
        self.fail = fail
        self.beside = beside  # grpcio can bind beside the listener

    def __call__(self, address: str, options: Sequence[tuple[str, int]]
                 ) -> tuple[grpc.aio.Server, int]:
        self.calls += 1
        if self.calls <= self.fail:
            raise ImportError("no grpcio here")
        if not self.beside and not address.startswith("127.0.0.1:0"):
            raise RuntimeError(f"Failed to bind to address {address}")
        return echo_server(address, options)


def channel_to(port: int) -> grpc.aio.Channel:
    """A channel with connections of its own (grpcio shares them between a process's channels
    by default, and keeps them past a channel's close)."""
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                     options=(("grpc.use_local_subchannel_pool", 1),))


async def call(port: int, body: bytes) -> bytes:
    async with channel_to(port) as channel:
        answer: bytes = await channel.unary_unary(METHOD)(body, timeout=10)
        return answer


def run(test: Callable[[], Coroutine[None, None, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))



@contextlib.asynccontextmanager
async def first_call() -> AsyncIterator[tuple[LazyGrpc, grpc.aio.UnaryUnaryMultiCallable]]:
    """A lazy gRPC port on 127.0.0.1 and a channel to it whose first call went through."""
    lazy = LazyGrpc(Builds())
    port = await lazy.listen("127.0.0.1", 0)
    async with channel_to(port) as channel:
        echo = channel.unary_unary(METHOD)
        assert await echo(b"ab", timeout=10) == b"ba"
        yield lazy, echo

async def stopped(lazy: LazyGrpc, echo: grpc.aio.UnaryUnaryMultiCallable) -> None:
    """``lazy`` stopped: every joined socket closed, and a call on the channel fails."""
    await asyncio.wait_for(lazy.stop(1.0), 5)
    assert not lazy._joins
    with pytest.raises(grpc.aio.AioRpcError):
        await echo(b"cd", timeout=2)



def test_the_port_is_held_from_the_start_and_the_server_made_at_the_first_connection() -> None:
    async def test() -> None:
        builds = Builds()
        lazy = LazyGrpc(builds)
        port = await lazy.listen("127.0.0.1", 0)
        with socket.socket() as other, pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        assert builds.calls == 0 and not lazy.servers
        first, second = await asyncio.gather(call(port, b"abc"), call(port, b"xyz"))
        assert (first, second) == (b"cba", b"zyx")
        assert builds.calls == 2 and len(lazy.servers) == 2  # beside the listener, and joining
        assert not lazy._sockets  # the listener handed the port over
        joined = set(lazy._joins)  # those two channels' connections
        async with channel_to(port) as channel:
            big = b"1" * 3_000_000
            assert await channel.unary_unary(METHOD)(big, timeout=10) == big
            assert lazy._joins <= joined  # grpcio took this connection itself
        with socket.socket() as other, pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))  # still no one else's
        assert refused.value.errno == errno.EADDRINUSE
        await lazy.stop(1.0)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await call(port, b"late")
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE

    run(test)


def test_a_client_that_leaves_at_once_costs_nothing_and_a_failed_load_is_tried_again() -> None:
    async def test() -> None:
        builds = Builds(fail=1)
        lazy = LazyGrpc(builds)
        port = await lazy.listen("127.0.0.1", 0)
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()  # before anything is joined
        await writer.wait_closed()
        for _ in range(100):
            if builds.calls:
                break
            await asyncio.sleep(0.01)
        assert builds.calls == 1 and not lazy.servers  # it failed: the log says why
        assert await call(port, b"again") == b"niaga"
        assert builds.calls == 3
        await lazy.stop(1.0)

    run(test)


def test_a_joined_channel_moves_to_grpcio_after_its_age_without_a_failed_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy_grpc, "JOINED_AGE", 0.5)

    async def test() -> None:
        async with first_call() as (lazy, echo):
            assert len(lazy._joins) == 2  # the first connection: joined
            # calls all along, past the age (when the client leaves the joined connection
            # depends on the machine's load): none fails, and the channel reconnects, to
            # grpcio itself
            deadline = asyncio.get_running_loop().time() + 20
            index = 0
            while lazy._joins and asyncio.get_running_loop().time() < deadline:
                assert await echo(b"x%d" % index, timeout=10) == (b"x%d" % index)[::-1]
                index += 1
                await asyncio.sleep(0.05)
            assert index >= 1 and not lazy._joins, (index, lazy._joins)
            await stopped(lazy, echo)

    run(test)


@contextlib.asynccontextmanager
async def joined(server: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                  Coroutine[None, None, None]]
                 ) -> AsyncIterator[tuple[set[_End], asyncio.StreamReader, asyncio.StreamWriter]]:
    """A client's connection joined, as :class:`LazyGrpc` joins one, to a server that runs
    ``server``: the joined sockets, and the client's reader and writer."""
    loop = asyncio.get_running_loop()
    inner_server = await asyncio.start_server(server, "127.0.0.1", 0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        client = asyncio.ensure_future(asyncio.open_connection(*listener.getsockname()))
        conn, _peer = await loop.sock_accept(listener)
    joins: set[_End] = set()
    _transport, inner = await loop.create_connection(
        lambda: _End(joins), "127.0.0.1", inner_server.sockets[0].getsockname()[1])
    _transport, outer = await loop.connect_accepted_socket(lambda: _End(joins), conn)
    inner.join(outer)
    reader, writer = await client
    try:
        yield joins, reader, writer
    finally:
        writer.close()
        inner_server.close()


@pytest.mark.parametrize("first", ["client", "server"])
def test_a_joined_connection_ended_both_ways_frees_both_sockets(first: str) -> None:
    """Whichever side ends first (the other answering before it ends too), what is written
    arrives and both joined sockets close (no socket is left half-closed both ways)."""
    async def test() -> None:
        async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if first == "client":
                asked = await reader.read()  # to the client's end
                writer.write(b"answer to " + asked)
            else:
                writer.write(b"bye")
                writer.write_eof()
                await reader.read()
            writer.close()

        async with joined(server) as (joins, reader, writer):
            assert len(joins) == 2
            if first == "client":
                writer.write(b"ask")
                writer.write_eof()
                assert await reader.read() == b"answer to ask"
            else:
                assert await reader.read() == b"bye"
                writer.write_eof()
            await eventually(lambda: not joins, "both joined sockets closed", timeout=5)

    run(test)


def test_stop_closes_joined_connections() -> None:
    async def test() -> None:
        async with first_call() as (lazy, echo):
            assert lazy._joins
            await stopped(lazy, echo)

    run(test)


def test_an_address_nothing_binds_is_an_os_error() -> None:
    async def test() -> None:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            with pytest.raises(OSError) as failed:
                await LazyGrpc(Builds()).listen("127.0.0.1", holder.getsockname()[1])
            assert failed.value.errno == errno.EADDRINUSE

    run(test)


def test_where_grpcio_cannot_bind_beside_the_listener_every_connection_is_joined() -> None:
    async def test() -> None:
        lazy = LazyGrpc(Builds(beside=False))
        port = await lazy.listen("127.0.0.1", 0)
        async with channel_to(port) as channel:
            assert await channel.unary_unary(METHOD)(b"ab", timeout=10) == b"ba"
            assert len(lazy.servers) == 1 and lazy._sockets and len(lazy._joins) == 2
        assert await call(port, b"cd") == b"dc"  # the listener still takes connections
        await lazy.stop(1.0)

    run(test)
