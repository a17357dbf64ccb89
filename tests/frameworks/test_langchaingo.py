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
  next request gets the stop answer, the agent's finish with the stop note; or a plain report,
  which the agent cannot parse: its caller gets the parse error with the report in it);
* the agent's own limit first (``WithMaxIterations(2)`` under a budget of 3): the user gets
  ``agent not finished before max iterations`` and no output; the run is not the budget's;
* a loop: the same action every time, wound down by ``tool-cycle`` and stopped by the stop
  answer: the user gets the note as the agent's final answer;
* an abort after 2 actions: the 3rd request gets the stop answer, not the upstream;
* ``NewOpenAIFunctionsAgent`` acts by the API's tool calls under the same budget.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import clean_environ, run_go_agent
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

AGENT_DIR = Path(__file__).resolve().parent / "go" / "langchaingo"
KEY = "sk-langchaingo-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
# its actions: "Action:" and "Action Input:" (the Thought before them aside); an answer with
# none is its Final Answer (the conversational agent's "AI:")
ACTION = r"(?s)Action:\s*(.*?)\s*Action Input:\s*(.*)"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: langchaingo
budgets:
  - agents: ["lcg-budget"]
    max_tool_calls: 3
    actions: text
    action_pattern: {json.dumps(ACTION)}
    stop_answer: "Final Answer: ${{note}}"
  - agents: ["lcg-chat"]
    max_tool_calls: 3
    actions: text
    action_pattern: {json.dumps(ACTION)}
    stop_answer: "AI: ${{note}}"
  - agents: ["lcg-functions"]
    max_tool_calls: 3
  - agents: ["lcg-any"]
    actions: text
  - agents: ["lcg-bare-abort"]
    actions: text
    action_pattern: {json.dumps(ACTION)}
  - agents: ["lcg*"]
    actions: text
    action_pattern: {json.dumps(ACTION)}
    stop_answer: "Final Answer: ${{note}}"
rules:
  - name: two-actions-then-abort
    agents: ["lcg-abort", "lcg-bare-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
FINISH = "end the task now, in the form your instructions give for finishing it"
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
STOPPED = "The agent-watchdog stopped this run"
_CASES = itertools.count(1)


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


def looping(index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The same action, whatever the model is told, under other thoughts each time."""
    return act(f"Attempt {index}: I should read the notes file to find the answer.",
               "read_file", "notes.txt")


# -- the agent ----------------------------------------------------------------------------------

def pointed(endpoint: str, agent: str) -> dict[str, str]:
    """What points the agent at the sidecar's model endpoint ``endpoint`` and names it
    ``agent``: one variable, which ``openai.New()`` reads (docs/agents.md shows it)."""
    return {"OPENAI_BASE_URL": f"{endpoint}/agent/{agent}/v1"}


@dataclass(frozen=True)
class Invocation:
    outcomes: list[dict[str, str]]  # per Executor call: the output the user got, the error
    ran: list[str]  # what its tools were given
    requests: list[dict[str, Any]]  # what the upstream read


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, tasks: tuple[str, ...] = (), kind: str = "oneshot",
           iterations: int = 10) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL: one Executor call per task
    (by default one, a task of its own: the same input run after run is a loop the default
    pack's ``agent-ping-pong`` winds down), its limit ``iterations``, its model scripted by
    ``script``."""
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    (tmp / "notes.txt").write_text("nothing here yet\n")
    env = {**clean_environ(), **pointed(sidecar.url("model"), agent), "OPENAI_API_KEY": KEY,
           "OPENAI_MODEL": model, "AGENT_KIND": kind,
           "AGENT_TASKS": json.dumps(tasks), "AGENT_MAX_ITERATIONS": str(iterations)}
    outcomes, ran = run_go_agent(AGENT_DIR, "langchaingo-agent", env, tmp)
    return Invocation(outcomes, ran, llm.requests(model))


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
    # its Final Answer holds no action (the pack's action_pattern): the run's answer, which
    # ends it at once
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {"text_action": 3}, run["signals"]
    assert run["final_output"].endswith("Final Answer: all done"), run


def test_without_a_pattern_every_answer_is_an_action_and_the_run_is_held_open(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """An entry with ``actions: text`` and no ``action_pattern``: the Final Answer is one
    more action (its whole text), the run held open for its result until ``loose_run_gap``."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-any", sums_then_answer(3), tmp_path)
    assert it.outcomes == [{"output": "all done", "error": ""}]
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["tool_calls"] == 3)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"]) == (
        "active", 4, 1), run


def test_two_executor_calls_are_two_runs(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """One executor, two calls (the conversational agent, its memory the executor's: the
    second prompt carries the first call's exchange in its history): a run each."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-two", sums_then_answer(1, finish="AI:"), tmp_path,
                tasks=("Add 100 to 0.", "And again?"), kind="conversational")
    assert [outcome["error"] for outcome in it.outcomes] == ["", ""]
    assert len(it.requests) == 3 and "Human: Add 100 to 0." in prompt(it.requests[-1])
    runs = new_runs(sidecar, before, lambda runs: sum(run["iterations"] for run in runs) == 3)
    assert sorted((run["iterations"], run["tool_calls"]) for run in runs) == [
        (1, 0), (2, 1)], json.dumps(runs)



def test_the_same_task_run_again_to_its_answer_is_no_loop(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A script runs the agent on one task three times, each to its answer (the endpoint puts
    them in one session): three tasks, not a loop across runs; the third goes as the first."""
    task = "Add 100 to 0 (the same task, run again by a script)."
    for time in range(3):
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "lcg", sums_then_answer(1), tmp_path, tasks=(task,))
        assert it.outcomes == [{"output": "all done", "error": ""}], time
        assert [notes(body) for body in it.requests] == ["", ""], time
        run = the_ended_run(sidecar, before)
        assert (run["terminal_state"], run["tool_calls"]) == ("completed", 1), run

# -- a budget -------------------------------------------------------------------------------------

def test_a_budget_counts_actions_down_and_ends_with_the_agents_own_finish(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-budget", sums_then_answer(10), tmp_path)
    assert it.ran == ["calculator 0 + 100", "calculator 1 + 100", "calculator 2 + 100"]
    # the model's report is the output the user gets: the agent parsed its Final Answer
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    assert len(it.requests) == 4
    # the true count left at each request, in a system message before the ReAct prompt
    assert [LEFT.findall(notes(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [[message["role"] for message in body["messages"]] for body in it.requests] == [
        ["system", "user"]] * 4
    assert all("[budget:" not in prompt(body) for body in it.requests)
    assert [final_asked(body) for body in it.requests] == [False, False, False, True]
    assert "all 3 tool calls used" in notes(it.requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_an_action_past_the_budget_runs_and_the_next_request_gets_the_stop_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model does not take the final instruction: its answer is one more action, which
    the agent runs (the endpoint cannot take it out of the text); its next request is the
    run's, answered with the stop answer (the pack's ``Final Answer: ${note}``): the user gets
    the stop note as the agent's output, and the upstream nothing more."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-budget", sums_then_answer(10, obeys=False), tmp_path)
    assert len(it.ran) == 4 and len(it.requests) == 4 and final_asked(it.requests[-1])
    [outcome] = it.outcomes
    assert outcome["error"] == "" and STOPPED in outcome["output"], outcome
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert len(llm.requests(str(it.requests[0]["model"]))) == 4


def test_a_report_not_in_the_agents_form_reaches_the_user_as_its_parse_error(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model answers the final request with a plain report (no ``Final Answer:``): the
    pack's ``action_pattern`` finds no action in it, so it is the run's answer and ends the
    run; LangChainGo cannot parse it, and its caller gets ``unable to parse agent output``
    with the report in it (no output): the upstream gets nothing more."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        return fakellm.answer(REPORT) if final_asked(body) else sums_then_answer(10)(index, body)

    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-budget", pick, tmp_path)
    assert len(it.ran) == 3 and len(it.requests) == 4
    assert it.outcomes == [{"output": "", "error": f"unable to parse agent output: {REPORT}"}]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        3, "tool_limit_reached", REPORT), run


def test_the_conversational_agent_finishes_in_its_own_form(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The conversational ReAct agent ends on ``AI:``: its pack entry's ``stop_answer`` says
    so, and its final request's answer in that form is the user's output."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-chat", sums_then_answer(10, finish="AI:"), tmp_path,
                kind="conversational")
    assert len(it.ran) == 3 and len(it.requests) == 4 and final_asked(it.requests[-1])
    assert [outcome["output"].strip() for outcome in it.outcomes] == [REPORT]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


def test_the_agents_own_limit_first_ends_the_call_with_its_error(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``WithMaxIterations(2)`` under a budget of 3: the executor stops after 2 actions, with
    no request more: the user gets LangChainGo's ``agent not finished before max
    iterations`` and no output. Nothing tells the endpoint: the run, 2 of 3 tool calls used,
    is held open for the action it last handed over (``loose_run_gap``), not the budget's."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-budget", sums_then_answer(10), tmp_path, iterations=2)
    assert it.outcomes == [{"output": "",
                            "error": "agent not finished before max iterations"}]
    assert len(it.ran) == 2 and len(it.requests) == 2
    assert not any(final_asked(body) for body in it.requests)
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["tool_calls"] == 1)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"]) == (
        "active", 2, 1), run


# -- loops and aborts -----------------------------------------------------------------------------

def test_a_looping_agent_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg", looping, tmp_path, iterations=20)
    told = [LOOP_NOTE in notes(body) for body in it.requests]
    # tool-cycle fires at the 4th identical action: the next 2 requests are wound down, with
    # the rule's grace of 2 counted down; the 7th is final
    assert len(it.requests) == 7 and told[:6] == [False] * 4 + [True] * 2, told
    assert final_asked(it.requests[-1])
    # the model loops on: its 7th action runs too, then the stop answer ends the agent, its
    # note (the run is over) the output the user gets
    assert it.ran == ["read_file notes.txt"] * 7
    [outcome] = it.outcomes
    assert outcome["error"] == "" and STOPPED in outcome["output"], outcome
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


def test_an_abort_is_answered_in_the_agents_own_finish(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-abort", sums_then_answer(10), tmp_path)
    assert len(it.ran) == 2 and len(it.requests) == 2  # the 3rd got the stop, not upstream
    [outcome] = it.outcomes
    assert outcome["error"] == "" and "Stopped by the test's rule after 2 actions" in \
        outcome["output"], outcome
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_abort_without_the_agents_finish_form_ends_it_with_the_note_in_its_error(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """No ``stop_answer`` in its entry: nothing says how the agent finishes (its
    ``action_pattern`` says what an action is, not the form its parser takes as final), so the
    abort answers the stop note alone, an answer with no action. LangChainGo reads it as
    malformed and ends the call: its caller gets the parse error, the note in it, and the
    upstream nothing more (the docs say to give the form: ``stop_answer``)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-bare-abort", sums_then_answer(10), tmp_path)
    assert len(it.ran) == 2 and len(it.requests) == 2
    [outcome] = it.outcomes
    assert outcome["output"] == "" and outcome["error"].startswith(
        "unable to parse agent output: ") and STOPPED in outcome["error"] \
        and "Stopped by the test's rule after 2 actions" in outcome["error"], outcome
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- the API's tool calls -------------------------------------------------------------------------

def test_the_functions_agent_acts_by_tool_calls_under_the_same_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``NewOpenAIFunctionsAgent`` offers its tools: the budget's countdown, its calls trimmed
    to the calls left, the final request with the tools withdrawn, whose answer is the user's
    output."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body) or body.get("tool_choice") == "none":
            return fakellm.answer(REPORT)
        return fakellm.call("calculator", __arg1=f"{index} + 100")

    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "lcg-functions", pick, tmp_path, kind="functions")
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    assert it.ran == ["calculator 0 + 100", "calculator 1 + 100", "calculator 2 + 100"]
    assert len(it.requests) == 4 and it.requests[-1].get("tool_choice") == "none"
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run
