"""``POST /v1/runs/{id}/sync`` (DESIGN §8) against a real sidecar: spans applied before the
answer, the directives they caused in it, and each span counted once whichever path — the
sync or the OTLP export — brings it first."""

from __future__ import annotations

import asyncio
import json
import re
import select
import socket
from typing import Any

import pytest

from tests.harness import WAIT, RunningServer, http_request, wait_until
from tests.otel import export_http
from tests.spans import SpanMaker, encode, tool_attrs
from watchdog.core.spans.decode import parse_protobuf
from watchdog.shell.api import runs

RUN = {"watchdog.run.id": "sync-run", "watchdog.agent.name": "syncer",
       "watchdog.budget.max_tool_calls": 4}


def tools(maker: SpanMaker, start: int, count: int) -> list[Any]:
    """Tool spans of the run, children of its (open) agent span."""
    root = getattr(maker, "root", None)
    if root is None:
        root = maker.root = maker.open(  # type: ignore[attr-defined]
            "invoke_agent syncer", {**RUN, "gen_ai.operation.name": "invoke_agent"})
    for index in range(start, start + count):
        maker.span(f"execute_tool t{index}", {**RUN, **tool_attrs(
            f"t{index}", json.dumps({"n": index}))}, parent=root)
    return maker.take()


def sync(sidecar: RunningServer, spans: list[Any], after: int = 0,
         query: str = "") -> tuple[int, dict[str, Any]]:
    body = encode(spans).SerializeToString() if spans else b""
    status, raw = http_request("POST", f"{sidecar.api}/v1/runs/sync-run/sync?after={after}"
                               + query, body, {"Content-Type": "application/x-protobuf"})
    return status, json.loads(raw)


def export(sidecar: RunningServer, spans: list[Any]) -> None:
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/traces",
                             encode(spans).SerializeToString(),
                             {"Content-Type": "application/x-protobuf"})
    assert status == 200


def tool_calls(sidecar: RunningServer) -> int:
    sidecar.flush()
    calls: int = sidecar.get_json("/v1/runs/sync-run")["signals"]["tool_calls"]
    return calls


def test_sync_answers_with_the_directives_its_spans_caused(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    status, answer = sync(sidecar, [])
    assert status == 200 and answer["known"] is False and answer["directives"] == []
    status, answer = sync(sidecar, tools(maker, 0, 1))
    assert status == 200 and answer["known"] and answer["tool_calls"] == 1
    assert answer["budget"] == {"max_tool_calls": 4, "remaining_tool_calls": 3}
    (countdown,) = answer["directives"]  # fired by the span just sent, stored, in the answer
    assert countdown["rule"] == "budget-countdown" and countdown["seq"] == 1
    assert countdown["report_prompt"] and answer["last_seq"] == 1
    status, answer = sync(sidecar, [], after=1)
    assert answer["directives"] == [] and answer["last_seq"] == 1


def test_a_sync_ahead_of_the_sidecar_gets_its_directives_numbered_after_it(
        sidecar: RunningServer) -> None:
    """A client that has seen directives up to 5 from a sidecar whose state is gone: the new
    sidecar's directives for the run come numbered after them, so the client applies them."""
    maker = SpanMaker()
    attrs = {**RUN, "watchdog.run.id": "ahead-run"}
    root = maker.open("invoke_agent syncer", {**attrs, "gen_ai.operation.name": "invoke_agent"})
    maker.span("execute_tool t0", {**attrs, **tool_attrs("t0", "{}")}, parent=root)
    status, raw = http_request("POST", f"{sidecar.api}/v1/runs/ahead-run/sync?after=5",
                               encode(maker.take()).SerializeToString(),
                               {"Content-Type": "application/x-protobuf"})
    assert status == 200
    answer = json.loads(raw)
    (countdown,) = answer["directives"]
    assert countdown["rule"] == "budget-countdown" and countdown["seq"] == 6
    assert answer["last_seq"] == 6


def test_each_span_counts_once_whichever_copy_comes_first(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    first = tools(maker, 0, 2)
    sync(sidecar, first)
    export(sidecar, first)  # the exporter's copy, later: dropped
    second = tools(maker, 2, 1)
    export(sidecar, second)  # the exporter first this time
    status, answer = sync(sidecar, second)
    assert status == 200 and answer["applied"] == 0 and answer["tool_calls"] == 3
    assert tool_calls(sidecar) == 3


def test_a_span_of_any_run_that_comes_again_counts_once(sidecar: RunningServer) -> None:
    """A run no client syncs (plain GenAI spans, keyed by their trace): spans re-sent in a
    batch cut otherwise (an exporter's or a collector's retry), and one sent twice in one
    request, through the OTel SDK's exporter, count once; the budget they announce is spent
    by the calls made, not by their copies."""
    maker = SpanMaker(resource={"service.name": "resender",
                                "watchdog.budget.max_tool_calls": 10})
    root = maker.open("invoke_agent resender", {"gen_ai.operation.name": "invoke_agent",
                                                "gen_ai.agent.name": "resender"})
    for index in range(3):
        maker.span(f"execute_tool t{index}", tool_attrs(f"t{index}", json.dumps({"n": index})),
                   parent=root)
    spans = maker.take()
    export_http(sidecar, spans)
    export_http(sidecar, spans[1:])  # re-cut: two of them again
    export_http(sidecar, [spans[0], spans[0]])  # twice in one request
    key = f"trace:{spans[0].context.trace_id:032x}"
    sidecar.flush()
    run = sidecar.get_json(f"/v1/runs/{key}")
    assert run["tool_calls"] == 3, run
    assert run["budget"]["remaining_tool_calls"] == 7  # (its copies: 5 more, a countdown)
    assert not sidecar.get_json(f"/v1/runs/{key}/directives")["directives"]


def test_a_client_stop_and_bad_requests(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    sync(sidecar, tools(maker, 0, 1))
    status, answer = sync(sidecar, [], query="&stop=whatever")
    assert status == 400 and 'stop="whatever" is not allowed' in answer["error"]["message"]
    status, raw = http_request("POST", f"{sidecar.api}/v1/runs/sync-run/sync", b"\xff\x00junk",
                               {"Content-Type": "application/x-protobuf"})
    assert status == 400 and json.loads(raw)["error"]["code"] == "bad_request"
    status, answer = sync(sidecar, [], query="&stop=max_tool_calls")
    assert status == 200
    maker.root.end()  # type: ignore[attr-defined]
    export(sidecar, maker.take())
    sidecar.flush()
    detail = sidecar.get_json("/v1/runs/sync-run")
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["terminal_reason"] == "max_tool_calls"


@pytest.mark.parametrize(("said", "error"), [
    ("{not json", "X-Watchdog-Announce is not valid JSON"),
    ('{"budget": {"max_tool_calls": -1}}', "announce.budget.max_tool_calls=-1 is not allowed"),
    ('{"colour": "red"}', "announce.colour is not allowed"),
    ('{"trace_id": 7}', "announce.trace_id=7 is not allowed: expected a str"),
])
def test_a_sync_announces_the_run_it_comes_first_for(sidecar: RunningServer, said: str,
                                                     error: str) -> None:
    """``X-Watchdog-Announce`` (the heartbeat's ``announce``): a run's first sync names its
    agent and budget, so the span it carries counts against that budget; a bad one is a 400
    naming what is wrong, and nothing of the request is applied."""
    maker = SpanMaker()
    run_id = {"watchdog.run.id": "sync-run"}  # (all the client SDK's spans say of their run)
    maker.span("execute_tool t0", {**run_id, **tool_attrs("t0", "{}")},
               parent=maker.open("watchdog.run syncer", run_id))
    body = encode(maker.take()).SerializeToString()
    url = f"{sidecar.api}/v1/runs/sync-run/sync?after=0"
    headers = {"Content-Type": "application/x-protobuf"}
    status, raw = http_request("POST", url, body, {**headers, "X-Watchdog-Announce": said})
    assert status == 400 and error in json.loads(raw)["error"]["message"]
    assert http_request("GET", f"{sidecar.api}/v1/runs/sync-run")[0] == 404
    announce = json.dumps({"agent": "syncer", "budget": {"max_tool_calls": 4}})
    status, raw = http_request("POST", url, body, {**headers, "X-Watchdog-Announce": announce})
    answer = json.loads(raw)
    assert status == 200 and answer["tool_calls"] == 1
    assert answer["budget"] == {"max_tool_calls": 4, "remaining_tool_calls": 3}
    assert [d["rule"] for d in answer["directives"]] == ["budget-countdown"]
    assert sidecar.get_json("/v1/runs/sync-run")["agent"] == "syncer"


def test_a_client_stop_at_a_grace_spares_the_escalation(sidecar: RunningServer) -> None:
    """tool-cycle winds down with a 2-call grace announced as the absolute count where it ends;
    a client that stops there says ``stop=grace`` and the run ends as the rule decided, with no
    escalation — even when the tool call it refused at the stop sent a span."""
    run = {"watchdog.run.id": "grace-run", "watchdog.agent.name": "cycler"}
    maker = SpanMaker()
    root = maker.open("invoke_agent cycler", {**run, "gen_ai.operation.name": "invoke_agent"})

    def calls(names: list[str]) -> list[Any]:
        for name in names:
            maker.span(f"execute_tool {name}", {**run, **tool_attrs(name, '{"p": 1}')},
                       parent=root)
        return maker.take()

    def grace_sync(spans: list[Any], query: str = "") -> dict[str, Any]:
        status, raw = http_request(
            "POST", f"{sidecar.api}/v1/runs/grace-run/sync?after=0" + query,
            encode(spans).SerializeToString() if spans else b"",
            {"Content-Type": "application/x-protobuf"})
        assert status == 200, raw
        answer: dict[str, Any] = json.loads(raw)
        return answer

    answer = grace_sync(calls(["list", "read"] * 4))
    (wind_down,) = [d for d in answer["directives"] if d["rule"] == "tool-cycle"]
    assert wind_down["grace"] == {"tool_calls": 2, "ends_at_tool_calls": 10}
    grace_sync(calls(["list", "read"]))
    answer = grace_sync(calls(["list"]), "&stop=grace")  # the 11th was refused, not run
    assert answer["tool_calls"] == 11
    assert [d["rule"] for d in answer["directives"]] == ["tool-cycle"]  # no escalation
    root.end()
    export(sidecar, maker.take())
    sidecar.flush()
    detail = sidecar.get_json("/v1/runs/grace-run")
    assert (detail["terminal_state"], detail["terminal_reason"]) == ("loop_detected",
                                                                     "tool-cycle")
    assert [d["escalation"] for d in detail["directives"]] == [False]


def test_the_answer_is_on_the_wire_before_the_sidecar_hands_its_cpu_over(
        sidecar: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent woken by the answer is queued on the sidecar's CPU (a loopback wake-up is a
    synchronous one): the sidecar yields that CPU only once the whole answer is written."""
    host, port = sidecar.server.addresses["api"]
    seen: list[bytes] = []

    def hand_over() -> None:  # on the server's loop, when it yields: what the agent can read
        readable, _, _ = select.select([client], [], [], 0)
        seen.append(client.recv(65536, socket.MSG_PEEK) if readable else b"")

    monkeypatch.setattr(runs, "hand_over", hand_over)
    body = encode(tools(SpanMaker(), 0, 1)).SerializeToString()
    with socket.create_connection((host, port)) as client:
        client.sendall(b"POST /v1/runs/sync-run/sync?after=0 HTTP/1.1\r\nHost: watchdog\r\n"
                       b"Content-Type: application/x-protobuf\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        (wire,) = wait_until(lambda: seen, "the sidecar handed its CPU over")
    head, _, answer = wire.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
    assert len(answer) == length and json.loads(answer)["tool_calls"] == 1


def test_an_export_is_parsed_only_when_no_sync_is_in_flight(sidecar: RunningServer) -> None:
    """A sync arriving while an export request's body waits to be parsed goes first: the parse
    (~1 ms for 128 spans, unsliced) is a slice of bulk work like any other."""
    service = sidecar.server.service
    assert service is not None
    body = encode(tools(SpanMaker(), 0, 2)).SerializeToString()
    order: list[str] = []

    def parse() -> Any:
        order.append("parsed")
        return parse_protobuf(body)

    async def scenario() -> int:
        with service.priority.sync():
            export = asyncio.ensure_future(service.export_in_slices(parse, "test"))
            for _ in range(5):  # the sync's turns of the loop
                await asyncio.sleep(0)
            order.append("sync answered")
        return (await export).rejected_count

    assert asyncio.run_coroutine_threadsafe(scenario(), sidecar.loop).result(WAIT) == 0
    assert order == ["sync answered", "parsed"]
    assert tool_calls(sidecar) == 2
