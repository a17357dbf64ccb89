"""A home-grown loop on the OpenAI client, traced by opentelemetry-instrumentation-openai-v2:
one ``chat`` span per model call, each its own trace, and no span for the invocation.

What the instrumentation emits (details: the recordings and ``/work/findings/openai-v2.md``):
per model call one CLIENT span ``chat <model>`` with ``gen_ai.operation.name = chat``,
``gen_ai.response.finish_reasons`` (``tool_calls`` / ``stop``; absent on streamed responses),
token usage, and (with content capture off, the default) no messages. Nothing for the tools the
loop runs, nothing for the loop's own step limit, nothing for a tool's exception the loop
catches: those are invisible in the spans, so the expectations below are what the spans can
tell — one run per invocation (consecutive loose model calls of one agent), iterations = model
calls, the answer (a stream that ends with text is an answer), and a run that stops without an
answer ends as ``no_response`` once ``loose_run_gap`` passes without a call.

Streamed, with the default configuration, a span says nothing about how its response ended:
``three_tools_stream`` (answered) and ``limit_stream`` (stopped after a tool call) end with spans
of the same shape, so no reading can make both exact; their expectations are the truth. The
``_content`` cases turn message capture on (``gen_ai.output.messages`` with ``finish_reason``
on every span, streamed or not), which the README should recommend.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.frameworks import cases
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer, running_server, sidecar_config

DRIVER = "openai_v2_loop"
ENV = "openai_v2"
AGENT = "openai-v2-loop"  # its service.name: the spans carry no agent name
LOOSE_RUN_GAP = 3.0  # seconds without a call that end a loose run (default 2 min)
SCRIPTS = {"three_tools": cases.three_tools(), "limit": cases.limit(),
           "tool_error": cases.tool_error()}
EXPECTED: dict[str, list[Expect]] = {
    # the loop's tools are not traced: no tool calls seen
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=0, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # the loop's MAX_STEPS=5 stop leaves no trace in the spans: five model calls asking for
    # tools, then nothing; the run ends after loose_run_gap without an answer
    "limit": [Expect(agent=AGENT, iterations=5, tool_calls=0, errors=0,
                     terminal_state="no_response", has_final_answer=False,
                     terminal_reason=None, parent_agent=None)],
    # the loop catches the tool's exception and tells the model: no error in the spans
    "tool_error": [Expect(agent=AGENT, iterations=2, tool_calls=0, errors=0,
                          terminal_state="completed", has_final_answer=True,
                          terminal_reason=None, parent_agent=None)],
}
# ``_content``: the instrumentation configured to put messages on its spans (the only way a
# streamed span tells how the stream ended: without it, it carries no finish reason, no usage, no
# output, so a streamed answer and a streamed tool call look the same)
CONTENT = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}
CASES = [scenario + suffix for scenario in EXPECTED
         for suffix in ("", "_stream", "_content", "_stream_content")]


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state", loose_run_gap=LOOSE_RUN_GAP)) as server:
        yield server


def expected(case: str) -> list[Expect]:
    return EXPECTED[base(case)]


def base(case: str) -> str:
    return case.removesuffix("_content").removesuffix("_stream")


@pytest.mark.parametrize("case", CASES)
def test_live(sidecar: RunningServer, llm: FakeLLM, case: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{case}", SCRIPTS[base(case)])
    run_driver(ENV, DRIVER, case, sidecar, llm, model,
               extra_env=CONTENT if case.endswith("_content") else None)
    check_runs(sidecar, expected(case))
    if case.startswith("limit"):
        assert len(llm.requests(model)) == 5  # the loop's own MAX_STEPS stopped it


@pytest.mark.parametrize("case", CASES)
def test_replay(sidecar: RunningServer, case: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{case}.jsonl")
    check_runs(sidecar, expected(case))
