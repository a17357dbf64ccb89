"""An agent whose actions are in its answers' text, steered through the model endpoint by base
URL alone: mini-swe-agent (its ``mini`` CLI, text-based: ``-c mini_textbased.yaml
--model-class litellm_textbased``; LiteLLM's SDK beneath it, ``OPENAI_BASE_URL``), run as a
user runs it, in a temp dir, its commands really executed there (each appends to
``ran.log``). It never uses the API's tool calling: each answer holds one bash block, which
the agent runs, and its output comes back as the next user message; the agent ends when a
command prints ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first (its submission: what follows).

The sidecar's rule pack declares these agents ``actions: text`` (named by the base URL's
``/agent/<name>/``), with the answer that ends their task as their ``stop_answer``. Behind the
sidecar, the scripted upstream (:mod:`tests.frameworks.fakellm`) answers in mini's format;
its recorded request bodies are what the model read. Nothing waits for a directive.

* declared: the conversation is one run, each answer an action (a ``text_action`` call);
  undeclared: each step is a run of its own (the endpoint cannot tell an action from an answer);
* a budget of 3 tool calls: the model reads the true countdown at each request, the agent runs
  3 commands, the 4th request is final and asks for the agent's own finish; the model gives
  it (the agent submits the report) — or runs one more command, and the agent's next request
  gets the stop answer, which ends it; the upstream gets nothing after;
* a budget of 4 model calls (``max_iterations``): told from 2 left, the 4th call is final;
* loop: the same failing command — ``tool-cycle`` winds the run down at the 5th request, its
  grace of 2 counts down, the 7th is final; the model loops on, and the stop answer ends the
  agent; the upstream gets nothing after;
* abort: a rule aborts after 2 actions: the 3rd request gets the stop answer, not the upstream.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.harness import RunningServer, endpoint_with_pack, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-text-actions-0123456789abcdefSECRET"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
REPORT = "REPORT: 3 steps done; the rest remains."
STOP_ANSWER = f"""${{note}}

```mswea_bash_command
echo {SUBMIT}
```
"""
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: text-agents
budgets:
  - agents: ["mini-budget"]
    max_tool_calls: 3
    actions: text
    stop_answer: {json.dumps(STOP_ANSWER)}
  - agents: ["mini-calls"]
    max_iterations: 4
    actions: text
    stop_answer: {json.dumps(STOP_ANSWER)}
  - agents: ["mini*"]
    actions: text
    stop_answer: {json.dumps(STOP_ANSWER)}
rules:
  - name: two-actions-then-abort
    agents: ["mini-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
CALLS_LEFT = re.compile(r"\[budget: (\d+) of (\d+) model calls left")
FINISH = "end the task now, in the form your instructions give for finishing it"
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
_CASES = itertools.count(1)


# -- the world ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    # (loose_run_gap: the declared runs stay open this long after an answer; far longer than
    # a step of these runs, so none ends between two of its requests)
    with endpoint_with_pack(tmp_path_factory.mktemp("text-actions"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def block(command: str, thought: str = "THOUGHT: the next step.") -> fakellm.Step:
    """An answer in mini's text-based format: its reasoning, then one bash block."""
    return fakellm.answer(f"{thought}\n\n```mswea_bash_command\n{command}\n```")


def final_asked(body: dict[str, Any]) -> bool:
    return FINISH in instructions(body)


def steps_then_submit(count: int, obeys: bool = True) -> fakellm.Script:
    """``count`` commands (step 0, 1, ...: each appends to ran.log), then the submission;
    a final request's instruction is obeyed (the report submitted) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and final_asked(body):
            return block(f"echo {SUBMIT} && echo '{REPORT}'", "THOUGHT: I report now.")
        if index < count:
            return block(f"echo step{index} >> ran.log && echo done {index}")
        return block(f"echo {SUBMIT} && cat ran.log", "THOUGHT: done.")
    return pick


def looping(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The same failing command, whatever the model is told."""
    return block("echo tried >> ran.log && cat missing.txt")


def run_mini(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
             tmp_path: Path) -> tuple[str, dict[str, Any], list[str], list[dict[str, Any]]]:
    """``mini`` once, in a temp dir of its own, on a model scripted by ``script``, named
    ``agent`` by its base URL. Returns the model's name, its trajectory's info, the commands
    it really ran (ran.log) and the requests the upstream got."""
    model = llm.script(f"mini-{agent}-{next(_CASES)}", script)
    trajectory = tmp_path / "trajectory.json"
    drive_mini(sidecar, agent, tmp_path, [
        "-c", "mini_textbased.yaml", "--model-class", "litellm_textbased",
        "-m", f"openai/{model}", "-t", "Count the steps.", "--yolo", "--exit-immediately",
        "-o", str(trajectory)])
    work = tmp_path / "work"
    saved = json.loads(trajectory.read_text())
    info: dict[str, Any] = {**saved["info"], "last_answer": next(
        (m["content"] for m in reversed(saved["messages"]) if m["role"] == "assistant"), None)}
    ran = work / "ran.log"
    commands = ran.read_text().splitlines() if ran.exists() else []
    return model, info, commands, llm.requests(model)


def drive_mini(sidecar: RunningServer, agent: str, tmp_path: Path, args: list[str],
               extra: dict[str, str] | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """The ``mini`` CLI with ``args``, named ``agent`` by its base URL, in ``tmp_path/work``
    (made here), its settings in ``tmp_path`` (and ``extra``)."""
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **clean_environ("MSWEA_", "LITELLM_"),
        "OPENAI_BASE_URL": f"{sidecar.url('model')}/agent/{agent}/v1",
        "OPENAI_API_KEY": KEY,
        # as a user sets mini up for a model of their own, with nothing asked at start
        "MSWEA_CONFIGURED": "true",
        "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mini-config"),
        "MSWEA_COST_TRACKING": "ignore_errors",  # (a model LiteLLM has no price for)
        "MSWEA_SILENT_STARTUP": "1",
        "PYTHONPATH": str(DRIVERS),
        "MINI_WORKDIR": str(work),
        "MINI_ARGS": json.dumps(args),
        **(extra or {}),
    }
    # (the driver process imported LiteLLM with PRELOAD_ENV: its price list from the package,
    # never fetched)
    return drive_command("mini_swe_agent", "endpoint_mini_swe_agent", "cli",
                         {**clean_environ(), "PYTHONPATH": str(DRIVERS)}, env, check)


def instructions(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


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
    assert len(runs) == 1, f"one run per invocation, the sidecar has {json.dumps(runs)}"
    return runs[0]


def check_loop_wound_down(requests: list[dict[str, Any]], run: dict[str, Any]) -> None:
    """A text agent's loop, the same failing action again and again: tool-cycle fires at the
    4th identical action, the next 2 requests are wound down with the rule's grace of 2
    counted down, the 7th is final, and nothing goes upstream after it; its run ended
    ``loop_detected`` with the 6 actions the grace allowed."""
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and notes[:6] == [False] * 4 + [True] * 2, notes
    grace = [re.findall(r"\[grace: (\d+) tool calls? left", instructions(body))
             for body in requests]
    assert grace == [[]] * 4 + [["2"], ["1"], []], grace
    assert "tool calls allowed after the wind-down" in instructions(requests[-1])
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


def check_no_control_text_in_user_messages(requests: list[dict[str, Any]]) -> None:
    for body in requests:
        for message in body["messages"][1:]:
            assert "[budget:" not in str(message.get("content")) or \
                message["role"] == "assistant", message


# -- a conversation is one run ----------------------------------------------------------------

def test_declared_its_conversation_is_one_run_each_answer_an_action(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini", steps_then_submit(3), tmp_path)
    assert ran == ["step0", "step1", "step2"]
    assert (info["exit_status"], info["submission"]) == ("Submitted",
                                                         "step0\nstep1\nstep2\n")
    assert len(requests) == 4
    # nothing to steer: each request went upstream as mini sent it
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests)
    assert not any("tools" in body for body in requests)
    runs = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 4)
    assert len(runs) == 1, json.dumps(runs)
    run = runs[0]
    # open until loose_run_gap passes with no request (the submission's action has no result)
    assert (run["state"], run["iterations"], run["tool_calls"]) == ("active", 4, 3), run
    assert run["signals"]["tools"] == {"text_action": 3}, run["signals"]
    # its last answer's action runs at the agent (as far as the endpoint can tell): in flight,
    # not idle, as a run whose tool calls were handed over is
    assert run["signals"]["in_flight"] == 1, run["signals"]


def test_undeclared_each_step_is_a_run_of_its_own(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "another-agent", steps_then_submit(2),
                                      tmp_path)
    assert (ran, info["exit_status"]) == (["step0", "step1"], "Submitted")
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 3
                    and all(run["state"] == "ended" for run in runs))
    assert {(run["iterations"], run["tool_calls"], run["terminal_state"])
            for run in runs} == {(1, 0, "completed")}, runs
    assert len(requests) == 3


# -- budgets ------------------------------------------------------------------------------------

def test_a_budget_of_tool_calls_counts_actions_and_ends_with_the_agents_own_finish(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini-budget", steps_then_submit(10),
                                      tmp_path)
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    assert (info["exit_status"], info["submission"]) == ("Submitted", REPORT + "\n")
    assert len(requests) == 4
    # the true count left at each request (the default pack's countdown: from 3 left)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [final_asked(body) for body in requests] == [False, False, False, True]
    assert "all 3 tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_an_answer_past_the_budget_gets_the_stop_answer_which_ends_the_agent(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model does not take the final instruction: its answer is one more command, which
    the agent runs (the endpoint cannot take an action out of text); the agent's next request
    is the run's, answered with the stop answer, and the upstream gets nothing more."""
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini-budget",
                                      steps_then_submit(10, obeys=False), tmp_path)
    assert ran == ["step0", "step1", "step2", "step3"]
    assert len(requests) == 4 and final_asked(requests[-1])
    assert (info["exit_status"], info["submission"]) == ("Submitted", "")
    assert "The agent-watchdog stopped this run" in info["last_answer"]
    # saying why, as it does when a model asks for tools past its final request
    assert "went on after its final request instead of ending (budget-exhausted)" in info[
        "last_answer"], info["last_answer"]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert len(llm.requests(_model_of(requests))) == 4


def _model_of(requests: list[dict[str, Any]]) -> str:
    return str(requests[0]["model"])


def test_a_budget_of_model_calls_is_counted_down_and_its_last_call_is_final(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini-calls", steps_then_submit(10),
                                      tmp_path)
    assert ran == ["step0", "step1", "step2"]
    assert (info["exit_status"], info["submission"]) == ("Submitted", REPORT + "\n")
    assert len(requests) == 4
    assert [CALLS_LEFT.findall(instructions(body)) for body in requests] == [
        [], [], [("2", "4")], []]
    assert [final_asked(body) for body in requests] == [False, False, False, True]
    assert "this is the last of 4" in instructions(requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"]) == (4, 3), run


# -- loops and aborts ---------------------------------------------------------------------------

def test_a_looping_agent_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini", looping, tmp_path)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert final_asked(requests[-1])
    # the model loops on: its 7th answer runs too, then the stop answer ends the agent
    assert ran == ["tried"] * 7
    assert (info["exit_status"], info["submission"]) == ("Submitted", "")
    assert len(llm.requests(_model_of(requests))) == 7  # nothing after the final request


def test_an_abort_is_answered_in_the_agents_own_finish(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    _, info, ran, requests = run_mini(sidecar, llm, "mini-abort", steps_then_submit(10),
                                      tmp_path)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert (info["exit_status"], info["submission"]) == ("Submitted", "")
    # the stop answer: the note, then the pack's finish, the only action in it
    assert "Stopped by the test's rule after 2 actions" in info["last_answer"]
    assert info["last_answer"].count("```mswea_bash_command") == 1
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_agent_that_offers_tools_acts_by_them_whatever_the_pack_says(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent the pack's glob declares ``actions: text`` (``mini*``) whose requests offer
    tools (the ``openai`` SDK's own loop: a tool call, its result, then the answer) acts by the
    API's tool calls: its text answer is its run's answer, which ends the run at once (not an
    action held open for ``loose_run_gap``), and its one tool call is counted, no
    ``text_action``; its final request keeps the tools' form (no finish asked)."""
    import openai

    model = llm.script(f"mini-tools-{next(_CASES)}", fakellm.steps(
        fakellm.call("bash", command="ls"), fakellm.answer("There are 3 files.")))
    client = openai.OpenAI(base_url=f"{sidecar.url('model')}/agent/mini-tools/v1",
                           api_key=KEY, max_retries=0)
    tools: Any = [{"type": "function", "function": {
        "name": "bash", "parameters": {"type": "object", "properties": {
            "command": {"type": "string"}}}}}]
    before = run_ids(sidecar)
    messages: list[Any] = [{"role": "user", "content": "Count the files."}]
    first = client.chat.completions.create(model=model, messages=messages, tools=tools)
    (call,) = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "a b c"}]
    second = client.chat.completions.create(model=model, messages=messages, tools=tools)
    assert second.choices[0].message.content == "There are 3 files."
    run = the_ended_run(sidecar, before)
    assert (run["terminal_state"], run["signals"]["tool_calls"]) == ("completed", 1), run
    assert all(fakellm.offers_tools(body) and not final_asked(body)
               for body in llm.requests(model))
