"""The model endpoint served by the compiled relay (``model_relay: native``; DESIGN §12).

Theory of operation
-------------------
The relay (``native/relay``, a Rust extension: ``watchdog.shell.model._relay``) owns the
endpoint's socket, its HTTP/1.1 keep-alive connections, the upstream connection pool (TLS with
the system's CAs, ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` honoured) and the bytes of every
response, on threads of its own that never take the GIL. It reads each request (bounded by
``model_max_body_bytes`` and ``model_max_concurrent``) and queues it; a byte on a socket pair
wakes this event loop, which takes what is queued and answers each request once, at once, with
what :meth:`ModelProxy.plan` decides, exactly as the aiohttp endpoint does:

* an answer of its own (a refusal, an aborted run's final answer): ``respond``;
* a request to send upstream whose response passes as it comes (every request but a run's
  final one): ``forward`` with ``observe``; the relay streams the response back and, when it
  has ended (or was cut short, or the client went away, which drops the upstream request),
  hands back a copy of the upstream's bytes once (a gzip or deflate body's inflated, bounded
  alike: ``native/relay/src/inflate.rs``), with what a successful stream said read
  there (``native/relay/src/observe.rs``, the twin of ``wire.read_stream`` and the
  accumulators; where it cannot be sure to read a stream as they do, and for a whole
  response, the bytes are read here as the aiohttp relay reads them on the way), and the
  call is booked (below). With a bound on the tool calls it may hand over
  (``keep``: a budget, a wind-down's grace) the relay trims a successful response on the way
  as the aiohttp relay does (``native/relay/src/trim.rs``, the twin of the wire modules'
  ``trim`` and stream trimmers): a stream event by event, a whole response read first; a
  Chat Completions stream asked for its usage for a budget in dollars or tokens
  (``unasked``) is passed event by event too, its usage-only chunk left out (an upstream that
  refuses ``stream_options`` is sent the request without it). A stream's
  end is told at its last event (``[DONE]``, a Responses end event, ``message_stop``), before
  the agent has it, bound or not (``watch``);
* a new conversation's first request, when this process has said what a new run of its agent
  gets (a bound or none, and nothing else: no note, no final turn, no answer of its own), is
  sent on by the relay at once, before this loop has read it (``admit``, below); it comes
  here as ``taken`` and is read, given its run and booked as a forwarded one is;
* a request that continues a run whose next request this process has said (``admit_next``,
  below) goes on the same way, and comes here as ``taken`` too;
* a run's final request, whose answer is held until it ends (replaced by a stop note when the
  model leaves it empty): ``forward`` with ``hold`` too (its tools withdrawn here, as for the
  aiohttp relay: the body is this process's). The relay trims it on the way (``keep`` 0: only
  final-answer tool calls pass) and holds what it would pass on, up to ``MAX_RESPONSE_BYTES``
  (past it, what it held goes on and the rest as it comes, as the aiohttp relay does); when
  the upstream has ended, its ``done`` event comes with ``held`` and the relay waits for
  :meth:`_release`'s word, given at once: the held bytes, or, when nothing is left of the
  answer (:meth:`ModelProxy.empty_final`, read here as the aiohttp relay reads it), the stop
  note's answer (``streams.stop_answer``) in their place, with the ``Content-Encoding`` left
  out. An upstream that fails once the answer has begun gets what was held, then the answer
  broken off; one that stalls past ``model_upstream_timeout`` before its head, a 504
  (``failed``), as on the aiohttp relay.

While a request of a run is with the model, the relay watches its client's connection (a
second descriptor of its socket, peeked: hyper reads nothing of it meanwhile) and tells when
the client ends its side (``ended``: it half-closed, or went away); a request of the same run
or conversation that comes then lets it go (:meth:`ModelProxy._let_go_resent`, the rule of
both relays: an SDK's retry after its timeout), and ``let_go`` closes that connection, which
cancels it as a client gone does. A client that resets the connection (gone: the answer's
head met a reset) has it closed by the relay at once, as ``let_go`` would: a final request's
answer, held until it ends, writes nothing more that would meet the reset.

A forward that fails before the client's answer has begun (no head in time, none at all, a
whole response whose body stalls or breaks off while the relay reads it first, one a bound
cannot judge) comes back as ``failed`` and is answered here as the aiohttp relay answers it
(:meth:`ModelProxy.upstream_failed`). The relay waits for Python's word on a request at most
``model_upstream_timeout`` + 30 s, a backstop: then it answers 503 itself.

Booking a call (reading its response, its record through the core's step with the rules) is
most of this loop's work per request, so it waits until the requests queued with it have been
decided and sent on: the responses that ended are held, and booked together, in one step of
the core, once the requests that came before that moment have been taken. A request that may
continue a call held unbooked (of its conversation, of its run's trace or ``x-watchdog-run``,
a call its tool results answer, the response it continues; a call that may have handed a
sub-agent's first request its task: :meth:`ModelBook.unbooked_of`) has those booked before its
run is found, so each request still finds its run's calls counted (the countdown exact) and
its caller; the others wait.

What a new conversation's first request gets depends only on its agent (the rule packs'
budgets and rules for a run with nothing in it), its session's earlier runs, and the fleet's
failing tools. The relay learns the first from a request this process decided
(``admit_agent``: a pass, with the bound it got, for a request that opened a run; or, a Chat
Completions request's, the countdown's note with it, when its rule pack's budget of tool calls
is small enough that a new run starts counting down), is told every
conversation that is not new (``known``: each one a request here was of, and the sessions
restored at start), and forgets what it learned when the rules or the fleet change
(``admit_clear``: at a reload, and after any step of the core that changed the fleet's
failing tools). Such a request that this process would
have decided otherwise (the fleet changed while it was on its way) is logged as a miss, and
the relay forgets what it learned.

A request that continues a run is decided from the run, so the relay can send it on only
when this process has said what it gets, and it says so only when it proves it. When a call
of a run is booked, this process publishes (``admit_next``) what the next request of its
conversation gets, for a Chat Completions run keyed by its conversation (no trace, no run
header, not the client SDK's), with no budget but a rule pack's of tool calls (none
announced) and no directive but its budget's countdown, with no other request of it in
flight, not stopped: a plain pass, with no bound or the bound of the tool calls left, and,
once the countdown has started (its rule fired before, or fires at that request's step: the
proof says which), the countdown's note for a request that offers tools, which the relay
splices into its bytes as this process's
steering does (``Relay.splice_note``; not the final request; :meth:`_bound_next`), for a
request that comes
within ``NEXT_HOLD``, when the core proves it (:meth:`Core.quiet
<watchdog.core.step.Core.quiet>`): its rules decide nothing, on the timer or at that request,
and the timer does not end the run, up to ``NEXT_HOLD`` + ``NEXT_MARGIN`` from now (the margin
covers the time from this word to the relay's and from the request's coming to this loop's
reading it). When the booked call handed tool calls over, the request is one that carries the
model's answer with those calls and a result for each, and nothing else (the relay checks it:
``admit.rs``); the proof folds the records such a request makes, each result read as not
failed and like no result before (the relay checks that too: Rust twins of ``looks_failed``
and ``stable_hash``, told the hashes of the results the run had), into a copy of the run. When
it handed none over, the request is one longer than the one decided and ending with tool
results (a new user message may start the conversation's next run) none of which answers a
call any response through the relay handed over (that call's run's, else): it makes no record,
so nothing is evaluated at it. A response whose calls the relay cannot read comes ``unread``:
until this process has booked it and told the relay the ids it read it as handing over
(``sight``), no continuing request goes on ahead. A request that may be told so (``forward``'s
``ahead``: its conversation) marks its conversation in the relay, whose next request then waits
for this booking (at most 50 ms), which publishes or takes the mark back (``admit_next_clear``):
an agent that sends its next request as soon as it has the answer still finds it said. A request
that waits so is told here (``awaited``), and its call is booked before the other calls that
ended and the events queued after its end (:meth:`NativeEndpoint._drain`). The relay
uses what it was told once, and forgets it when a call of the conversation goes upstream (it was
of the run before that call: said, say, while this loop decided that very request, having booked
the call before it then); this process takes it back when the run's directives or its end change
(a step of the core that decided on it, ended, merged or resumed it, or the tracker let it go)
or it takes a budget or a frame (an announcement), when a checkpoint changes its session
(``Service.session_changed``), when the rules or the fleet change, and
when the book lets the run or its conversation go; taking it back leaves the mark of a call of
the conversation in flight (the request the relay sent on with it, whose decision, read here, is
such a step), so the next request still waits for that call's booking rather than for this
loop. A continuing request it sent on is read here
as the others (``continued`` counts them; ``answered`` those with the results of the calls
handed over), and one decided otherwise once read (a change from outside the run meanwhile: a
reload, the fleet) is logged as a miss, as above.

Nothing here logs a header; the relay never does.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from multidict import CIMultiDict

from watchdog.core.handout import Step
from watchdog.core.model.actions import MAX_PENDING_CALLS
from watchdog.core.model.book import Caller, EndpointRun, Unbooked
from watchdog.core.model.chat import LEGACY_CALL_ID
from watchdog.core.model.failure import MAX_REFUSAL_READ, refused
from watchdog.core.model.steer import (
    Act,
    Board,
    Counts,
    Turn,
    answer_tools,
    decide,
)
from watchdog.core.model.wire import Observation, ObservedFields, Request, observation_of
from watchdog.core.spans.record import KeySource
from watchdog.shell.model.headers import TOKEN_HEADER, Refused, door
from watchdog.shell.model.plans import (
    MAX_RESPONSE_BYTES,
    Answer,
    Booked,
    Exchange,
    Plan,
    reservable,
)
from watchdog.shell.model.proxy import (
    CONNECT_TIMEOUT,
    ModelProxy,
    failed_code,
    read_observation,
)
from watchdog.shell.model.streams import is_stream

log = logging.getLogger("watchdog.model")

SESSION_PREFIX = "model:"  # a conversation's session: this and its digest's first 24 hex digits
SESSION_DIGEST = re.compile(r"[0-9a-f]{24}")
MAX_NEXT = 1 << 16  # runs whose next request the relay was told (its own bound: admit.rs)
# what the relay is told of a run's next request holds for a request that comes within this
# many seconds; this process proves it for NEXT_MARGIN seconds more (the time from its word to
# the relay's, and from the request's coming to this loop's reading it)
NEXT_HOLD = 60.0
NEXT_MARGIN = 30.0
MAX_EXPECTED = 64  # tool calls handed over whose results the relay checks (more: the loop's)
DRAIN_POLL = 0.05  # seconds between looks at the requests left in flight, while stopping
MAX_TAKES = 8  # takes of the relay's events in one drain while requests sent on are still unread


def missing_relay() -> str | None:
    """None when the compiled relay is built, else why it cannot be loaded."""
    try:
        from watchdog.shell.model import _relay  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def built() -> bool:
    """Whether the compiled relay is built (``model_relay`` unset: it serves when it is)."""
    return missing_relay() is None


def budget_only(board: Board | None) -> bool:
    """Whether a run's directives change nothing of what its requests get but the countdown's
    note and the name of the rule it is told under: none, or only wind-downs of its budget's
    countdown (a rule's ``countdown``: the note is the endpoint's own, from the counts), no
    abort, no grace, no note to tell."""
    return board is None or (board.abort is None and board.grace is None
                             and board.notify is None
                             and board.wind_down is None)


def countdown_or_pass(turn: Turn, board: Board | None) -> bool:
    """Whether ``turn`` of a run with ``board`` is a plain pass or the tool-call countdown's
    note and nothing else (what a request sent on ahead may get; its usage not asked)."""
    return not turn.usage and budget_only(board) and turn.act in (Act.PASS, Act.NOTE)


def awaits(plan: Plan, awaited: set[str]) -> bool:
    """Whether ``plan``'s conversation is one of ``awaited`` (digests' 24 hex digits)."""
    return plan.exchange is not None and (
        conversation := plan.exchange.state.conversation) is not None \
        and conversation[:24] in awaited


class Forwarded:
    """A request the relay forwarded, with the model until its ``done`` (or ``failed``) event
    (:class:`~watchdog.shell.model.plans.Asking`): ``ended`` once the relay told that its
    client ended its side of the connection; let go, the relay closes that connection."""

    __slots__ = ("ended", "exchange", "number", "relay")

    def __init__(self, relay: Any, number: int, exchange: Exchange) -> None:
        self.relay = relay
        self.number = number
        self.exchange = exchange
        self.ended = False

    def let_go(self) -> None:
        self.relay.let_go(self.number)


class NativeEndpoint:
    """The model endpoint on the compiled relay; :class:`ModelProxy` decides and books."""

    def __init__(self, proxy: ModelProxy) -> None:
        self.proxy = proxy
        self.relay: Any = None  # watchdog.shell.model._relay.Relay
        self.pending: dict[int, Plan] = {}  # forwarded requests, until their response ends
        # those of a run (and those to the aiohttp relay), as ModelProxy.asking has them
        self.forwarded: dict[int, Forwarded] = {}
        self.finals = 0  # final requests the relay carried, their answers held
        self.stopped = 0  # of those, answers left empty: the stop note sent in their place
        # held answers read to give the relay its word: booked with what was read (by id(plan))
        self.held_seen: dict[int, Observation] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        # to book
        self.ended: list[tuple[Plan, int, str, bytes | None, str, float, bool,
                               ObservedFields | None]] = []
        self.booking = False  # a booking of the ended calls is scheduled
        self.closed = False
        self.answers_told = False  # the relay has the final-answer tools (Relay.answer_tools)
        self.admitted = 0  # requests the relay sent on before this loop read them
        self.missed = 0  # of those, decided otherwise here once read
        self.continued = 0  # of those, requests that continue a run (admit_next)
        self.answered = 0  # of those, requests carrying the results of the calls handed over
        self.noted = 0  # of those, countdowns: the note spliced in by the relay
        self.unread = 0  # responses whose tool calls the relay could not read
        self.to_sight: dict[int, Plan] = {}  # of those, the ones still to book (by id(plan))
        self.ahead = True  # continuing requests may go on ahead (False: the loop decides all)
        # conversations whose next request waits in the relay for the booking of their call
        # (its digest's 24 hex digits; until booked)
        self.awaiting: set[str] = set()
        # runs whose next request the relay was told -> their conversation's 24 hex digits
        self.next_of: OrderedDict[str, str] = OrderedDict()
        self._basis: tuple[object, object] | None = None  # the rules and fleet learned from
        self._full = False  # the relay remembers all the conversations it can
        self.taken_at = 0.0  # when the events in hand were taken (the service's clock)

    async def start(self, host: str, port: int) -> int:
        """Listens at ``host:port`` (OSError when it cannot); the port bound."""
        from watchdog.shell.model._relay import Relay

        config = self.proxy.config
        await self.proxy.start()
        self.relay = Relay(host, port, config.model_max_body_bytes, config.model_max_concurrent,
                           CONNECT_TIMEOUT, config.model_upstream_timeout, MAX_RESPONSE_BYTES,
                           body_timeout=config.model_body_timeout,
                           max_inflight=config.model_max_inflight_bytes,
                           body_min_rate=config.model_body_min_rate,
                           body_rate_window=config.model_body_rate_window,
                           max_held_responses=config.model_max_held_response_bytes)
        relay = self.relay
        if proxy_metrics := self.proxy.metrics:
            proxy_metrics.model_bytes_from(lambda: relay.held_bytes,
                                           lambda: relay.held_response_bytes)
        proxy = self.proxy
        token = None if proxy.token is None else (TOKEN_HEADER, proxy.token)
        self.relay.admission(proxy.openai, proxy.anthropic, config.model_agent_name or "",
                             token)
        self._know(digest for digest in (sid.removeprefix(SESSION_PREFIX) for sid in
                                         proxy.service.sessions.ids(SESSION_PREFIX))
                   if SESSION_DIGEST.fullmatch(digest))  # (another's session may be "model:…")
        proxy.service.stepped = self._stepped
        proxy.service.session_changed = self._session_changed
        proxy.service.state.writable_changed = self.check_basis
        proxy.service.tracker.dropped = self._dropped
        proxy.book.let_go = self._dropped
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.relay.fd, self._drain)
        self.proxy.before_identify = self._before_identify
        return int(self.relay.port)

    async def close(self, grace: float = 0.0, hurry: asyncio.Event | None = None) -> None:
        """Stops: no request is taken any more (the listener closes; one that comes on a
        connection open gets 503 with ``Retry-After``), those in flight get ``grace`` seconds
        to finish and be booked (less if ``hurry`` is set meanwhile), then what is left is
        cut."""
        if self.relay is not None:
            assert self.loop is not None
            self.relay.drain()
            deadline = self.loop.time() + grace
            while (self.relay.in_flight and self.loop.time() < deadline
                   and not (hurry is not None and hurry.is_set())):
                await asyncio.sleep(DRAIN_POLL)  # (this loop decides and books meanwhile)
            self._drain()  # the ends told meanwhile, booked below
            self.closed = True
            self.loop.remove_reader(self.relay.fd)
            self.relay.close()
            self._book_ended()
            self._drain_closed()
        await self.proxy.close()

    def _drain_closed(self) -> None:
        """The relay has stopped: what it held is settled as cancelled."""
        for plan in self.pending.values():
            self._finish(plan, 0, "cancelled", None, "", 0.0)
        self.pending.clear()
        for number in list(self.forwarded):
            self._asked(number)

    # -- events ---------------------------------------------------------------------------------

    def _drain(self) -> None:
        """The queued events in their order: a response's end comes before any request its
        client sent after it (so the next request of a conversation finds the call booked).
        A request waiting in the relay for its call's booking (``awaited``) has that call
        booked as soon as its end has been taken, before the events after it, with those of
        the other requests waiting then (:meth:`_book_awaited`; looked for again after each
        request decided or read here). While any does, the requests the relay sent on
        (``taken``: on their way already, nobody waits for their reading) are read last:
        before the next request this loop decides, before what follows of the same request,
        and once the relay has nothing more queued (what came meanwhile taken first, up to
        ``MAX_TAKES`` takes)."""
        sent: dict[int, tuple[float, tuple[Any, ...]]] = {}  # taken events, with when
        for _ in range(MAX_TAKES):
            events = self.relay.take()
            self.taken_at = self.proxy.service.now()  # (a request's event: how long ago it came)
            self.check_basis()
            awaiting = self.awaiting
            for event in events:
                if event[0] == "awaited" and len(awaiting) < MAX_NEXT:
                    awaiting.add(event[2])
            self._book_awaited()
            for event in events:
                kind, number = event[0], event[1]
                if kind == "awaited":
                    continue
                if kind == "taken" and (sent or awaiting):
                    sent[number] = (self.taken_at, event)
                    continue
                if sent and (kind == "request" or number in sent):
                    self._read_sent(sent, None if kind == "request" else number)
                self._event(kind, number, event)
                if kind in ("request", "taken") or (
                        awaiting and kind == "done" and self.ended
                        and awaits(self.ended[-1][0], awaiting)):
                    self._book_awaited()
            if not sent or not self.relay.queued:
                break
        self._read_sent(sent, None)
        if self.ended and not self.booking:
            assert self.loop is not None
            self.booking = True
            self.loop.call_soon(self._book_soon)

    def _read_sent(self, sent: dict[int, tuple[float, tuple[Any, ...]]],
                   number: int | None) -> None:
        """The requests the relay sent on that ``_drain`` put off (``number``: that one only),
        read now, each with when its event was taken; between two, the calls of the requests
        that came meanwhile to wait for their booking are booked."""
        taken_at = self.taken_at
        for key in list(sent) if number is None else [number]:
            self.taken_at, event = sent.pop(key)
            self._event("taken", key, event)
            self._book_awaited()
        self.taken_at = taken_at

    def _event(self, kind: str, number: int, event: tuple[Any, ...]) -> None:
        """One event of the relay's, handled."""
        try:
            if kind == "request":
                self._request(number, *event[2:])
            elif kind == "taken":
                self._taken(number, *event[2:])
            elif kind == "done":
                self._done(number, *event[2:])
            elif kind == "ended":
                if (forwarded := self.forwarded.get(number)) is not None:
                    forwarded.ended = True
            else:
                self._upstream_failed(number, event[2], event[3])
        except Exception:  # a bug: the request is answered, the loop goes on
            log.exception("the model endpoint failed on a %s event", kind)
            self.relay.respond(number, 500, [("Content-Type", "application/json")],
                               b'{"error":{"code":"internal_error","message":'
                               b'"the model endpoint failed on this request"}}')

    def _book_awaited(self) -> None:
        """The calls that ended (their ends taken) of the conversations whose next request
        waits in the relay for their booking (``awaiting``, and those the relay has queued
        since: :attr:`Relay.awaited`), booked now, in one step of the core, before the other
        calls that ended (:meth:`_book_soon`) and the events queued after. Any request of
        those conversations would book them first (:meth:`_before_identify`)."""
        if not self.ended:
            return
        awaiting = self.awaiting.union(self.relay.awaited)
        chosen = {index for index, (plan, *_) in enumerate(self.ended)
                  if awaits(plan, awaiting)}
        if chosen:
            self._book_ended(chosen)

    def _book_soon(self) -> None:
        """The calls that ended are booked, after the requests queued meanwhile (taken here,
        when the relay has any: this booking books what their ``done`` events end too)."""
        try:
            if not self.closed:
                if self.relay.queued:
                    self._drain()
                else:
                    self.check_basis()  # (as a drain would, with nothing taken)
        finally:
            self.booking = False
        self._book_ended()

    def _before_identify(self, api: str, request: Request, caller: Caller,
                         agent: str | None) -> None:
        """The calls that ended and that this request may continue are booked first (the
        others wait for :meth:`_book_soon`, after the requests queued with it)."""
        if not self.ended:
            return
        held = [(index, Unbooked(plan.exchange.state, seen[0] if seen is not None else None,
                                 frozenset(call[0] for call in seen[7])
                                 if seen is not None else None))
                for index, (plan, *_, seen) in enumerate(self.ended)
                if plan.exchange is not None]
        chosen = self.proxy.book.unbooked_of(api, request, caller, agent,
                                             [call for _, call in held])
        if chosen:
            self._book_ended({held[index][0] for index in chosen})

    def _book_ended(self, only: set[int] | None = None) -> None:
        """The calls that ended (``only`` those at these places in the list), read and
        booked: their records in one step of the core."""
        ended = self.ended
        if only is None:
            self.ended = []
        else:
            self.ended = [item for index, item in enumerate(ended) if index not in only]
            ended = [item for index, item in enumerate(ended) if index in only]
        calls: list[Booked] = []
        if self.awaiting:  # (booked now: no request waits for these any more, nor for a call
            # not in flight: its booking came before the request said it waits)
            if only is None:
                self.awaiting.intersection_update(
                    conversation[:24] for plan in self.pending.values()
                    if plan.exchange is not None
                    and (conversation := plan.exchange.state.conversation) is not None)
            else:
                self.awaiting.difference_update(
                    conversation[:24] for plan, *_ in ended if plan.exchange is not None
                    and (conversation := plan.exchange.state.conversation) is not None)
        try:
            for plan, status, outcome, body, content_type, seconds, changed, seen in ended:
                try:
                    self._finish(plan, status, outcome, body, content_type, seconds, calls,
                                 changed, seen)
                except Exception:  # a bug: the others are booked all the same
                    log.exception("the model endpoint failed on a done event")
        finally:
            if calls:
                self.proxy.book_calls(calls)
            for plan, *_ in ended:
                if plan.exchange is not None:
                    plan.exchange.settle()
                if self.to_sight and self.to_sight.pop(id(plan), None) is not None:
                    self._sight(plan)
        for plan, status, outcome, *_ in ended:
            if plan.exchange is not None and plan.api == "chat":
                self._publish_next(plan, 200 <= status < 300 and outcome == "ok")

    def _request(self, number: int, method: str, target: str, raw_headers: list[tuple[str, str]],
                 body: bytes | None, refusal: str, in_flight: int, learn: str | None,
                 waited: float) -> None:
        """A request the relay asks about, ``waited`` seconds after its head came when its
        event was taken (``taken_at``)."""
        proxy = self.proxy
        if not self.answers_told:  # (the conventions' tables: loaded at the first request)
            names, prefixes = answer_tools()
            self.relay.answer_tools(sorted(names), list(prefixes))
            self.answers_told = True
        if not proxy.usage_unasked and self.relay.usage_refused:
            proxy.usage_refused()  # (a request's, still on its way: no later request asks)
        headers: CIMultiDict[str] = CIMultiDict(raw_headers)
        wire = proxy.wire_of(method, unquote(target.split("?", 1)[0]))
        try:
            # (the relay's ``unauthorized``: a wrong token that waits for ``100 Continue``,
            # its body unsent: refused here by the door, as with its body)
            target, agent = door(method, target, headers, proxy.token)
            wire = proxy.wire_of(method, unquote(target.split("?", 1)[0]))
            if refusal == "overloaded":
                raise proxy.overloaded(in_flight)
            if refusal == "reading":  # (``in_flight``: the other bodies being read)
                raise proxy.reading_full(in_flight)
            if refusal == "over_budget":
                raise proxy.over_budget()
            if refusal == "too_large":
                raise proxy.too_large(proxy.config.model_max_body_bytes)
            if refusal == "body_late":
                raise proxy.body_late(proxy.config.model_body_timeout)
            if refusal == "body_slow":
                raise proxy.body_slow()
            if refusal == "bad_host":
                raise Refused(400, "bad_request", "an HTTP/1.1 request must have exactly one "
                              "Host header (RFC 9112 §3.2)", {"Connection": "close"})
            if refusal or body is None:
                raise Refused(400, "bad_request", "the request body could not be read")
            plan = proxy.plan(wire, method, target, headers, body, agent,
                              self.taken_at - waited)
        except Refused as refused:
            plan = proxy.refusal(wire, refused, headers)
        if isinstance(plan, Answer):
            self.relay.respond(number, plan.status, list(plan.headers.items()), plan.body)
            return
        self._publish(plan, learn)
        self.pending[number] = plan
        observed = plan.exchange is not None
        hold = not plan.fast  # (a final request's answer: held until it ends)
        if not self.relay.forward(number, plan.method, plan.url, list(plan.headers.items()),
                                  plan.body, observed, api=plan.api, keep=plan.keep,
                                  answer_tool=plan.answer_tool, watch=observed,
                                  unasked=plan.unasked, ahead=self._ahead(plan), hold=hold,
                                  echo=plan.echo, offered=plan.offered):
            del self.pending[number]  # the client went away meanwhile
            self._finish(plan, 0, "cancelled", None, "", 0.0)
        else:
            self.finals += hold
            self._asking(number, plan)
        plan.body = b""  # the relay's now (shared, not copied): not held here as well

    def _asking(self, number: int, plan: Plan) -> None:
        """Request ``number``, of a run, is with the model: told to the proxy, which lets it
        go when its client, having ended its side, sends it (or its run's next) again
        (:meth:`ModelProxy._let_go_resent`)."""
        if plan.exchange is not None:
            forwarded = self.forwarded[number] = Forwarded(self.relay, number, plan.exchange)
            self.proxy.asking[plan.exchange] = forwarded

    def _asked(self, number: int) -> None:
        """Request ``number`` is no longer with the model (its response ended, or failed)."""
        forwarded = self.forwarded.pop(number, None)
        if forwarded is not None and self.proxy.asking.get(forwarded.exchange) is forwarded:
            del self.proxy.asking[forwarded.exchange]

    def _taken(self, number: int, method: str, target: str, raw_headers: list[tuple[str, str]],
               body: bytes, in_flight: int, keep: int, waited: float,
               continued: bool = False, note: str = "") -> None:
        """A new conversation's first request (``continued``: a request that continues a run)
        the relay sent on with the bound ``keep`` (-1: none) and the note ``note`` spliced
        into it ("": none; the countdown): read, given its run, and booked when its response
        ends, as if decided here; a miss if it is not what this process decides now."""
        proxy = self.proxy
        wire = proxy.wire_of(method, target)
        headers: CIMultiDict[str] = CIMultiDict(raw_headers)
        try:
            plan = proxy.plan(wire, method, target, headers, body, arrived=self.taken_at - waited,
                              sent=True)
        except Refused as refused:
            plan = proxy.refusal(wire, refused, headers)
        self.admitted += 1
        self.continued += continued
        metrics = proxy.metrics
        kind = "continued" if continued else "first"
        decided = "an answer"
        if isinstance(plan, Plan):
            exchange = plan.exchange
            if continued and exchange is not None:
                handed_by, key = proxy.book.handed_by, exchange.state.key
                self.answered += any(handed_by(result.call_id) == key
                                     for result in exchange.request.results)
            self._publish(plan, None)
            # (the relay's trim knows no request's own answer tool: a bound with one is not)
            same = exchange is None or (plan.keep == keep and exchange.unasked is None and (
                keep < 0 or exchange.answer_tool is None) and (
                (exchange.turn.act is Act.PASS and not note)
                or (exchange.turn.act is Act.NOTE and exchange.turn.text == note != "")))
            decided = exchange.turn.act.value if exchange is not None else "unread"
            if exchange is not None and not same:
                # what went upstream is the relay's (its bound, its note): booked as that, so
                # what its answer hands over is counted however this process decides now
                exchange.state.final_used = False  # the final turn did not go: the request did
                exchange.release()
                exchange.turn = Turn(Act.NOTE if note else Act.PASS, note,
                                     None if keep < 0 else keep, "ahead")
                exchange.unasked, exchange.answer_tool = None, None
                exchange.reserved = reservable(exchange.request, exchange.state, keep)
                exchange.state.reserved += exchange.reserved
            plan.body = b""  # (the relay's, sent on already: not held here as well)
            self.noted += bool(note)
            self.pending[number] = plan
            self._asking(number, plan)
            if same:
                if metrics is not None:
                    metrics.model_ahead(kind, "same")
                return
        self.missed += 1
        if metrics is not None:
            metrics.model_ahead(kind, "missed")
        self._forget()
        log.warning("model request sent on as %s (bound %s) but decided otherwise "
                    "once read (%s): the rules, the fleet or the state's writes changed "
                    "meanwhile; its call is booked as sent",
                    "its run's next" if continued else "a new run's", keep, decided)

    # -- what the relay sends on before this loop reads it -------------------------------------

    def _publish(self, plan: Plan, learn: str | None) -> None:
        """The relay told the request's conversation (not new from now on), and, for a new
        conversation's first request (``learn``: its agent) that offered tools and opened a run
        with nothing but a bound, or a bound and the countdown's note of its rule pack's budget
        of tool calls (a Chat Completions request's), what new runs of its agent get (not for
        an agent whose runs have a budget in dollars or tokens: their streams are asked for
        usage, here)."""
        exchange = plan.exchange
        if exchange is None:
            return
        state = exchange.state
        if state.conversation is not None:
            self._know((state.conversation[:24],))
        turn = exchange.turn
        if (learn is not None and plan.fast and not turn.usage
                and (turn.act is Act.PASS or (
                    turn.act is Act.NOTE and plan.api == "chat" and plan.echo is None
                    and exchange.unasked is None and countdown_or_pass(
                        turn, self.proxy.service.board(state.run_key or state.key))))
                and exchange.request.has_tools  # (one that offers none is told no countdown)
                and exchange.answer_tool is None  # (a trim with it is this process's)
                and state.answered == 0 and state.asking == 1 and not state.handed):
            self.check_basis()
            if self._basis is not None:
                # (a countdown from a new run's first request on: its note, which the relay
                # writes into a first request that offers tools, as into a continuing one)
                self.relay.admit_agent(learn, plan.keep,
                                       turn.text if turn.act is Act.NOTE else None)

    def _ahead(self, plan: Plan) -> str | None:
        """The conversation of a request whose booked call may tell the relay what its next
        request gets (the relay then holds that request for the booking, briefly)."""
        exchange = plan.exchange
        if not self.ahead or exchange is None or plan.api != "chat":
            return None
        state, turn = exchange.state, exchange.turn
        if state.conversation is None or state.traced or state.acts_in_text \
                or not countdown_or_pass(
                turn, self.proxy.service.board(state.run_key or state.key)):
            return None
        return state.conversation[:24]

    def _publish_next(self, plan: Plan, answered: bool) -> None:
        """The relay told what the next request of the booked call's conversation gets, when
        this process can prove it (see the module's theory): a plain pass, for a request that
        comes within ``NEXT_HOLD`` and, when the call handed tool calls over, carries their
        results and nothing else, none a failure, none like a result the run had; else that
        it does not say (``answered``: the call was, completely)."""
        exchange = plan.exchange
        assert exchange is not None
        state = exchange.state
        conversation = state.conversation
        relay = self.relay
        if conversation is None or self.closed:
            return
        session = conversation[:24]
        proved = self._proved_next(plan, answered)
        if proved is None:
            self.next_of.pop(state.key, None)
            # (the relay holds its next request no more)
            relay.admit_next_clear(session, booked=True)
            return
        calls, seen, keep, note = proved
        self.next_of[state.key] = session
        self.next_of.move_to_end(state.key)
        while len(self.next_of) > MAX_NEXT:
            _, gone = self.next_of.popitem(last=False)
            relay.admit_next_clear(gone)
        relay.admit_next(session, keep, state.messages, state.agent or "", NEXT_HOLD, calls,
                         seen, note)

    def _proved_next(self, plan: Plan, answered: bool
                     ) -> tuple[list[tuple[str, str]] | None, list[int] | None, int,
                                str | None] | None:
        """What the relay is told the next request of the booked call's run must carry to get
        a plain pass (the calls handed over, as id and tool name, and the result hashes the
        run had; None, None: nothing of the calls it answers, as none is pending), the bound
        it gets (-1: none) and, when it offers tools, the countdown's note (None: none; one
        that offers none gets none), when this process proves that it gets that: the run has no
        budget but its rule pack's of tool calls, no directive, nothing asked or reserved, and
        the core proves its rules decide nothing and the timer leaves it running up to
        ``NEXT_HOLD`` + ``NEXT_MARGIN`` from now, with the records such a request makes
        (:meth:`Core.quiet`); with a budget of tool calls, the request gets its bound whether
        it offers tools or not (:meth:`_bound_next`). None when it cannot."""
        exchange = plan.exchange
        assert exchange is not None
        state = exchange.state
        if (not answered or not self.ahead or state.traced or state.answer_tool is not None
                or state.key_source is not KeySource.WATCHDOG
                or state.asking or state.reserved or state.final_used or state.stop is not None
                or state.answered == 0 or exchange.broke
                or len(state.pending) > MAX_EXPECTED):
            return None
        proxy = self.proxy
        book = proxy.book
        if book.latest(state.conversation or "") != state.key or state.run_key != state.key:
            return None
        service = proxy.service
        if not countdown_or_pass(exchange.turn, service.board(state.key)):
            return None
        core = service.core
        until = service.now() + NEXT_HOLD + NEXT_MARGIN
        calls: list[tuple[str, str]] | None = None
        seen: list[int] | None = None
        records = []
        if state.pending:
            ids = list(state.pending)
            if any(not call_id or call_id.startswith(LEGACY_CALL_ID)
                   or book.handed_by(call_id) != state.key for call_id in ids):
                return None
            seen = core.result_hashes(state.key)
            found = book.answered_records(state, int(until * 1e9), seen)
            if found is None:
                return None
            records = found
            calls = [(call.call_id, call.name[:200] or "unknown")
                     for call in state.pending.values()]
        board = service.board(state.key)
        counting = set(board.counting) if board is not None else set()
        if not core.quiet(state.key, records, until, tool_budget=True, countdowns=counting):
            return None
        bound = self._bound_next(state, len(records), frozenset(counting))
        if bound is None:
            return None
        self.check_basis()
        if self._basis is None:
            return None
        return calls, seen, *bound

    def _bound_next(self, state: EndpointRun, answers: int, counting: frozenset[str]
                    ) -> tuple[int, str | None] | None:
        """The bound the next request of ``state``'s run gets (-1: none) whatever its
        instructions (none of the client SDK's: the relay checks), and the note it gets when
        it offers tools (None: none), ``answers`` results of the calls handed over folded in
        (each one tool call more, and one result more): the run's counts then, decided as
        :meth:`ModelProxy._observe_request` decides them (:func:`decide`), on a board whose
        ``counting`` is the budgets whose countdown has started by that request's step. A
        plain pass with that bound, whether it offers tools or not; or, once the countdown
        has started, its note with it to one that offers tools, a plain pass to one that
        offers none. None for anything else (a final turn)."""
        core = self.proxy.service.core
        run = core.tracker.get(state.key)
        if run is None:
            return None
        pack = core.engine.agent_budget(run.agent_name) if core.engine is not None else {}
        limit = run.budget.get("max_tool_calls", pack.get("max_tool_calls"))
        if limit is None:
            return (-1, None) if not run.budget and not pack else None
        counts = Counts(used=max(run.tool_calls + answers, state.results + answers),
                        handed=state.handed, budget={"max_tool_calls": limit})
        board = Board(counting=counting)
        plain, offered = (decide(counts, board, "", offers) for offers in (False, True))
        if plain.act is not Act.PASS or plain.usage or plain.keep is None:
            return None
        if offered == plain:
            return plain.keep, None
        if offered.act is Act.NOTE and not offered.usage and offered.keep == plain.keep:
            return plain.keep, offered.text
        return None

    def _stepped(self, step: Step) -> None:
        """After a step of the core: what the relay learned holds while what it was learned
        from does (the rules, the fleet; each run told, its directives and its end)."""
        self.check_basis()
        next_of = self.next_of
        if not next_of or self.relay is None or self.closed:
            return
        # a run that took a budget or a frame since (a heartbeat's or a sync's announcement,
        # which decides nothing when no rule fires on it): what the relay was told is no
        # longer proved (Core.quiet is not for such a run)
        keys = [key for key, run in step.dirty.items() if key in next_of and (
            run.framed or run.budget)]
        if step.decisions or step.finished or step.gone or step.resumed:
            keys.extend(decided.run.key for decided in step.decisions)
            keys.extend(run.key for run in step.finished)
            keys.extend(step.gone)
            keys.extend(step.gone.values())
            keys.extend(step.resumed)
        for key in keys:
            session = next_of.pop(key, None)
            if session is not None:
                self.relay.admit_next_clear(session)

    def _session_changed(self, session: str) -> None:
        """A checkpoint changed ``session`` (or gave it a run): what the relay was told of its
        runs' next requests was proved with the session as it was (the rules may read it)."""
        if not self.next_of or self.relay is None or self.closed:
            return
        get = self.proxy.service.core.tracker.get
        for key in [key for key in self.next_of
                    if (run := get(key)) is None or run.session == session]:
            self.relay.admit_next_clear(self.next_of.pop(key))

    def _dropped(self, key: str) -> None:
        """The tracker let the ended run ``key`` go, or the book the run or its conversation:
        a request of it would open it anew."""
        session = self.next_of.pop(key, None)
        if session is not None and self.relay is not None and not self.closed:
            self.relay.admit_next_clear(session)

    def _know(self, sessions: Iterable[str]) -> None:
        if not self._full and not self.relay.known(list(sessions)):
            self._full = True
            log.warning("the model endpoint's relay remembers as many conversations as it "
                        "can: every new conversation's first request is now read before it is "
                        "sent on")

    def check_basis(self) -> None:
        """What the relay learned holds while the rules and the fleet's failing tools are
        those it was learned under and the state can be written and keeps up (checked at each
        batch of events, when the rules are loaded again, after each step of the core and when
        the state's writes fail or succeed again); while it cannot, the relay learns
        nothing."""
        if self.relay is None or self.closed:
            return
        service = self.proxy.service
        core = service.core
        writer = service.state
        if writer.state_error is not None or writer.behind:
            # (the state cannot take a request's records, unwritable or behind: Python steers
            # each one by the book's counts, ModelProxy._steer_unrecorded, which no proof
            # says ahead)
            if self._basis is not None:
                self._forget()
            return
        rules = core.engine.ruleset if core.engine is not None else None
        fleet = core.fleet.activation()
        basis = self._basis
        if basis is None or basis[0] is not rules or (basis[1] is not fleet
                                                      and basis[1] != fleet):
            if basis is not None:
                self._forget()
            self._basis = (rules, fleet)

    def _forget(self) -> None:
        self.relay.admit_clear()
        self.relay.admit_next_clear()
        self.next_of.clear()
        self._basis = None

    def _done(self, number: int, status: int, outcome: str, body: bytes | None,
              content_type: str, seconds: float, changed: bool = False,
              seen: ObservedFields | None = None, unread: bool = False,
              held: bool = False) -> None:
        if unread:
            self._unread(number)
        self._asked(number)
        plan = self.pending.pop(number, None)
        if held:
            self._release(number, plan, status, body, content_type, seen)
        if plan is not None:
            self.ended.append((plan, status, outcome, body, content_type, seconds, changed,
                               seen))
            if plan.unasked is not None and self.relay.usage_refused:
                self.proxy.usage_refused()  # (sent again without: no later request asks)

    def _release(self, number: int, plan: Plan | None, status: int, body: bytes | None,
                 content_type: str, seen: ObservedFields | None) -> None:
        """The relay's word on the held answer of request ``number``, a run's final one, which
        has ended: the answer as held, or, when the model left nothing of it (no call left
        once trimmed, no text, complete: :meth:`ModelProxy.empty_final`, which reads the run
        now, as the aiohttp relay reads it when its stream ends), the stop note's answer in
        its place. What was read is booked (:meth:`_finish`), the stop note as its text."""
        replaced = None
        try:
            exchange = plan.exchange if plan is not None else None
            if exchange is not None and 200 <= status < 300:
                observation = observation_of(seen) if seen is not None else read_observation(
                    exchange.wire, body or b"", content_type)
                if observation is not None:
                    assert plan is not None
                    self.held_seen[id(plan)] = observation
                    replaced = self.proxy.empty_final(exchange, observation, exchange.handed(
                        observation.calls), is_stream(content_type))
                    if replaced is not None:
                        self.stopped += 1
        finally:  # (the relay waits for this word: given always, the held bytes on a bug)
            self.relay.release(number, replaced)

    def _unread(self, number: int) -> None:
        """The relay could not read the tool calls of response ``number``: counted, and once
        it is booked (at once, when nothing here books it) the relay is told the ids this
        process read it as handing over (:meth:`_sight`)."""
        self.unread += 1
        if (metrics := self.proxy.metrics) is not None:
            metrics.model_ahead_unread()
        if self.unread == 1:
            log.warning("the model endpoint's relay could not read a response's tool calls: "
                        "continuing requests wait for the loop until it has booked it (logged "
                        "once; counted in model_ahead_unread_total)")
        plan = self.pending.get(number)
        if plan is None or plan.exchange is None:
            self.relay.sight([])  # (no call of it booked here: it hands nothing over here)
        else:
            self.to_sight[id(plan)] = plan

    def _sight(self, plan: Plan) -> None:
        """The relay told the tool calls the booked call of ``plan`` handed over (it could not
        read them): those of its run's waiting for their results, or, when they may be more
        than the run keeps waiting, every id the book remembers."""
        exchange = plan.exchange
        assert exchange is not None
        state = exchange.state
        calls = [*state.pending.values(), *state.begun.values()]
        book = self.proxy.book
        self.relay.sight(book.handed_ids() if len(calls) >= MAX_PENDING_CALLS
                         else [call.call_id for call in calls if call.call_id])

    def _finish(self, plan: Plan, status: int, outcome: str, body: bytes | None,
                content_type: str, seconds: float, into: list[Booked] | None = None,
                changed: bool = False, seen: ObservedFields | None = None) -> None:
        """A forwarded response has ended: observed, counted; without ``into``, its run
        settled (with it, its record goes there and the caller books and settles it);
        ``changed``: the relay trimmed it; ``seen``: a stream's observation, read by the relay."""
        proxy, exchange = self.proxy, plan.exchange
        agent = exchange.agent if exchange is not None else None
        read = self.held_seen.pop(id(plan), None) if self.held_seen else None
        try:
            if exchange is not None and 200 <= status < 300:
                proxy.observe_whole(exchange, body or b"", content_type, into, changed,
                                    read if read is not None
                                    else None if seen is None else observation_of(seen))
            elif exchange is not None and refused(status):  # (its body inflated, if it was)
                proxy.observe_refused(exchange, status, (body or b"")[:MAX_REFUSAL_READ],
                                      into=into)
            if exchange is not None and not plan.fast and not exchange.settled and (
                    outcome == "cancelled" or exchange.broke
                    or not (200 <= status < 300 or refused(status))):
                # a final request that got no answer (the client went away, the upstream
                # failed or broke its answer off): it had no final turn, as on the aiohttp
                # relay (ModelProxy.forward)
                exchange.state.final_used = False
            if outcome == "cancelled":
                proxy.count(agent, plan.api, "cancelled")
                return
            if outcome == "cut":  # (an answer broken off: the upstream's failure)
                log.warning("model upstream response cut short")
                if exchange is not None and plan.fast:  # (a held answer's: as it read,
                    exchange.broke = True  # ended or not, as the aiohttp relay reads it)
            if proxy.metrics is not None:
                proxy.metrics.model_upstream(plan.api, seconds)
            if exchange is not None and (status >= 400 or outcome == "cut"):
                proxy.service.model_failed(exchange.key, failed_code(status))
            if exchange is None or not 200 <= status < 300:
                proxy.count(agent, plan.api, "passed" if status < 400 and outcome != "cut"
                            else "upstream_error")
            else:
                proxy.count(agent, plan.api, exchange.outcome)
        finally:
            if exchange is not None and into is None:
                exchange.settle()

    def _upstream_failed(self, number: int, kind: str, detail: str) -> None:
        """The relay's forward failed before its answer began: answered here, always (the
        relay waits for this answer)."""
        self._asked(number)
        plan = self.pending.pop(number, None)
        settle = plan is not None
        if plan is None:  # (a request the relay sent on, decided otherwise once read)
            plan = Plan("POST", "other", "", CIMultiDict(), b"", None)
        try:
            if settle and not plan.fast and plan.exchange is not None:
                plan.exchange.state.final_used = False  # (no answer: no final turn)
            answer = self.proxy.upstream_failed(plan, kind, detail)
            self.relay.respond(number, answer.status, list(answer.headers.items()), answer.body)
        finally:
            if settle and plan.exchange is not None:
                plan.exchange.settle()
                if plan.api == "chat":  # (no call to book: the relay holds no request for it)
                    self._publish_next(plan, False)
