"""Tool calls matched by the model's call id (issue 28): a hand-written loop on the OpenAI client,
traced by OpenLLMetry's openai instrumentation (driver ``openai_olm_call_ids``, venv
``.venvs/openai_olm``), whose plain span per tool call carries the call id it runs — as an
attribute, or inside its input JSON — and whose tool consults a cache traced under the tool's
own name with the cache client's own ``call_id`` (a miss, recorded as an exception, caught).

The model asks for ``lookup`` twice in one response, then answers: two tool calls of one tool
are two calls, and the cache's span named like the tool but answering no call asked for is not
one (its miss is no failed tool call). Live (real OpenTelemetry SDK, real OTLP export to a
sidecar) and from the committed recordings (``recordings/openai_olm_call_ids/``).
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step, ToolCall
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV, DRIVER = "openai_olm", "openai_olm_call_ids"
AGENT = "openai-olm-call-ids"  # nothing names an agent (a plain span's name is an operation)
ANSWER = "a and b are known."


def _script(scenario: str) -> fakellm.Script:
    second = "broken" if scenario == "parallel_error" else "b"
    return fakellm.steps(Step(tool_calls=(ToolCall("lookup", {"key": "a"}),
                                          ToolCall("lookup", {"key": second}))),
                         fakellm.answer(ANSWER))


# scenario -> the run: 2 model calls, 2 tool calls (the cache's misses no calls, no errors)
EXPECTED = {
    "parallel": Expect(AGENT, 2, 2, 0, "completed", True, None, None),
    "parallel_input": Expect(AGENT, 2, 2, 0, "completed", True, None, None),
    "parallel_error": Expect(AGENT, 2, 2, 1, "completed", True, None, None),
}


def _tools_read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["final_output"] == ANSWER
    signals = run["signals"]
    assert signals["tools"] == {"lookup": 2}
    if scenario == "parallel_error":  # the tool's own failure, not a cache miss
        assert signals["last_error"].startswith("RuntimeError"), signals["last_error"]
    else:
        assert not signals["last_error"], signals["last_error"]  # no failure at all


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": _script(scenario)},
                    [EXPECTED[scenario]])
    _tools_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, [EXPECTED[scenario]])
    _tools_read(sidecar, scenario)
