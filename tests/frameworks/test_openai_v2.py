"""A home-grown loop on the OpenAI client, traced by opentelemetry-instrumentation-openai-v2:
one ``chat`` span per model call, each its own trace, no span for the invocation and none for
the tools (the loop runs them itself; ``traced_tools``: the loop traces each tool call too, a
trace of its own). The calls are grouped into one run per invocation."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

AGENT = "openai-v2-loop"  # no agent name on these spans: the service name is all there is
ANSWER = "a, b and c are known."
# Streamed calls carry no finish reason and no usage: what tells an answer from a tool request
# is the output message, on the span only with the latest GenAI conventions and content capture.
STREAM_ENV = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"}

SCRIPTS = {
    "three_tools": fakellm.tools_then_answer("lookup", [{"key": k} for k in "abc"], ANSWER),
    # the loop's own cap (5 model calls) stops it; nothing on a span says so
    "limit": fakellm.looping("lookup", lambda i: {"key": f"k{i}"}),
    "tool_error": fakellm.steps(fakellm.call("lookup", key="broken"),
                                fakellm.answer("it is broken")),
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 0, 0, "completed", True, None, None)],
    # no answer came; the run ends after loose_run_gap without a call
    "limit": [Expect(AGENT, 5, 0, 0, "no_response", False, None, None)],
    # the tool's failure is only text in the next request: not a span, not an error here
    "tool_error": [Expect(AGENT, 2, 0, 0, "completed", True, None, None)],
}
CASES = [(scenario, stream) for scenario in EXPECTED for stream in (False, True)]
# The loop traces its tool calls itself, each a trace of its own like each model call: exported
# in one batch, grouped by scope (every model call, the answer too, before every tool call),
# they are still one run (it read as two: the answer ended the first, the tool calls opened a
# second).
SCRIPTS["traced_tools"] = SCRIPTS["three_tools"]
EXPECTED["traced_tools"] = [Expect(AGENT, 4, 3, 0, "completed", True, None, None)]
CASES.append(("traced_tools", False))


def _name(scenario: str, stream: bool) -> str:
    return scenario + ("_stream" if stream else "")


@pytest.mark.parametrize(("scenario", "stream"), CASES)
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str, stream: bool) -> None:
    model = llm.script(f"openai-v2-{_name(scenario, stream)}", SCRIPTS[scenario])
    run_driver("openai_v2", "openai_v2_loop", _name(scenario, stream), sidecar, llm, model,
               extra_env=STREAM_ENV if stream else None)
    check_runs(sidecar, EXPECTED[scenario])


@pytest.mark.parametrize(("scenario", "stream"), CASES)
def test_recorded(sidecar: RunningServer, scenario: str, stream: bool) -> None:
    replay(sidecar, RECORDINGS / "openai_v2_loop" / f"{_name(scenario, stream)}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])


def test_streamed_calls_without_content_capture_cannot_tell_an_answer(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The instrumentation's default for streams: no finish reason, no usage, no content. The
    calls are still one run; whether it answered is unknowable, so it ends `no_response`."""
    model = llm.script("openai-v2-bare-stream", SCRIPTS["three_tools"])
    run_driver("openai_v2", "openai_v2_loop", "three_tools_stream", sidecar, llm, model)
    check_runs(sidecar, [Expect(AGENT, 4, 0, 0, "no_response", False, None, None)])
