"""``/v1/runs`` and everything under one run: the list, the detail, the report, the heartbeat
(with the client SDK's announcement of who the run is) and the sync.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from watchdog.core.bounds import (
    MAX_BUDGET,
    MAX_EPOCH_SECONDS,
    MAX_IN_FLIGHT,
    MAX_MESSAGES,
    MIN_EPOCH_SECONDS,
    budget_limit,
    id_problem,
    is_number,
    load_json,
)
from watchdog.core.runs.view import run_summary
from watchdog.core.shown import shown
from watchdog.core.spans.decode import DecodeError, parse_protobuf
from watchdog.core.spans.record import BUDGET_KEYS, WHOLE_BUDGET_KEYS
from watchdog.core.sync import CLIENT_STOPS, SYNC_DIRECTIVE_WAIT, sync_answer
from watchdog.shell.api.http import (
    MARKDOWN,
    MAX_SEQ,
    _int_param,
    _is_int_in,
    _json_object,
    _wants_json,
    ignored_fields,
    json_response,
    request_body,
)
from watchdog.shell.api.interface import Watchdog
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.errors import BadRequest
from watchdog.shell.priority import hand_over
from watchdog.shell.state.queries import MAX_LIST_LIMIT

ANNOUNCE_HEADER = "X-Watchdog-Announce"
TRACE_ID = re.compile(r"[0-9a-f]{32}")
ZERO_TRACE = "0" * 32
DEFAULT_LIST_LIMIT = 100
RUN_STATES = ("active", "ended")
MAX_CURSOR_CHARS = 2048  # a listing's cursor: a run's place (its id is at most 200 characters)
class RunRoutes:
    """``/v1/runs`` and everything under one run."""

    def __init__(self, service: Watchdog, max_request_bytes: int,
                 directives: Outbox | None = None) -> None:
        self.max_request_bytes = max_request_bytes
        self.service = service
        self.directives = directives

    async def list_runs(self, request: web.Request) -> web.Response:
        query = request.query
        state = query.get("state") or None
        if state is not None and state not in RUN_STATES:
            raise BadRequest(f"state={shown(state)} is not allowed: expected one of "
                             + ", ".join(RUN_STATES))
        agent = query.get("agent") or None
        session = query.get("session") or None
        if session is not None and (problem := id_problem(session)) is not None:
            raise BadRequest(f"session={shown(session)} is not allowed: it {problem}")
        limit = _int_param(query.get("limit"), "limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)
        after = query.get("after")
        runs, last = await self.service.queries.list_runs(
            state=state, agent=agent, limit=limit,
            after=None if after is None else read_cursor(after), session=session)
        return json_response({"runs": runs,
                              "next": None if last is None else write_cursor(last)})

    async def get_run(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        detail = await self.service.queries.run_detail(key)
        if self.directives is not None:
            listed, omitted = await self.directives.run_directives(key)
            detail["directives"] = listed  # the newest; older ones are only counted
            detail["directives_omitted"] = omitted
        return json_response(detail)

    async def report(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        service = self.service
        queries = service.queries
        run = await queries.find_run(key)
        activity = await queries.activity(key)
        children = await queries.child_runs(key)
        directives: list[dict[str, Any]] = []  # (what stopped it: the first such, only)
        if self.directives is not None \
                and (stop := await self.directives.first_stop(key)) is not None:
            directives = [stop.to_json()]
        from watchdog.core.runs.report import build_report, render_markdown  # (on first use)

        report = build_report(run, activity, children=children,
                              trace_url=queries.trace_url, directives=directives)
        if _wants_json(request.headers.get("Accept", "")):
            return json_response(report)
        return web.Response(text=render_markdown(report), content_type=MARKDOWN,
                            charset="utf-8")

    async def heartbeat(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        beat = parse_heartbeat(body)
        run = self.service.heartbeat(request.match_info["id"], beat.messages, beat.in_flight,
                                     beat.oldest_call_started, beat.announce)
        answer = {**run_summary(run, self.service.queries.trace_url), "messages": run.messages,
                  "in_flight": run.in_flight}
        if ignored := ignored_fields(body, HEARTBEAT_FIELDS):
            answer["ignored"] = ignored
        return json_response(answer)

    async def sync(self, request: web.Request) -> web.Response:
        """``POST /v1/runs/{id}/sync?after=SEQ`` with the run's newly ended spans (an OTLP
        protobuf export body, possibly empty): answered once they are applied and the
        directives they caused are stored (:mod:`watchdog.core.sync`)."""
        run_id = request.match_info["id"]
        after = _int_param(request.query.get("after"), "after", 0, 0, MAX_SEQ)
        stop = request.query.get("stop") or None
        if stop is not None and stop not in CLIENT_STOPS:
            raise BadRequest(f"stop={shown(stop)} is not allowed: expected one of "
                             + ", ".join(sorted(CLIENT_STOPS)))
        announce = _announce_header(request.headers.get(ANNOUNCE_HEADER))
        body = await request_body(request, self.max_request_bytes, "max_request_bytes")
        try:
            export = parse_protobuf(body)
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        service = self.service
        with service.priority.sync():  # bulk ingest waits until the answer is on the wire
            if self.directives is not None:  # (before the spans: they may decide one)
                self.directives.client_has_seen(run_id, after)
            run, applied = service.sync(run_id, export, stop, announce)
            directives = [] if self.directives is None else \
                await self.directives.directives_after(run_id, after, SYNC_DIRECTIVE_WAIT)
            if run is not None:  # as it is now, the directives stored
                run = service.view(run_id) or run
            response = json_response(sync_answer(
                run, run_id, applied, [d.to_json() for d in directives],
                directives[-1].seq if directives else after))
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:  # the agent hung up: aiohttp logs it as it would have
                return response
        hand_over()  # the agent was woken on this CPU to read it (watchdog.shell.priority)
        return response


def write_cursor(place: tuple[bool, float, str]) -> str:
    """A run's place in the listing (``GET /v1/runs``'s ``next``), as opaque URL-safe text."""
    active, when, key = place
    text = json.dumps([int(active), when, key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_cursor(raw: str) -> tuple[bool, float, str]:
    """What :func:`write_cursor` wrote; anything else is a :class:`BadRequest`."""
    problem = BadRequest(f"after={shown(raw[:MAX_CURSOR_CHARS])} is not allowed: expected "
                         f"the next of an answer of GET /v1/runs")
    if not raw or len(raw) > MAX_CURSOR_CHARS:
        raise problem
    try:
        value = load_json(base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_",
                                           validate=True))
    except (ValueError, binascii.Error):
        raise problem from None
    if not (isinstance(value, list) and len(value) == 3 and value[0] in (0, 1)
            and type(value[0]) is int and is_number(value[1])
            and isinstance(value[2], str) and id_problem(value[2]) is None):
        raise problem
    return bool(value[0]), float(value[1]), value[2]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    messages: int
    in_flight: int | None
    oldest_call_started: float | None
    announce: dict[str, Any] | None


# what a heartbeat's body may hold: any other field is ignored and named (ignored_fields)
HEARTBEAT_FIELDS = frozenset({"messages", "in_flight", "oldest_call_started", "announce",
                              "trace_id"})


def parse_heartbeat(body: dict[str, Any]) -> Heartbeat:
    """A ``POST /v1/runs/{id}/heartbeat`` body; raises :class:`BadRequest` naming the field."""
    messages = body.get("messages", 0)
    if not isinstance(messages, int) or not _is_int_in(messages, 0, MAX_MESSAGES):
        raise BadRequest(f"messages={shown(messages)} is not allowed: expected an integer "
                         f"from 0 to {MAX_MESSAGES} (the conversation length)")
    in_flight = body.get("in_flight")
    if in_flight is not None and not _is_int_in(in_flight, 0, MAX_IN_FLIGHT):
        raise BadRequest(f"in_flight={shown(in_flight)} is not allowed: expected an integer "
                         f"from 0 to {MAX_IN_FLIGHT} (calls started and not ended)")
    oldest = body.get("oldest_call_started")
    if oldest is not None and not (is_number(oldest)
                                   and MIN_EPOCH_SECONDS <= oldest <= MAX_EPOCH_SECONDS):
        raise BadRequest(f"oldest_call_started={shown(oldest)} is not allowed: expected "
                         f"epoch seconds from {MIN_EPOCH_SECONDS} (2000) to "
                         f"{MAX_EPOCH_SECONDS:g}")
    announce = _announcement(body.get("announce"))
    # (the run's trace beside the announcement: a sidecar that predates it ignores it there)
    if announce is not None and body.get("trace_id") is not None:
        announce["trace_id"] = _trace_id(body["trace_id"], "trace_id")
    return Heartbeat(messages, in_flight, float(oldest) if oldest is not None else None,
                     announce)


def _trace_id(value: object, name: str) -> str:
    """The run's trace (the client SDK's run span's), as W3C Trace Context writes it."""
    if not isinstance(value, str) or not TRACE_ID.fullmatch(value) or value == ZERO_TRACE:
        raise BadRequest(f"{name}={shown(value)} is not allowed: expected the run's trace "
                         f"id, 32 lower-case hex digits, not all zero")
    return value


def _announce_header(raw: str | None) -> dict[str, Any] | None:
    """A sync's ``X-Watchdog-Announce`` (the heartbeat's ``announce``, as JSON): the client's
    syncs carry who the run is and its budget until the sidecar has heard them, so its first
    spans count against that budget whenever the heartbeat comes."""
    if raw is None:
        return None
    try:
        value = load_json(raw)
    except ValueError as exc:
        raise BadRequest(f"{ANNOUNCE_HEADER} is not valid JSON: {exc}") from None
    return _announcement(value)


ANNOUNCE_KEYS = {"agent": str, "session": str, "parent_run": str, "budget": dict,
                 "trace_id": str}
ID_KEYS = frozenset({"session", "parent_run"})  # follow the id rule (watchdog.core.bounds)


def _announcement(value: object) -> dict[str, Any] | None:
    """The heartbeat's optional ``announce`` object: who the run is, before its spans arrive."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("announce must be an object with agent, session, parent_run, budget")
    announce: dict[str, Any] = {}
    for key, item in value.items():
        expected = ANNOUNCE_KEYS.get(key)
        if expected is None:
            raise BadRequest(f"announce.{key} is not allowed: expected one of "
                             + ", ".join(sorted(ANNOUNCE_KEYS)))
        if item is None:
            continue
        if not isinstance(item, expected):
            raise BadRequest(f"announce.{key}={shown(item)} is not allowed: expected a "
                             f"{expected.__name__}")
        if key in ID_KEYS:
            problem = id_problem(item)
            if problem is not None:
                raise BadRequest(f"announce.{key}={shown(item)} is not allowed: it {problem}")
        if key == "trace_id":
            _trace_id(item, "announce.trace_id")
        announce[key] = item
    budget = announce.get("budget")
    if budget is not None:
        allowed = set(BUDGET_KEYS)
        limits: dict[str, float] = {}
        for key, raw in budget.items():
            limit = budget_limit(raw, key in WHOLE_BUDGET_KEYS)
            if key not in allowed or limit is None:
                raise BadRequest(f"announce.budget.{key[:64]}={shown(raw)} is not allowed: "
                                 f"expected {', '.join(sorted(allowed))} with numbers from 0 "
                                 f"to {MAX_BUDGET:g} (whole ones for counts)")
            limits[key] = limit
        announce["budget"] = limits
    return announce
