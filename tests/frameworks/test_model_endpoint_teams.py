"""Agents of one invocation handing work to each other, steered through the model endpoint by
base URL alone (DESIGN §12; the agents of :mod:`tests.frameworks.test_model_endpoint_frameworks`,
its sidecars and upstream):

* a handoff within one conversation (LlamaIndex's ``AgentWorkflow``: the researcher hands the
  conversation, its history whole, to the writer, whose requests carry the writer's system
  prompt) stays in its run: one run, the countdown the true one across both agents (the handoff
  is a tool call the agent runs), the writer's request the last one when the budget is spent,
  its answer (the report) the invocation's output;
* a member that a team's leader delegates to in a conversation of its own (Agno's ``Team``: the
  member gets the task as a new conversation, its own instructions) is a run of its own, with
  its own budget: the endpoint links requests by conversation, and nothing in the member's
  requests names the leader's (a known limit, docs/model-endpoint.md).
"""

from __future__ import annotations

from typing import Any

from tests.frameworks import fakellm
from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    budgeted,
    plain,
)
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

HANDOFF = shared.Agent("llamaindex", "endpoint_llamaindex", "handoff")
TEAM = shared.Agent("agno", "endpoint_agno", "team")
WRITTEN = "Written up: the file is /srv/a.txt."


def tool_results(body: dict[str, Any]) -> int:
    return sum(1 for message in body.get("messages") or [] if message.get("role") == "tool")


def handing_off(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """The researcher searches twice then hands off; the writer answers; the report when the
    tools are withdrawn."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(shared.REPORT)
    if "You are the writer" in shared.instructions(body):
        return fakellm.answer(WRITTEN)
    done = tool_results(body)
    if done < 2:
        return fakellm.call("search", q=f"term {done}")
    return fakellm.call("handoff", to_agent="writer", reason="searched")


def delegating(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """The leader delegates once then answers; the member searches twice then answers."""
    done = tool_results(body)
    if "You are the searcher" in shared.instructions(body):
        return fakellm.call("search", q=f"term {done}") if done < 2 else fakellm.answer("None.")
    if done < 1:
        return fakellm.call("delegate_task_to_member", member_id="searcher", task="Search.")
    return fakellm.answer(WRITTEN)


def new_runs(sidecar: RunningServer, before: set[str], count: int) -> list[dict[str, Any]]:
    """The invocation's runs once ``count`` of them have ended (their details)."""
    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) >= count and all(run["state"] == "ended"
                                                  for run in runs) else None

    runs = wait_until(ended, what=f"{count} runs to end")
    return [sidecar.get_json(f"/v1/runs/{run['id']}") for run in runs]


def test_a_handoff_in_one_conversation_is_one_run(plain: RunningServer,  # noqa: F811
                                                  llm: FakeLLM) -> None:
    model = llm.script("llamaindex-handoff-counts", handing_off)
    before = shared.run_ids(plain)
    outcome = shared.drive(HANDOFF, plain, model)
    assert outcome == {"ran": ["term 0", "term 1"], "output": WRITTEN}
    requests = llm.requests(model)
    assert ["You are the writer" in shared.instructions(body) for body in requests] == [
        False, False, False, True]
    run = shared.the_new_run(plain, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run


def test_a_handoff_in_one_conversation_is_counted_down_as_one_run(
        budgeted: RunningServer, llm: FakeLLM) -> None:  # noqa: F811
    model = llm.script("llamaindex-handoff-budget", handing_off)
    before = shared.run_ids(budgeted)
    outcome = shared.drive(HANDOFF, budgeted, model)
    requests = llm.requests(model)
    # the researcher's 2 searches and its handoff spend the budget of 3: the writer's request is
    # the last, without tools, and its answer (the report) the invocation's output
    assert outcome == {"ran": ["term 0", "term 1"], "output": shared.REPORT}
    assert len(requests) == shared.BUDGET + 1
    for index, body in enumerate(requests[:-1]):
        assert shared.LEFT.findall(shared.instructions(body)) == [
            (str(shared.BUDGET - index), str(shared.BUDGET))]
    assert "You are the writer" in shared.instructions(requests[-1])
    shared.check_last_is_the_only_one_without_tools(HANDOFF, requests)
    run = shared.the_new_run(budgeted, before)
    assert (run["tool_calls"], run["terminal_state"], run["has_final_answer"]) == (
        shared.BUDGET, "tool_limit_reached", True), run


def test_a_team_member_in_a_conversation_of_its_own_is_a_run_of_its_own(
        budgeted: RunningServer, llm: FakeLLM) -> None:  # noqa: F811
    model = llm.script("agno-team-budget", delegating)
    before = shared.run_ids(budgeted)
    outcome = shared.drive(TEAM, budgeted, model)
    assert outcome == {"ran": ["term 0", "term 1"], "output": WRITTEN}
    runs = new_runs(budgeted, before, 2)
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"])
                  for run in runs) == [(2, 1, "completed"), (3, 2, "completed")], runs
    # each run counts down its own budget: the member's first request has all 3 left
    member = [body for body in llm.requests(model)
              if "You are the searcher" in shared.instructions(body)]
    assert [shared.LEFT.findall(shared.instructions(body)) for body in member] == [
        [("3", "3")], [("2", "3")], [("1", "3")]]
