"""The client SDK's countdown is its sidecar's rule pack's (``countdown:`` on a rule): the same
pack as ``tests/test_model_countdown.py`` (a budget of 8 tool calls counted down from 5 left)
gives a hand-written loop of a real OpenAI client the same notes as the model endpoint gives,
and a user's ``token-budget-guard`` wind-down reaches the model with its own words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from agent_watchdog_client import Watchdog
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks.fakellm import FakeLLM, looping
from tests.harness import RunningServer, running_server, sidecar_config
from tests.test_model_countdown import COUNTED, GUARD, LEFT, TOOLS
from tests.test_model_countdown import llm as llm  # (the fixtures: the model,
from tests.test_model_countdown import pack as pack  # and each pack)


@pytest.fixture
def sidecar(tmp_path: Path, pack: str) -> Iterator[RunningServer]:
    path = tmp_path / "countdown.yaml"
    path.write_text(pack)
    with running_server(sidecar_config(tmp_path / "state", rules=(str(path),))) as server:
        yield server


def sdk_loop(sidecar: RunningServer, llm: FakeLLM, agent: str) -> tuple[list[str], int]:
    """A loop of a real OpenAI client steered by the client SDK (``before_model_call`` before
    each request, its instructions as the system message; ``before_tool_call`` before each
    tool, whose span ends before the next request), the pack's budget of 8: the system message
    each request the model saw carried, and the tools run."""
    model = llm.script(agent, looping("search", lambda i: {"q": f"page {i}"},
                                      answer_without_tools="REPORT"))
    client = openai.OpenAI(base_url=llm.base_url, api_key="sk-x", max_retries=0)
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    tracer = wd.tracer()
    ran = 0
    with wd.run(agent=agent) as run:
        messages: list[dict[str, object]] = [{"role": "user", "content": "find it"}]
        for _ in range(12):
            turn = run.before_model_call()
            system = [{"role": "system", "content": turn.instructions or "You are terse."}]
            message = client.chat.completions.create(
                model=model, messages=[*system, *messages],  # type: ignore[list-item]
                **({} if turn.final else {"tools": TOOLS})).choices[0].message
            if not message.tool_calls:
                run.set_final_answer(message.content or "")
                break
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": [call.model_dump() for call in message.tool_calls]})
            for call in message.tool_calls:
                run.before_tool_call("search")
                ran += 1
                with tracer.start_as_current_span("execute_tool search", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.arguments": call.function.arguments}):
                    pass
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": f"found {ran} for {call.function.arguments}"})
    wd.close()
    return [request["messages"][0]["content"] for request in llm.requests(model)], ran


def test_the_sdk_counts_down_where_the_pack_says(sidecar: RunningServer, llm: FakeLLM) -> None:
    """The model reads the true count from 5 left on, as through the model endpoint, and
    nothing of the budget before; the final request asks for the report; 8 tools ran."""
    seen, ran = sdk_loop(sidecar, llm, "counted")
    assert ran == 8
    notes = [found.group(1) if (found := LEFT.search(text)) else None for text in seen]
    assert notes[:8] == COUNTED, notes
    assert all("[budget" not in text for text in seen[:3])
    assert "This run is being stopped" in seen[8]


def test_a_users_budget_named_wind_down_reaches_the_model_through_the_sdk(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``token-budget-guard`` fired after 2 tools: the next request's instructions are its
    wind-down's (its report prompt, which quotes its message once), with no tool-call
    countdown (6 left: the pack counts from 5), nor its message taken for one."""
    seen, _ = sdk_loop(sidecar, llm, "guarded")
    assert GUARD not in seen[1] and seen[2].count(GUARD) == 1, json.dumps(seen[:3])
    assert LEFT.search(seen[2]) is None and not seen[2].startswith(GUARD)
