"""An aiohttp connection seen on its way in: :class:`Wrapped` hands every event of the
connection to aiohttp's request handler, for a subclass to look at (or keep) some of them
first (the control API's arrivals, :mod:`watchdog.shell.api.app`; the model endpoint's HTTP/1.1
door, :mod:`watchdog.shell.model.http1`). A request the HTTP parser refuses is said without its
bytes (:func:`parser_refusal`; :class:`QuietRunner` for the listeners with no error shape of
their own)."""

from __future__ import annotations

import asyncio
import re
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

MAX_REFUSAL_TEXT = 200  # characters of what is said of a request the parser refused
# Seconds a new connection has to send its first request's head, else it is closed: one that
# sends nothing held its file for aiohttp's keep-alive (an hour), and enough of them took every
# file the listeners accept with (a client sends its request as soon as it has connected).
FIRST_REQUEST_TIMEOUT = 10.0


# aiohttp's words for an HTTP/2 connection preface (``PRI * HTTP/2.0``), and what they are
# said as: most likely an OTLP exporter set to gRPC, given the OTLP/HTTP port's address.
HTTP2_PREFACE = "Pause on PRI/Upgrade"
HTTP2_REFUSAL = ("an HTTP/2 connection (a gRPC client?) on an HTTP/1.1 port: OTLP/gRPC goes "
                 "to otlp_grpc_address (4317 by default)")

# Where the parser's words end and the bytes it quotes begin: a colon, or a quote that opens
# (at the start, after a space, or as Python's b'...'), not an apostrophe inside a word ("can't").
_QUOTE = re.compile(r"""[:]|(?:^|(?<=\s))b?['"]""")


def parser_refusal(error: BaseException | None) -> str:
    """What aiohttp's HTTP parser refused, said without the request's bytes: its message quotes
    the line it stopped at (a header past 8,190 bytes, a control character in one), which may
    be an `Authorization` with its key or a URL with a token in its query; the words before the
    quote say what was wrong."""
    said = (getattr(error, "message", "") or "").split("\n", 1)[0]
    if said.startswith(HTTP2_PREFACE):
        return HTTP2_REFUSAL
    said = _QUOTE.split(said, maxsplit=1)[0].strip()[:MAX_REFUSAL_TEXT]
    return said or (type(error).__name__ if error is not None else "malformed HTTP request")


def close_if_silent(handler: RequestHandler, bound: float | None = None) -> None:
    """``handler``'s connection closed past :data:`FIRST_REQUEST_TIMEOUT` (or ``bound``, if
    shorter) with no request head."""
    seconds = FIRST_REQUEST_TIMEOUT if bound is None else min(FIRST_REQUEST_TIMEOUT, bound)
    handler._loop.call_later(seconds, _silent, handler)


def _silent(handler: RequestHandler) -> None:
    if handler._request_count == 0 and handler.transport is not None:
        handler.force_close()


class QuietRefusals(RequestHandler):
    """aiohttp's connection handler, saying what its parser refused without the bytes, and
    closing a connection that sends no request (:func:`close_if_silent`; within
    ``first_request_bound`` seconds, if shorter)."""

    __slots__ = ()
    first_request_bound: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        close_if_silent(self, self.first_request_bound)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status < 500 and message is not None:
            message = parser_refusal(exc)
        return super().handle_error(request, status, exc, message)


class QuietRunner(web.AppRunner):
    """aiohttp's runner whose connections' handler is ``handler`` (aiohttp's, refusing a
    request it cannot parse without echoing its bytes; a subclass says more its own way), each
    connection's protocol made by ``wrap`` of it."""

    handler: type[RequestHandler] = QuietRefusals

    def wrap(self, handler: RequestHandler) -> asyncio.Protocol:
        return handler

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()  # aiohttp builds it (Application._make_handler)
        server.__class__ = _QuietServer
        cast(_QuietServer, server).runner = self
        return server


class _QuietServer(web.Server):
    runner: QuietRunner

    def __call__(self) -> Any:  # the protocol factory of every accepted connection
        handler = super().__call__()
        handler.__class__ = self.runner.handler
        return self.runner.wrap(handler)


class Wrapped(asyncio.Protocol):
    """A connection's protocol that passes every event to ``handler``."""

    __slots__ = ("handler",)

    def __init__(self, handler: asyncio.Protocol) -> None:
        self.handler = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()
