"""The OTLP/gRPC port bound at start with grpcio loaded at its first connection
(watchdog/shell/receivers/lazy_grpc.py), driven by real grpcio clients against a real grpcio
server behind it on 127.0.0.1."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Coroutine

import grpc
import pytest

from watchdog.shell.receivers.lazy_grpc import LazyGrpc

METHOD = "/test.Echo/Call"


def echo_server(address: str) -> tuple[grpc.aio.Server, int]:
    """A gRPC server answering ``METHOD`` with the request's bytes reversed."""

    async def call(body: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return body[::-1]

    server = grpc.aio.server(handlers=(grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}),))
    return server, server.add_insecure_port(address)


class Builds:
    """``build`` for :class:`LazyGrpc` that counts its calls and can be made to fail."""

    def __init__(self, fail: int = 0) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self, address: str) -> tuple[grpc.aio.Server, int]:
        self.calls += 1
        if self.calls <= self.fail:
            raise RuntimeError("no grpcio here")
        return echo_server(address)


async def call(port: int, body: bytes) -> bytes:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer: bytes = await channel.unary_unary(METHOD)(body, timeout=10)
        return answer


def run(test: Callable[[], Coroutine[None, None, None]]) -> None:
    asyncio.run(test())


def test_the_port_is_held_from_the_start_and_the_server_made_at_the_first_connection() -> None:
    async def test() -> None:
        builds = Builds()
        lazy = LazyGrpc(builds)
        port = await lazy.listen("127.0.0.1", 0)
        with socket.socket() as other, pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        assert builds.calls == 0 and lazy.server is None
        first, second = await asyncio.gather(call(port, b"abc"), call(port, b"xyz"))
        assert (first, second) == (b"cba", b"zyx")
        assert await call(port, b"1" * 3_000_000) == b"1" * 3_000_000  # past every buffer
        assert builds.calls == 1 and lazy.server is not None
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
        assert builds.calls == 1 and lazy.server is None  # it failed: the log says why
        assert await call(port, b"again") == b"niaga"
        assert builds.calls == 2
        await lazy.stop(1.0)

    run(test)


def test_stop_lets_a_call_in_flight_finish_and_closes_joined_connections() -> None:
    async def test() -> None:
        lazy = LazyGrpc(Builds())
        port = await lazy.listen("127.0.0.1", 0)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            echo = channel.unary_unary(METHOD)
            assert await echo(b"ab", timeout=10) == b"ba"
            await asyncio.wait_for(lazy.stop(1.0), 5)
            assert not lazy._joins  # every joined socket closed
            with pytest.raises(grpc.aio.AioRpcError):
                await echo(b"cd", timeout=2)

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
