"""``POST /v1/runs/{id}/sync`` (DESIGN §8) against a real sidecar: spans applied before the
answer, the directives they caused in it, and each span counted once whichever path — the
sync or the OTLP export — brings it first."""

from __future__ import annotations

import json
from typing import Any

from tests.harness import RunningServer, http_request
from tests.spans import SpanMaker, encode, tool_attrs

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


def test_a_client_stop_and_bad_requests(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    sync(sidecar, tools(maker, 0, 1))
    status, answer = sync(sidecar, [], query="&stop=whatever")
    assert status == 400 and "stop='whatever' is not allowed" in answer["error"]["message"]
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
