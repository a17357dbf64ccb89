"""An agent that ends its task only by a tool call, steered through the model endpoint by base
URL alone: mini-swe-agent in its default configuration (``mini.yaml``: the API's tool calling,
one ``bash`` tool; LiteLLM's SDK beneath it, ``OPENAI_BASE_URL``), run as a user runs it, in a
temp dir, its commands really executed there (each appends to ``ran.log``). It ends only when
a command prints ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first (its submission: what follows);
any answer without a tool call is a format error, sent back as a new user message.

Behind the sidecar, the scripted upstream (:mod:`tests.frameworks.fakellm`) calls ``bash``
while tools are offered and answers the report when they are withdrawn; its recorded request
bodies are what the model read. Nothing waits for a directive.

* undeclared, a budget of 3 tool calls: the final request's report is a format error to mini,
  its replies (at once) are still the ended run's and get the stop answer; mini ends at its
  own limit of format errors, and the upstream got the budget's requests only, not a run
  after run;
* declared (``finish:`` the ``bash`` call that submits): the final request's report reaches
  mini as that call; mini submits it and exits 0;
* declared, aborted by a rule after 2 actions: the 3rd request gets the finish call with the
  stop note, not the upstream; mini submits it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_text_actions import drive_mini, new_runs, run_ids
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
REPORT = "REPORT: 3 steps done; it's 'quoted' $HOME `and` \"more\" ${report}."
FINISH = f"""\
    finish:
      tool: bash
      arguments:
        command: "printf '%s\\\\n' {SUBMIT} ${{report_shell}}"
"""
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: finish-tool
budgets:
  - agents: ["mini-finish-abort"]
{FINISH}
  - agents: ["mini-finish"]
    max_tool_calls: 3
{FINISH}
  - agents: ["mini-tools"]
    max_tool_calls: 3
rules:
  - name: two-actions-then-abort
    agents: ["mini-finish-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("finish-tool"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def steps_then_report(count: int) -> fakellm.Script:
    """``count`` commands (step 0, 1, ...: each appends to ran.log) while tools are offered,
    then the submission; the report once tools are withdrawn (the final request)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index < count:
            return fakellm.call("bash", command=f"echo step{index} >> ran.log && echo ok")
        return fakellm.call("bash", command=f"echo {SUBMIT} && cat ran.log")
    return pick


def run_mini(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
             tmp_path: Path) -> tuple[int, dict[str, Any], list[dict[str, Any]], list[str],
                                      list[dict[str, Any]]]:
    """``mini`` once in its default (tool-calling) configuration, in a temp dir of its own, on
    a model scripted by ``script``, named ``agent`` by its base URL. Returns its exit status,
    its trajectory's info and messages, the commands it really ran (ran.log) and the requests
    the upstream got."""
    model = llm.script(f"mini-{agent}-{next(_CASES)}", script)
    trajectory = tmp_path / "trajectory.json"
    result = drive_mini(sidecar, agent, tmp_path, [
        "-m", f"openai/{model}", "-t", "Count the steps.", "--yolo", "--exit-immediately",
        "-o", str(trajectory)],
        # (a refused request sent once, not 10 times 4-60 s apart: a regression fails fast)
        {"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}, check=False)
    work = tmp_path / "work"
    saved = json.loads(trajectory.read_text())
    ran = work / "ran.log"
    commands = ran.read_text().splitlines() if ran.exists() else []
    return result.returncode, saved["info"], saved["messages"], commands, llm.requests(model)


def instructions(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def the_run(sidecar: RunningServer, before: set[str]) -> dict[str, Any]:
    """The one run the invocation made, once it has ended (every run it made, if more)."""
    runs = new_runs(sidecar, before, lambda runs: all(run["state"] == "ended" for run in runs))
    assert len(runs) == 1, f"one run per invocation, the sidecar has {json.dumps(runs)}"
    return runs[0]


def test_undeclared_its_reply_to_the_final_answer_ends_in_the_run_not_run_after_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    status, info, messages, ran, requests = run_mini(sidecar, llm, "mini-tools",
                                                     steps_then_report(10), tmp_path)
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    # the budget's requests, the last final (tools withdrawn); nothing after it: no next run
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    # mini read the report as a format error and replied at once: each reply got the stop
    # answer (the report again, from the endpoint), until mini's own limit of format errors
    # in a row (3) ended it
    errors = [m["extra"]["response"] for m in messages
              if m.get("extra", {}).get("interrupt_type") == "FormatError"]
    assert [(e["id"].startswith("chatcmpl-watchdog"), e["choices"][0]["message"]["content"])
            for e in errors] == [(False, REPORT), (True, REPORT), (True, REPORT)], errors
    assert (status, info["exit_status"]) == (0, "RepeatedFormatError"), (status, info)
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_declared_the_final_report_is_given_as_its_finish_call_and_the_agent_submits_it(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    status, info, _, ran, requests = run_mini(sidecar, llm, "mini-finish",
                                              steps_then_report(10), tmp_path)
    assert ran == ["step0", "step1", "step2"]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    # the report, word for word (quoted for the shell: run as text, never as code)
    assert (status, info["exit_status"], info["submission"]) == (0, "Submitted",
                                                                 REPORT + "\n"), info
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_declared_an_abort_is_answered_with_its_finish_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    status, info, _, ran, requests = run_mini(sidecar, llm, "mini-finish-abort",
                                              steps_then_report(10), tmp_path)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2  # the 3rd request got the finish call, not the upstream
    assert (status, info["exit_status"]) == (0, "Submitted"), info
    assert "Stopped by the test's rule after 2 actions" in info["submission"]
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_reply_rejecting_a_text_answer_mid_task_goes_on_in_the_run_with_its_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model answers in text once, tools still offered, after 2 of the budget's 3 calls:
    that answer ends the run as any text answer does, but mini reads it as a format error and
    replies at once, the answer dropped from its conversation. That reply is the agent's own
    rejection of the answer, not a new task: the run goes on with what is left of its budget
    (1 of 3), never a next run with a budget of its own (3 of 3 again: an agent that talks to
    itself escaped its budget so, run after run)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index == 2:
            return fakellm.answer("I think the steps are counted.")
        return fakellm.call("bash", command=f"echo step{index} >> ran.log && echo ok")

    before = run_ids(sidecar)
    _, _, messages, ran, requests = run_mini(sidecar, llm, "mini-tools", pick, tmp_path)
    assert ran == ["step0", "step1", "step3"]  # the budget's 3, no more
    assert [LEFT.findall(instructions(body)) for body in requests[:5]] == [
        [("3", "3")], [("2", "3")], [("1", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests[:5]] == [True] * 4 + [False]
    errors = [m for m in messages if m.get("extra", {}).get("interrupt_type") == "FormatError"]
    assert errors and requests[3]["messages"][-1]["content"] == errors[0]["content"]
    runs = new_runs(sidecar, before, lambda runs: all(run["state"] == "ended" for run in runs)
                    and any(run["terminal_state"] == "tool_limit_reached" for run in runs))
    assert [(run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (3, "tool_limit_reached")], runs
