"""Go agents steered through the sidecar's model endpoint with no code in them (DESIGN §12):
``go/main.go``, tool loops on the official Go SDKs (``openai-go``: Chat Completions and the
Responses API; ``anthropic-sdk-go``: Messages; each streamed and not), pinned by ``go/go.sum``
and built by ``make goagent`` (part of ``make test``) from the Go module proxy. The three
scenarios and the API key run with the other agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`); here, what only the Go SDKs offer:
the agent's name and budget headers from the environment alone, on both relays; and the
Responses API's conversation chained by ``previous_response_id`` from a client that is not
Python."""

from __future__ import annotations

import json

import pytest

from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (sidecars)
    budgeted,
    plain,
)
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)


@pytest.mark.parametrize("mode", ["chat_stream", "responses", "messages_stream"])
def test_the_name_and_budget_headers_come_from_the_environment_too(
        plain: RunningServer, llm: FakeLLM, mode: str) -> None:  # noqa: F811
    """The Go SDKs add the headers of ``OPENAI_CUSTOM_HEADERS`` / ``ANTHROPIC_CUSTOM_HEADERS``
    (a ``name: value`` a line) to every request: the agent's name and its budget need no code
    either (docs/model-endpoint.md, Headers)."""
    agent = shared.Agent("go", "endpoint_go", mode)
    model = llm.script(f"{agent.name}-headers", shared.searching())
    headers = "x-watchdog-agent: go-headed\nx-watchdog-budget-tool-calls: 2"
    before = shared.run_ids(plain)
    outcome = shared.drive(agent, plain, model, {"OPENAI_CUSTOM_HEADERS": headers,
                                                 "ANTHROPIC_CUSTOM_HEADERS": headers})
    requests = llm.requests(model)
    assert outcome == {"ran": ["term 0", "term 1"], "output": shared.REPORT}
    assert [shared.LEFT.findall(shared.instructions(body)) for body in requests] == [
        [("2", "2")], [("1", "2")], []]
    shared.check_last_is_the_only_one_without_tools(agent, requests)
    assert not any("x-watchdog" in json.dumps(sent).lower()
                   for sent in llm.request_headers(model))  # read and stripped
    run = shared.the_new_run(plain, before)
    assert (run["agent"], run["tool_calls"], run["terminal_state"]) == (
        "go-headed", 2, "tool_limit_reached"), run


@pytest.mark.parametrize("mode", ["responses_chained", "responses_chained_stream"])
def test_a_responses_conversation_chained_by_id_is_one_run(
        budgeted: RunningServer, llm: FakeLLM, mode: str) -> None:  # noqa: F811
    """openai-go's tool loop on the Responses API, each request after the first only its tool
    results and ``previous_response_id``, streamed and not: one run."""
    shared.check_a_chained_responses_run(shared.Agent("go", "endpoint_go", mode), budgeted, llm)
