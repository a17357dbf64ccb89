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
