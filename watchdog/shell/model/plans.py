"""What the model endpoint makes of a request (DESIGN §12): an answer of its own, or a plan to
send it upstream, with the exchange its response is read against; and a call to book."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from multidict import CIMultiDict

from watchdog.core.model.book import EndpointRun, ModelBook
from watchdog.core.model.failure import MAX_REFUSAL_READ
from watchdog.core.model.steer import Act, Turn, kept_calls
from watchdog.core.model.wire import ToolCall, Wire
from watchdog.core.spans.codings import inflate
from watchdog.core.spans.record import SpanRecord

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a whole (not streamed) response read to observe it
# an upstream that refuses a request's stream_options (a server that takes no unknown field)
# answers 400 or 422 with an error of its own naming it, with its length said
REFUSED_USAGE_STATUSES = (400, 422)

JSON = {"Content-Type": "application/json"}


class Held:
    """The bytes a request holds of a budget: its body's (``model_max_inflight_bytes``), its
    whole response's (``model_max_held_response_bytes``)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class Answer(NamedTuple):
    """An answer the endpoint gives itself."""

    status: int
    body: bytes
    headers: dict[str, str]


class Booked(NamedTuple):
    """A model call that has ended, to book: its record, its run, the tool calls handed."""

    record: SpanRecord
    key: str
    handed: int
    since: float | None = None  # when its request arrived (the service's clock)


class Plan:
    """A request to send upstream, as it goes; with an exchange, a call of a run to observe
    and settle when its response has ended."""

    __slots__ = ("api", "body", "exchange", "headers", "method", "url")

    def __init__(self, method: str, api: str, url: str, headers: CIMultiDict[str],
                 body: bytes, exchange: Exchange | None) -> None:
        self.method, self.api, self.url, self.headers = method, api, url, headers
        self.body, self.exchange = body, exchange

    @property
    def fast(self) -> bool:
        """Its response passes as it comes (its tool calls past the bound left out), read only
        when it has ended: no final answer to hold (the compiled relay's path)."""
        exchange = self.exchange
        return exchange is None or exchange.turn.act is not Act.FINAL

    @property
    def unasked(self) -> bytes | None:
        """The request as it goes without asking for its stream's usage, when it asks on the
        client's behalf (:meth:`Exchange.hide_usage`)."""
        exchange = self.exchange
        return exchange.unasked if exchange is not None else None

    @property
    def echo(self) -> str | None:
        """The instructions its client sent, to set its response's echo back to (None: the
        echo is the client's own)."""
        exchange = self.exchange
        return exchange.echo if exchange is not None else None

    @property
    def keep(self) -> int:
        """The tool calls its response may hand over (-1: no bound)."""
        exchange = self.exchange
        keep = exchange.turn.keep if exchange is not None else None
        return -1 if keep is None else keep

    @property
    def answer_tool(self) -> str | None:
        """The tool whose calls its response hands over beside those ``keep`` bounds."""
        exchange = self.exchange
        return exchange.answer_tool if exchange is not None else None

    @property
    def offered(self) -> list[str] | None:
        """The final-answer tools its request offers: a call of another is work (None: its
        response is not judged, every final-answer tool's call passes as an answer)."""
        exchange = self.exchange
        return list(exchange.offered) if exchange is not None else None


def refuses_usage(body: bytes, coding: str) -> bool:
    """Whether an upstream's error (400 or 422, read whole: at most ``MAX_REFUSAL_READ``, in
    its ``Content-Encoding``) says it refuses ``stream_options``."""
    try:
        body = inflate(body, coding.strip().lower(), MAX_REFUSAL_READ)
    except ValueError:  # (a coding it cannot read, or more than that inflated: not one)
        return False
    return b"stream_options" in body


class Asking(Protocol):
    """A request with the model, as its relay has it (``ModelProxy.asking``): whether its
    client ended its side of the connection (half-closed, or gone: an SDK's timeout), and
    how it is let go (cancelled, its upstream request dropped)."""

    @property
    def ended(self) -> bool: ...

    def let_go(self) -> None: ...


def reservable(request: Any, state: EndpointRun, keep: int | None) -> int:
    """The tool calls a request on its way keeps from its run's other requests: the ``keep``
    its turn allows, when it may hand over any (it offers tools, or its agent acts on the
    answer's text); none for one that offers no tools (a title or a summary the agent asks for
    while its run's own request is with the model, whose tools it must not withdraw)."""
    can_act = request.has_tools or state.acts_in_text
    return max(keep or 0, 0) if can_act else 0


class Exchange:
    """One request on its way: what the response is read against."""

    __slots__ = ("agent", "answer_tool", "answered", "arrived", "broke", "echo", "key",
                 "offered", "request", "reserved", "settled", "started_ns", "state", "turn",
                 "unasked", "wire")

    def __init__(self, wire: Wire, request: Any, state: EndpointRun, turn: Turn,
                 started_ns: int, agent: str, key: str, unasked: bytes | None = None,
                 arrived: float | None = None) -> None:
        self.wire, self.request, self.state, self.turn = wire, request, state, turn
        self.started_ns, self.agent, self.key = started_ns, agent, key
        # when the request arrived, on the service's clock: its run's calls are in flight
        # from then (the model call, then the tool calls it hands over), on either relay
        self.arrived = arrived
        # the request asks for its stream's usage on its client's behalf: the body without
        # that, sent instead if the upstream refuses it (:func:`refuses_usage`)
        self.unasked = unasked
        # the instructions its client sent (JSON text), when the request went upstream with
        # others (a note there): its response's echo of them is set back to these
        # (:func:`~watchdog.core.model.responses.echo_of`)
        self.echo: str | None = None
        # the tool whose call is its answer, not work (its agent's finish that carries only
        # the answer, offered so: ``EndpointRun.answer_tool``): never trimmed nor counted
        self.answer_tool = state.answer_tool
        # the final-answer tools it offers (``Request.answers_offered``): a call of another is
        # work (a tool the model made up, which the agent refuses), never its answer
        self.offered: tuple[str, ...] = request.answers_offered
        # its stream's last event came: the client had it all, whatever its connection does
        self.answered = False
        self.broke = False  # its response broke off before its end (booked as a failed call)
        self.settled = False  # no longer its run's (settle: once)
        # the tool calls it may hand over, kept from its run's other requests until it is
        # booked or settled
        self.reserved = reservable(request, state, turn.keep if turn.act is not Act.FINAL
                                   else 0)
        state.reserved += self.reserved

    def handed(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls of its response that reach the agent (:func:`kept_calls`)."""
        return kept_calls(calls, self.turn.keep, self.answer_tool, self.offered)

    @property
    def hide_usage(self) -> bool:
        """The stream's usage-only chunk, which its client did not ask for, is read and left
        out (:func:`watchdog.core.model.chat.usage_only`)."""
        return self.unasked is not None

    @property
    def outcome(self) -> str:
        """How a call that went upstream and was answered is counted (an answer that broke
        off mid-way as the upstream's error)."""
        if self.broke:
            return "upstream_error"
        return "steered" if self.turn.act is not Act.PASS else "passed"

    def release(self) -> None:
        """Its response is booked (what it handed over counted), or it ended without one."""
        self.state.reserved = max(0, self.state.reserved - self.reserved)
        self.reserved = 0

    def settle(self) -> None:
        """The request is over: released, and no longer its run's (ModelBook.settle); a
        second call does nothing (a request let go before its handler ended)."""
        self.release()
        if not self.settled:
            self.settled = True
            ModelBook.settle(self.state)
