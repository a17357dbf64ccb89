"""LlamaIndex.TS (npm ``llamaindex`` 0.12.1, ``@llamaindex/workflow`` 1.1.25,
``@llamaindex/openai`` 0.4.23), steered through the model endpoint with no code in it:
``ts/llamaindex/endpoint.ts``, its own ``package-lock.json``, installed by ``make
tests/frameworks/ts/llamaindex/node_modules/.installed``. Its agents: ``agent()`` (one
``FunctionAgent`` in an ``AgentWorkflow``) and ``multiAgent()`` (a supervisor that can hand off
to a worker), their tools ``tool()``s with a zod schema, their LLM ``openai()``, pointed at the
sidecar by ``OPENAI_BASE_URL`` or the LLM's ``baseURL`` alone, which also names the agent
(``/agent/<name>/v1``). The agent streams every model request (``stream: true``) whether the
caller ``run()``s or ``runStream()``s. LlamaIndex.TS emits no OpenTelemetry of its own and no
instrumentation package for it works offline: it is read through the endpoint alone.

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.steering import GRACE_LEFT, LEFT, instructions, user_text
from tests.frameworks.test_langchaingo import LOOP_NOTE, STOPPED
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

TS_DIR = Path(__file__).resolve().parent / "ts"
AGENT = TS_DIR / "llamaindex" / "endpoint.ts"
KEY = "sk-llamaindex-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: llamaindex-ts
budgets:
  - agents: ["li-budget"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["li-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("llamaindex-ts"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def pointed(endpoint: str, agent: str) -> str:
    """The base URL that points the agent at the sidecar's model endpoint ``endpoint`` and
    names it ``agent`` (docs/agents.md shows it)."""
    return f"{endpoint}/agent/{agent}/v1"


@dataclass(frozen=True)
class Invocation:
    outcomes: list[dict[str, str]]  # per task: the output the caller got, the error
    ran: list[str]  # what its tools were given
    requests: list[dict[str, Any]]  # what the upstream read


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, kind: str = "single", stream: bool = False,
           tasks: tuple[str, ...] = (), by_llm: bool = False) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL (``by_llm``: given as the
    LLM's ``baseURL``, else by ``OPENAI_BASE_URL``): one ``run()`` (``stream``:
    ``runStream()``) per task (by default one, a task of its own), its model scripted by
    ``script``."""
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    url = pointed(sidecar.url("model"), agent)
    env = {**clean_environ(), "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
           "AGENT_KIND": kind, "AGENT_STREAM": "1" if stream else "0",
           "AGENT_TASKS": json.dumps(tasks), "AGENT_RAN_LOG": str(tmp / "ran.log"),
           **({"AGENT_LLM_BASE_URL": url} if by_llm else {"OPENAI_BASE_URL": url})}
    result = subprocess.run(["node", "--import", "tsx", str(AGENT)], env=env, cwd=TS_DIR,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    ran = tmp / "ran.log"
    return Invocation([json.loads(line) for line in result.stdout.splitlines()
                       if line.startswith("{")],
                      ran.read_text().splitlines() if ran.exists() else [],
                      llm.requests(model))


def sums(index: int, body: dict[str, Any]) -> fakellm.Step:
    """``add`` while tools can be called, the report when not."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("add", a=index, b=100)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def added(count: int) -> list[str]:
    return [f'add {{"a":{index},"b":100}}' for index in range(count)]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "runStream"])
def test_each_run_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 ({stream}).", f"And to 4, 5, 6 ({stream}).")
    it = invoke(sidecar, llm, "li-budget", sums, tmp_path, stream=stream, tasks=tasks)
    print(json.dumps(it.requests, indent=1)[:6000])
    print(it.outcomes, it.ran)
    assert it.outcomes == [{"output": REPORT, "error": ""}] * 2
