"""An aiohttp connection seen on its way in: :class:`Wrapped` hands every event of the
connection to aiohttp's request handler, for a subclass to look at (or keep) some of them
first (the control API's arrivals, :mod:`watchdog.shell.api.app`; the model endpoint's HTTP/1.1
door, :mod:`watchdog.shell.model.http1`)."""

from __future__ import annotations

import asyncio


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
