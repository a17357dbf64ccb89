"""Go agents steered through the sidecar's model endpoint with no code in them (DESIGN §12):
``go/main.go``, tool loops on the official Go SDKs (``openai-go``: Chat Completions and the
Responses API; ``anthropic-sdk-go``: Messages; each streamed and not), pinned by ``go/go.sum``
and built by ``make goagent`` (part of ``make test``) from the Go module proxy, pointed at a
real sidecar by ``OPENAI_BASE_URL`` or ``ANTHROPIC_BASE_URL`` alone, in front of the scripted
upstream, on both relays. The same three scenarios as the Python agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`, whose helpers this module uses), and
the API key nowhere but upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

MODES = ["chat", "chat_stream", "responses", "responses_stream", "messages", "messages_stream"]
AGENTS = [shared.Agent("go", "endpoint_go", mode) for mode in MODES]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
          model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    shared.go_agent()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("plain"), llm, False, model_relay)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    shared.go_agent()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("budgeted"), llm, True, model_relay)


def test_the_sidecars_carry_the_tests_relay(plain: RunningServer, budgeted: RunningServer,
                                           model_relay: str) -> None:  # noqa: F811
    shared.test_the_sidecars_carry_the_tests_relay(plain, budgeted, model_relay)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.mode)
def test_one_run_per_invocation_with_its_counts(plain: RunningServer, llm: FakeLLM,
                                                agent: shared.Agent) -> None:
    shared.test_one_run_per_invocation_with_its_counts(plain, llm, agent)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.mode)
def test_budget_counts_down_then_the_report_is_the_output(budgeted: RunningServer,
                                                          llm: FakeLLM,
                                                          agent: shared.Agent) -> None:
    shared.test_budget_counts_down_then_the_report_is_the_output(budgeted, llm, agent)


@pytest.mark.parametrize("agent", AGENTS[::2], ids=lambda agent: agent.mode)
def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(
        plain: RunningServer, llm: FakeLLM, agent: shared.Agent) -> None:
    shared.test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(plain, llm, agent)


def test_the_agents_api_key_is_nowhere_but_upstream(plain: RunningServer,
                                                    budgeted: RunningServer,
                                                    llm: FakeLLM) -> None:
    """The key of the Go agents (``Authorization: Bearer`` from both SDKs: anthropic-sdk-go
    sends ``ANTHROPIC_API_KEY`` so, with ``anthropic-version``, where the Python SDK sends
    ``x-api-key``) reaches the upstream and nothing of either sidecar shows it."""
    shared.check_the_api_key_is_nowhere_but_upstream(
        plain, budgeted, llm, [agent for agent in AGENTS if agent.mode in ("chat", "messages")])


@pytest.mark.parametrize("mode", ["chat_stream", "responses", "messages_stream"])
def test_the_name_and_budget_headers_come_from_the_environment_too(
        plain: RunningServer, llm: FakeLLM, mode: str) -> None:
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
