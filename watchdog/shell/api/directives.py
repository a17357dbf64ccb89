"""The directive routes: long-poll, Server-Sent Events and acks (DESIGN §6, §7).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from watchdog.core.directives.model import Directive
from watchdog.core.shown import shown
from watchdog.shell import logs
from watchdog.shell.api.http import (
    MAX_SEQ,
    _float_param,
    _int_param,
    _is_int_in,
    _json_object,
    ignored_fields,
    json_response,
)
from watchdog.shell.directives.hub import StreamEnded, SubscriberOverflow, Subscription
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.errors import BadRequest

MAX_POLL_WAIT = 60.0  # seconds a long-poll may hold (proxies commonly cut idle requests at 60 s+)
MAX_POLL_BATCH = 100  # directives per long-poll answer; more come on the next poll
SSE_WRITE_TIMEOUT = 10.0  # seconds a stream write may wait for a client that does not read
SSE_RETRY_MS = 1000  # the reconnection delay EventSource clients are told to use
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}  # the last: nginx must not buffer the stream

class DirectiveRoutes:
    """Long-poll, Server-Sent Events and acks (DESIGN §6, §7).

    A run that is not known (yet) is not an error here: an agent may start polling before its
    first span has reached the watchdog, so the request waits like any other.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.hub = outbox.hub
        self.metrics = outbox.metrics

    async def poll(self, request: web.Request) -> web.Response:
        """``GET /v1/runs/{id}/directives?after=SEQ&wait=S``: directives with ``seq > after``,
        waiting up to ``wait`` seconds for the first one. ``last_seq`` is the ``after`` to send
        next time."""
        run_id = request.match_info["id"]
        after = _int_param(request.query.get("after"), "after", 0, 0, MAX_SEQ)
        wait = _float_param(request.query.get("wait"), "wait", 0.0, 0.0, MAX_POLL_WAIT)
        limit = _int_param(request.query.get("limit"), "limit", MAX_POLL_BATCH, 1,
                           MAX_POLL_BATCH)
        self.outbox.client_has_seen(run_id, after)
        directives = await self.hub.wait_for_run(run_id, after, wait, limit)
        if directives:
            last_seq = directives[-1].seq
        else:  # never past a directive not yet seen; back to the store's if the client is ahead
            last_seq = min(after, await self.hub.latest_seq(run_id))
        response = json_response({"directives": [d.to_json() for d in directives],
                                  "last_seq": last_seq})
        if not directives:
            return response
        # Counted as delivered only once written to a client still connected: one that left
        # while the poll waited gets nothing (it polls again from its own last_seq).
        if _gone(request):
            return response
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:  # it hung up as the answer went out
            return response
        for directive in directives:
            self.metrics.directive_delivered(directive.action, "longpoll", "sent")
            logs.directive_sent(directive, "longpoll")
        return response

    async def run_stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/runs/{id}/directives/stream``: SSE, ``id:`` = seq; from the run's first
        directive unless ``Last-Event-ID`` or ``?after=`` say where to resume."""
        after = self._resume_point(request) or 0
        self.outbox.client_has_seen(request.match_info["id"], after)
        return await self._stream(request, request.match_info["id"], after)

    async def all_stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/directives/stream``: SSE for every run, ``id:`` = global seq; live only
        unless ``Last-Event-ID`` or ``?after=`` (``after=0``: all that is stored) say more."""
        after = self._resume_point(request)
        if after is None:
            after = await self.hub.latest_global_seq()
        return await self._stream(request, None, after)

    async def ack(self, request: web.Request) -> web.Response:
        """``POST /v1/runs/{id}/ack {"seq": n}``: the agent has applied directives up to ``n``
        — its process put them into a model request it made, or stopped the run at them (what
        the client SDK sends, with every adapter). A directive's ``acked`` is ``seq <= n``."""
        body = await _json_object(request)
        seq = parse_ack(body)
        run_id = request.match_info["id"]
        acked = await self.outbox.ack(run_id, seq)
        logs.event("directive_acked", run=run_id, seq=seq, acked_seq=acked)
        answer: dict[str, Any] = {"run_id": run_id, "acked_seq": acked}
        if ignored := ignored_fields(body, ACK_FIELDS):
            answer["ignored"] = ignored
        return json_response(answer)

    @staticmethod
    def _resume_point(request: web.Request) -> int | None:
        last_event_id = request.headers.get("Last-Event-ID", "").strip()
        if last_event_id:  # a reconnecting EventSource: it wins over the URL's ?after=
            return _int_param(last_event_id, "Last-Event-ID", 0, 0, MAX_SEQ)
        raw = request.query.get("after")
        return None if raw in (None, "") else _int_param(raw, "after", 0, 0, MAX_SEQ)

    async def _stream(self, request: web.Request, run_id: str | None, after: int
                      ) -> web.StreamResponse:
        subscription = self.hub.subscribe(run_id, after)  # may refuse: 503 before any byte
        response = web.StreamResponse(headers=SSE_HEADERS)
        try:
            await response.prepare(request)
            await self._write(request, response, f"retry: {SSE_RETRY_MS}\n\n".encode())
            await self._pump(request, response, subscription)
        except SubscriberOverflow:  # counted by the hub; the client resumes from Last-Event-ID
            await self._hang_up(request, response)
        except (StreamEnded, ConnectionError, TimeoutError):
            pass  # shutdown, or the client went away or stopped reading
        finally:
            subscription.close()
        return response

    async def _pump(self, request: web.Request, response: web.StreamResponse,
                    subscription: Subscription) -> None:
        heartbeat = self.hub.heartbeat
        while True:
            directive = await subscription.get(timeout=heartbeat)
            if directive is None:
                await self._write(request, response, b": keep-alive\n\n")
                continue
            await self._write(request, response, _sse_event(subscription.number(directive),
                                                             directive))
            self.metrics.directive_delivered(directive.action, "sse", "sent")
            logs.directive_sent(directive, "sse")

    @staticmethod
    async def _hang_up(request: web.Request, response: web.StreamResponse) -> None:
        """End the stream cleanly if the client still reads, else drop the connection."""
        try:
            await asyncio.wait_for(response.write_eof(), SSE_WRITE_TIMEOUT)
        except (TimeoutError, ConnectionError):
            if request.transport is not None:
                request.transport.abort()

    @staticmethod
    async def _write(request: web.Request, response: web.StreamResponse, data: bytes) -> None:
        try:
            await asyncio.wait_for(response.write(data), SSE_WRITE_TIMEOUT)
        except TimeoutError:
            if request.transport is not None:  # a client that stopped reading: hang up
                request.transport.abort()
            raise


def _gone(request: web.Request) -> bool:
    """Whether the client of ``request`` has hung up (its connection lost or closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()


ACK_FIELDS = frozenset({"seq"})  # any other field of an ack's body is ignored and named


def parse_ack(body: dict[str, Any]) -> int:
    """The ``seq`` of a ``POST /v1/runs/{id}/ack`` body; raises :class:`BadRequest`."""
    if "seq" not in body:
        raise BadRequest("seq is missing: send {\"seq\": n}, n the seq of the last directive "
                         "the agent has seen (an integer from 0 to " + str(MAX_SEQ) + ")")
    seq = body.get("seq")
    if not isinstance(seq, int) or not _is_int_in(seq, 0, MAX_SEQ):
        raise BadRequest(f"seq={shown(seq)} is not allowed: expected an integer from 0 to "
                         f"{MAX_SEQ} (the seq of the last directive the agent has seen)")
    return seq


def _sse_event(event_id: int, directive: Directive) -> bytes:
    data = json.dumps(directive.to_json(), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return f"id: {event_id}\nevent: directive\ndata: {data}\n\n".encode()
