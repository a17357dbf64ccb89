"""hermes-agent's own steering cases (DESIGN §8), beyond the shared ones of
``test_steering_frameworks.py``: several tool calls in one response, a model that calls a tool
when none is offered, and a dollar budget given to the adapter. The real Hermes loop (driver
``steering_hermes``) against the scripted model server, the agento11y plugin's spans to a real
sidecar; nothing waits for a directive."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_watchdog_client.adapters.hermes import with_turn
from agent_watchdog_client.steer import ModelTurn
from genai_prices import Usage, calc_price

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step, ToolCall
from tests.frameworks.steering import (
    REPORT,
    STOP_MARKER,
    check_countdown,
    check_final,
    instructions,
    searching,
)
from tests.frameworks.test_steering_frameworks import drive, ended
from tests.harness import RunningServer

HERMES = ("hermes", "steering_hermes")
NOTE = "[budget: 2 of 10 tool calls left — wrap up soon]"
CALLS_PER_RESPONSE = 4


def four_searches(index: int, body: dict[str, Any]) -> Step:
    if not body.get("tools"):
        return fakellm.answer(REPORT)
    return Step(tool_calls=tuple(ToolCall("search", {"q": f"term {index}-{k}"})
                                 for k in range(CALLS_PER_RESPONSE)))


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(message.get("content")) for message in body["messages"]
            if message.get("role") == "tool"]


def test_calls_past_the_budget_in_one_response_are_refused(sidecar: RunningServer,
                                                           llm: FakeLLM) -> None:
    """Budget 10, four calls per response: 4 + 4 run, then 2 of the third response's four;
    the other two never run and the model gets the refusal as their results."""
    model = llm.script("hermes-parallel", four_searches)
    outcome = drive(sidecar, llm, HERMES, "parallel", model)
    requests = llm.requests(model)
    assert len(outcome["ran"]) == 10 and len(requests) == 4
    check_countdown(requests, lambda index: min(index * CALLS_PER_RESPONSE, 10), 10)
    check_final(requests)
    results = tool_results(requests[-1])[-CALLS_PER_RESPONSE:]
    assert [result.startswith("2 results") for result in results] == [True, True, False, False]
    for refused in results[2:]:
        assert json.loads(refused)["error"].startswith("Not run: [budget: all 10 tool calls used")
    assert outcome["output"] == REPORT and outcome["report"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True
    # The plugin records a blocked call as an execute_tool span like any other (it maps only an
    # `error` status), so the sidecar counts the two refused calls too.
    assert detail["tool_calls"] == 12


def test_a_tool_call_on_the_final_turn_is_refused_and_ends_the_turn(sidecar: RunningServer,
                                                                   llm: FakeLLM) -> None:
    """The model calls a tool even on the request that offers none: the call does not run,
    no further request is sent, and ``run_conversation`` raises ``WatchdogAbort`` (Hermes,
    interrupted, closes the turn itself). No report came: the model never gave one."""
    model = llm.script("hermes-stubborn", fakellm.looping("search", lambda i: {"q": f"t {i}"}))
    outcome = drive(sidecar, llm, HERMES, "stubborn", model)
    requests = llm.requests(model)
    assert len(outcome["ran"]) == 10 and len(requests) == 11
    assert not requests[-1].get("tools") and STOP_MARKER in instructions(requests[-1])
    assert outcome["aborted"] and outcome["report"] is None
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is False


# -- the request Hermes sends, by API mode (pure) -------------------------------------------------

def test_the_turn_goes_into_the_system_prompt_of_a_chat_request() -> None:
    system = {"role": "system", "content": "You are Hermes."}
    messages = [system, {"role": "user", "content": "Find the file."}]
    request = {"model": "m", "messages": messages, "tools": [{"type": "function"}],
               "tool_choice": "auto"}
    steered = with_turn(request, ModelTurn(NOTE, final=False, remaining_tool_calls=2))
    assert steered["messages"][0] == {"role": "system", "content": "You are Hermes.\n\n" + NOTE}
    assert steered["messages"][1:] == messages[1:] and steered["tools"] == request["tools"]
    # Hermes reuses its message list when it retries a request: nothing it holds has changed
    assert messages[0] is system and system["content"] == "You are Hermes."
    final = with_turn(request, ModelTurn(NOTE, final=True, remaining_tool_calls=0))
    assert "tools" not in final and "tool_choice" not in final and "tools" in request


def test_the_turn_goes_where_each_api_mode_keeps_system_text() -> None:
    turn = ModelTurn(NOTE, final=True, remaining_tool_calls=0)
    responses = with_turn({"instructions": "You are Hermes.", "input": [], "tools": [{}]}, turn)
    assert responses == {"instructions": "You are Hermes.\n\n" + NOTE, "input": []}
    anthropic = with_turn({"system": [{"type": "text", "text": "You are Hermes."}],
                           "messages": []}, turn)
    assert anthropic["system"][-1] == {"type": "text", "text": NOTE}
    bare = with_turn({"messages": [{"role": "user", "content": "hi"}]}, turn)
    assert bare["messages"][0] == {"role": "system", "content": NOTE}
    parts = with_turn({"messages": [{"role": "system", "content": [
        {"type": "text", "text": "You are Hermes.", "cache_control": {"type": "ephemeral"}}]}]},
        turn)
    assert parts["messages"][0]["content"][-1] == {"type": "text", "text": NOTE}
    nothing = {"messages": [], "tools": [{}]}
    assert with_turn(nothing, ModelTurn("", final=False, remaining_tool_calls=9)) is nothing


def test_a_dollar_budget_given_to_the_adapter_stops_the_turn_with_its_report(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``watch_hermes(..., max_cost_usd=0.0002)`` and no tool budget: the model searches on
    every request that offers tools; the sidecar prices each call of ``gpt-4o-mini`` (a model
    genai-prices knows) from the usage the plugin's spans carry, and once the dollars are spent
    the next request offers no tools and asks for the report, which ends the turn."""
    model = llm.script("gpt-4o-mini", searching())
    outcome = drive(sidecar, llm, HERMES, "dollars", model)
    requests = llm.requests(model)
    # the call whose price crossed the budget asked for one more search: it ran when that
    # price reached the sidecar after the tool started, else the tool hook refused it ("Not
    # run"); either way the next request asked for the report
    refused = len(requests) - len(outcome["ran"]) - 1
    assert 1 <= len(outcome["ran"]) < 20 and refused in (0, 1), (outcome["ran"], len(requests))
    if refused:
        assert "Not run" in json.dumps(requests[-1]["messages"][-1]), requests[-1]["messages"]
    assert all(fakellm.offers_tools(body) for body in requests[:-1])
    assert not fakellm.offers_tools(requests[-1])
    assert "of the cost budget used" in instructions(requests[-1])
    assert outcome["output"] == REPORT and outcome["report"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert (detail["terminal_state"], detail["terminal_reason"]) == (
        "tool_limit_reached", "budget-cost-exhausted"), detail
    assert detail["budget"]["max_cost_usd"] == 0.0002
    signals = detail["signals"]
    assert signals["unpriced_calls"] == 0 and signals["cost_usd"] >= 0.0002
    assert signals["cost_usd"] == pytest.approx(float(calc_price(Usage(
        input_tokens=signals["input_tokens"], output_tokens=signals["output_tokens"]),
        "gpt-4o-mini").total_price))
