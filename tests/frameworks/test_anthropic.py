"""A home-grown tool loop on the Anthropic client (Messages API, ``tool_use`` / ``tool_result``
content blocks), traced by OpenLLMetry's opentelemetry-instrumentation-anthropic: one
``anthropic.chat`` span per model call, each its own trace, no span for the invocation and none
for the tools (the loop runs them itself). The calls are grouped into one run per invocation.

The Anthropic SDK (2.x) traces its API calls itself too, by default, once a tracer provider is
set: each model call is also an ``anthropic.messages.create`` span (scope
``com.anthropic.sdk.python``, ``gen_ai.operation.name`` ``chat``, the same
``gen_ai.response.id``), a trace of its own, not around nor inside OpenLLMetry's."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

AGENT = "anthropic-loop"  # no agent name on these spans: the service name is all there is
ANSWER = "a, b and c are known."

SCRIPTS = {
    "three_tools": fakellm.tools_then_answer("lookup", [{"key": k} for k in "abc"], ANSWER),
    # the loop's own cap (5 model calls) stops it; nothing on a span says so
    "limit": fakellm.looping("lookup", lambda i: {"key": f"k{i}"}),
    "tool_error": fakellm.steps(fakellm.call("lookup", key="broken"),
                                fakellm.answer("it is broken")),
}
# GAP: each model call counts twice (the SDK's span and OpenLLMetry's; neither inside the
# other, so they are not paired as one call traced twice)
EXPECTED = {
    "three_tools": [Expect(AGENT, 8, 0, 0, "completed", True, None, None)],
    # no answer came; the run ends after loose_run_gap without a call
    "limit": [Expect(AGENT, 10, 0, 0, "no_response", False, None, None)],
    # the tool's failure is only a tool_result block in the next request: not a span, not an
    # error here
    "tool_error": [Expect(AGENT, 4, 0, 0, "completed", True, None, None)],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = llm.script(f"anthropic-{scenario}", SCRIPTS[scenario])
    run_driver("anthropic", "anthropic_loop", scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / "anthropic_loop" / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
