"""The newest GenAI conventions' log events from their real emitter: opentelemetry-
instrumentation-openai-v2 (on opentelemetry-util-genai) with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=event_only`` puts each model call's content
(messages in and out, the tool calls asked for) on a ``gen_ai.client.inference.operation.details``
log record, not the span; the SDK's OTLP log exporter sends it to ``/v1/logs``.

A streamed call carries no finish reason and no usage: only its output messages tell an answer
from a tool request. Read from the log events, the run is the one read from the same content on
the spans (``span_only``): answered; without either it could not be told (``no_response``,
test_openai_v2.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer, http_request, running_server, sidecar_config

AGENT = "openai-v2-loop"
ANSWER = "a, b and c are known."
LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
SPAN_CONTENT = {**LATEST, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"}
EVENT_CONTENT = {**LATEST, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
                 "OTEL_BLRP_SCHEDULE_DELAY": "50"}
SCRIPT = fakellm.tools_then_answer("lookup", [{"key": k} for k in "abc"], ANSWER)
EXPECTED = [Expect(AGENT, 4, 0, 0, "completed", True, None, None)]
# Signals that tell which run and when, not what it did
TIMING = frozenset({"id", "trace_id", "service", "elapsed_seconds", "idle_seconds",
                    "seconds_since_progress", "in_flight_seconds", "seconds_since_last_span"})
SCENARIO = "three_tools_stream_events"


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    """The frameworks' sidecar, each span waiting up to 10 s for its log events (2 s by
    default): a driver on a machine busy with the rest of the suite may send them later, and
    a span waits only until they come."""
    config = sidecar_config(tmp_path / "state", loose_run_gap=1.0, eval_interval=0.2,
                            log_content_wait=10.0)
    with running_server(config) as server:
        yield server


def _what_it_did(run: dict[str, Any]) -> dict[str, Any]:
    return {"signals": {key: value for key, value in run["signals"].items()
                        if key not in TIMING},
            "terminal_state": run["terminal_state"], "final_output": run.get("final_output")}


def _detail(sidecar: RunningServer, run: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = sidecar.get_json(f"/v1/runs/{run['id']}")
    return found


@pytest.mark.parametrize("stream", [True, False])
def test_live(sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    suffix = "_stream" if stream else ""
    model = llm.script(f"openai-v2-events{suffix}", SCRIPT)
    run_driver("openai_v2", "openai_v2_loop", f"three_tools{suffix}_events", sidecar, llm,
               model, extra_env=EVENT_CONTENT)
    (from_logs,) = check_runs(sidecar, EXPECTED)
    assert _detail(sidecar, from_logs)["final_output"] == ANSWER


def test_log_content_and_span_content_give_the_same_signals(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    run_driver("openai_v2", "openai_v2_loop", "three_tools_stream", sidecar, llm,
               llm.script("openai-v2-span-content", SCRIPT), extra_env=SPAN_CONTENT)
    run_driver("openai_v2", "openai_v2_loop", SCENARIO, sidecar, llm,
               llm.script("openai-v2-event-content", SCRIPT), extra_env=EVENT_CONTENT)
    from_spans, from_logs = check_runs(sidecar, EXPECTED + EXPECTED)
    assert _what_it_did(_detail(sidecar, from_logs)) == _what_it_did(
        _detail(sidecar, from_spans))


@pytest.mark.parametrize("logs_first", [True, False], ids=["logs-first", "spans-first"])
def test_recorded(sidecar: RunningServer, logs_first: bool) -> None:
    """The recording (spans, and the log events beside them): the logs first, as the driver
    flushes them, then the spans; or the spans first, before the service's first log event
    (nothing holds them: the content is read into the run when it comes)."""
    if not logs_first:
        replay(sidecar, RECORDINGS / "openai_v2_loop" / f"{SCENARIO}.jsonl")
    logs = RECORDINGS / "openai_v2_loop" / f"{SCENARIO}.logs.jsonl"
    for line in logs.read_text(encoding="utf-8").splitlines():
        status, body = http_request("POST", sidecar.otlp_http + "/v1/logs", line.encode(),
                                    {"Content-Type": "application/json"})
        assert status == 200, (status, body)
        assert json.loads(line)["resourceLogs"]  # (a recording of log events, not spans)
    if logs_first:
        replay(sidecar, RECORDINGS / "openai_v2_loop" / f"{SCENARIO}.jsonl")
    (run,) = check_runs(sidecar, EXPECTED)
    assert _detail(sidecar, run)["final_output"] == ANSWER
