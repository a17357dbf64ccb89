"""TypeScript agents steered through the sidecar's model endpoint with no code in them
(DESIGN §12), installed by ``make test`` with ``npm ci`` from ``ts/package-lock.json`` and run
by node, each pointed at a real sidecar by its base URL alone, in front of the scripted
upstream:

* ``ts/agent.ts``: a hand tool loop on the ``openai`` npm package (``OPENAI_BASE_URL``), Chat
  Completions and the Responses API, streamed and not;
* ``ts/ai_sdk.ts``: the Vercel AI SDK's own tool loop (``generateText`` / ``streamText`` with
  ``stopWhen: stepCountIs(...)``, and its ``ToolLoopAgent``) on ``@ai-sdk/openai``
  (``OPENAI_BASE_URL``: ``openai(model)`` speaks the Responses API, ``openai.chat(model)`` Chat
  Completions) and ``@ai-sdk/anthropic`` (``baseURL``: the sidecar's ``/v1``; Messages);
* ``ts/openai_agents.ts``: the OpenAI Agents SDK for JavaScript (``@openai/agents``: an
  ``Agent`` with a ``tool``, ``run`` streamed and not) on its default client
  (``OPENAI_BASE_URL``), the Responses API and Chat Completions.

The three scenarios and the API key run with the other agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`); here, what only the Agents SDK for JS
shows: the turns of a conversation the server keeps, on both relays."""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import budgeted  # noqa: F401 (its sidecar)
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)


@pytest.mark.parametrize("mode", ["responses_chained", "responses_conversation"])
def test_a_conversation_the_server_keeps_is_a_run_per_turn(
        budgeted: RunningServer, llm: FakeLLM, mode: str) -> None:  # noqa: F811
    """The Agents SDK's two turns of a conversation the server keeps, each request sending only
    its new items: by ``previousResponseId`` (the id of the response each goes on from), or by
    ``conversationId`` (the Responses ``conversation``: the same id on every request). Each
    turn is one run, counted and steered as one, its countdown true — the second, once the
    first ended at its budget, the session's next run with the whole budget and its report as
    the output (not the first run's stop answered again without the model; not a first
    request's run of its own, the rest another run that hands a tool call past the budget)."""
    agent = shared.Agent("ts", "endpoint_openai_agents_js", mode)
    model = llm.script(f"{agent.name}-budget", shared.searching())
    before = shared.run_ids(budgeted)
    outcome = shared.drive(agent, budgeted, model)
    requests = llm.requests(model)
    assert outcome == {"ran": ["term 0", "term 1", "term 2", "term 4", "term 5", "term 6"],
                       "output": shared.REPORT}
    if mode == "responses_chained":  # the SDK's follow-up, by the ids of responses
        assert [bool(body.get("previous_response_id")) for body in requests] == [
            False, False, False, False, True, True, True, True]
    else:  # every request names the conversation, and sends only the new items
        assert len({body.get("conversation") for body in requests}) == 1
        assert [len(body["input"]) for body in requests] == [1] * 8
    assert [shared.LEFT.findall(shared.instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []] * 2
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False] * 2

    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what="the two turns' runs to end")
    assert [(run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (3, "tool_limit_reached")] * 2, runs
    assert len({run["session"] for run in runs}) == 1 and runs[0]["session"]



@pytest.mark.parametrize("mode", ["responses_chained", "responses_chained_stream"])
def test_a_responses_conversation_chained_by_id_is_one_run(
        budgeted: RunningServer, llm: FakeLLM, mode: str) -> None:  # noqa: F811
    """The ``openai`` npm package's tool loop on the Responses API, each request after the
    first only its tool results and ``previous_response_id``, streamed and not: one run."""
    shared.check_a_chained_responses_run(shared.Agent("ts", "endpoint_ts", mode), budgeted, llm)
