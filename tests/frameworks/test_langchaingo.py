"""A Go agent that acts in its answers' text, steered through the model endpoint by base URL
alone: LangChainGo (``github.com/tmc/langchaingo``, ``go/langchaingo/main.go``, pinned by its
``go.sum``, built by ``make langchaingo-agent``), its agents run by its ``Executor`` as a user
runs them, OpenAI's client pointed at the sidecar by ``OPENAI_BASE_URL``.

Its ReAct agents (``NewOneShotAgent``, ``NewConversationalAgent``) never use the API's tool
calling: each request is one user message, the ReAct prompt (the tools, the format: ``Thought:``
/ ``Action:`` / ``Action Input:`` / ``Observation:`` / ``Final Answer:``, the question) with the
scratchpad at its end: the model's every answer so far, each followed by its tool's
``Observation:``. So each request is a conversation's first (no model answer in it), its prompt
the one before grown by the latest answer and what the tool said. The agent parses each answer
for an action; ``Final Answer:`` (the conversational agent's ``AI:``) ends the call. Its own
limit, ``WithMaxIterations``, ends the call with ``agent not finished before max iterations``.

The sidecar's rule pack declares these agents ``actions: text`` (named by the base URL's
``/agent/<name>/``), with the ReAct finish as their ``stop_answer``. Behind the sidecar, the
scripted upstream (:mod:`tests.frameworks.fakellm`) answers in ReAct's format; its recorded
request bodies are what the model read. Nothing waits for a directive.

* an ``Executor`` call is one run, each answer an action (a ``text_action`` call, its result
  the ``Observation``); two calls of one executor, two runs;
* a budget of 3 tool calls: the model reads the true countdown in a system message before the
  ReAct prompt (which the agent's parser never reads: it parses the answer), the tools run 3
  times, the 4th request is final and asks for the agent's own finish, which the model gives
  (``Final Answer:`` the report: the user's output), or does not (its 4th action runs, and the
  next request gets the stop answer, the agent's finish with the stop note);
* the agent's own limit first (``WithMaxIterations(2)`` under a budget of 3): the user gets
  ``agent not finished before max iterations`` and no output; the run is not the budget's;
* a loop: the same action every time, wound down by ``tool-cycle`` and stopped by the stop
  answer: the user gets the note as the agent's final answer;
* an abort after 2 actions: the 3rd request gets the stop answer, not the upstream;
* ``NewOpenAIFunctionsAgent`` acts by the API's tool calls under the same budget.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.harness import RunningServer, endpoint_with_pack, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

AGENT_DIR = Path(__file__).resolve().parent / "go" / "langchaingo"
KEY = "sk-langchaingo-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: langchaingo
budgets:
  - agents: ["lcg-budget"]
    max_tool_calls: 3
    actions: text
    stop_answer: "Final Answer: ${note}"
  - agents: ["lcg-chat"]
    max_tool_calls: 3
    actions: text
    stop_answer: "AI: ${note}"
  - agents: ["lcg-functions"]
    max_tool_calls: 3
  - agents: ["lcg*"]
    actions: text
    stop_answer: "Final Answer: ${note}"
rules:
  - name: two-actions-then-abort
    agents: ["lcg-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
FINISH = "end the task now, in the form your instructions give for finishing it"
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
STOPPED = "The agent-watchdog stopped this run"
_CASES = itertools.count(1)


def agent_binary() -> Path:
    """The agent ``make langchaingo-agent`` built for ``go/langchaingo/`` as it is now (the
    Makefile's hash: of main.go, go.mod and go.sum, in that order)."""
    sources = [AGENT_DIR / "main.go", AGENT_DIR / "go.mod", AGENT_DIR / "go.sum"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = AGENT_DIR.parents[3] / ".cache" / "langchaingo-agent" / digest / "langchaingo-agent"
    assert binary.exists(), f"{binary} is missing: `make langchaingo-agent` builds it"
    return binary


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    # (loose_run_gap: a declared run stays open this long after an answer; far longer than a
    # step of these runs, so none ends between two of its requests)
    with endpoint_with_pack(tmp_path_factory.mktemp("langchaingo"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


# -- the model ----------------------------------------------------------------------------------

def prompt(body: dict[str, Any]) -> str:
    """The agent's prompt: its one user message (after the system message the endpoint may
    have put before it)."""
    [user] = [message for message in body["messages"] if message["role"] == "user"]
    return str(user["content"])


def notes(body: dict[str, Any]) -> str:
    """What the endpoint told the model: the system message it put before the prompt."""
    return "\n".join(str(message["content"]) for message in body["messages"]
                     if message["role"] == "system")


def final_asked(body: dict[str, Any]) -> bool:
    return FINISH in notes(body)


def act(thought: str, tool: str, argument: str) -> fakellm.Step:
    return fakellm.answer(f"Thought: {thought}\nAction: {tool}\nAction Input: {argument}")


def sums_then_answer(count: int, obeys: bool = True, finish: str = "Final Answer:"
                     ) -> fakellm.Script:
    """``count`` sums on the calculator (``{index} + 100``), then the answer; a final
    request's instruction is obeyed (the report, in ``finish``'s form) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and final_asked(body):
            return fakellm.answer(f"Thought: I now know the final answer\n{finish} {REPORT}")
        if index < count:
            return act(f"I add {index} to 100 next, as the question asks.", "calculator",
                       f"{index} + 100")
        return fakellm.answer(f"Thought: I now know the final answer\n{finish} all done")
    return pick


def looping(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The same action, whatever the model is told."""
    return act("I should read the notes file to find the answer.", "read_file", "notes.txt")


# -- the agent ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Invocation:
    outcomes: list[dict[str, str]]  # per Executor call: the output the user got, the error
    ran: list[str]  # what its tools were given
    requests: list[dict[str, Any]]  # what the upstream read


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, tasks: tuple[str, ...] = ("Add 100 to 0, 1 and 2 in turn.",),
           kind: str = "oneshot", iterations: int = 10) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL: one Executor call per task
    (its limit ``iterations``), its model scripted by ``script``."""
    model = llm.script(f"{agent}-{next(_CASES)}", script)
    (tmp / "notes.txt").write_text("nothing here yet\n")
    env = {**clean_environ(), "OPENAI_BASE_URL": f"{sidecar.url('model')}/agent/{agent}/v1",
           "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model, "AGENT_KIND": kind,
           "AGENT_TASKS": json.dumps(tasks), "AGENT_MAX_ITERATIONS": str(iterations)}
    result = subprocess.run([str(agent_binary())], env=env, cwd=tmp, capture_output=True,
                            text=True, timeout=DRIVER_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    outcomes = [json.loads(line) for line in result.stdout.splitlines()]
    ran = tmp / "ran.log"
    return Invocation(outcomes, ran.read_text().splitlines() if ran.exists() else [],
                      llm.requests(model))


def run_ids(sidecar: RunningServer) -> set[str]:
    return {run["id"] for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]}


def new_runs(sidecar: RunningServer, before: set[str],
             done: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """The runs the invocation made, once ``done`` holds for them (their details)."""
    def made() -> list[dict[str, Any]] | None:
        runs = [sidecar.get_json(f"/v1/runs/{run['id']}")
                for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if runs and done(runs) else None

    found: list[dict[str, Any]] = wait_until(made, what="the invocation's runs")
    return found


def the_ended_run(sidecar: RunningServer, before: set[str]) -> dict[str, Any]:
    runs = new_runs(sidecar, before, lambda runs: all(run["state"] == "ended" for run in runs))
    assert len(runs) == 1, f"one run per Executor call, the sidecar has {json.dumps(runs)}"
    return runs[0]


# -- one run per Executor call --------------------------------------------------------------------

def test_an_executor_call_is_one_run_each_answer_an_action(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg", sums_then_answer(3), tmp_path)
    assert it.outcomes == [{"output": "all done", "error": ""}]
    assert it.ran == ["calculator 0 + 100", "calculator 1 + 100", "calculator 2 + 100"]
    assert len(it.requests) == 4
    # nothing to steer: each request went upstream as the agent sent it, one user message
    assert all([message["role"] for message in body["messages"]] == ["user"]
               for body in it.requests)
    assert "Observation: 102" in prompt(it.requests[-1])
    runs = new_runs(sidecar, before, lambda runs: sum(run["tool_calls"] for run in runs) >= 3)
    assert len(runs) == 1, json.dumps(runs)
    [run] = runs
    assert (run["iterations"], run["tool_calls"]) == (4, 3), run
    assert run["signals"]["tools"] == {"text_action": 3}, run["signals"]
