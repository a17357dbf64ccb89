"""Real agents steered through the sidecar's model endpoint with no code in them (DESIGN §12).

Each agent — the ``openai`` SDK (Chat Completions and Responses, streamed and not; its Chat
Completions loop also under the AgentOps SDK's decorators and instrumentation), the
``anthropic`` SDK (streamed and not), the OpenAI Agents SDK, pydantic-ai (alone and traced as
Langfuse's docs set it up), LangChain's
``ChatOpenAI`` agent (alone and traced by Langfuse's ``CallbackHandler``), crewai,
smolagents, AutoGen AgentChat, Agno (Chat Completions and
Responses), LlamaIndex's ``FunctionAgent``, Strands, google-adk (``LiteLlm``, ``OpenAILlm``,
``OpenAIResponsesLlm``), LiteLLM's SDK (``litellm.completion``), Haystack's ``Agent``, AG2's
``Agent``, an Apache Burr state machine, AgentScope's ``Agent``, CAMEL-AI's ``ChatAgent``,
Griptape's ``Agent`` and
Semantic Kernel's ``ChatCompletionAgent`` (and DSPy's ReAct, whose tools are text: its own
tests at the end), each in its framework's venv
(``drivers/endpoint_*.py``); the Go agents on the official SDKs (``go/``: ``openai-go``,
``anthropic-sdk-go``; :mod:`tests.frameworks.test_model_endpoint_go`; Genkit for Go,
``go/genkit``); a rig agent (``rust/rig``, rig-core's ``Agent``); the Rust agent
(``rust/``: a tool loop on ``async-openai``, Chat Completions and Responses); the Java agents
(``java/``: LangChain4j, anthropic-java; :mod:`tests.frameworks.test_model_endpoint_java`;
``spring_ai/``: Spring AI's ``ChatClient``, called and streamed; ``koog/``: Koog's ``AIAgent``,
Kotlin, on Chat Completions and the Responses API); the
TypeScript agents under node (``ts/``, :mod:`tests.frameworks.test_model_endpoint_ts`: a tool
loop on the ``openai`` npm package, the Vercel AI SDK on ``@ai-sdk/openai`` and
``@ai-sdk/anthropic``, the OpenAI Agents SDK for JS; Mastra, ``ts/mastra/endpoint.ts``;
LangGraph.js traced by OpenLLMetry's Node SDK, ``ts/traceloop/endpoint.ts``; VoltAgent,
``ts/voltagent/endpoint.ts``) — is
pointed at a real sidecar by
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` alone (``@ai-sdk/anthropic``: its ``baseURL``):
no OpenTelemetry (``OTEL_SDK_DISABLED``), no client SDK, no header. Behind the sidecar is the
scripted upstream (:mod:`tests.frameworks.fakellm`), whose recorded request bodies are what the
model really read. The agent's tool counts each of its executions; the sidecar's API shows the
run it saw. Nothing waits for a directive.

* counts: two tool calls then an answer — one run, 3 model calls, 2 tool calls, completed;
* budget: a rule pack gives every agent ``max_tool_calls: 3``; the model searches forever —
  the countdown it reads is the true number left on every request, the agent runs 3 tools, the
  4th request withdraws the tools and its answer (the report) is the agent's output — for an
  agent that answers through a final-answer tool (smolagents), the 4th request leaves only that
  tool, forced, and the report comes as its call;
* loop: the model repeats the same call — ``tool-cycle`` (a cycle of one call) winds the run
  down at the 4th, its grace of 2 counts down, the next request withdraws the tools and its
  answer is the agent's output; the upstream gets nothing after it.

Two sidecars per module (one with the budget pack), one scripted upstream for the session.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm, jvm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, DRIVERS, clean_environ, drive_command
from tests.frameworks.steering import CYCLE_LOOP
from tests.frameworks.test_genkit_go import genkit_go
from tests.frameworks.test_rig import rig_agent
from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-endpoint-tests-0123456789abcdefSECRET"
AGENT = "endpoint-agent"  # model_agent_name: nothing else names these agents
ANSWER = "The file is /srv/a.txt."
REPORT = ("## Task\nFind the file.\n\n## Completed Work\nSearched.\n\n## Key Findings\n"
          "Nothing yet.\n\n## Not Started / Remaining\nThe rest.")
BUDGET = 3
BUDGET_PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: endpoint-budget
budgets:
  - agents: ["*"]
    max_tool_calls: {BUDGET}
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
GRACE_LEFT = re.compile(r"\[grace: (\d+) tool calls? left")
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
TS_DIR = Path(__file__).resolve().parent / "ts"
GO_DIR = Path(__file__).resolve().parent / "go"
RUST_DIR = Path(__file__).resolve().parent / "rust"
_TASKS = itertools.count(1)


@dataclass(frozen=True)
class Agent:
    """One agent: a driver in a venv (``env`` "ts": a TypeScript agent under node, its file by
    driver in ``TS_AGENTS``; "go": the Go agent; "rust": the Rust agent; "java": the Java agents,
    :mod:`tests.frameworks.jvm`) and its mode;
    ``answer_tool``: the tool its framework answers through (smolagents' final_answer);
    ``tool``: the name the model sees the agent's one tool by (Semantic Kernel's is qualified
    by its plugin)."""

    env: str
    driver: str
    mode: str
    answer_tool: str | None = None
    tool: str = "search"

    @property
    def name(self) -> str:
        return f"{self.driver.removeprefix('endpoint_')}-{self.mode}"


AGENTS = [
    Agent("openai_v2", "endpoint_openai", "chat"),
    Agent("openai_v2", "endpoint_openai", "chat_stream"),
    Agent("openai_v2", "endpoint_openai", "responses"),
    Agent("openai_v2", "endpoint_openai", "responses_stream"),
    # the same loop under the AgentOps SDK (its OpenAI instrumentation wraps the calls)
    Agent("agentops", "endpoint_agentops", "chat"),
    Agent("agentops", "endpoint_agentops", "chat_stream"),
    Agent("anthropic", "endpoint_anthropic", "messages"),
    Agent("anthropic", "endpoint_anthropic", "messages_stream"),
    Agent("openai_agents", "endpoint_openai_agents", "responses"),
    Agent("openai_agents", "endpoint_openai_agents", "chat"),
    Agent("openai_agents_laminar", "endpoint_openai_agents", "laminar"),  # traced by Laminar
    Agent("pydantic_ai", "endpoint_pydantic_ai", "run"),
    Agent("pydantic_ai", "endpoint_pydantic_ai", "stream"),
    # traced as Langfuse's docs set it up (Agent.instrument_all() under the Langfuse SDK)
    Agent("pydantic_ai_langfuse", "endpoint_pydantic_ai", "langfuse"),
    Agent("langchain", "endpoint_langchain", "invoke"),
    Agent("langchain", "endpoint_langchain", "stream"),
    Agent("langfuse", "endpoint_langchain", "langfuse"),  # traced by Langfuse's CallbackHandler
    Agent("crewai", "endpoint_crewai", "kickoff"),
    Agent("smolagents", "endpoint_smolagents", "run", answer_tool="final_answer"),
    # on LiteLLM, traced by the AgentOps SDK
    Agent("agentops_smolagents", "endpoint_smolagents", "agentops", answer_tool="final_answer"),
    Agent("autogen", "endpoint_autogen", "run"),
    Agent("autogen", "endpoint_autogen", "stream"),
    Agent("agno_langtrace", "endpoint_agno", "langtrace"),  # traced by Langtrace
    *(Agent("agno", "endpoint_agno", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream")),
    *(Agent("llamaindex", "endpoint_llamaindex", mode) for mode in ("run", "stream", "workflow")),
    Agent("strands", "endpoint_strands", "run"),
    *(Agent("google_adk", "endpoint_google_adk", mode) for mode in (
        "litellm", "litellm_stream", "chat", "chat_stream", "responses", "responses_stream")),
    # LiteLLM's SDK as the client (litellm.completion, its OpenAI provider)
    Agent("litellm_logfire", "endpoint_litellm", "completion"),
    Agent("litellm_logfire", "endpoint_litellm", "completion_stream"),
    Agent("haystack", "endpoint_haystack", "run"),
    # AG2 1.x's Agent on its OpenAIConfig, streamed and not
    *(Agent("ag2", "endpoint_ag2", mode) for mode in ("run", "stream")),
    Agent("burr", "endpoint_burr", "run"),  # an Apache Burr state machine on the OpenAI client
    # AgentScope 2's Agent on its OpenAIChatModel (openai.AsyncClient), whole and streamed
    *(Agent("agentscope", "endpoint_agentscope", mode) for mode in ("run", "stream")),
    Agent("haystack", "endpoint_haystack", "stream"),
    # CAMEL-AI's ChatAgent on its OpenAI model: step and astep, whole and streamed
    *(Agent("camel", "endpoint_camel", mode) for mode in (
        "step", "step_stream", "astep", "astep_stream")),
    Agent("semantic_kernel", "endpoint_semantic_kernel", "invoke", tool="Files-search"),
    Agent("semantic_kernel", "endpoint_semantic_kernel", "stream", tool="Files-search"),
    *(Agent("go", "endpoint_go", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream", "messages", "messages_stream")),
    # Genkit for Go: its flow on the compat_oai OpenAI plugin (Chat Completions)
    *(Agent("genkit-go", "endpoint_genkit_go", mode) for mode in ("endpoint", "endpoint_stream")),
    *(Agent("rust", "endpoint_rust", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream")),
    Agent("rig", "endpoint_rig", "endpoint"),  # rig-core's Agent (Chat Completions)
    Agent("java", "langchain4j", "chat"),
    Agent("java", "langchain4j", "chat_stream"),
    Agent("java", "anthropic-java", "messages"),
    Agent("java", "anthropic-java", "messages_stream"),
    # Spring AI's ChatClient on its OpenAI model (the official openai-java SDK beneath it)
    Agent("spring-ai", "spring_ai", "call"),
    Agent("spring-ai", "spring_ai", "stream"),
    # Koog's AIAgent (Kotlin) on its OpenAILLMClient: Chat Completions, and the Responses API
    # (a model that speaks only that), with no system prompt too (the note then goes into
    # ``instructions``, whose echo Koog reads as a list only)
    *(Agent("koog", "koog", mode) for mode in ("chat", "responses", "responses_bare")),
    *(Agent("ts", "endpoint_ts", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream")),
    *(Agent("ts", "endpoint_ai_sdk", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream", "messages", "messages_stream",
        "agent", "agent_stream")),
    *(Agent("ts", "endpoint_openai_agents_js", mode) for mode in (
        "chat", "chat_stream", "responses", "responses_stream")),
    # (Mastra: each API once, one of them streamed: a node process is 2-3 s)
    *(Agent("ts", "endpoint_mastra", mode) for mode in ("responses", "chat_stream")),
    # LangGraph.js' ReAct agent on ChatOpenAI, traced by OpenLLMetry's Node SDK
    Agent("ts", "endpoint_langgraphjs_traceloop", "invoke"),
    # VoltAgent's Agent: its model string openai/<model> (Responses) and
    # @ai-sdk/openai-compatible (Chat Completions), each API once, one of them streamed
    *(Agent("ts", "endpoint_voltagent", mode) for mode in ("responses", "chat_stream")),
    # Griptape's Agent on OpenAiChatPromptDriver (its tool Files, activity search)
    Agent("griptape", "endpoint_griptape", "run", tool="Files_search"),
    # PraisonAI Agents' Agent on its default client (the openai client; streamed, it runs one
    # round of tools only: test_model_endpoint_praisonai)
    Agent("praisonai", "endpoint_praisonai", "start"),
    # aisuite's client: create(..., tools=[search], max_turns=N), the loop inside the call
    Agent("aisuite", "endpoint_aisuite", "create"),
]
# the loop scenario once per framework and API (its stream variants steer the same way)
LOOPING = [agent for agent in AGENTS if not agent.mode.endswith("stream")]
STREAMING = [agent for agent in AGENTS if agent.mode.endswith("stream")]
PRICED_MODEL = "gpt-4o-mini"  # a model genai-prices knows
DOLLARS_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: endpoint-dollars
budgets:
  - agents: ["*"]
    max_cost_usd: 5
"""


# -- the world ------------------------------------------------------------------------------

class Captured(logging.Handler):
    """Every log record of the sidecar while a module's sidecars run (debug included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + " " + json.dumps(record.__dict__, default=str))


LOGS = Captured()


def start_sidecar(tmp: Path, llm: FakeLLM, budget: str | None, relay: str
                  ) -> Iterator[RunningServer]:
    """A sidecar in front of ``llm``, with the rule pack ``budget`` or none, on the model relay
    ``relay``."""
    rules: tuple[str, ...] = ()
    if budget is not None:
        pack = tmp / "budget.yaml"
        pack.write_text(budget)
        rules = (str(pack),)
    config = sidecar_config(tmp / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            model_agent_name=AGENT, rules=rules, eval_interval=0.2,
                            model_relay=relay)
    watchdog_log = logging.getLogger("watchdog")
    level = watchdog_log.level
    watchdog_log.addHandler(LOGS)
    watchdog_log.setLevel(logging.DEBUG)
    try:
        with running_server(config) as server:
            yield server
    finally:
        watchdog_log.removeHandler(LOGS)
        watchdog_log.setLevel(level)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
          model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    yield from start_sidecar(tmp_path_factory.mktemp("plain"), llm, None, model_relay)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    yield from start_sidecar(tmp_path_factory.mktemp("budgeted"), llm, BUDGET_PACK, model_relay)


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
           model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    yield from start_sidecar(tmp_path_factory.mktemp("priced"), llm, DOLLARS_PACK, model_relay)


def agent_env(sidecar: RunningServer, model: str) -> dict[str, str]:
    """The environment of an agent steered by base URL alone: its API key, the base URL, its
    model and task; no OpenTelemetry exporter, no watchdog variable."""
    return {**agent_base_env(),
            "OPENAI_BASE_URL": sidecar.url("model") + "/v1",
            "ANTHROPIC_BASE_URL": sidecar.url("model"),
            "OPENAI_API_KEY": KEY,
            "ANTHROPIC_API_KEY": KEY,
            "ENDPOINT_MODEL": model,
            # a task of its own per invocation: each is a conversation of its own
            "ENDPOINT_TASK": f"Find the file. (case {next(_TASKS)})"}


def agent_base_env() -> dict[str, str]:
    """What every agent's environment holds, whatever its endpoint and task (its framework is
    imported with this)."""
    env = clean_environ("ANTHROPIC_", "CREWAI_")
    env.update({
        "PYTHONPATH": str(DRIVERS),
        "PYTHONUNBUFFERED": "1",
        # no telemetry of any kind leaves the agent: not ours, not the frameworks' own
        "OTEL_SDK_DISABLED": "true",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "CREWAI_DISABLE_TELEMETRY": "true",
        "CREWAI_DISABLE_TRACKING": "true",
        "CREWAI_TRACING_ENABLED": "false",
        "CREWAI_STORAGE_DIR": "/tmp/crewai-endpoint-tests",
        # swarms' telemetry (on by default) and its workspace (else ./agent_workspace)
        "SWARMS_TELEMETRY_ON": "false",
        "WORKSPACE_DIR": "/tmp/swarms-endpoint-tests",
    })
    return env


def go_agent() -> Path:
    """The Go agent ``make goagent`` built for ``go/`` as it is now (the Makefile's hash: of its
    sources' bytes, in the order of their paths)."""
    sources = sorted([*GO_DIR.glob("*.go"), GO_DIR / "go.mod", GO_DIR / "go.sum"])
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = GO_DIR.parents[2] / ".cache" / "goagent" / digest / "goagent"
    assert binary.exists(), f"{binary} is missing: `make goagent` builds it (make test does)"
    return binary


def rust_agent() -> Path:
    """The Rust agent ``make rust-agent`` built for ``rust/`` as it is now (the Makefile's hash:
    of its sources' bytes, Cargo.toml, Cargo.lock, then src/*.rs in the order of their paths)."""
    sources = [RUST_DIR / "Cargo.toml", RUST_DIR / "Cargo.lock",
               *sorted((RUST_DIR / "src").glob("*.rs"))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = RUST_DIR.parents[2] / ".cache" / "rust-agent" / digest / "rust-agent"
    assert binary.exists(), f"{binary} is missing: `make rust-agent` builds it (make test does)"
    return binary


# the TypeScript agents (env "ts"), by driver: their file in ts/
TS_AGENTS = {"endpoint_ts": "agent.ts", "endpoint_ai_sdk": "ai_sdk.ts",
             "endpoint_openai_agents_js": "openai_agents.ts",
             "endpoint_mastra": "mastra/endpoint.ts",
             "endpoint_langgraphjs_traceloop": "traceloop/endpoint.ts",
             "endpoint_voltagent": "voltagent/endpoint.ts"}
TS_PACKAGES = ("openai", "ai", "@ai-sdk/openai", "@ai-sdk/anthropic", "@openai/agents", "tsx",
               "mastra/node_modules/@mastra/core",
               "traceloop/node_modules/@traceloop/node-server-sdk",
               "voltagent/node_modules/@voltagent/core")


def ts_agent(agent: Agent) -> Path:
    """A TypeScript agent's file, once ``npm ci`` has installed its packages (Mastra's in
    ``ts/mastra``: ``make tests/frameworks/ts/mastra/node_modules/.installed``)."""
    missing = [package for package in TS_PACKAGES
               if not ((TS_DIR / "node_modules" / package / "package.json").exists()
                       or (TS_DIR / package / "package.json").exists())]
    assert not missing, (f"{TS_DIR}/node_modules lacks {missing}: run `make "
                         f"tests/frameworks/ts/node_modules/.installed` (part of `make test`)")
    return TS_DIR / TS_AGENTS[agent.driver]


# the agents that are no Python driver, by env: their command, and its directory
COMMANDS: dict[str, Callable[[Agent], tuple[list[str], Path]]] = {
    "ts": lambda agent: (["node", "--import", "tsx", str(ts_agent(agent)), agent.mode], TS_DIR),
    "go": lambda agent: ([str(go_agent()), agent.mode], GO_DIR),
    "rust": lambda agent: ([str(rust_agent()), agent.mode], RUST_DIR),
    "genkit-go": lambda agent: ([str(genkit_go()), agent.mode], genkit_go().parent),
    "rig": lambda agent: ([str(rig_agent()), agent.mode], rig_agent().parent),
    "spring-ai": lambda agent: (["java", *jvm.jvm_flags(), "-cp", (jvm.built(
        jvm.SPRING_AI_DIR) / "classpath").read_text().strip(), "agent.Main", "endpoint",
                                 agent.mode], jvm.SPRING_AI_DIR),
    "koog": lambda agent: (["java", *jvm.jvm_flags(), "-cp", (jvm.built(
        jvm.KOOG_DIR) / "classpath").read_text().strip(), "agent.MainKt", "endpoint",
                            agent.mode], jvm.KOOG_DIR),
}


def drive(agent: Agent, sidecar: RunningServer, model: str,
          extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run the agent once (``extra``: more of its environment); its last stdout line:
    ``{"ran": [...], "output": "..."}``."""
    env = {**agent_env(sidecar, model), **(extra or {})}
    if agent.env in COMMANDS:
        command, cwd = COMMANDS[agent.env](agent)
        result = subprocess.run(command, env=env, capture_output=True, text=True,
                                timeout=DRIVER_TIMEOUT, cwd=cwd)
        if result.returncode != 0:
            sys.stderr.write(result.stderr[-6000:])
            raise AssertionError(f"{agent.name} exited {result.returncode}:\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    elif agent.env == "java":
        result = jvm.run(agent.driver, agent.mode, env)
    else:
        result = drive_command(agent.env, agent.driver, agent.mode, agent_base_env(), env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{agent.name} printed no outcome:\n{result.stdout[-3000:]}"
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome


def run_ids(sidecar: RunningServer) -> set[str]:
    return {run["id"] for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]}


def the_new_run(sidecar: RunningServer, before: set[str]) -> dict[str, Any]:
    """The one run the invocation made, once it has ended (its detail)."""
    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if runs and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what="the invocation's run to end")
    assert len(runs) == 1, f"one run per invocation, the sidecar has {json.dumps(runs)}"
    detail: dict[str, Any] = sidecar.get_json(f"/v1/runs/{runs[0]['id']}")
    return detail


# -- what the model read --------------------------------------------------------------------

def instructions(body: Mapping[str, Any]) -> str:
    """The instructions of a Chat Completions, Responses or Anthropic Messages request body:
    system/developer messages, ``instructions``, Anthropic's ``system``."""
    texts: list[str] = []
    for key in ("instructions", "system"):
        value = body.get(key)
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.extend(str(part.get("text", "")) for part in value if isinstance(part, dict))
    for message in body.get("messages") or body.get("input") or []:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(str(part.get("text", "")) for part in content
                                   if isinstance(part, dict))
            texts.append(str(content))
    return "\n".join(texts)


def user_text(body: Mapping[str, Any]) -> str:
    return "\n".join(json.dumps(message.get("content"))
                     for message in body.get("messages") or body.get("input") or []
                     if isinstance(message, dict) and message.get("role") == "user")


def check_cycle_wound_down(requests: list[dict[str, Any]]) -> None:
    """A coding agent's tool cycle as the upstream saw it (the same pair of calls round and
    round): tool-cycle fires at the 8th call, the next two requests wind down with a grace of
    2 and 1, the 11th is the final request, its tools withdrawn."""
    assert len(requests) == 11
    assert [CYCLE_LOOP in instructions(body) for body in requests] == [False] * 8 + [True] * 3
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [[]] * 8 + [
        ["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 10 + [False]
    assert "Tools are withdrawn" in instructions(requests[-1])


def check_no_control_text_in_user_messages(requests: list[dict[str, Any]]) -> None:
    for body in requests:
        text = user_text(body)
        assert "[budget" not in text and "[grace" not in text and "agent-watchdog" not in text


def forced_tool(body: Mapping[str, Any]) -> str | None:
    """The tool a request's ``tool_choice`` names (Chat Completions, Responses, Anthropic)."""
    choice = body.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") not in ("function", "tool"):
        return None
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else choice.get("name")
    return name if isinstance(name, str) else None


def tool_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        names.append(str((function or tool).get("name")))
    return names


def check_last_is_the_only_one_without_tools(agent: Agent,
                                             requests: list[dict[str, Any]]) -> None:
    """Only the last request withdraws the tools; for an agent that answers through a
    final-answer tool, it leaves that tool alone, forced."""
    if agent.answer_tool is None:
        without = [i for i, body in enumerate(requests) if not fakellm.offers_tools(body)]
        assert without == [len(requests) - 1], (without, len(requests))
    else:
        forced = [i for i, body in enumerate(requests) if forced_tool(body)]
        assert forced == [len(requests) - 1], (forced, len(requests))
        last = requests[-1]
        assert forced_tool(last) == agent.answer_tool, last.get("tool_choice")
        assert tool_names(last) == [agent.answer_tool], tool_names(last)
        assert all(agent.tool in tool_names(body) for body in requests[:-1])
    assert "Tools are withdrawn" in instructions(requests[-1])



def check_a_chained_responses_run(agent: Agent, sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent whose Responses requests after the first send only their new items (the tool
    results) and ``previous_response_id``, with the budget pack's 3 tool calls, the model
    searching on: one run, the true countdown in the instructions of each request that offers
    tools, 3 tools run, then the report as its output."""
    model = llm.script(f"{agent.name}-chained", searching())
    before = run_ids(sidecar)
    outcome = drive(agent, sidecar, model)
    requests = llm.requests(model)
    assert outcome == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}
    assert [bool(body.get("previous_response_id")) for body in requests] == [
        False, True, True, True]
    assert [len(body["input"]) for body in requests] == [1] * 4  # only the new items
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    check_last_is_the_only_one_without_tools(agent, requests)
    run = the_new_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, BUDGET, "tool_limit_reached"), run

# -- the scripts ----------------------------------------------------------------------------

def counting(agent: Agent) -> fakellm.Script:
    final = (fakellm.call(agent.answer_tool, answer=ANSWER) if agent.answer_tool
             else fakellm.answer(ANSWER))
    return fakellm.steps(fakellm.call(agent.tool, q="alpha"), fakellm.call(agent.tool, q="beta"),
                         final)


def answering_when_forced(script: fakellm.Script) -> fakellm.Script:
    """As a real model does: a request whose ``tool_choice`` names a tool gets a call of it
    (the report as its answer)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        forced = forced_tool(body)
        if forced is not None:
            return fakellm.call(forced, answer=REPORT)
        return script(index, body)

    return pick


def searching(tool: str = "search") -> fakellm.Script:
    """New terms on every request that lets the model call tools; the report when none."""
    return answering_when_forced(fakellm.looping(tool, lambda i: {"q": f"term {i}"},
                                                 REPORT))


def repeating(tool: str = "search") -> fakellm.Script:
    """The same call on every request that lets the model call tools; the report when none."""
    return answering_when_forced(fakellm.looping(tool, lambda i: {"q": "the file"},
                                                 REPORT))


# -- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.name)
def test_one_run_per_invocation_with_its_counts(plain: RunningServer, llm: FakeLLM,
                                                agent: Agent) -> None:
    model = llm.script(f"{agent.name}-counts", counting(agent))
    before = run_ids(plain)
    native = plain.server.native
    ahead = (native.continued, native.missed) if native is not None else (0, 0)
    outcome = drive(agent, plain, model)
    assert outcome == {"ran": ["alpha", "beta"], "output": ANSWER}
    if native is not None and agent.driver == "endpoint_openai" and agent.mode in (
            "chat", "chat_stream"):
        # the agent's continuing requests (the tool call handed over, answered) go on
        # through the compiled relay before the loop reads them; the loop reads them as such
        wait_until(lambda: plain.call(lambda: native.continued) > ahead[0],
                   "a continuing request sent on ahead")
        assert native.missed == ahead[1]
    requests = llm.requests(model)
    assert len(requests) == 3
    # nothing to apply: what the agent sent is what the upstream read
    assert not any("agent-watchdog" in json.dumps(body) for body in requests)
    run = the_new_run(plain, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        AGENT, 3, 2, 0), run
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.name)
def test_budget_counts_down_then_the_report_is_the_output(budgeted: RunningServer,
                                                          llm: FakeLLM, agent: Agent) -> None:
    model = llm.script(f"{agent.name}-budget", searching(agent.tool))
    before = run_ids(budgeted)
    outcome = drive(agent, budgeted, model)
    requests = llm.requests(model)
    assert outcome["ran"] == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    # the true number left, in the instructions of every request (all have <= 3 left)
    for index, body in enumerate(requests[:-1]):
        said = LEFT.findall(instructions(body))
        assert said == [(str(BUDGET - index), str(BUDGET))], (index, instructions(body)[:400])
    check_last_is_the_only_one_without_tools(agent, requests)
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert outcome["output"] == REPORT  # the last upstream answer is the agent's output
    run = the_new_run(budgeted, before)
    assert (run["tool_calls"], run["terminal_state"], run["has_final_answer"]) == (
        BUDGET, "tool_limit_reached", True), run
    assert len(llm.requests(model)) == BUDGET + 1  # and nothing more reached the upstream


@pytest.mark.parametrize("agent", STREAMING, ids=lambda agent: agent.name)
def test_a_dollar_budget_prices_every_streamed_call(priced: RunningServer, llm: FakeLLM,
                                                    agent: Agent) -> None:
    """A dollar budget needs every call's usage; a Chat Completions stream reports it only when
    the request asks, which many clients do not: the endpoint asks, reads it and leaves the
    usage-only chunk out. Every streaming client reads its stream as before, and each of its
    calls is priced (none unpriced)."""
    model = llm.script(PRICED_MODEL, counting(agent))
    before = run_ids(priced)
    outcome = drive(agent, priced, model)
    assert outcome == {"ran": ["alpha", "beta"], "output": ANSWER}
    requests = llm.requests(model)
    assert len(requests) == 3
    for body, headers in zip(requests, llm.request_headers(model), strict=True):
        chat = "input" not in body and "anthropic-version" not in headers
        # asked of Chat Completions; the Responses and Anthropic APIs report usage unasked
        assert (body.get("stream_options") or {}).get("include_usage") is (
            True if chat else None), body
    run = the_new_run(priced, before)
    assert (run["iterations"], run["tool_calls"], run["unpriced_calls"]) == (3, 2, 0), run
    assert run["cost_usd"] > 0, run


@pytest.mark.parametrize("agent", LOOPING, ids=lambda agent: agent.name)
def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(
        plain: RunningServer, llm: FakeLLM, agent: Agent) -> None:
    model = llm.script(f"{agent.name}-loop", repeating(agent.tool))
    before = run_ids(plain)
    outcome = drive(agent, plain, model)
    requests = llm.requests(model)
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    # tool-cycle fires at the 4th identical call: the next request winds down, with the rule's
    # grace of 2 tool calls counted down; then the final request, without tools
    assert len(requests) == 7 and notes[:6] == [False] * 4 + [True] * 2, notes
    assert "the 2 tool calls allowed after the wind-down (tool-cycle) are used" in \
        instructions(requests[-1])
    grace = [GRACE_LEFT.findall(instructions(body)) for body in requests]
    assert grace == [[]] * 4 + [["2"], ["1"], []], grace
    assert outcome["ran"] == ["the file"] * 6
    check_last_is_the_only_one_without_tools(agent, requests)
    check_no_control_text_in_user_messages(requests)
    assert outcome["output"] == REPORT
    run = the_new_run(plain, before)
    assert (run["tool_calls"], run["terminal_state"], run["has_final_answer"]) == (
        6, "loop_detected", True), run
    assert len(llm.requests(model)) == 7  # the upstream got nothing after the final request


def test_the_sidecars_carry_the_tests_relay(plain: RunningServer, budgeted: RunningServer,
                                           model_relay: str) -> None:  # noqa: F811
    assert (plain.server.config.model_relay, budgeted.server.config.model_relay) == (
        model_relay, model_relay)


def test_the_agents_api_key_is_nowhere_but_upstream(plain: RunningServer,
                                                    budgeted: RunningServer,
                                                    llm: FakeLLM) -> None:
    """An agent of each SDK family (Python, Go, Rust, Java, TypeScript; the key in ``Authorization:
    Bearer``, in ``x-api-key``: anthropic-sdk-go and anthropic-java send ``ANTHROPIC_API_KEY``
    as a bearer token, ``@ai-sdk/anthropic`` as ``x-api-key``) runs through each sidecar: the
    key reaches the upstream, and appears in none of the sidecars' API answers, metrics, state
    files or log records (nor from the runs of the tests above, when they ran first)."""
    agents = [agent for agent in AGENTS if agent.name in (
        "openai-chat", "anthropic-messages", "go-chat", "go-messages", "rust-chat",
        "langchain4j-chat", "anthropic-java-messages", "ai_sdk-responses", "ai_sdk-messages",
        "openai_agents_js-chat")]
    for sidecar, scenario in ((plain, "counts"), (budgeted, "budget")):
        for agent in agents:
            model = llm.script(f"{agent.name}-secrets-{scenario}",
                               counting(agent) if scenario == "counts" else searching(agent.tool))
            drive(agent, sidecar, model)
            sent = llm.request_headers(model)
            assert sent and all(KEY in json.dumps(headers) for headers in sent)
    for sidecar in (plain, budgeted):
        runs = sidecar.get_json("/v1/runs?limit=1000")["runs"]
        assert runs
        seen = [json.dumps(runs)] + [
            json.dumps(sidecar.get_json(f"/v1/runs/{run['id']}")) for run in runs]
        seen += [json.dumps(sidecar.get_json(f"/v1/runs/{run['id']}/report",
                                             {"Accept": "application/json"})) for run in runs]
        seen.append(json.dumps(sidecar.get_json("/v1/rules")))
        status, metrics = http_request("GET", sidecar.metrics + "/metrics")
        assert status == 200
        seen.append(metrics.decode())
        assert not [text for text in seen if KEY in text]
        sidecar.flush()
        state = Path(sidecar.server.config.state_dir)
        files = [path for path in state.rglob("*") if path.is_file()]
        assert files and not [path for path in files if KEY.encode() in path.read_bytes()]
    assert LOGS.lines and not [line for line in LOGS.lines if KEY in line]



# -- DSPy: tools in text --------------------------------------------------------------------
# DSPy's ReAct (drivers/endpoint_dspy.py) picks its tools in text fields of its ChatAdapter
# format, each step a request of its own whose one user message holds the task and the
# trajectory so far: no request offers ``tools`` and no response calls one, and no two steps
# share their leading messages. The endpoint has no tool call to count, hand over or withdraw:
# each step is a run of one model call with no tool call, ended by its answer; a budget or loop
# rule cannot bind the agent's tools (ReAct's own ``max_iters`` does). The scripts answer in the
# ChatAdapter format (tests.frameworks.test_dspy).

DSPY = Agent("dspy", "endpoint_dspy", "call")


def react(terms: list[str]) -> fakellm.Script:
    """ReAct's steps: ``search`` with each of ``terms``, then its ``finish``; its extract step
    answers ANSWER."""
    from tests.frameworks.test_dspy import react as react_script
    from tests.frameworks.test_dspy import react_step

    return react_script([*(react_step("search", q=term) for term in terms),
                         react_step("finish")], ANSWER)


def check_each_step_a_run_without_tools(sidecar: RunningServer, before: set[str],
                                        requests: list[dict[str, Any]]) -> None:
    assert not any("tools" in body or "tool_choice" in body for body in requests)

    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        done = len(runs) == len(requests) and all(run["state"] == "ended" for run in runs)
        return runs if done else None

    runs = wait_until(ended, what="a run per request, ended")
    assert {(run["iterations"], run["tool_calls"], run["terminal_state"],
             run["has_final_answer"]) for run in runs} == {(1, 0, "completed", True)}, runs


def test_dspy_react_reaches_the_model_through_the_endpoint_unchanged(
        plain: RunningServer, llm: FakeLLM) -> None:
    model = llm.script("dspy-counts", react(["alpha", "beta"]))
    before = run_ids(plain)
    outcome = drive(DSPY, plain, model)
    assert outcome == {"ran": ["alpha", "beta"], "output": ANSWER}
    requests = llm.requests(model)
    assert len(requests) == 4  # search, search, finish, the extract step
    assert not any("agent-watchdog" in json.dumps(body) for body in requests)
    assert all(KEY in json.dumps(headers) for headers in llm.request_headers(model))
    check_each_step_a_run_without_tools(plain, before, requests)


def test_dspy_react_tools_are_not_bound_by_a_budget(budgeted: RunningServer,
                                                     llm: FakeLLM) -> None:
    terms = [f"term {i}" for i in range(BUDGET + 2)]
    model = llm.script("dspy-budget", react(terms))
    before = run_ids(budgeted)
    outcome = drive(DSPY, budgeted, model)
    assert outcome == {"ran": terms, "output": ANSWER}  # past the budget: ReAct's tools are text
    requests = llm.requests(model)
    assert len(requests) == len(terms) + 2
    # each step, a run of its own that offers no tools, is told no countdown
    assert [LEFT.findall(instructions(body)) for body in requests] == [[]] * len(requests)
    check_no_control_text_in_user_messages(requests)
    check_each_step_a_run_without_tools(budgeted, before, requests)
