"""Agents' own step limits declared as their rule pack's model-call budget (``max_iterations``), on
both relays: the OpenAI Agents SDK's ``max_turns``, pydantic-ai's ``request_limit``, LangChain's
``recursion_limit`` (``create_agent``, a LangGraph graph), LlamaIndex's ``max_iterations``,
Haystack's ``max_agent_steps``, AutoGen's ``max_tool_iterations``, aisuite's ``max_turns``,
swarms' ``max_loops``, smolagents' ``max_steps``,
CrewAI's ``max_iter``, Semantic Kernel's ``maximum_auto_invoke_attempts`` and google-adk's
``max_llm_calls``; in TypeScript, the Vercel AI SDK's ``stepCountIs``, the OpenAI Agents SDK for
JS' ``maxTurns``, Mastra's and VoltAgent's ``maxSteps``; each agent pointed at the sidecar by
``OPENAI_BASE_URL`` alone (its driver ``drivers/endpoint_*.py`` or ``ts/*.ts``, its limit
``ENDPOINT_OWN_LIMIT``). CAMEL-AI, AgentScope, Strands for TypeScript and Eino are tested in
their own modules; docs/model-endpoint.md's table of the limits (``an-agents-own-step-limit``)
is this module's :data:`LIMITS` and theirs, checked here.

* declared as the model calls the limit allows: the request with 2 calls left is told so, the
  last is the run's final request (tools withdrawn), its answer the agent's output; the agent's
  own limit never cuts it off; the run ends ``tool_limit_reached`` with the report;
* a budget a call above an own limit that stops with no request more (known gap): the agent
  raises its limit's error or returns what it has, and the run is held open for the call it
  last handed over;
* an agent that asks the model for the answer itself at its limit (no tools: smolagents,
  CrewAI, Semantic Kernel), alone: that run ends ``tool_limit_reached`` where its request says
  so in the agent's words (smolagents, CrewAI), else ``completed`` (known gap).

What the upstream saw is asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, drive_command
from tests.frameworks.steering import check_ended_at_own_limit, check_last_model_call_final
from tests.frameworks.test_model_endpoint_frameworks import (
    COMMANDS,
    REPORT,
    Agent,
    agent_base_env,
    agent_env,
    drive,
    searching,
)
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Limit:
    """An agent, the setting of its own limit, its value and the model calls it allows."""

    agent: Agent
    setting: str
    own: int
    calls: int

    @property
    def name(self) -> str:
        return f"{self.agent.env}-{self.agent.mode}-{self.setting}-{self.own}"


OPENAI_AGENTS = Agent("openai_agents", "endpoint_openai_agents", "responses")
PYDANTIC_AI = Agent("pydantic_ai", "endpoint_pydantic_ai", "run")
LANGCHAIN = Agent("langchain", "endpoint_langchain", "invoke")
SMOLAGENTS = Agent("smolagents", "endpoint_smolagents", "run", answer_tool="final_answer")
LLAMAINDEX = Agent("llamaindex", "endpoint_llamaindex", "run")
HAYSTACK = Agent("haystack", "endpoint_haystack", "run")
AUTOGEN = Agent("autogen", "endpoint_autogen", "run")
CREWAI = Agent("crewai", "endpoint_crewai", "kickoff")
SEMANTIC_KERNEL = Agent("semantic_kernel", "endpoint_semantic_kernel", "invoke",
                        tool="Files-search")
SEMANTIC_KERNEL_STREAM = Agent("semantic_kernel", "endpoint_semantic_kernel", "stream",
                               tool="Files-search")
GOOGLE_ADK = Agent("google_adk", "endpoint_google_adk", "chat")
AI_SDK = Agent("ts", "endpoint_ai_sdk", "chat")
OPENAI_AGENTS_JS = Agent("ts", "endpoint_openai_agents_js", "responses_stream")
MASTRA = Agent("ts", "endpoint_mastra", "responses")
VOLTAGENT = Agent("ts", "endpoint_voltagent", "chat_stream")
AISUITE = Agent("aisuite", "endpoint_aisuite", "create")
SWARMS = Agent("swarms", "endpoint_swarms", "run")
LIMITS = [
    Limit(OPENAI_AGENTS, "max_turns", 4, 4),  # a turn a model call
    Limit(Agent("openai_agents", "endpoint_openai_agents", "chat"), "max_turns", 4, 4),
    Limit(PYDANTIC_AI, "request_limit", 4, 4),  # UsageLimits(request_limit=...)
    Limit(Agent("pydantic_ai", "endpoint_pydantic_ai", "stream"), "request_limit", 4, 4),
    # LangGraph's supersteps: a model step and a tools step a call, the last call's answer
    # needing a step more: N calls from 2N (and 2N + 1)
    Limit(LANGCHAIN, "recursion_limit", 8, 4),
    Limit(LANGCHAIN, "recursion_limit", 9, 4),
    Limit(Agent("langchain", "endpoint_langchain", "stream"), "recursion_limit", 7, 3),
    # model calls, the N-th's answer its error whatever it holds: N - 1 answered
    Limit(LLAMAINDEX, "max_iterations", 5, 4),
    Limit(Agent("llamaindex", "endpoint_llamaindex", "stream"), "max_iterations", 5, 4),
    Limit(HAYSTACK, "max_agent_steps", 4, 4),
    Limit(Agent("haystack", "endpoint_haystack", "stream"), "max_agent_steps", 4, 4),
    Limit(AUTOGEN, "max_tool_iterations", 4, 4),
    Limit(Agent("autogen", "endpoint_autogen", "stream"), "max_tool_iterations", 4, 4),
    # its steps, then one call more of its own for the answer (no tools)
    Limit(SMOLAGENTS, "max_steps", 3, 4),
    Limit(CREWAI, "max_iter", 3, 4),
    Limit(SEMANTIC_KERNEL, "maximum_auto_invoke_attempts", 3, 4),
    # streamed (invoke_stream), it stops with no request more: N
    Limit(SEMANTIC_KERNEL_STREAM, "maximum_auto_invoke_attempts", 4, 4),
    Limit(GOOGLE_ADK, "max_llm_calls", 4, 4),  # RunConfig(max_llm_calls=...)
    Limit(Agent("google_adk", "endpoint_google_adk", "litellm_stream"), "max_llm_calls", 4, 4),
    # TypeScript, under node: a model call a step (a turn)
    Limit(AI_SDK, "stepCountIs", 4, 4),
    Limit(Agent("ts", "endpoint_ai_sdk", "agent_stream"), "stepCountIs", 4, 4),
    Limit(Agent("ts", "endpoint_openai_agents_js", "chat"), "maxTurns", 4, 4),
    Limit(OPENAI_AGENTS_JS, "maxTurns", 4, 4),
    Limit(MASTRA, "maxSteps", 4, 4),
    Limit(VOLTAGENT, "maxSteps", 4, 4),
    # aisuite's create(..., max_turns=N): N model calls, the last answer returned as it is
    Limit(AISUITE, "max_turns", 4, 4),
    # swarms' Agent(max_loops=N): N model calls, whatever each answers
    Limit(SWARMS, "max_loops", 4, 4),
]
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: own-limits
budgets:
  - agents: ["own-limit"]
    max_iterations: {calls}
  - agents: ["own-limit-above"]
    max_iterations: {above}
"""


def run_agent(sidecar: RunningServer, llm: FakeLLM, agent: Agent, name: str, own: int,
              check: bool = True) -> tuple[dict[str, Any] | str, list[dict[str, Any]]]:
    """The agent once, named ``name`` by its base URL, its own limit ``own``, its model
    searching on while it may call tools (the report when not): what it printed (``check``
    off: its stderr, as it failed) and the upstream's requests."""
    model = llm.script(f"own-{name}-{agent.env}-{agent.mode}-{own}", searching(agent.tool))
    extra = {"OPENAI_BASE_URL": f"{sidecar.url('model')}/agent/{name}/v1",
             "ENDPOINT_OWN_LIMIT": str(own)}
    if check:
        return drive(agent, sidecar, model, extra), llm.requests(model)
    env = {**agent_env(sidecar, model), **extra}
    if agent.env in COMMANDS:
        command, cwd = COMMANDS[agent.env](agent)
        result = subprocess.run(command, env=env, capture_output=True, text=True,
                                timeout=DRIVER_TIMEOUT, cwd=cwd, check=False)
    else:
        result = drive_command(agent.env, agent.driver, agent.mode, agent_base_env(), env,
                               check=False)
    assert result.returncode != 0, result.stdout[-2000:]
    return result.stderr, llm.requests(model)


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.name)
def test_its_own_limit_declared_as_the_packs_ends_at_its_last_call_with_the_report(
        llm: FakeLLM, tmp_path: Path, model_relay: str, limit: Limit) -> None:  # noqa: F811
    with endpoint_with_pack(tmp_path, PACK.format(calls=limit.calls, above=99), llm.base_url,
                            model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_agent(sidecar, llm, limit.agent, "own-limit", limit.own)
        run = the_ended_run(sidecar, before)
    assert said == {"ran": [f"term {index}" for index in range(limit.calls - 1)],
                    "output": REPORT}, said
    check_last_model_call_final(requests, limit.calls)
    check_ended_at_own_limit(run, limit.calls, REPORT)


@pytest.mark.parametrize(("agent", "own", "error"), [
    (OPENAI_AGENTS, 3, "agents.exceptions.MaxTurnsExceeded: Max turns (3) exceeded"),
    (PYDANTIC_AI, 3, "pydantic_ai.exceptions.UsageLimitExceeded: The next request would "
                     "exceed the request_limit of 3."),
    (LANGCHAIN, 6, "langgraph.errors.GraphRecursionError: Recursion limit of 6 reached "
                   "without hitting a stop condition."),
    (LLAMAINDEX, 3, "workflows.errors.WorkflowRuntimeError: Max iterations of 3 reached!"),
    (GOOGLE_ADK, 3, "google.adk.agents.invocation_context.LlmCallsLimitExceededError: Max "
                    "number of llm calls limit of `3` exceeded"),
    (OPENAI_AGENTS_JS, 3, "MaxTurnsExceededError: Max turns (3) exceeded")],
    ids=["max_turns", "request_limit", "recursion_limit", "max_iterations", "max_llm_calls",
         "maxTurns"])
def test_its_own_limit_below_the_packs_fails_and_leaves_the_run_open_known_gap(
        llm: FakeLLM, tmp_path: Path, model_relay: str, agent: Agent, own: int,  # noqa: F811
        error: str) -> None:
    """Known gap: an own limit of 3 calls under ``max_iterations`` 4 stops the agent after
    its 3rd call with its error and no request more: nothing tells the endpoint, whose run
    waits for the call it last handed over (``abandoned`` after ``run_end_timeout``)."""
    with endpoint_with_pack(tmp_path, PACK.format(calls=99, above=4), llm.base_url,
                            model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_agent(sidecar, llm, agent, "own-limit-above", own, check=False)
        assert error in str(said), str(said)[-3000:]
        check_held_open(sidecar, before, requests)


@pytest.mark.parametrize(("agent", "output"), [
    (HAYSTACK, "None"), (AUTOGEN, "search #3: no file matches 'term 2'"),
    (SEMANTIC_KERNEL_STREAM, ""), (AI_SDK, ""), (MASTRA, ""), (VOLTAGENT, ""),
    (AISUITE, "None"),
    (SWARMS, "Function 'search' result:\nsearch #3: no file matches 'term 2'")],
    ids=["max_agent_steps", "max_tool_iterations", "maximum_auto_invoke_attempts-stream",
         "stepCountIs", "maxSteps-mastra", "maxSteps-voltagent", "max_turns-aisuite",
         "max_loops-swarms"])
def test_its_own_limit_below_the_packs_returns_and_leaves_the_run_open_known_gap(
        llm: FakeLLM, tmp_path: Path, model_relay: str, agent: Agent,  # noqa: F811
        output: str) -> None:
    """Known gap: an own limit of 3 calls under ``max_iterations`` 4 ends the agent after its
    3rd call's tool ran, with no request more, returning what it has (Haystack no message,
    AutoGen the tool's result, aisuite the 3rd answer's content, None; swarms its last
    message, the tool's result, Semantic Kernel streamed, the AI SDK, Mastra and VoltAgent no
    text): the run waits for the call it last handed over."""
    with endpoint_with_pack(tmp_path, PACK.format(calls=99, above=4), llm.base_url,
                            model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_agent(sidecar, llm, agent, "own-limit-above", 3)
        assert said == {"ran": ["term 0", "term 1", "term 2"], "output": output}, said
        check_held_open(sidecar, before, requests)


def check_held_open(sidecar: RunningServer, before: set[str],
                    requests: list[dict[str, Any]]) -> None:
    """3 requests, each offering the tools; the run active, the call it last handed over
    still awaited."""
    assert len(requests) == 3 and all(fakellm.offers_tools(body) and body.get(
        "tool_choice") != "none" for body in requests)
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 3)
    assert (run["state"], run["terminal_state"], run["signals"]["in_flight"]) == (
        "active", None, 1), run


@pytest.mark.parametrize(("agent", "ended"), [
    (SMOLAGENTS, ("tool_limit_reached", "max_steps")),
    (CREWAI, ("tool_limit_reached", "max_iter")),
    (SEMANTIC_KERNEL, ("completed", None))],
    ids=["max_steps", "max_iter", "maximum_auto_invoke_attempts"])
def test_its_own_limit_alone_asks_for_the_answer_and_ends_as_its_words_say(
        llm: FakeLLM, tmp_path: Path, model_relay: str, agent: Agent,  # noqa: F811
        ended: tuple[str, str | None]) -> None:
    """An own limit of 3 with no model-call budget declared: after its 3rd call the agent asks
    the model for the answer itself, offering no tools. smolagents' system prompt and CrewAI's
    last message say in their own words that it is the limit (the conventions'
    ``limit_prompts``): the run ends ``tool_limit_reached``, answered, with that limit as its
    reason; Semantic Kernel's request says nothing of it, so its run ends ``completed``
    (known gap)."""
    with endpoint_with_pack(tmp_path, PACK.format(calls=99, above=99), llm.base_url,
                            model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_agent(sidecar, llm, agent, "own-alone", 3)
        run = the_ended_run(sidecar, before)
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}, said
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False]
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, ended[0], REPORT), run
    if ended[1] is not None:
        assert (run["terminal_reason"], run["has_final_answer"]) == (ended[1], True), run


# -- docs/model-endpoint.md's table ---------------------------------------------------------

ROW = re.compile(r"^\| (.+?) \| `(\w+)` \| (.+?) \|$")


def test_the_docs_table_of_own_limits_is_what_the_tests_show() -> None:
    """Each row of docs/model-endpoint.md's table (an agent, the setting of its limit, the
    ``max_iterations`` that matches a limit of N) says what these tests (and the agents' own
    modules) run: N for a limit that counts model calls, N + 1 for an agent that asks once
    more for the answer itself, N − 1 for one whose N-th answer is its error, half of N for a
    graph's steps (a model step and a tools step a call)."""
    text = (ROOT / "docs" / "model-endpoint.md").read_text()
    section = text[text.index("### An agent's own step limit"):text.index("### An abort")]
    rows = [(match.group(2), match.group(3)) for line in section.splitlines()
            if (match := ROW.match(line))]
    assert rows == [
        ("max_iteration", "N"), ("max_iters", "N + 1"), ("turns", "N"),
        ("MaxStep", "N ÷ 2, rounded up"), ("MaxIterations", "N"), ("max_turns", "N"),
        ("request_limit", "N"), ("recursion_limit", "N ÷ 2, rounded down"),
        ("max_iterations", "N − 1"), ("max_agent_steps", "N"), ("max_tool_iterations", "N"),
        ("max_steps", "N + 1"), ("max_iter", "N + 1"),
        ("maximum_auto_invoke_attempts", "N + 1; streamed, N"), ("max_llm_calls", "N"),
        ("stepCountIs", "N"),
        ("maxTurns", "N"), ("maxSteps", "N"), ("maxSteps", "N"),
        ("with_max_iterations", "N"), ("max_iterations", "N"), ("max_iterations", "N"),
        ("max_turns", "N"), ("max_loops", "N")], json.dumps(rows, indent=1)
    counts: dict[str, str] = {}
    for setting, count in rows:  # (a setting's later rows: agents of modules of their own)
        counts.setdefault(setting, count)
    calls: dict[str, Callable[[int, str], int]] = {
        "N": lambda n, _mode: n, "N + 1": lambda n, _mode: n + 1,
        "N − 1": lambda n, _mode: n - 1, "N ÷ 2, rounded up": lambda n, _mode: -(-n // 2),
        "N ÷ 2, rounded down": lambda n, _mode: n // 2,
        "N + 1; streamed, N": lambda n, mode: n if mode == "stream" else n + 1}
    for limit in LIMITS:
        assert limit.calls == calls[counts[limit.setting]](limit.own, limit.agent.mode), limit
