"""Langroid (``langroid`` 0.69.16: a ``ChatAgent`` with a ``ToolMessage`` tool, ``shell``, run
unattended by a ``Task``) steered through the model endpoint by its base URL alone
(``OPENAI_BASE_URL``, which the OpenAI client beneath Langroid reads; a lead and its helper
each by their ``OpenAIGPTConfig(api_base=...)``), its commands really run in a temp dir (each
appends to ``ran.log``). Its model is Langroid's ``OpenAIGPT``, streamed. It acts two ways,
each tested: by a JSON object in its answer's text (Langroid's default: ``{"request": "shell",
"command": ...}``, the tool's result the next user message), and by the API's tool calls
(``use_tools_api=True``). An answer with no tool ends its task, that answer the task's result
(``handle_llm_no_tool="done"``). One ``Task.run`` is one run. Langroid emits no OpenTelemetry
of its own: the endpoint's records are all the sidecar has of it.

The sidecar's rule pack declares the agents ``actions: text`` with ``action_key: request``
(named by the base URL's ``/agent/<name>/``): each JSON object in an answer whose ``request``
names a tool is a call of it, an answer with none the run's answer, and ``answer_tools:
[done_tool]``: its ``DoneTool`` object is its answer too; no ``stop_answer``: the
stop note alone is an answer with no tool, which ends Langroid's task with it as its result.
Behind the sidecar, the scripted upstream (:mod:`tests.frameworks.fakellm`); its recorded
request bodies are what the model read. Nothing waits for a directive.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_text_actions import (
    LEFT,
    check_loop_wound_down,
    final_asked,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-langroid-0123456789abcdefSECRET"
REPORT = "REPORT: 3 steps done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: langroid
budgets:
  - agents: ["langroid-budget*"]
    max_tool_calls: 3
    actions: text
    action_key: request
    answer_tools: [done_tool]
  - agents: ["langroid-json-stop"]
    actions: text
    action_key: request
    answer_tools: [done_tool]
    stop_answer: '{"request": "done_tool", "content": ${note_json}}'
  - agents: ["langroid*"]
    actions: text
    action_key: request
    answer_tools: [done_tool]
rules:
  - name: two-actions-then-abort
    agents: ["langroid-abort", "langroid-json-stop"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
STOPPED = "The agent-watchdog stopped this run"
MODES = ("text", "tools")
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("langroid"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def act(command: str, mode: str) -> fakellm.Step:
    """One action: ``command`` by the ``shell`` tool, as Langroid's JSON in the answer's text
    (fenced, after a sentence, as its models write it) or as a tool call."""
    if mode == "tools":
        return fakellm.call("shell", command=command)
    return fakellm.answer("I run the next step.\n```json\n" + json.dumps(
        {"request": "shell", "command": command}) + "\n```")


def steps_then_answer(count: int, mode: str, obeys: bool = True) -> fakellm.Script:
    """``count`` commands (step 0, 1, ...: each appends to ran.log), then the answer; a final
    request's instruction is obeyed (the report, no tool) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and (final_asked(body) or body.get("tool_choice") == "none"):
            return fakellm.answer(REPORT)
        if index >= count:
            return fakellm.answer(f"All {count} steps are done.")
        return act(f"echo step{index} >> ran.log && echo done {index}", mode)
    return pick


def settings(api_base: str | None, model: str, mode: str = "text"
             ) -> dict[str, dict[str, object]]:
    """What a user sets to run a Langroid agent unattended on a model at ``api_base`` (None:
    ``OPENAI_BASE_URL`` says where), its key from ``OPENAI_API_KEY``: its ``OpenAIGPTConfig``'s
    and its ``ChatAgentConfig``'s keyword arguments (``mode`` ``tools``: by the API's tool
    calls). The tests run it so, and docs/steering.md shows it (``langroid-config``, checked
    in tests/test_docs.py)."""
    llm: dict[str, object] = {"chat_model": model}
    if api_base is not None:
        llm["api_base"] = api_base
    agent: dict[str, object] = {"handle_llm_no_tool": "done"}
    if mode == "tools":
        agent.update(use_functions_api=True, use_tools=False)
    return {"llm": llm, "agent": agent}


def run_langroid(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                 tmp_path: Path, mode: str, helper: tuple[str, fakellm.Script] | None = None,
                 done_tool: bool = False
                 ) -> tuple[str | None, list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """One ``Task.run`` of Langroid, in a temp dir of its own, on a model scripted by
    ``script``, named ``agent`` by ``OPENAI_BASE_URL``. ``helper`` (its name and script): the
    lead agent ``agent`` delegates to a helper agent by Langroid's ``send_tool``, each named
    by its own ``api_base``; ``done_tool``: the agent has Langroid's ``done_tool``. Returns
    the task's result, the commands really run (ran.log),
    the requests the lead's upstream got and the helper's."""
    case = next(_CASES)
    model = llm.script(f"langroid-{agent}-{case}", script)
    work = tmp_path / "work"
    work.mkdir()
    endpoint = sidecar.url("model")
    env = {**clean_environ("LITELLM_"), "HOME": str(tmp_path), "PYTHONPATH": str(DRIVERS),
           "LR_WORKDIR": str(work), "OPENAI_API_KEY": KEY,
           "LR_TASKS": json.dumps([f"Count the steps (case {case})."]),
           **({"LR_DONE_TOOL": "1"} if done_tool else {})}
    helper_model = None
    if helper is None:
        env.update(OPENAI_BASE_URL=f"{endpoint}/agent/{agent}/v1",
                   LR_SETTINGS=json.dumps(settings(None, model, mode)))
    else:
        helper_model = llm.script(f"langroid-{helper[0]}-{case}", helper[1])
        env.update(LR_SETTINGS=json.dumps(settings(f"{endpoint}/agent/{agent}/v1", model, mode)),
                   LR_HELPER=json.dumps(settings(f"{endpoint}/agent/{helper[0]}/v1",
                                                 helper_model, mode)))
    result = drive_command("langroid", "endpoint_langroid", mode,
                           {**clean_environ(), "PYTHONPATH": str(DRIVERS)}, env)
    [said] = json.loads(result.stdout.strip().splitlines()[-1])
    ran = work / "ran.log"
    return (said, ran.read_text().splitlines() if ran.exists() else [], llm.requests(model),
            llm.requests(helper_model) if helper_model else [])


def instructions(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def looping(mode: str) -> fakellm.Script:
    """The same failing command, whatever the model is told."""
    return lambda _index, _body: act("echo tried >> ran.log && cat missing.txt", mode)


# -- a Task.run is a run --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_one_task_run_is_one_run_each_tool_it_asks_for_a_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Each JSON object naming its tool is a call of that tool, as a tool call is: the run's
    counts are the same either way; its answer with no tool ends the run at once,
    ``completed``, with that answer, which is also what ``Task.run`` returns."""
    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid", steps_then_answer(3, mode),
                                          tmp_path, mode)
    assert ran == ["step0", "step1", "step2"]
    assert said == "All 3 steps are done."
    assert len(requests) == 4
    # nothing to steer: each request went upstream as it came
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests)
    assert [("tools" in body) for body in requests] == [mode == "tools"] * 4
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {"shell": 3}, run["signals"]
    assert run["final_output"] == "All 3 steps are done."


@pytest.mark.parametrize("agent", ["langroid", "langroid-budget"])
def test_its_done_tool_is_its_answer_and_ends_the_run_at_once(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, agent: str) -> None:
    """The model that ends its task by Langroid's ``done_tool`` in its text (``{"request":
    "done_tool", "content": ...}``, its ``DoneTool``), a tool the pack's ``answer_tools``
    names, gives the run's answer by it: no tool call (not one of a budget's 3), its
    ``content`` the run's output, and the run ends ``completed`` at once, as with an answer
    with no tool (``loose_run_gap`` is 2 min here). Read the moment ``Task.run`` has
    returned."""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        if index == 2:
            return fakellm.answer("Both steps ran.\n```json\n" + json.dumps(
                {"request": "done_tool", "content": "Both done."}) + "\n```")
        return act(f"echo step{index} >> ran.log", "text")

    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, agent, pick, tmp_path, "text",
                                          done_tool=True)
    assert (said, ran, len(requests)) == ("Both done.", ["step0", "step1"], 3)
    if agent == "langroid-budget":  # (its 3rd request: 1 of 3 left, the done_tool none)
        assert LEFT.findall(instructions(requests[2])) == [("1", "3")], requests[2]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 2, "completed"), run
    assert run["signals"]["tools"] == {"shell": 2}, run["signals"]
    assert run["final_output"] == "Both done."


# -- a budget -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_budget_of_three_counts_down_and_its_final_request_asks_for_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-budget",
                                          steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    assert said == REPORT  # what Task.run returns: the report, as the agent's answer
    assert len(requests) == 4
    # the true count left at each request (the default pack's countdown: from 3 left)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert "all 3 tool calls used" in instructions(requests[-1])
    if mode == "text":  # (its answer's text is read for an action: the finish is asked for)
        assert [final_asked(body) for body in requests] == [False, False, False, True]
    else:  # (its tools withdrawn, their definitions kept: Langroid asks for auto)
        assert [body.get("tool_choice") for body in requests] == ["auto"] * 3 + ["none"]
        assert all(body["tools"] for body in requests)
    for body in requests:  # (never as a user message)
        assert all("[budget:" not in str(message.get("content"))
                   for message in body["messages"][1:]), body
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_its_done_tool_beside_a_tool_is_its_answer_and_neither_runs(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """An answer with a ``shell`` object and its ``done_tool`` after it: Langroid ends its
    task with the ``done_tool``'s content and runs no command, so the run ends at once with
    that answer, no tool call counted (not held open for the command)."""
    def pick(_index: int, _body: dict[str, Any]) -> fakellm.Step:
        return fakellm.answer(json.dumps({"request": "shell", "command": "echo a >> ran.log"})
                              + "\n" + json.dumps({"request": "done_tool", "content": "Done."}))

    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid", pick, tmp_path, "text",
                                          done_tool=True)
    assert (said, ran, len(requests)) == ("Done.", [], 1)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        1, 0, "completed"), run
    assert run["final_output"] == "Done."


def test_its_final_request_answered_by_its_done_tool_gives_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """At the budget, the model that ends the task as asked by its ``done_tool`` (the report
    its ``content``): Langroid returns the report, and it is the run's output, not the JSON
    around it."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if final_asked(body):
            return fakellm.answer(json.dumps({"request": "done_tool", "content": REPORT}))
        return act(f"echo step{index} >> ran.log", "text")

    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-budget", pick, tmp_path,
                                          "text", done_tool=True)
    assert (said, ran, len(requests)) == (REPORT, ["step0", "step1", "step2"], 4)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


def test_two_tools_in_one_answer_are_two_calls_of_the_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """An answer with two JSON objects naming a tool: Langroid runs both, and the endpoint
    counts both (``action_key``: a call per object): the next request is told 1 of 3 left,
    and the one after is the final."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if final_asked(body):
            return fakellm.answer(REPORT)
        if index == 0:
            return fakellm.answer("Two at once:\n" + "\n".join(json.dumps(
                {"request": "shell", "command": f"echo step{n} >> ran.log"}) for n in (0, 1)))
        return act(f"echo step{index + 1} >> ran.log", "text")

    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-budget", pick, tmp_path,
                                          "text")
    assert ran == ["step0", "step1", "step2"] and said == REPORT
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("1", "3")], []]
    assert [final_asked(body) for body in requests] == [False, False, True]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 3, "tool_limit_reached"), run


def test_a_tool_past_the_budget_is_run_and_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model does not take the final instruction: its answer holds one more tool's JSON,
    which Langroid runs (the endpoint cannot take an action out of text); its next request
    gets the stop answer, the note with no tool in it, which ends its task as its result;
    the upstream gets nothing more."""
    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-budget",
                                          steps_then_answer(10, "text", obeys=False), tmp_path,
                                          "text")
    assert ran == ["step0", "step1", "step2", "step3"]
    assert len(requests) == 4 and final_asked(requests[-1])
    assert said is not None and said.startswith(STOPPED) and '"request"' not in said
    assert "went on after its final request instead of ending (budget-exhausted)" in said
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


# -- a loop, an abort -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_loop_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid", looping(mode), tmp_path,
                                          mode)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert len(llm.requests(str(requests[0]["model"]))) == 7  # nothing after the final
    assert said is not None and said.startswith(STOPPED) and "6 tool calls" in said
    if mode == "text":
        # the model loops on: its 7th answer's tool runs too, then the stop answer ends it,
        # saying why
        assert ran == ["tried"] * 7
        assert "went on after its final request instead of ending (tool-cycle)" in said
    else:
        # the call past the grace is taken out of the final answer: 6 run
        assert ran == ["tried"] * 6
        assert "asked for tools again instead of its final report" in said


@pytest.mark.parametrize("mode", MODES)
def test_an_abort_is_answered_with_the_stop_note_which_ends_its_task(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-abort",
                                          steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert said is not None and "Stopped by the test's rule after 2 actions" in said
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


@pytest.mark.parametrize("mode", MODES)
def test_an_abort_in_a_json_stop_answer_is_its_done_tools_content(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """A ``stop_answer`` that is Langroid's ``DoneTool`` as JSON, the stop note as its
    ``content`` by ``${note_json}``: Langroid parses it and ends its task with the note, whole
    (its quotes, its lines), as the result. (``"${note}"`` there would be JSON no more: the
    note has lines, and the model's last answer it quotes has quotes.)"""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        return act(f'echo "step{index}" >> ran.log', mode)

    before = run_ids(sidecar)
    said, ran, requests, _ = run_langroid(sidecar, llm, "langroid-json-stop", pick,
                                          tmp_path, mode, done_tool=True)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run
    # the note, as the stop answer carried it: the task's result
    assert said is not None and said.startswith(STOPPED), said
    assert "Stopped by the test's rule after 2 actions" in said and "\n" in said, said
    assert '"' in said, said


# -- two agents: a lead delegates to a helper ----------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_lead_delegating_to_a_helper_is_two_runs_each_under_its_agents_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """The lead's ``send_tool`` call hands the task to the helper (a sub-task, its agent its
    own conversation with the model): each agent's conversation is a run of its own, each
    named by its base URL, each under its own agent's budget. The helper, under a budget of
    3, reports at its final request; its report is the lead's tool's result; the lead then
    answers, unsteered."""
    def lead(index: int, _body: dict[str, Any]) -> fakellm.Step:
        if index == 0:
            if mode == "tools":
                return fakellm.call("send_tool", to="Helper", content="Run the steps.")
            return fakellm.answer("I hand it over.\n" + json.dumps(
                {"request": "send_tool", "to": "Helper", "content": "Run the steps."}))
        return fakellm.answer("The helper reports: done.")

    before = run_ids(sidecar)
    said, ran, requests, helped = run_langroid(
        sidecar, llm, "langroid-lead", lead, tmp_path, mode,
        helper=("langroid-budget-helper", steps_then_answer(10, mode)))
    assert ran == ["step0", "step1", "step2"]
    assert said == "The helper reports: done."
    assert len(requests) == 2 and len(helped) == 4
    assert REPORT in json.dumps(requests[1]["messages"][-1])  # the helper's report, its result
    assert not any("[budget:" in json.dumps(body) for body in requests)
    assert [LEFT.findall(instructions(body)) for body in helped] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    found = {run["agent"]: (run["iterations"], run["tool_calls"], run["terminal_state"],
                            run["signals"]["tools"]) for run in runs}
    assert found == {
        "langroid-lead": (2, 1, "completed", {"send_tool": 1}),
        "langroid-budget-helper": (4, 3, "tool_limit_reached", {"shell": 3})}, found
