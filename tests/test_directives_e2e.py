"""Directives end to end: a scripted agent exports real OTel SDK spans (``OTLPSpanExporter`` with
a ``SimpleSpanProcessor``, so each span is sent as it ends) to a real sidecar; the shipped rule
pack decides; the decisions come back on the sidecar's own delivery channels — Server-Sent
Events and long-poll read by plain HTTP clients, and signed webhooks POSTed to a real aiohttp
receiver that verifies every request with :func:`watchdog.shell.directives.webhooks.verify`.

The unit-level behaviour of each channel (resume seams, overflow, retry classes, signing vectors)
is covered by ``test_directives_api.py``/``test_directives_webhooks.py`` with a bare outbox; here
the whole path runs — ingest, rule evaluation, outbox, store, hub, API, webhook sender — across
sidecar restarts on one state dir. Nothing sleeps for a fixed time: every wait is a poll on a
condition with a bounded timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import queue
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aiohttp import web
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.harness import (
    WAIT,
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from watchdog.shell.directives.store import DeliveryState, DirectiveStore
from watchdog.shell.directives.webhooks import verify

T = TypeVar("T")

SECRET = "whsec_" + base64.b64encode(b"agent-watchdog-e2e-webhook-key-32").decode()
DESIGN_FIELDS = ["id", "run_id", "seq", "action", "rule", "severity", "message",
                 "terminal_state", "budget", "report_prompt", "created_at"]
ISO_SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# -- the agent ------------------------------------------------------------------------------------

class Redirectable(SpanExporter):
    """The real ``OTLPSpanExporter``, re-created when the sidecar comes back on new ports (every
    test sidecar binds port 0), so one agent — one root span — can outlive a restart. Every
    export must succeed: a refused span would make the rule assertions meaningless."""

    def __init__(self, server: RunningServer) -> None:
        self.inner = self._exporter(server)
        self.results: list[SpanExportResult] = []

    @staticmethod
    def _exporter(server: RunningServer) -> OTLPSpanExporter:
        return OTLPSpanExporter(endpoint=server.otlp_http + "/v1/traces", timeout=10)

    def point_at(self, server: RunningServer) -> None:
        self.inner.shutdown()
        self.inner = self._exporter(server)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        assert result is SpanExportResult.SUCCESS, f"the sidecar refused spans: {result}"
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


class Agent:
    """A scripted agent run: a root ``invoke_agent`` span (open until :meth:`finish`) with tool
    and model calls under it. Every span carries the run id, the agent name and the budget as
    attributes, the way the client SDK / an instrumented framework announces them."""

    def __init__(self, server: RunningServer, run_id: str, name: str, max_tool_calls: int
                 ) -> None:
        self.run_id = run_id
        self.attrs: dict[str, Any] = {"watchdog.run.id": run_id, "watchdog.agent.name": name,
                                      "watchdog.budget.max_tool_calls": max_tool_calls}
        self.exporter = Redirectable(server)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "e2e-agent"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("directives-e2e")
        self.root = self.tracer.start_span(f"invoke_agent {name}", attributes={
            "gen_ai.operation.name": "invoke_agent", **self.attrs})
        self.context = trace.set_span_in_context(self.root)
        self.tool_calls = 0

    def tool(self, name: str, args: dict[str, Any], result: str) -> None:
        with self.tracer.start_as_current_span(f"execute_tool {name}", context=self.context,
                                               attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.arguments": json.dumps(args),
                "gen_ai.tool.call.result": result, **self.attrs}):
            pass
        self.tool_calls += 1

    def chat(self) -> None:
        with self.tracer.start_as_current_span("chat gpt-4o", context=self.context, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 200,
                "gen_ai.usage.output_tokens": 20,
                "gen_ai.response.finish_reasons": ["tool_calls"], **self.attrs}):
            pass

    def point_at(self, server: RunningServer) -> None:
        self.exporter.point_at(server)

    def finish(self, answer: str | None = None) -> None:
        if answer is not None:
            self.root.set_attribute("final_result", answer)
        self.root.end()
        self.provider.shutdown()


# Distinct tools, arguments and results per call: no loop, cycle or repeated-result rule fires.
CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("list_dir", {"path": "/repo"}, "README.md src tests"),
    ("read_file", {"path": "/repo/README.md"}, "# demo: a retrying HTTP client"),
    ("grep", {"pattern": "retry", "path": "/repo/src"}, "src/retry.py:12: def backoff("),
    ("read_file", {"path": "/repo/src/retry.py"}, "def backoff(n): return 2 ** n"),
    ("run_tests", {"target": "tests/test_retry.py"}, "3 passed in 0.2s"),
    ("write_file", {"path": "/repo/NOTES.md"}, "written 120 bytes"),
]


# -- Server-Sent Events, read by a plain HTTP client in a thread ---------------------------------

@dataclass
class Event:
    id: int
    data: dict[str, Any]


class SSEClient:
    """``http.client`` reading an event stream line by line in its own thread; parsed events go
    to a queue. ``connected`` is set once the server has sent its ``retry:`` preamble, which it
    writes after subscribing, so anything stored from then on reaches this client."""

    def __init__(self, url: str, last_event_id: int | None = None) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT)
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""),
                          headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "text/event-stream"
        self.events: queue.Queue[Event] = queue.Queue()
        self.connected = threading.Event()
        self.ended = threading.Event()
        self.retry_ms: int | None = None
        self._closing = False
        self.thread = threading.Thread(target=self._read, name="sse-client", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        fields: dict[str, str] = {}
        try:
            while True:
                raw = self.response.readline()
                if not raw:
                    return
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith(":"):
                    continue  # keep-alive comment
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value[1:] if value.startswith(" ") else value
                    continue
                if "retry" in fields:
                    self.retry_ms = int(fields["retry"])
                    self.connected.set()
                if "data" in fields:
                    assert fields.get("event") == "directive", fields
                    self.events.put(Event(int(fields["id"]), json.loads(fields["data"])))
                fields = {}
        except (OSError, ValueError, http.client.HTTPException):
            if not self._closing:
                raise
        finally:
            self.ended.set()

    def take(self, count: int, timeout: float = WAIT) -> list[Event]:
        deadline = time.monotonic() + timeout
        events: list[Event] = []
        while len(events) < count:
            remaining = deadline - time.monotonic()
            try:
                events.append(self.events.get(timeout=max(remaining, 0.001)))
            except queue.Empty:
                raise AssertionError(f"SSE: {len(events)} of {count} events within "
                                     f"{timeout:.0f} s: {events}") from None
        return events

    def pending(self) -> list[Event]:
        """Events received but not taken (what arrived beyond the expected ones)."""
        extra = []
        while not self.events.empty():
            extra.append(self.events.get_nowait())
        return extra

    def close(self) -> None:
        self._closing = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # unblocks the reader thread
        self.thread.join(5)
        self.conn.close()


@contextmanager
def sse(url: str, last_event_id: int | None = None) -> Iterator[SSEClient]:
    client = SSEClient(url, last_event_id)
    try:
        assert client.connected.wait(WAIT), "SSE stream never sent its retry: preamble"
        assert client.retry_ms == 1000
        yield client
    finally:
        client.close()


def long_poll(server: RunningServer, run_id: str, after: int, wait: float = 0.0
              ) -> dict[str, Any]:
    status, body = http_request(
        "GET", f"{server.api}/v1/runs/{run_id}/directives?after={after}&wait={wait:g}",
        timeout=wait + 10)
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


class Background:
    """A call running in a thread (a second client talking to the sidecar at the same time)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.started = time.monotonic()
        self.elapsed = 0.0
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # re-raised in the test thread by join()
            self.error = exc
        self.elapsed = time.monotonic() - self.started

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout: float = WAIT) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background request did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def run_directives(server: RunningServer, run_id: str) -> list[dict[str, Any]]:
    return server.get_json(f"/v1/runs/{run_id}")["directives"]  # type: ignore[no-any-return]


def open_longpolls(server: RunningServer) -> int:
    assert server.server.outbox is not None
    outbox = server.server.outbox
    return server.call(lambda: outbox.hub.open_streams("longpoll"))


def budget_message(remaining: int, limit: int) -> str:
    if remaining == 1:
        return f"[budget: 1 of {limit} tool calls left — finalize now]"
    if remaining == 0:
        return f"[budget: all {limit} tool calls used — stop and report]"
    return f"[budget: {remaining} of {limit} tool calls left — wrap up soon]"


def check_budget_directive(d: dict[str, Any], run_id: str, seq: int, remaining: int,
                           limit: int, tools_seen: Sequence[str]) -> None:
    """One budget directive as an agent receives it (DESIGN §6)."""
    assert list(d)[:len(DESIGN_FIELDS)] == DESIGN_FIELDS, list(d)
    assert d["run_id"] == run_id and d["seq"] == seq
    assert re.fullmatch(r"[0-9a-f]{32}", d["id"]), d["id"]
    assert ISO_SECONDS.match(d["created_at"]), d["created_at"]
    created = datetime.strptime(d["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(time.time() - created.timestamp()) < 120
    assert d["message"] == budget_message(remaining, limit)
    assert d["budget"] == {"max_tool_calls": limit, "remaining_tool_calls": remaining}
    assert all(type(v) is int for v in d["budget"].values()), d["budget"]  # 5, not 5.0
    if remaining == 0:
        assert (d["action"], d["rule"], d["severity"], d["terminal_state"]) == (
            "abort", "budget-exhausted", "critical", "tool_limit_reached")
    else:
        rule = "budget-last-call" if remaining == 1 else "budget-countdown"
        assert (d["action"], d["rule"], d["severity"], d["terminal_state"]) == (
            "wind_down", rule, "warning", None)
    prompt = d["report_prompt"]
    assert isinstance(prompt, str)
    # a system/developer instruction from the supervisor, not a user turn
    assert prompt.startswith("[agent-watchdog: system instruction")
    assert "not from the user" in prompt
    assert not re.search(r"(?im)^\s*(user|human)\s*:", prompt)
    assert d["message"] in prompt
    for section in ("## Task", "## Completed Work", "## Key Findings",
                    "## Attempted but Inconclusive", "## Not Started / Remaining",
                    "## Suggested Next Steps"):
        assert section in prompt
    # the run's own activity log, up to and including the call that triggered it
    for tool in tools_seen:
        assert tool in prompt, (tool, prompt)
    used = limit - remaining
    assert f"tool calls {used} of {limit} ({remaining} left)" in prompt, prompt
    assert ("Stop calling tools now" in prompt) is (remaining == 0)


# -- 1. budget countdown on SSE and long-poll -----------------------------------------------------

def test_budget_countdown_reaches_sse_and_long_poll_with_the_right_numbers(tmp_path: Path
                                                                           ) -> None:
    run_id = f"budget-{uuid.uuid4().hex[:12]}"
    limit = 5
    # after call n: (seq, remaining) of the directive it must produce; call 1 produces none
    expected = {2: (1, 3), 3: (2, 2), 4: (3, 1), 5: (4, 0)}
    with running_server(sidecar_config(tmp_path / "state")) as server:
        stream_url = f"{server.api}/v1/runs/{run_id}/directives/stream"
        with sse(stream_url) as live:  # connected before the run's first span exists
            agent = Agent(server, run_id, "budgeted-explorer", max_tool_calls=limit)
            received: list[Event] = []
            waiting: Background | None = None
            for n, (tool, args, result) in enumerate(CALLS[:limit], start=1):
                if n == limit:  # a long-poll already waiting when the abort is decided
                    waiting = Background(lambda: long_poll(server, run_id, after=3, wait=15))
                    wait_until(lambda: open_longpolls(server) == 1, "the long-poll is waiting")
                agent.tool(tool, args, result)
                if n not in expected:
                    continue
                (event,) = live.take(1)
                seq, remaining = expected[n]
                assert event.id == seq
                check_budget_directive(event.data, run_id, seq, remaining, limit,
                                       [call[0] for call in CALLS[:n]])
                received.append(event)
            assert waiting is not None
            woken = waiting.join()
            assert [d["seq"] for d in woken["directives"]] == [4] and woken["last_seq"] == 4
            assert woken["directives"][0] == received[-1].data
            assert waiting.elapsed < 10  # woken by the directive, not by its wait running out

            sent = [event.data for event in received]
            # long-poll from the start: the same list, in the same order
            assert long_poll(server, run_id, after=0) == {"directives": sent, "last_seq": 4}
            assert long_poll(server, run_id, after=2)["directives"] == sent[2:]
            # nothing new after the last one: the poll holds its full wait, then answers empty
            idle_poll = Background(lambda: long_poll(server, run_id, after=4, wait=2))
            # meanwhile: a reconnecting stream replays exactly what it missed, then waits
            with sse(stream_url, last_event_id=2) as resumed, \
                    sse(f"{server.api}/v1/directives/stream?after=0") as everything:
                replayed = resumed.take(2)
                assert [e.id for e in replayed] == [3, 4]
                assert [e.data for e in replayed] == sent[2:]
                every = everything.take(4)
                assert [e.data for e in every] == sent
                global_ids = [e.id for e in every]
                assert global_ids == sorted(set(global_ids))
                assert idle_poll.join() == {"directives": [], "last_seq": 4}
                assert idle_poll.elapsed >= 1.9
                # two more seconds on the open streams: nothing was sent twice
                assert resumed.pending() == [] and everything.pending() == []
            assert live.pending() == []

            agent.finish()  # the root span: the run ends
            run = wait_until(
                lambda: (r := server.get_json(f"/v1/runs/{run_id}"))["state"] == "ended" and r,
                "the run ends when its root span arrives")
    assert run["terminal_state"] == "tool_limit_reached"
    assert run["terminal_reason"] == "budget-exhausted"
    assert run["signals"]["tool_calls"] == limit
    assert [{k: v for k, v in d.items() if k != "acked"} for d in run["directives"]] == sent
    assert [d["acked"] for d in run["directives"]] == [False] * 4
    assert all(result is SpanExportResult.SUCCESS for result in agent.exporter.results)


# -- 2. webhooks exactly once across a receiver outage and a sidecar restart --------------------

class WebhookReceiver:
    """A real aiohttp server on 127.0.0.1 (its own thread and loop) that verifies the Standard
    Webhooks signature of every POST, answers ``status``, and counts attempts and acceptances
    by ``webhook-id``."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.status = 200
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self.raw: dict[str, tuple[bytes, dict[str, str]]] = {}
        self.bad_signatures = 0
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="webhook-receiver",
                                        daemon=True)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        with self.lock:
            if not verify(body, request.headers, self.secret):
                self.bad_signatures += 1
                return web.Response(status=401)
            msg_id = request.headers["webhook-id"]
            status = self.status
            self.attempts[msg_id] += 1
            if 200 <= status < 300:
                self.accepted[msg_id] += 1
                self.raw.setdefault(msg_id, (body, headers))
        return web.Response(status=status)

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        with self.lock:
            return Counter(self.attempts), Counter(self.accepted)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/hooks/watchdog", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/hooks/watchdog"

    def __exit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def deliveries(server: RunningServer) -> list[Any]:
    assert server.server.outbox is not None
    return server.server.outbox.store.deliveries()


def test_webhooks_arrive_exactly_once_across_a_receiver_outage_and_a_sidecar_restart(
        tmp_path: Path) -> None:
    run_id = f"hooked-{uuid.uuid4().hex[:12]}"
    limit = 6
    state = tmp_path / "state"
    with WebhookReceiver(SECRET) as receiver:
        config = sidecar_config(state, webhooks=(
            {"url": receiver.url, "secret": SECRET, "name": "test"},))
        receiver.status = 503  # the receiver is down
        with running_server(config) as first:
            agent = Agent(first, run_id, "hooked-agent", max_tool_calls=limit)
            for tool, args, result in CALLS[:4]:  # -> "3 of 6" (call 3), "2 of 6" (call 4)
                agent.tool(tool, args, result)
            stored = wait_until(lambda: len(found := run_directives(first, run_id)) == 2 and found,
                           "two countdown directives stored during the outage")
            ids_before = [d["id"] for d in stored]
            # each refused at least twice (the first attempt and a backoff retry), none accepted
            wait_until(lambda: all(receiver.snapshot()[0][i] >= 2 for i in ids_before),
                  "the outbox retries during the outage")
            assert not receiver.snapshot()[1]
            rows = deliveries(first)
            assert [(r.hook, r.state) for r in rows] == [("test", DeliveryState.PENDING)] * 2
        # the sidecar has stopped: what it still owes the receiver is on disk
        store = DirectiveStore(str(state))
        try:
            pending = store.deliveries()
        finally:
            store.close()
        assert [(r.state, r.attempts >= 2, r.last_error) for r in pending] == [
            (DeliveryState.PENDING, True, "HTTP 503")] * 2

        receiver.status = 200  # the receiver is back; a new sidecar on the same state dir
        with running_server(config) as second:
            agent.point_at(second)
            wait_until(lambda: set(receiver.snapshot()[1]) == set(ids_before),
                  "the persisted deliveries are sent after the restart")
            for tool, args, result in CALLS[4:6]:  # -> "1 of 6" (call 5), abort (call 6)
                agent.tool(tool, args, result)
            everything = wait_until(lambda: len(found := run_directives(second, run_id)) == 4
                               and found, "two more directives after the restart")
            wait_until(lambda: len(rows := deliveries(second)) == 4
                  and all(r.state is DeliveryState.DELIVERED for r in rows),
                  "every delivery is marked delivered")
            attempts, accepted = receiver.snapshot()
            agent.finish("Retries use exponential backoff (src/retry.py:12).")

    ids = [d["id"] for d in everything]
    assert ids[:2] == ids_before
    assert [(d["seq"], d["rule"]) for d in everything] == [
        (1, "budget-countdown"), (2, "budget-countdown"), (3, "budget-last-call"),
        (4, "budget-exhausted")]
    # exactly once each, counted by webhook-id; no signature ever failed
    assert accepted == Counter(dict.fromkeys(ids, 1)), accepted
    assert receiver.bad_signatures == 0
    assert [attempts[i] for i in ids[2:]] == [1, 1]  # fine weather: first attempt delivered
    for directive in everything:
        body, headers = receiver.raw[directive["id"]]
        payload = json.loads(body)
        assert payload == {k: v for k, v in directive.items() if k != "acked"}
        assert headers["webhook-id"] == payload["id"]
        assert headers["webhook-signature"].startswith("v1,")
        assert headers["Content-Type"] == "application/json"
        assert verify(body, headers, SECRET)
    # what a receiver must refuse: a changed body, a body moved to another id, another key
    body, headers = receiver.raw[ids[-1]]
    tampered = body.replace(b'"action":"abort"', b'"action":"notify"')
    assert tampered != body and not verify(tampered, headers, SECRET)
    assert not verify(body + b" ", headers, SECRET)
    assert not verify(body, {**headers, "webhook-id": ids[0]}, SECRET)
    other_key = "whsec_" + base64.b64encode(b"not-the-key-this-sidecar-uses!").decode()
    assert not verify(body, headers, other_key)
    assert not verify(body, headers, SECRET, now=int(headers["webhook-timestamp"]) + 301)


# -- 3. restart: nothing fires twice, numbering continues ----------------------------------------

def test_directives_fired_before_a_restart_are_not_fired_again_and_seq_continues(
        tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "state")
    main, other = f"restart-{uuid.uuid4().hex[:12]}", f"other-{uuid.uuid4().hex[:12]}"

    def seen(server: RunningServer, run_id: str, count: int) -> list[dict[str, Any]]:
        return wait_until(lambda: len(found := long_poll(server, run_id, 0)["directives"]) >= count
                     and found, f"{count} directives for {run_id}")

    def check_outbox(server: RunningServer) -> None:
        outbox = server.server.outbox
        assert outbox is not None
        assert (outbox.duplicates, outbox.dropped) == (0, 0)  # nothing re-decided

    with running_server(config) as first:
        agent = Agent(first, main, "restarted", max_tool_calls=6)
        bystander = Agent(first, other, "bystander", max_tool_calls=4)
        for tool, args, result in CALLS[:3]:  # remaining 3 -> countdown "3 of 6"
            agent.tool(tool, args, result)
        bystander.tool("list_dir", {"path": "/"}, "bin etc")  # remaining 3 -> "3 of 4"
        seen(first, other, 1)
        agent.tool(*CALLS[3])  # remaining 2 -> countdown "2 of 6"
        seen(first, main, 2)
        check_outbox(first)

    with running_server(config) as second:
        agent.point_at(second)
        bystander.point_at(second)
        # the same runs go on; every rule condition that held before the restart still holds
        # (remaining 2 of 6 and 3 of 4, same messages): nothing is decided again
        agent.chat()
        bystander.chat()
        agent.tool(*CALLS[4])  # remaining 1 -> last call, the next number
        after_first_restart = seen(second, main, 3)
        check_outbox(second)

    with running_server(config) as third:
        agent.point_at(third)
        bystander.point_at(third)
        agent.chat()  # remaining 1 holds: budget-last-call does not fire again
        bystander.chat()
        agent.tool(*CALLS[5])  # remaining 0 -> abort
        final = seen(third, main, 4)
        with sse(f"{third.api}/v1/directives/stream?after=0") as everything:
            every = everything.take(5)
        assert long_poll(third, other, 0)["directives"] == seen(third, other, 1)
        check_outbox(third)
        agent.finish()
        bystander.finish()
        ended = wait_until(lambda: (r := third.get_json(f"/v1/runs/{main}"))["state"] == "ended"
                      and r, "the run ends")

    assert [(d["seq"], d["rule"], d["message"]) for d in final] == [
        (1, "budget-countdown", budget_message(3, 6)),
        (2, "budget-countdown", budget_message(2, 6)),
        (3, "budget-last-call", budget_message(1, 6)),
        (4, "budget-exhausted", budget_message(0, 6)),
    ]
    assert final[:3] == after_first_restart
    assert [d["budget"]["remaining_tool_calls"] for d in final] == [3, 2, 1, 0]
    # the global numbering continues across both restarts too: no number reused, no gap
    assert [e.id for e in every] == [1, 2, 3, 4, 5]
    assert [(e.data["run_id"], e.data["seq"]) for e in every] == [
        (main, 1), (other, 1), (main, 2), (main, 3), (main, 4)]
    assert len({e.data["id"] for e in every}) == 5
    assert ended["terminal_state"] == "tool_limit_reached"
    assert ended["terminal_reason"] == "budget-exhausted"
    assert [d["id"] for d in ended["directives"]] == [d["id"] for d in final]
