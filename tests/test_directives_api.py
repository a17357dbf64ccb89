"""Directive delivery over real HTTP on 127.0.0.1: long-poll, Server-Sent Events (resume,
ordering, overflow, limits, heartbeats) and acks, through the control API's own routes.

The app is the real control API around a real outbox, hub and directive store; only the rule
engine is left out (decisions are submitted directly)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.harness import eventually
from watchdog.core.rules.decision import Action, Decided, Decision, Severity
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.run import RunState
from watchdog.core.runs.steps import RecentSteps
from watchdog.core.spans.record import KeySource
from watchdog.core.step import RECENT_STEPS
from watchdog.shell.api.app import create_app
from watchdog.shell.clock import Clock
from watchdog.shell.config import Config
from watchdog.shell.directives import outbox as outbox_module
from watchdog.shell.directives.hub import Hub
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.directives.webhooks import RetryPolicy, WebhookTarget
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store

# -- a small sidecar: control API + directives, on 127.0.0.1:0 -----------------------------------


class RecordingMetrics:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def directive_delivered(self, action: str, channel: str, outcome: str) -> None:
        self.calls.append((action, channel, outcome))

    def count(self, channel: str, outcome: str) -> int:
        return sum(1 for _a, c, o in self.calls if (c, o) == (channel, outcome))


@dataclass
class Sidecar:
    outbox: Outbox
    url: str
    metrics: RecordingMetrics
    runs: dict[str, RunState] = field(default_factory=dict)

    def run(self, key: str) -> RunState:
        if key not in self.runs:
            run = RunState(key, KeySource.WATCHDOG, "cd" * 16, time.time())
            run.agent = "explorer"
            run.budget = {"max_tool_calls": 20}
            self.runs[key] = run
        return self.runs[key]

    def submit(self, key: str, rule: str = "budget-countdown",
               action: Action = Action.WIND_DOWN, message: str | None = None,
               dedup_key: str | None = None) -> int:
        """Submit one decision; returns its seq."""
        run = self.run(key)
        run.tool_calls += 1
        text = message or f"{20 - run.tool_calls} of 20 tool calls left"
        made = Decision(key, rule, action, Severity.WARNING, text, None, dedup_key or text)
        now = time.time()
        directive = self.outbox.submit(Decided(made, run.view(now), recent_steps(key), now))
        assert directive is not None
        return directive.seq


def recent_steps(key: str) -> tuple[str, ...]:
    steps = RecentSteps(RECENT_STEPS)
    for i in range(1, 4):
        steps.append(ActivityEntry(key, i, time.time(), "tool", "read_file",
                                   f'{{"path": "/a/{i}"}}', f"content {i}"))
    return steps.render()[0]


@asynccontextmanager
async def sidecar(state_dir: str = ":memory:", *, webhooks: Sequence[WebhookTarget] = (),
                  retry: RetryPolicy | None = None, config: Config | None = None,
                  clock: Clock | None = None, **hub_options: Any) -> AsyncIterator[Sidecar]:
    config = config or Config(state_dir=state_dir)
    metrics = RecordingMetrics()
    store = DirectiveStore(state_dir)
    hub = Hub(store, metrics=metrics, **hub_options)
    outbox = Outbox(store, hub, webhooks, metrics=metrics,
                    clock=clock, retry=retry)
    await outbox.restore()
    await outbox.start()
    service = WatchdogService(config, Store(":memory:"))
    runner = web.AppRunner(create_app(service, config, directives=outbox), access_log=None,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield Sidecar(outbox, f"http://{host}:{port}", metrics)
    finally:
        outbox.hub.close()  # what the server does first: streams end, so the API stops fast
        await runner.cleanup()
        await outbox.stop()
        await service.close()


# -- SSE client ---------------------------------------------------------------------------------

@dataclass
class Event:
    id: int
    data: dict[str, Any]


class EventStream:
    """A minimal EventSource: parses ``id``/``event``/``data`` frames, notes comments."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.comments: list[str] = []
        self.retry: int | None = None

    async def next(self, timeout: float = 5.0) -> Event | None:
        """The next event; None when the server ends the stream."""
        fields: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while True:
            raw = await asyncio.wait_for(self.response.content.readline(),
                                         deadline - time.monotonic())
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line == "":
                if "data" in fields:
                    assert fields.get("event") == "directive"
                    return Event(int(fields["id"]), json.loads(fields["data"]))
                fields = {}
            else:
                name, _, value = line.partition(": ")
                if name == "retry":
                    self.retry = int(value)
                else:
                    fields[name] = value

    async def take(self, count: int) -> list[Event]:
        events: list[Event] = []
        for _ in range(count):
            event = await self.next()
            assert event is not None, f"stream ended after {len(events)} of {count} events"
            events.append(event)
        return events


@asynccontextmanager
async def stream(session: aiohttp.ClientSession, url: str, last_event_id: int | None = None
                 ) -> AsyncIterator[EventStream]:
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    async with session.get(url, headers=headers) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["X-Accel-Buffering"] == "no"
        yield EventStream(response)


# -- long-poll ----------------------------------------------------------------------------------

async def test_long_poll_returns_stored_at_once_and_waits_for_new_ones() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        car.submit("run-1")
        await car.outbox.flush()
        async with http.get(f"{car.url}/v1/runs/run-1/directives?after=0&wait=10") as response:
            body = await response.json()
        assert [d["seq"] for d in body["directives"]] == [1] and body["last_seq"] == 1
        first = body["directives"][0]
        assert first["action"] == "wind_down" and first["budget"]["remaining_tool_calls"] == 19
        assert "## Key Findings" in first["report_prompt"]
        assert "read_file" in first["report_prompt"]  # the activity log is in the prompt

        started = time.monotonic()
        poll = asyncio.create_task(http.get(f"{car.url}/v1/runs/run-1/directives?after=1&wait=10"))
        await eventually(lambda: car.outbox.hub.open_streams("longpoll") == 1)
        car.submit("run-1")
        async with await poll as response:
            body = await response.json()
        assert [d["seq"] for d in body["directives"]] == [2] and body["last_seq"] == 2
        assert time.monotonic() - started < 5
        assert car.metrics.count("longpoll", "sent") == 2


async def test_long_poll_times_out_empty_and_allows_unknown_runs() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        async with http.get(f"{car.url}/v1/runs/not-yet/directives?wait=0.05") as response:
            assert response.status == 200
            assert await response.json() == {"directives": [], "last_seq": 0}
        car.submit("run-1")
        await car.outbox.flush()
        # a client ahead of the store (e.g. the state dir was wiped) is told where the run is
        async with http.get(f"{car.url}/v1/runs/run-1/directives?after=9") as response:
            assert await response.json() == {"directives": [], "last_seq": 1}
        for query in ("wait=61", "wait=abc", "after=-1", "limit=0"):
            async with http.get(f"{car.url}/v1/runs/run-1/directives?{query}") as response:
                assert response.status == 400
                assert (await response.json())["error"]["code"] == "bad_request"


async def test_a_long_poll_whose_client_left_is_not_counted_as_delivered() -> None:
    """Counted (metric and ``directive_sent`` log) only when written to a client still there."""
    async with sidecar() as car, aiohttp.ClientSession() as http:
        host, port = car.url.removeprefix("http://").rsplit(":", 1)
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /v1/runs/run-1/directives?after=0&wait=10 HTTP/1.1\r\n"
                     b"Host: x\r\n\r\n")
        await writer.drain()
        await eventually(lambda: car.outbox.hub.open_streams("longpoll") == 1)
        writer.close()  # the agent went away while its poll waited
        await writer.wait_closed()
        await asyncio.sleep(0.2)  # (the sidecar sees the connection closed)
        car.submit("run-1")
        await eventually(lambda: car.outbox.hub.open_streams("longpoll") == 0)
        await asyncio.sleep(0.1)
        assert car.metrics.count("longpoll", "sent") == 0
        async with http.get(f"{car.url}/v1/runs/run-1/directives?after=0") as response:
            assert [d["seq"] for d in (await response.json())["directives"]] == [1]
        assert car.metrics.count("longpoll", "sent") == 1


async def test_unknown_or_repeated_directive_query_parameters_are_400() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        for path, message in (
                ("/v1/runs/r/directives?since=3", 'query parameter "since" is not allowed on '
                 "GET /v1/runs/{id}/directives: it takes after, wait, limit"),
                ("/v1/runs/r/directives?after=1&after=2", 'query parameter "after" is given '
                 "more than once"),
                ("/v1/runs/r/directives/stream?since=1", 'query parameter "since" is not '
                 "allowed on GET /v1/runs/{id}/directives/stream: it takes after"),
                ("/v1/directives/stream?run=r", 'query parameter "run" is not allowed on '
                 "GET /v1/directives/stream: it takes after")):
            async with http.get(car.url + path) as response:
                assert response.status == 400, path
                assert (await response.json())["error"]["message"].startswith(message), path
        # every documented one still works
        async with http.get(f"{car.url}/v1/runs/r/directives?after=0&wait=0&limit=5") as answer:
            assert answer.status == 200


async def test_an_ack_without_seq_says_seq_is_missing() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        async with http.post(f"{car.url}/v1/runs/r/ack", json={}) as response:
            assert response.status == 400
            message = (await response.json())["error"]["message"]
        assert message.startswith("seq is missing: send {\"seq\": n}"), message
        assert "None" not in message


async def test_the_run_detail_lists_the_newest_directives_and_counts_the_older_ones() -> None:
    limit = outbox_module.MAX_RUN_DIRECTIVES
    async with sidecar() as car:
        for i in range(limit + 5):
            car.submit("run-1", message=f"directive {i}")
        car.submit("run-1", action=Action.ABORT, message="stop now")
        await car.outbox.flush()
        listed, omitted = await car.outbox.run_directives("run-1")
    assert omitted == 6 and len(listed) == limit
    assert listed[-1]["action"] == "abort" and listed[-1]["seq"] == limit + 6
    assert [d["seq"] for d in listed] == list(range(7, limit + 7))


# -- SSE ----------------------------------------------------------------------------------------

async def test_sse_resume_with_last_event_id_gets_exactly_the_missed_ones() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        url = f"{car.url}/v1/runs/run-1/directives/stream"
        async with stream(http, url) as events:
            for _ in range(3):
                car.submit("run-1")
            seen = await events.take(3)
            assert events.retry == 1000
        assert [e.id for e in seen] == [1, 2, 3] == [e.data["seq"] for e in seen]
        for _ in range(4):  # while the client is away
            car.submit("run-1")
        await car.outbox.flush()
        async with stream(http, url, last_event_id=3) as events:
            resumed = await events.take(4)
            car.submit("run-1")  # and live after the backlog, without a gap or a repeat
            live = await events.take(1)
        assert [e.id for e in resumed + live] == [4, 5, 6, 7, 8]
        async with stream(http, url + "?after=6") as events:
            assert [e.id for e in await events.take(2)] == [7, 8]


async def test_a_client_ahead_of_a_sidecar_that_lost_its_state_gets_the_next_directive(
        ) -> None:
    """A sidecar whose state was lost numbers a run's directives after what its client says it
    has seen (clients ignore one numbered at or below that), by long-poll and by stream."""
    async with sidecar() as car, aiohttp.ClientSession() as http:
        async def poll() -> Any:
            url = f"{car.url}/v1/runs/polled/directives?after=7&wait=5"
            async with http.get(url) as response:
                return await response.json()

        waiting = asyncio.create_task(poll())  # waiting when the directive is decided
        await asyncio.sleep(0.1)
        assert car.submit("polled") == 8
        assert [d["seq"] for d in (await waiting)["directives"]] == [8]
        url = f"{car.url}/v1/runs/streamed/directives/stream"
        async with stream(http, url, last_event_id=41) as events:
            await asyncio.sleep(0.05)
            car.submit("streamed")
            car.submit("streamed")
            assert [e.id for e in await events.take(2)] == [42, 43]
        car.submit("other")  # a run no client named is numbered from 1
        assert car.submit("other") == 2
        await car.outbox.flush()  # (the API lists what is stored: written moments after)
        async with http.get(f"{car.url}/v1/runs/other/directives?after=1") as response:
            assert [d["seq"] for d in (await response.json())["directives"]] == [2]
        assert car.submit("other") == 3  # a client behind the sidecar changes nothing


async def test_sse_order_per_run_and_global_under_interleaving() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        runs = ["a", "b", "c"]
        async with stream(http, f"{car.url}/v1/directives/stream") as everything, \
                stream(http, f"{car.url}/v1/runs/b/directives/stream") as only_b:
            await eventually(lambda: car.outbox.hub.open_streams() == 2)
            expected_b = []
            for i in range(150):
                key = runs[i % 3]
                seq = car.submit(key, dedup_key=f"d{i}")
                if key == "b":
                    expected_b.append(seq)
                if i % 40 == 0:
                    await asyncio.sleep(0)  # let some batches go out in between
            all_events = await everything.take(150)
            b_events = await only_b.take(len(expected_b))
        assert [e.id for e in all_events] == list(range(1, 151))
        per_run: dict[str, list[int]] = {}
        for event in all_events:
            per_run.setdefault(event.data["run_id"], []).append(event.data["seq"])
        assert all(seqs == list(range(1, 51)) for seqs in per_run.values())
        assert [e.id for e in b_events] == expected_b == list(range(1, 51))
        assert car.metrics.count("sse", "sent") == 200


async def test_global_stream_starts_live_unless_asked_to_replay() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        car.submit("old")
        await car.outbox.flush()
        async with stream(http, f"{car.url}/v1/directives/stream") as live:
            await eventually(lambda: car.outbox.hub.open_streams() == 1)
            car.submit("new")
            (event,) = await live.take(1)
        assert event.data["run_id"] == "new" and event.id == 2
        async with stream(http, f"{car.url}/v1/directives/stream?after=0") as replay:
            assert [e.id for e in await replay.take(2)] == [1, 2]


async def test_a_subscriber_that_falls_behind_is_disconnected_and_resumes() -> None:
    async with sidecar(queue_size=4) as car, aiohttp.ClientSession() as http:
        url = f"{car.url}/v1/runs/run-1/directives/stream"
        async with stream(http, url) as events:
            await eventually(lambda: car.outbox.hub.open_streams() == 1)
            for i in range(20):  # one burst: stored in one batch, published in one go
                car.submit("run-1", dedup_key=f"d{i}")
            received = []
            while (event := await events.next()) is not None:
                received.append(event)
        assert car.outbox.hub.overflows == 1
        assert car.metrics.count("sse", "overflow") == 1
        await eventually(lambda: car.outbox.hub.open_streams() == 0)
        last = received[-1].id if received else 0
        async with stream(http, url, last_event_id=last) as events:  # reconnect and catch up
            rest = await events.take(20 - last)
        assert [e.id for e in received + rest] == list(range(1, 21))


async def test_stream_limit_heartbeat_and_shutdown() -> None:
    async with sidecar(max_streams=1, heartbeat=0.05) as car, aiohttp.ClientSession() as http:
        url = f"{car.url}/v1/runs/run-1/directives/stream"
        async with stream(http, url) as events:
            async with http.get(url) as refused:
                assert refused.status == 503
                assert refused.headers["Retry-After"] == "5"
                assert (await refused.json())["error"]["code"] == "overloaded"
            with pytest.raises(TimeoutError):  # nothing to send: only keep-alive comments
                await events.next(timeout=0.3)
            assert len(events.comments) >= 2 and set(events.comments) == {"keep-alive"}
            car.outbox.hub.close()  # shutdown ends open streams at once
            assert await events.next() is None


# -- acks and the run's directives --------------------------------------------------------------

async def test_ack() -> None:
    async with sidecar() as car, aiohttp.ClientSession() as http:
        car.submit("run-1")
        car.submit("run-1")
        await car.outbox.flush()
        ack = f"{car.url}/v1/runs/run-1/ack"
        async with http.post(ack, json={"seq": 1}) as response:
            assert await response.json() == {"run_id": "run-1", "acked_seq": 1}
        async with http.post(ack, json={"seq": 1, "sequence": 2}) as response:  # (named)
            assert await response.json() == {"run_id": "run-1", "acked_seq": 1,
                                             "ignored": ["sequence"]}
        for body in ({"seq": 3}, {"seq": -1}, {"seq": "1"}, {}):
            async with http.post(ack, json=body) as response:
                assert response.status == 400, body
        listed, omitted = await car.outbox.run_directives("run-1")
        assert omitted == 0
        assert [(d["seq"], d["acked"]) for d in listed] == [(1, True), (2, False)]


async def test_directive_routes_use_the_api_token() -> None:
    config = replace(Config(state_dir=":memory:"), api_token="s3cret-token-value")
    async with sidecar(config=config) as car, aiohttp.ClientSession() as http:
        async with http.get(f"{car.url}/v1/runs/r/directives/stream") as response:
            assert response.status == 401
        headers = {"Authorization": "Bearer s3cret-token-value"}
        async with http.get(f"{car.url}/v1/runs/r/directives", headers=headers) as response:
            assert response.status == 200


# -- restart ------------------------------------------------------------------------------------

async def test_numbering_and_dedup_survive_a_restart(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    async with sidecar(state) as car:
        car.submit("run-1", dedup_key="countdown-3")
        car.submit("run-2", dedup_key="loop")
    async with sidecar(state) as car, aiohttp.ClientSession() as http:
        fired = await car.outbox.restore(["run-1"])
        assert [(f.run_key, f.dedup_key) for f in fired] == [("run-1", "countdown-3")]
        assert car.submit("run-1", dedup_key="countdown-2") == 2  # continues, no reuse
        car.submit("run-1", dedup_key="countdown-3")  # an engine bug: not stored, not sent
        await car.outbox.flush()
        assert car.outbox.duplicates == 1
        async with http.get(f"{car.url}/v1/runs/run-1/directives") as response:
            body = await response.json()
        assert [d["seq"] for d in body["directives"]] == [1, 2]


async def test_submissions_beyond_the_bound_are_dropped_and_counted() -> None:
    async with sidecar() as car:
        car.outbox.max_pending = 2
        assert car.outbox.submit(Decided(Decision("r", "x", Action.NOTIFY, Severity.INFO, "m",
                                                  None, "1"), car.run("r").view(time.time()),
                                         (), time.time())) is not None
        car.submit("r", dedup_key="2")
        dropped = car.outbox.submit(Decided(Decision("r", "x", Action.NOTIFY, Severity.INFO,
                                                     "m", None, "3"),
                                            car.run("r").view(time.time()), (), time.time()))
        assert dropped is None and car.outbox.dropped == 1
        assert car.metrics.count("outbox", "dropped") == 1


@pytest.mark.parametrize("path", ["/v1/runs/r/directives", "/v1/runs/r/directives/stream",
                                  "/v1/directives/stream"])
async def test_routes_are_absent_without_directives(path: str) -> None:
    config = Config(state_dir=":memory:")
    service = WatchdogService(config, Store(":memory:"))
    runner = web.AppRunner(create_app(service, config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://{host}:{port}{path}") as r:
            assert r.status == 404
    finally:
        await runner.cleanup()
        await service.close()
