"""A home-grown loop on the OpenAI client, traced by opentelemetry-instrumentation-openai-v2:
one ``chat`` span per model call, each its own trace, and no span for the invocation."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_runs, run_driver
from tests.harness import RunningServer


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_three_tools_then_answer(sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    model = llm.script(f"openai-v2-three-{stream}", fakellm.tools_then_answer(
        "lookup", [{"key": "a"}, {"key": "b"}, {"key": "c"}], "a, b and c are known."))
    run_driver("openai_v2", "openai_v2_loop", "three_tools" + ("_stream" if stream else ""),
               sidecar, llm, model)
    check_runs(sidecar, [Expect(agent="openai-v2-loop", iterations=4, tool_calls=0, errors=0,
                                terminal_state="completed", has_final_answer=True)])
