"""The compiled relay sends a request that continues a run upstream before the event loop has
read it, once the loop has said what the next request of that conversation gets
(``admit_next``: ``watchdog/shell/model/native.py``, ``native/relay/src/admit.rs``); and only
when nothing the request carries can change that.

As in ``tests/test_model_admission.py``, a served test holds the sidecar's event loop busy and
looks at what the upstream has received meanwhile."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.test_model_admission import (
    AGENT,
    BUDGET_PACK,
    PATHS,
    REPLIES,
    SEARCH,
    busy,
    in_background,
    post,
    reply,
    runs,
    seen_with,
    sidecar,
)
from tests.test_model_admission import upstream as upstream  # (the fixture)
from tests.test_model_proxy import RawUpstream
from watchdog.shell.clock import ManualClock
from watchdog.shell.model.native import NativeEndpoint

ANSWER = REPLIES[PATHS["chat"]]["choices"][0]["message"]  # the upstream's plain answer


def turn(task: str, *after: dict[str, Any], **extra: Any) -> bytes:
    """A request of the conversation of ``task``: its system prompt, the task, and the
    messages ``after`` it."""
    return json.dumps({"model": "m", "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": task},
        *after], "tools": SEARCH, **extra}).encode()


def tool_turn(task: str, calls: int) -> bytes:
    """The agent's turn ``calls`` (as the bench's agents send it): for each turn before, the
    model's tool call and the tool's result."""
    after: list[dict[str, Any]] = []
    for k in range(1, calls + 1):
        call = f"bench_{task.replace(' ', '_')}_{k}"
        after += [{"role": "assistant", "content": None, "tool_calls": [{
                      "id": call, "type": "function",
                      "function": {"name": "search", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": call, "content": f"result {k}"}]
    return turn(task, *after)


def native_of(server: RunningServer) -> NativeEndpoint:
    native = server.server.native
    assert native is not None
    return native


def told(server: RunningServer, count: int) -> None:
    """Until the relay has been told what the next request of ``count`` runs gets, once every
    call that has ended is booked (what was told before a call's booking is no proof of what
    its run's next request gets: the booking tells again, or takes it back)."""
    native = native_of(server)
    wait_until(lambda: not server.call(lambda: native.ended)
               and len(native.next_of) >= count,
               lambda: f"{len(native.next_of)} of {count} runs told")


def test_a_request_that_continues_a_run_goes_on_while_the_loop_is_busy(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """The run's call handed over no tool call and it has no budget and no directive: its next
    request (as the bench's agents send it: tool results for calls of their own) gets a plain
    pass whatever its results say, so the relay sends it on at once; the loop reads it
    afterwards, books it in the same run and finds the same."""
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], turn("task one"))[0] == 200  # decided by the loop
        told(server, 1)
        body = tool_turn("task one", 1)
        with busy(server) as held:
            status, answer = post(server, PATHS["chat"], body)
            assert not held.free.is_set(), "the request waited for the loop"
        assert status == 200 and json.loads(answer) == REPLIES[PATHS["chat"]]
        assert upstream.seen[-1].body == body  # byte for byte
        native = native_of(server)
        wait_until(lambda: native.continued == 1, "the request read by the loop")
        assert native.missed == 0
        wait_until(lambda: [run["iterations"] for run in runs(server)] == [2],
                   lambda: f"one run, both calls booked: {runs(server)}")


def answering(task: str, *turns: list[str], calls: int | None = None) -> bytes:
    """The request that follows the model's handing over, at each of ``turns``, as many calls
    of ``search`` as it has results (``call_0``...: the upstream's), with those results; with
    ``calls``, the upstream is asked to hand that many over again."""
    after: list[dict[str, Any]] = []
    for results in turns:
        after += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": "search", "arguments": json.dumps({"q": n})}}
            for n in range(len(results))]}, *({"role": "tool", "tool_call_id": f"call_{n}",
                                              "content": result}
                                             for n, result in enumerate(results))]
    return turn(task, *after, **({"metadata": {"calls": str(calls)}} if calls else {}))


def test_a_request_answering_the_calls_handed_over_goes_on_while_the_loop_is_busy(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A real agent's next request: the model handed two calls over, and the agent sends their
    results back. The loop proved, when it booked the call, that such a request gets a plain
    pass (what the rules decide on the records its results make, read as no failure and like
    no result before, whenever it comes within the hold); the relay finds it carries just that
    and sends it on at once. The loop reads it afterwards and decides the same. A result that
    reads as a failure, or repeats one the run had, keeps the next request for the loop."""
    with sidecar(tmp_path, upstream) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("real", metadata={"calls": "2"}))[0] == 200
        told_or_not(server)
        body = answering("real", ["found a", "found b"], calls=2)
        with busy(server) as held:
            assert post(server, PATHS["chat"], body)[0] == 200
            assert not held.free.is_set(), "the request waited for the loop"
        assert upstream.seen[-1].body == body
        wait_until(lambda: native.answered == 1, "the request read by the loop")
        assert native.missed == 0
        wait_until(lambda: runs(server) and runs(server)[0]["tool_calls"] == 2,
                   lambda: f"both results booked in the run: {runs(server)}")
        # handed over again: one result repeats one the run had
        told_or_not(server)
        waits(server, upstream, answering("real", ["found a", "found b"], ["found c", "found a"]),
              "found c")
        # a result that reads as a failure
        assert post(server, PATHS["chat"], turn("failing", metadata={"calls": "2"}))[0] == 200
        told_or_not(server)
        waits(server, upstream, answering("failing", ["Error: the index is gone", "found"]),
              "the index is gone")
        assert native.answered == 1 and native.missed == 0


def test_a_request_sent_as_soon_as_the_answer_before_it_ends_waits_for_its_booking_only(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """An agent sends its next request as soon as it has the answer before it, before the loop
    can have booked that answer's call: the relay holds that request for the booking (which it
    would wait for anyway) and then sends it on as it was told, without the loop deciding it
    first."""
    with sidecar(tmp_path, upstream) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("warming"))[0] == 200  # (the first booking
        wait_until(lambda: native.next_of, "warm")  # loads the pricing, the conventions...)
        assert post(server, PATHS["chat"], turn("at once"))[0] == 200
        for calls in range(1, 5):
            assert post(server, PATHS["chat"], tool_turn("at once", calls))[0] == 200
        wait_until(lambda: native.admitted == 5, lambda: f"{native.admitted} of 5 read")
        assert native.continued == 4 and native.missed == 0


def test_a_continuing_request_goes_on_once_per_call_booked(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """What the relay was told is used once: the request after, while the loop has not booked
    the call before it, waits for the loop."""
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], turn("once"))[0] == 200
        told(server, 1)
        with busy(server) as held:
            assert post(server, PATHS["chat"], tool_turn("once", 1))[0] == 200
            answer = in_background(lambda: post(server, PATHS["chat"], tool_turn("once", 2)))
            held.waiting(1)
            assert len(upstream.seen) == 2
        assert answer()[0] == 200
        native = native_of(server)
        wait_until(lambda: native.continued == 1 and native.admitted == 1, "read")
        # booked, told again: the next one goes on
        told(server, 1)
        with busy(server) as held:
            assert post(server, PATHS["chat"], tool_turn("once", 3))[0] == 200
            assert not held.free.is_set()
        wait_until(lambda: native.continued == 2, "read")
        assert native.missed == 0


def streamed(handler: Any, seen: Any) -> None:
    """The model's plain answer, streamed (what it said is read by the relay)."""
    from tests.test_model_proxy import send

    chunks = [{"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
              for delta, reason in (({"role": "assistant", "content": "done"}, None),
                                    ({}, "stop"))]
    send(handler, 200, b"".join(b"data: %s\n\n" % json.dumps(chunk).encode()
                                for chunk in chunks) + b"data: [DONE]\n\n",
         {"Content-Type": "text/event-stream"})


def streaming(body: bytes) -> bytes:
    return json.dumps({**json.loads(body), "stream": True}).encode()


def test_a_request_waiting_for_its_calls_booking_has_that_call_booked_first(
        tmp_path: Path) -> None:
    """Two conversations' calls end while the loop is busy, "first"'s before "second"'s, and
    the next request of "second" comes at once: it waits in the relay for its call's booking,
    and the relay tells the loop so. Once free, the loop books that call in a step of its own,
    before the one that ended before it, and the request goes on as the booking said."""
    raw = RawUpstream(streamed)
    try:
        with sidecar(tmp_path, raw) as server:
            native = native_of(server)
            keys: list[str] = []
            for task in ("first", "second"):  # (decided by the loop)
                assert post(server, PATHS["chat"], streaming(turn(task)))[0] == 200
                told(server, len(keys) + 1)
                keys.append(next(key for key in native.next_of if key not in keys))
            steps: list[list[str]] = []
            book_calls = native.proxy.book_calls

            def booking(calls: list[Any]) -> None:
                steps.append([call.key for call in calls])
                book_calls(calls)

            native.proxy.book_calls = booking  # type: ignore[method-assign]
            waiting = streaming(tool_turn("second", 2))
            with busy(server):
                for task in ("first", "second"):  # sent on as told, answered while held
                    assert post(server, PATHS["chat"],
                                streaming(tool_turn(task, 1)))[0] == 200
                third = in_background(lambda: post(server, PATHS["chat"], waiting))
                wait_until(lambda: len(native.relay.awaited) == 1, "the request waiting")
            assert third()[0] == 200
            assert raw.seen[-1].body == waiting  # byte for byte
            wait_until(lambda: not server.call(lambda: native.pending or native.ended),
                       "all booked")
            assert steps[0] == [keys[1]] and keys[0] in steps[1], steps
            assert native.missed == 0
    finally:
        raw.close()


def test_a_countdown_request_read_by_the_loop_leaves_its_next_request_waiting_for_its_booking(
        tmp_path: Path) -> None:
    """A run with a rule pack's budget of three calls: every request carries the countdown, so
    the loop's reading of a request the relay sent on ahead is a step that decides on the run,
    which takes back what the relay was told of its next request (already used). That takes
    back nothing of the call in flight: the next request, sent once the answer has ended while
    the loop is busy, still waits for that call's booking (the relay holds it up to 50 ms), as
    any continuing request does, rather than going to the loop at once."""
    gate = threading.Event()

    def gated(handler: Any, seen: Any) -> None:
        if b"gated" in seen.body:
            gate.wait(10)
        reply(handler, seen)

    raw = RawUpstream(gated)
    try:
        with sidecar(tmp_path, raw, BUDGET_PACK.format(agent=AGENT, calls=3)) as server:
            native = native_of(server)
            first = turn("counted down", metadata={"calls": "1"})
            status, body = post(server, PATHS["chat"], first)  # (decided by the loop)
            assert status == 200
            answer = json.loads(body)["choices"][0]["message"]
            after = [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                              "content": "found"}]
            told(server, 1)
            second = in_background(lambda: post(server, PATHS["chat"], turn(
                "counted down", *after, metadata={"calls": "1", "gated": True})))
            wait_until(lambda: native.continued == 1 and native.noted == 1,
                       "the second request sent on ahead with its countdown, read by the loop")
            with busy(server) as held:
                gate.set()
                status, body = second()
                assert status == 200
                answer = json.loads(body)["choices"][0]["message"]
                after += [answer, {"role": "tool", "content": "found too",
                                   "tool_call_id": answer["tool_calls"][0]["id"]}]
                sent = time.monotonic()
                third = in_background(lambda: post(server, PATHS["chat"], turn(
                    "counted down", *after, metadata={"calls": "1"})))
                held.waiting(1)
                waited = time.monotonic() - sent
                assert waited >= 0.045, f"it went to the loop after {waited * 1000:.1f} ms"
            assert third()[0] == 200
            wait_until(lambda: native.admitted >= 1 and not server.call(lambda: native.ended),
                       "booked")
            assert native.missed == 0
    finally:
        raw.close()


def waits(server: RunningServer, upstream: RawUpstream, body: bytes, marker: str,
          headers: dict[str, str] | None = None) -> None:
    """``body`` is kept for the loop: nothing of it reaches the upstream while it is busy."""
    with busy(server) as held:
        answer = in_background(lambda: post(server, PATHS["chat"], body, headers))
        held.waiting(1)
        assert not seen_with(upstream, marker)
    assert answer()[0] == 200


def test_a_run_whose_next_request_may_be_decided_otherwise_waits_for_the_loop(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """Each of these waits for the loop: the next request of a run whose call handed over tool
    calls, answered with the same result twice (a repeat the rules count), of a run with a
    budget in dollars, one that answers a call another response handed over, one no longer than the
    request decided, one with content the relay does not read, and one the loop decided
    itself."""
    pack = BUDGET_PACK.format(agent="budgeted", calls=50).replace("max_tool_calls",
                                                                    "max_cost_usd")
    with sidecar(tmp_path, upstream, pack) as server:
        native = native_of(server)
        # handed over two calls, answered with the same result twice
        assert post(server, PATHS["chat"], turn("handing", metadata={"calls": "2"}))[0] == 200
        wait_until(lambda: len(runs(server)) == 1, "booked")
        handed = json.loads(tool_calls_body := turn("handing", {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{n}", "type": "function",
                 "function": {"name": "search", "arguments": json.dumps({"q": n})}}
                for n in range(2)]}, *({"role": "tool", "tool_call_id": f"call_{n}",
                                       "content": "found"} for n in range(2))))
        assert handed["messages"][-1]["role"] == "tool"
        waits(server, upstream, tool_calls_body, "found")
        # a budget in dollars: the loop counts every call's cost
        budgeted = {"X-Watchdog-Agent": "budgeted"}
        assert post(server, PATHS["chat"], turn("budget"), budgeted)[0] == 200
        told_or_not(server)
        waits(server, upstream, tool_turn("budget", 1), "result 1", budgeted)
        # an answer to a call another response handed over (call_0, above)
        assert post(server, PATHS["chat"], turn("twin"))[0] == 200
        told(server, 1)
        stolen = turn("twin", ANSWER, {"role": "tool", "tool_call_id": "call_0",
                                       "content": "stolen"})
        waits(server, upstream, stolen, "stolen")
        # no longer than the request decided
        assert post(server, PATHS["chat"], tool_turn("short", 1))[0] == 200
        told(server, 1)
        waits(server, upstream, turn("short", ANSWER, {"role": "tool", "tool_call_id": "x",
                                                       "content": "short again"}), "short again")
        # a new user message (it may start the next run), content in parts
        for task, marker, *last in (
                ("task U", "user next", {"role": "user", "content": "user next"}),
                ("task P", "parts next", {"role": "system", "content": [
                    {"type": "text", "text": "parts next"}]},
                 {"role": "tool", "tool_call_id": "y", "content": "found"})):
            assert post(server, PATHS["chat"], turn(task))[0] == 200
            told(server, 1)
            waits(server, upstream, turn(task, ANSWER, *last), marker)
        assert native.continued == 0 and native.missed == 0


def test_a_directive_on_the_run_takes_back_what_the_relay_was_told(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A rule that fires on the run (here at its second model call) posts a directive: its
    next request carries the wind-down note, which only the loop writes."""
    pack = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: continuation-wind-down
rules:
  - name: second-call-wind-down
    when: "run.iterations >= 2"
    action: wind_down
    severity: warning
    message: "WIND DOWN NOW"
"""
    with sidecar(tmp_path, upstream, pack) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("winding"))[0] == 200
        told(server, 1)
        assert post(server, PATHS["chat"], tool_turn("winding", 1))[0] == 200
        wait_until(lambda: native.continued == 1, "the second request read")
        wait_until(lambda: not native.next_of and runs(server)[0]["iterations"] == 2,
                   "the directive takes it back")
        waits(server, upstream, tool_turn("winding", 2), "result 2")
        assert b"WIND DOWN NOW" in upstream.seen[-1].body
        assert native.missed == 0


def test_a_budget_announced_on_the_run_takes_back_what_the_relay_was_told(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A heartbeat that announces a budget on the run (its id, as GET /v1/runs lists it),
    with no rule firing on it: its next request is the loop's, which counts it against the
    budget (it went on as told before: decided otherwise once read, a miss; a budget it
    could not bound)."""
    with sidecar(tmp_path, upstream) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("announced", metadata={"calls": "2"}))[0] == 200
        told(server, 1)
        key = runs(server)[0]["id"]
        status, _ = http_request(
            "POST", f"{server.api}/v1/runs/{key}/heartbeat",
            json.dumps({"messages": 3, "announce": {"budget": {"max_tool_calls": 50}}}).encode(),
            {"Content-Type": "application/json"})
        assert status == 200
        wait_until(lambda: not native.next_of, "the announcement takes it back")
        waits(server, upstream, answering("announced", ["found a", "found b"]), "found a")
        assert native.continued == 0 and native.missed == 0


def test_a_continuing_request_decided_otherwise_is_a_logged_miss(
        tmp_path: Path, upstream: RawUpstream, caplog: pytest.LogCaptureFixture) -> None:
    """What the relay was told made wrong on purpose (a bound of 1): the request it sends on
    is read, found to differ, logged, counted, and the relay forgets what it was told. The
    call it sent is booked all the same, as sent (what its answer handed over counts), and
    what the relay is told next is the loop's own proof from that booking."""
    caplog.set_level(logging.WARNING, logger="watchdog.model")
    with sidecar(tmp_path, upstream) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("wrong"))[0] == 200
        told(server, 1)
        session = next(iter(native.next_of.values()))
        server.call(lambda: native.relay.admit_next(session, 1, 2, AGENT))
        assert post(server, PATHS["chat"], tool_turn("wrong", 1))[0] == 200
        wait_until(lambda: native.missed == 1, "the miss seen")
        assert native.continued == 1
        assert any("its run's next" in r.getMessage() and "decided otherwise once read"
                   in r.getMessage() for r in caplog.records)
        wait_until(lambda: runs(server)[0]["iterations"] == 2, "the missed call booked")


ABORT_LATER = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: abort-later
rules:
  - name: abort-later
    description: A test's abort, decided by the timer once the test's clock says so.
    agents: ["admitted"]
    when: "!run.ended && run.elapsed_seconds > 500.0"
    action: abort
    severity: critical
    message: "[stopped: decided meanwhile]"
"""


def test_a_request_sent_on_ahead_whose_run_an_abort_stopped_meanwhile_is_booked_as_sent(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """The relay sends a continuing request on ahead; before the loop reads it, the timer
    decides an abort of its run (the test's clock moved past its time). The upstream's answer
    has gone to the agent, so the call is booked as it was sent (a miss: its model call and the
    tool call it handed over count), and the run's next request gets the stop, the upstream
    nothing."""
    pack = tmp_path / "pack.yaml"
    pack.write_text(ABORT_LATER)
    clock = ManualClock()
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_relay="native", model_upstream=upstream.base + "/v1",
                            model_agent_name=AGENT, rules=(str(pack),), eval_interval=3600.0)
    with running_server(config, clock) as server:
        native = native_of(server)
        service = server.server.service
        assert service is not None
        assert post(server, PATHS["chat"], turn("meanwhile", metadata={"calls": "1"}))[0] == 200
        told(server, 1)
        with busy(server) as held:
            status, answer = post(server, PATHS["chat"],
                                  answering("meanwhile", ["found a"], calls=1))
            assert not held.free.is_set(), "the request waited for the loop"
            clock.advance(600.0)  # the abort, decided before the loop reads the request
            server.loop.call_soon_threadsafe(service.tick)
        assert status == 200 and json.loads(answer)["choices"][0]["message"]["tool_calls"]
        wait_until(lambda: native.missed == 1, "the miss seen")
        sent = len(upstream.seen)
        wait_until(lambda: runs(server)[0]["iterations"] == 2,
                   lambda: f"the call sent on booked: {runs(server)}")
        status, answer = post(server, PATHS["chat"], answering(
            "meanwhile", ["found a"], ["found b"]))
        assert status == 200 and "[stopped: decided meanwhile]" in answer.decode()
        assert len(upstream.seen) == sent  # the stop, from the endpoint
        wait_until(lambda: runs(server)[0]["tool_calls"] == 2, "the call handed over counted")


# -- the same upstream requests with the fast path on and off -------------------------------------

SCENARIO_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: continuation-scenarios
budgets:
  - agents: ["packed"]
    max_tool_calls: 4
  - agents: ["long-packed"]
    max_tool_calls: 11
rules:
  - name: third-call-wind-down
    agents: ["winding"]
    when: "!run.ended && run.iterations >= 3"
    action: wind_down
    severity: warning
    grace: {tool_calls: 2}
    message: "WIND DOWN: report now"
  - name: fifth-call-abort
    agents: ["aborting"]
    when: "run.iterations >= 5"
    action: abort
    severity: critical
    message: "ABORTED at five calls"
"""


def scripted(handler: Any, seen: Any) -> None:
    """The upstream: a plain answer, or the tool calls the request's ``metadata.calls`` asks
    for, their ids drawn from the request (the same on every sidecar)."""
    from tests.test_model_proxy import send

    body = json.loads(seen.body)
    wanted = int((body.get("metadata") or {}).get("calls", 0))
    tools_left = body.get("tool_choice") != "none" and body.get("tools")
    if not wanted or not tools_left:
        send(handler, 200, json.dumps(REPLIES[PATHS["chat"]]).encode())
        return
    tag = hashlib.sha256(untimed(seen.body)).hexdigest()[:10]
    send(handler, 200, json.dumps({
        "id": "chatcmpl-" + tag, "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                             "tool_calls": [
            {"id": f"call_{tag}_{n}", "type": "function", "function": {
                "name": body["tools"][0]["function"]["name"], "arguments": json.dumps({"q": n})}}
            for n in range(wanted)]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3,
                                                        "completion_tokens": 9}}).encode())


# (agent, system prompt, per turn: the tool calls asked of the model, what each result says)
# (a result's {n}: the turn's number, so that results differ from turn to turn)
SCENARIOS: list[tuple[str, str, list[tuple[int, str]]]] = [
    (AGENT, "plain", [(0, "fine")] * 5),  # every later request goes on ahead
    (AGENT, "budget by header", [(1, "fine {n}")] * 6),
    ("packed", "budget by pack", [(2, "fine {n}")] * 4),
    ("long-packed", "a long budget by pack", [(2, "fine {n}")] * 7),  # (bounds ahead)
    (AGENT, "error loop", [(1, "Error: connection refused")] * 8),
    ("winding", "wind-down", [(1, "fine {n}")] * 6),
    ("aborting", "abort", [(0, "fine")] * 7),
    (AGENT, "[budget: 3 of 9 tool calls left — wrap up soon] the SDK's", [(1, "fine {n}")] * 4),
    (AGENT, "mixed", [(0, "fine"), (2, "fine {n}"), (0, "fine"), (0, "fine"), (1, "fine {n}"),
                      (0, "fine")]),
    # a real agent's calls answered: the same call each turn (the default pack's
    # repeated-tool-call and tool-cycle wind it down), two calls each turn, a result that
    # repeats (repeated-tool-result), failures now and then
    # (an agent of their own: a request of AGENT's that the relay cannot read, the SDK's
    # above, takes back what it was told of every conversation of AGENT's)
    ("answering", "calls answered", [(1, "found {n}")] * 7),
    ("answering", "two calls answered", [(2, "got {n}")] * 6),
    ("answering", "results repeat", [(1, "the same")] * 7),
    ("answering", "now and then a failure", [(1, "found {n}"), (1, "Error: timeout {n}"),
                                             (1, "found {n}"), (2, "ValueError: no {n}"),
                                             (1, "found {n}"), (1, "found {n}")]),
]


def play(server: RunningServer, index: int, turns: int) -> None:
    """``turns`` more requests of scenario ``index``'s conversation, as its agent sends them:
    the model's answer back with a result for each tool call it asked for, and for a plain
    answer, a call of the agent's own and its result (as the bench's agents send them)."""
    agent, system, script = SCENARIOS[index]
    conversation = CONVERSATIONS.setdefault((id(server), index), [
        {"role": "system", "content": system}, {"role": "user", "content": f"task {index}"}])
    headers = {"X-Watchdog-Agent": agent}
    # (a tool that fails has an outage the fleet sees, for every run that uses it: the
    # failing scenarios' tool is one of their own)
    tools = FLAKY if "error" in system or "failure" in system else SEARCH
    if system == "budget by header":
        headers["X-Watchdog-Budget-Tool-Calls"] = "4"
    done = sum(1 for message in conversation if message["role"] == "assistant")
    for calls, said in script[done:done + turns]:
        status, body = post(server, PATHS["chat"], json.dumps({
            "model": "m", "messages": conversation, "tools": tools,
            "metadata": {"calls": str(calls)}}).encode(), headers)
        assert status == 200, body
        message = json.loads(body)["choices"][0]["message"]
        handed = message.get("tool_calls") or []
        if not handed:
            own = f"own_{index}_{done}"
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": own, "type": "function", "function": {"name": "search",
                                                            "arguments": "{}"}}]}
            handed = message["tool_calls"]
        conversation.append(message)
        conversation += [{"role": "tool", "tool_call_id": call["id"],
                          "content": said.format(n=done)} for call in handed]
        done += 1


CONVERSATIONS: dict[tuple[int, int], list[dict[str, Any]]] = {}
FLAKY = [{"type": "function", "function": {"name": "flaky", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]


def test_what_the_upstream_sees_is_the_same_with_requests_sent_on_ahead_or_not(
        tmp_path: Path) -> None:
    """The endpoint's steering scenarios (budgets by header and by pack with their countdown
    and final request, an error loop's abort, a wind-down with its grace, a rule's abort, the
    client SDK's own notes, runs that hand tool calls over between plain answers), their
    conversations interleaved, played against a sidecar that sends continuing requests on
    ahead and one whose loop decides them all: the upstream sees the same requests, byte for
    byte, in the same order; and the first sent some on ahead, none decided otherwise."""
    seen: dict[bool, list[tuple[str, bytes]]] = {}
    for ahead in (True, False):
        raw = RawUpstream(scripted)
        try:
            with sidecar(tmp_path, raw, SCENARIO_PACK, state=f"state-{ahead}") as server:
                native = native_of(server)
                server.call(lambda: setattr(native, "ahead", ahead))  # noqa: B023
                for round_ in range(8):
                    for index in range(len(SCENARIOS)):
                        play(server, index, 1)
                        if round_ % 2:  # (the loop's booking, and so what it told, comes
                            told_or_not(server)  # in its time: both ways)
                if ahead:
                    wait_until(lambda: native.answered > 0,  # noqa: B023
                               "some that answer the calls handed over sent on ahead")
                    assert native.missed == 0
                else:
                    assert native.continued == 0
            seen[ahead] = [(request.path, untimed(request.body)) for request in raw.seen]
        finally:
            raw.close()
    assert len(seen[True]) > 30
    assert seen[True] == seen[False]


def untimed(body: bytes) -> bytes:
    """A request as the upstream saw it, with the times a final report's activity log
    quotes (how long the run had taken at each step) left out: they differ from run to run."""
    return re.sub(rb"(elapsed |\+)\d+(\.\d+)?s\b", rb"\1<s>", body)


def told_or_not(server: RunningServer) -> None:
    """Until the loop has booked what has ended (the relay is told what it may send on)."""
    native = native_of(server)
    wait_until(lambda: not server.call(lambda: native.ended), "the calls booked")


@pytest.mark.parametrize("agent", ["", AGENT, "ägent"])
@pytest.mark.parametrize("task", ["task one", "ünïcode \\u2028 task", "x" * 3000])
def test_the_relay_reads_a_continuing_requests_conversation_as_the_loop(
        agent: str, task: str) -> None:
    """The conversation (its digest: the session) the relay finds for a continuing request is
    the one the loop's book finds for it."""
    from watchdog.core.model.book import _digest as conversation_digest
    from watchdog.core.model.chat import ChatWire
    from watchdog.shell.model._relay import Relay

    for calls in (1, 3):
        body = tool_turn(task, calls)
        read = ChatWire().read_request(json.loads(body))
        assert read.results and not read.last_is_user
        headers = [("x-watchdog-agent", agent)] if agent.isascii() and agent else []
        named = agent if headers else AGENT
        assert Relay.first_digest("POST", PATHS["chat"], headers, body, agent=AGENT) == \
            conversation_digest("chat", named, read.anchor)[:24]


# -- what the relay reads in a tool result, as Python reads it ----------------------------------

TRICKY = ["", " ", "\t", "\x0b", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "a", "Z",
          "_", ".", ":", "0", "é", "ſ", "\u212a", "ı", "İ", "{", '"', "(", ")", "-", "\n"]
HEADS = ["error", "Error", "ERROR", "exception", "Exception", "traceback (most recent call last)",
         "Traceback (most recent call last)", "ValueError", "requests.exceptions.HTTPError",
         "_Err.error", "ſError", "{", '{"error"', '{ "Error" ', "errors", "Exceptional", "found",
         "K\u212aError", "x" * 190 + "Error", "x" * 196 + "Error", "[ERROR]", "[error",
         "[errors]"]


def result_texts() -> list[str]:
    """Texts to read: every string of the committed framework recordings (the tool results
    and errors real agents produced among them), and made-up ones around what the failure
    pattern reads (its words, then characters Unicode treats apart from ASCII)."""
    import random

    texts: dict[str, None] = {}

    def strings(value: Any) -> None:
        if isinstance(value, str):
            texts[value[:400]] = None
        elif isinstance(value, list):
            for item in value:
                strings(item)
        elif isinstance(value, dict):
            for item in value.values():
                strings(item)

    from tests.recorded import RECORDINGS
    for path in sorted(RECORDINGS.rglob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            if line.strip():
                strings(json.loads(line))
    rng = random.Random(27)
    for head in HEADS:
        for _ in range(60):
            texts["".join(rng.choice(TRICKY) for _ in range(rng.randrange(3))) + head
                  + "".join(rng.choice(TRICKY) for _ in range(rng.randrange(4)))] = None
    return list(texts)


def test_the_relay_reads_a_tool_result_as_python_does_or_says_it_is_not_sure() -> None:
    """Over the recorded and made-up tool results: where the relay says whether a result
    looks failed, Python's ``looks_failed`` says the same; it is sure of every ASCII text; and
    its hash of a text is Python's ``stable_hash``."""
    from watchdog.core.model.failure import looks_failed
    from watchdog.core.spans.values import stable_hash
    from watchdog.shell.model._relay import Relay

    texts = result_texts()
    assert len(texts) > 5000
    failed = unsure = 0
    for text in texts:
        said, hashed = Relay.read_result(text)
        assert said is None or said == looks_failed(text), repr(text)
        assert said is not None or not text[:200].isascii(), repr(text)
        assert hashed == stable_hash(text), repr(text)
        failed += said is True
        unsure += said is None
    assert failed > 100 and unsure < len(texts) / 4, (failed, unsure)


# -- budgeted runs: the bound of tools left, told ahead -------------------------------------------

BOUND_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: continuation-bounds
budgets:
  - agents: ["wide"]
    max_tool_calls: 13
  - agents: ["long"]
    max_tool_calls: 12
  - agents: ["steady"]
    max_tool_calls: 7
  - agents: ["short"]
    max_tool_calls: 4
"""
# (agent, the tool calls the model asks for at each request)
BOUNDED = [("wide", 9), ("long", 2), ("steady", 1)]
LIMITS = {"wide": 13, "long": 12, "steady": 7, "short": 4}


def bounded_agent(server: RunningServer, agent: str, calls: int, task: str = "task of",
                  settle: Callable[[], None] | None = None,
                  system: bytes | None = None) -> list[int]:
    """The agent's loop, with no wait between its requests (``settle``: called before each
    request but the first): each request's answer back with a result for each tool call
    handed over, until an answer with none; the calls it was handed at each request.
    ``system``: the system message as sent (bytes of JSON), in place of json.dumps' own."""
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"{task} {agent}"}]
    handed: list[int] = []
    while len(handed) < 12:
        if handed and settle is not None:
            settle()
        sent = json.dumps({"model": "m", "messages": conversation, "tools": SEARCH,
                           "metadata": {"calls": str(calls)}}).encode()
        if system is not None:
            sent = sent.replace(json.dumps(conversation[0]).encode(), system, 1)
        status, body = post(server, PATHS["chat"], sent, {"X-Watchdog-Agent": agent})
        assert status == 200, body
        message = json.loads(body)["choices"][0]["message"]
        calls_handed = message.get("tool_calls") or []
        handed.append(len(calls_handed))
        if not calls_handed:
            return handed
        conversation.append(message)
        conversation += [{"role": "tool", "tool_call_id": call["id"],
                          "content": f"found {len(handed)}.{n}"}
                         for n, call in enumerate(calls_handed)]
    raise AssertionError(f"no final answer: {handed}")


def bounded_upstream(latency: float) -> Callable[[Any, Any], None]:
    """The model, answering after ``latency`` seconds: the tool calls the request's
    ``metadata.calls`` asks for, each with arguments of its own (no rule of the default pack
    fires), or a plain answer once the tools are withdrawn."""
    from tests.test_model_proxy import send

    def answer(handler: Any, seen: Any) -> None:
        time.sleep(latency)
        body = json.loads(seen.body)
        tag = hashlib.sha256(seen.body).hexdigest()[:10]
        if body.get("tool_choice") == "none":
            send(handler, 200, json.dumps(REPLIES[PATHS["chat"]]).encode())
            return
        send(handler, 200, json.dumps({
            "id": "chatcmpl-" + tag, "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                 "tool_calls": [
                {"id": f"call_{tag}_{n}", "type": "function", "function": {
                    "name": "search", "arguments": json.dumps({"q": f"{tag} {n}"})}}
                for n in range(int(body["metadata"]["calls"]))]},
                "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3,
                                                            "completion_tokens": 9}}).encode())
    return answer


def bounded_sidecar(tmp_path: Path, relay: str, upstream: RawUpstream) -> Any:
    path = tmp_path / f"pack-{relay}.yaml"
    path.write_text(BOUND_PACK)
    return running_server(sidecar_config(
        tmp_path / f"state-{relay}", model_address="127.0.0.1:0", model_relay=relay,
        model_upstream=upstream.base + "/v1", model_upstream_anthropic=upstream.base,
        model_agent_name=AGENT, rules=(str(path),)))


def settled(server: RunningServer) -> Callable[[], None]:
    """Until the loop has booked every call that ended (and so told the relay what the next
    request gets): the relay holds no response still to be told, the loop none to book."""
    native = native_of(server)
    return lambda: wait_until(lambda: server.call(lambda: not native.pending
                                                  and not native.ended), "booked")


def countdowns(bodies: list[bytes], agent: str, task: str = "task of") -> list[str | None]:
    """The countdown each request of ``agent``'s conversation carried (None: none)."""
    notes: list[str | None] = []
    for body in bodies:
        messages = json.loads(body)["messages"]
        if messages[1]["content"] != f"{task} {agent}":
            continue
        found = re.search(r"\[budget: (\d+ of \d+) tool calls left", messages[0]["content"])
        notes.append(found.group(1) if found else None)
    return notes


@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
def test_a_budgeted_runs_requests_go_on_ahead_with_their_bound_and_countdown(
        tmp_path: Path, latency: float) -> None:
    """Runs with a rule pack's budget of tool calls, at a model's latency of 0, 20 and 150 ms:
    the loop proves at each booking what the next request (the calls handed over answered)
    gets: a plain pass bounded to the calls left, or, from three left, that bound with the
    countdown's note, which the compiled relay splices into the request's bytes as the loop
    does. Their agents send each request as soon as they have the answer before it, then
    (``settle``) once the loop has booked it. Through the Python relay and through the
    compiled one, the upstream sees the same requests, byte for byte (the countdown true at
    each, then the final request with the tools withdrawn), and the agents are handed the
    same calls, never more than their budget; the compiled relay sent every continuing
    request but the final one on ahead once booked, countdowns included, none decided
    otherwise."""
    seen: dict[str, tuple[list[bytes], list[list[int]]]] = {}
    for relay in ("python", "native"):
        raw = RawUpstream(bounded_upstream(latency))
        try:
            with bounded_sidecar(tmp_path, relay, raw) as server:
                handed = [bounded_agent(server, agent, calls) for agent, calls in BOUNDED]
                if relay == "native":
                    native = native_of(server)
                    settle = settled(server)
                    before = server.call(lambda: (native.continued, native.noted))  # noqa: B023
                else:
                    settle = None
                handed += [bounded_agent(server, agent, calls, "settled task of", settle)
                           for agent, calls in BOUNDED]
                if relay == "native":
                    # (wide: 1 continuing request before its final one, long: 5, steady: 6;
                    # countdowns: long's 2 left, steady's 3, 2 and 1 left)
                    wait_until(lambda: server.call(
                        lambda: (native.continued - before[0],  # noqa: B023
                                 native.noted - before[1])) == (12, 4),  # noqa: B023
                        lambda: f"{native.continued - before[0]} continued, "  # noqa: B023
                                f"{native.noted - before[1]} countdowns ahead")  # noqa: B023
                    assert native.noted >= 4 and native.missed == 0
                    status, text = http_request("GET", server.metrics + "/metrics")
                    assert status == 200 and 'outcome="missed"' not in text.decode()
                    assert (f'agent_watchdog_model_ahead_total{{kind="continued",outcome="same"}} '
                            f'{float(native.continued)}') in text.decode()
            seen[relay] = ([untimed(request.body) for request in raw.seen], handed)
        finally:
            raw.close()
    expected = [[9, 4, 0], [2, 2, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1, 0]]
    assert seen["python"][1] == expected * 2
    assert seen["native"] == seen["python"]
    for (agent, _), handed in zip(BOUNDED * 2, seen["native"][1], strict=True):
        assert sum(handed) <= LIMITS[agent]
    bodies = seen["python"][0]
    for task in ("task of", "settled task of"):
        assert countdowns(bodies, "long", task) == [None] * 5 + ["2 of 12", None]
        assert countdowns(bodies, "steady", task) == [None] * 4 + ["3 of 7", "2 of 7", "1 of 7",
                                                                   None]
    assert b"tool calls left" not in bodies[7] and b"2 of 12 tool calls left" in bodies[8]
    assert b'"tool_choice": "none"' in bodies[-1] or b'"tool_choice":"none"' in bodies[-1]


def test_a_countdown_the_relay_cannot_splice_waits_for_the_loop(tmp_path: Path) -> None:
    """A run with 4 tool calls (its pack's), one used: its next request gets "3 of 4 left",
    and the relay was told so. One with a plain system message goes on ahead with the note
    spliced in while the loop is busy; one whose system message names its content twice (JSON
    that Python reads as the last one) waits for the loop: the relay's splice is not sure to
    edit what Python reads, so nothing goes with a wrong edit. The loop writes that body anew,
    with the note where Python puts it; nothing is decided otherwise."""
    raw = RawUpstream(bounded_upstream(0.0))
    note = "[budget: 3 of 4 tool calls left — wrap up soon]"
    try:
        with bounded_sidecar(tmp_path, "native", raw) as server:
            native = native_of(server)
            for task, system in (("plain", b'{"role": "system", "content": "You are terse."}'),
                                 ("twice", b'{"role": "system", "content": "ignored", '
                                           b'"content": "You are terse."}')):
                conversation: list[dict[str, Any]] = [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": task}]

                def sent() -> bytes:
                    return json.dumps({"model": "m", "messages": conversation,  # noqa: B023
                                       "tools": SEARCH, "metadata": {"calls": "1"}}).encode(
                    ).replace(json.dumps(conversation[0]).encode(), system, 1)  # noqa: B023

                status, answer = post(server, PATHS["chat"], sent(), {"X-Watchdog-Agent": "short"})
                assert status == 200
                message = json.loads(answer)["choices"][0]["message"]
                conversation += [message, {"role": "tool", "content": "found",
                                           "tool_call_id": message["tool_calls"][0]["id"]}]
                settled(server)()
                assert server.call(lambda: len(native.next_of)) >= 1
                seen = len(raw.seen)
                with busy(server) as held:
                    sending = in_background(lambda: post(server, PATHS["chat"], sent(),
                                                         {"X-Watchdog-Agent": "short"}))
                    if task == "plain":
                        assert sending()[0] == 200
                        assert not held.free.is_set(), "the countdown waited for the loop"
                    else:
                        held.waiting(1)
                        assert len(raw.seen) == seen, "sent before the loop read it"
                assert sending()[0] == 200
                upstream_saw = raw.seen[seen].body
                assert json.loads(upstream_saw)["messages"][0] == {
                    "role": "system", "content": f"You are terse.\n\n{note}"}
                if task == "plain":  # (the bytes as sent, the note spliced in)
                    escaped = json.dumps(note, ensure_ascii=False)[1:-1].encode()
                    assert upstream_saw == sent().replace(
                        b'terse."}', b"terse.\\n\\n" + escaped + b'"}', 1)
                    wait_until(lambda: native.noted == 1, "the countdown read by the loop")
            assert native.noted == 1 and native.missed == 0
    finally:
        raw.close()


def test_a_response_whose_calls_the_relay_cannot_read_holds_continuing_requests_until_booked(
        tmp_path: Path) -> None:
    """A Chat Completions response in a coding the relay cannot read (``br``): it cannot tell
    which tool calls it handed over, so no continuing request goes on ahead, of any
    conversation, until the loop has booked it and told the relay the calls it read it as
    handing over (here none: the loop cannot read it either). Then they go on ahead again;
    the response is logged once and counted (``model_ahead_unread_total``)."""
    from tests.test_model_proxy import send

    def unreadable(handler: Any, seen: Any) -> None:
        if b"in brotli" in seen.body:
            send(handler, 200, b"\x8b\x02\x80not brotli at all", {"Content-Encoding": "br"})
        else:
            reply(handler, seen)

    raw = RawUpstream(unreadable)
    try:
        with sidecar(tmp_path, raw) as server:
            native = native_of(server)
            assert post(server, PATHS["chat"], turn("first"))[0] == 200
            told(server, 1)
            assert post(server, PATHS["chat"], turn("in brotli"))[0] == 200
            wait_until(lambda: native.unread == 1, "the unreadable response booked")
            assert server.call(lambda: native.relay.sighted)
            with busy(server) as held:
                assert post(server, PATHS["chat"], tool_turn("first", 1))[0] == 200
                assert not held.free.is_set(), "the request waited for the loop"
            wait_until(lambda: native.continued == 1, "read")
            assert native.missed == 0
            status, text = http_request("GET", server.metrics + "/metrics")
            assert status == 200
            assert "agent_watchdog_model_ahead_unread_total 1.0" in text.decode()
            assert ('agent_watchdog_model_ahead_total{kind="continued",outcome="same"} 1.0'
                    in text.decode())
    finally:
        raw.close()


def test_a_request_the_relay_cannot_read_takes_back_only_what_its_conversation_was_told(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A Chat Completions request the relay cannot read (its system message in parts) may be
    of a conversation whose next request the loop said may go on: that conversation's next one
    waits for the loop. When the relay can tell which conversation it is of (its agent, its
    first user message a string, no trace or run named), only that one's: the agent's other
    conversations still go on ahead."""
    with sidecar(tmp_path, upstream) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("task one", metadata={"calls": "1"}))[0] == 200
        told(server, 1)
        parts = json.loads(turn("task two"))  # another conversation of the agent
        parts["messages"][0]["content"] = [{"type": "text", "text": "You are terse."}]
        assert post(server, PATHS["chat"], json.dumps(parts).encode())[0] == 200
        assert native.answered == 0  # (the loop's: the relay could not read it)
        body = answering("task one", ["found"], calls=1)
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], body))
            wait_until(lambda: upstream.seen[-1].body == body
                       or held.relay.queued_requests > held.queued, "the request sent or held")
            assert upstream.seen[-1].body == body, "task one's request waited for the loop"
            assert not held.free.is_set()
        assert answer()[0] == 200
        wait_until(lambda: native.answered == 1, "the request read by the loop")
        assert native.missed == 0


def test_a_checkpoint_of_the_runs_session_takes_back_what_the_relay_was_told(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """What the relay was told was proved with the run's session as it was: a checkpoint
    posted to that session (here the conversation's own) may make a rule that reads it fire at
    the next request, with that request's records (not at the checkpoint itself: the run had no
    tool call yet). The next request is the loop's, which writes the wind-down note; none went
    on ahead to be decided otherwise."""
    pack = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: continuation-sessions
rules:
  - name: checkpointed-and-working
    when: "session.checkpoints >= 1 && run.tool_calls >= 1"
    action: wind_down
    severity: warning
    message: "CHECKPOINTED: WIND DOWN"
"""
    with sidecar(tmp_path, upstream, pack) as server:
        native = native_of(server)
        assert post(server, PATHS["chat"], turn("checkpointed", metadata={"calls": "1"}))[0] == 200
        told(server, 1)
        session = runs(server)[0]["session"]
        status, _ = http_request(
            "POST", f"{server.api}/v1/sessions/{session}/checkpoints",
            json.dumps({"remaining": "the rest"}).encode(), {"Content-Type": "application/json"})
        assert status == 200
        wait_until(lambda: not native.next_of, "the checkpoint takes it back")
        waits(server, upstream, answering("checkpointed", ["found a"]), "found a")
        assert b"CHECKPOINTED: WIND DOWN" in upstream.seen[-1].body
        assert native.continued == 0 and native.missed == 0


# -- the countdown's note, spliced into a request's bytes as Python writes it --------------------

NOTE_TEXTS = ["[budget: 3 of 20 tool calls left — wrap up soon]",
              "[budget: 1 of 7 tool calls left — finalize now]", "", 'a "quote" and a \\',
              "tab\tline\ncr\r nul\x00 \x1f \x7f", "ünïcode ☃ \u2028 😀"]
ODD_TEXTS = ['"', "\\", "\n", "é", "😀", "\u2028", "\x00", "]", "}", "{", ",", ":", "s", "system",
             '"role":"system"', "[budget: "]


class Writer:
    """JSON written the ways clients write it: odd whitespace, strings escaped or not
    (``\\u`` escapes of plain letters, surrogate pairs), now and then a member named twice
    (a decoy first: Python reads the last); ``twice``: whether it wrote one."""

    def __init__(self, rng: Any) -> None:
        self.rng = rng
        self.twice = False

    def space(self) -> str:
        return self.rng.choice(["", "", " ", "\n", "\t ", "\r\n  "])

    def string(self, text: str) -> str:
        out = []
        for char in text:
            if char in '"\\' or char < " " or self.rng.random() < 0.1:
                out.append(json.dumps(char)[1:-1] if char in '"\\' or char < " "
                           else json.dumps(char, ensure_ascii=True)[1:-1] if ord(char) > 0xFFFF
                           else f"\\u{ord(char):04x}")
            else:
                out.append(char)
        return '"' + "".join(out) + '"'

    def value(self, value: Any) -> str:
        space = self.space
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            return "[" + space() + ("," + space()).join(
                self.value(item) for item in value) + space() + "]"
        if isinstance(value, dict):
            members = []
            for key, item in value.items():
                if self.rng.random() < 0.03:
                    self.twice = True
                    members.append(f"{self.string(key)}{space()}:{space()}"
                                   f"{self.value('decoy')}")
                members.append(f"{self.string(key)}{space()}:{space()}{self.value(item)}")
            return "{" + space() + ("," + space()).join(members) + space() + "}"
        return json.dumps(value)


def a_request(rng: Any) -> dict[str, Any]:
    """A Chat Completions request of any shape a client may send: instructions of every kind
    (a string, empty, in parts, of another type, missing; system or developer; first, late,
    or none), other messages and values around them that read like them."""
    def text() -> str:
        return "".join(rng.choice(ODD_TEXTS) for _ in range(rng.randrange(4)))

    def message() -> object:
        if rng.random() < 0.08:
            return rng.choice(["system", 3, None, ["system"]])
        out: dict[str, Any] = {}
        if rng.random() < 0.3:
            out["name"] = text()
        out["role"] = rng.choice(["system", "developer", "user", "user", "assistant", "tool",
                                  None, 5, ["system"], "System"])
        kind = rng.randrange(8)
        if kind < 3:
            out["content"] = text()
        elif kind == 3:
            out["content"] = ""
        elif kind == 4:
            out["content"] = [{"type": "text", "text": text()}
                              for _ in range(rng.randrange(3))]
        elif kind == 5:
            out["content"] = rng.choice([None, 3, True, {"text": text()}, 2.5])
        if rng.random() < 0.3:
            out["extra"] = {"messages": [text()], "role": "system"}
        if rng.random() < 0.5 and "content" in out:  # (content before the role)
            out = {"content": out.pop("content"), **out}
        return out

    body: dict[str, Any] = {}
    keys = ["model", "messages", "tools", "metadata", "stream"]
    rng.shuffle(keys)
    for key in keys:
        if key == "messages":
            body["messages"] = [message() for _ in range(rng.randrange(5))]
        elif rng.random() < 0.6:
            body[key] = {"model": "m", "tools": SEARCH, "stream": rng.random() < 0.5,
                         "metadata": {"messages": [{"role": "system", "content": text()}]}}[key]
    return body


def test_the_relays_note_splice_writes_what_add_note_writes() -> None:
    """Over many requests as clients write them, and notes of every kind: where the compiled
    relay's splice edits a body, the body it writes reads (parsed, members in order) as
    ``ChatWire.add_note`` writes it, every byte before the note as it came; where it is not
    sure (a member named twice, most of them), it says so, and Python writes the body anew."""
    import random

    from watchdog.core.bounds import load_json
    from watchdog.core.model.chat import ChatWire
    from watchdog.shell.model._relay import Relay

    def ordered(raw: bytes | str) -> Any:
        return json.loads(raw, object_pairs_hook=lambda pairs: pairs)

    rng = random.Random(4)
    spliced = unsure = 0
    for _ in range(3000):
        writer = Writer(rng)
        raw = writer.value(a_request(rng)).encode()
        note = rng.choice(NOTE_TEXTS)
        out = Relay.splice_note(raw, note)
        wanted = ChatWire().add_note(load_json(raw), note)
        if out is None:
            unsure += 1
            continue
        spliced += 1
        assert load_json(out) == wanted, raw
        if not writer.twice:
            assert ordered(out) == ordered(json.dumps(wanted)), raw
        # the note put in, nothing else changed but, at most, a content of another type
        prefix = next((i for i, (a, b) in enumerate(zip(raw, out, strict=False)) if a != b),
                      min(len(raw), len(out)))
        suffix = next((i for i, (a, b) in enumerate(zip(raw[::-1], out[::-1], strict=False))
                       if a != b), min(len(raw), len(out)))
        if prefix + suffix < len(raw):
            first = next(message for message in load_json(raw)["messages"]
                         if isinstance(message, dict)
                         and message.get("role") in ("system", "developer"))
            assert not isinstance(first.get("content"), str | list), raw
    assert spliced > 2000 and unsure > 30, (spliced, unsure)


@pytest.mark.parametrize("body", [
    b'{"messages":[{"role":"system","content":"s"}],"messages":[]}',  # named twice
    b'{"messages":{"role":"system"}}', b'{"messages":"s"}', b'{"model":"m"}', b'[]', b'"x"',
    b'{"messages":[{"role":"user","role":"system","content":"s"}]}',
    b'{"messages":[{"role":"system","content":"a","content":"b"}]}',
    b'{"messages":[{"role":"system","content":"s"}]', b'{"messages":[NaN]}',
    b'{"messages":[]} x', b'{"messages":["\xff"]}', b'{"messages":["\\ud800"]}',
    b'{"deep":' + b"[" * 200 + b"]" * 200 + b',"messages":[]}',
])
def test_a_body_the_splice_cannot_be_sure_of_is_left_to_python(body: bytes) -> None:
    """JSON the relay's splice cannot be sure to edit as Python reads it (a member that
    decides where the note goes named twice, messages not a list, JSON Python may read
    otherwise or not at all, nesting past serde_json's bounds): no edit, so the relay leaves
    the request to the loop and the loop writes the body anew."""
    from watchdog.shell.model._relay import Relay

    assert Relay.splice_note(body, "[budget: 3 of 20 tool calls left — wrap up soon]") is None
