"""swarms (``swarms`` 16.0.3, driver ``endpoint_swarms``) steered through the model endpoint by
``OPENAI_BASE_URL`` alone (its ``Agent`` on ``openai/<model>``, LiteLLM's OpenAI provider), on
both relays. Its ``Agent`` with an integer ``max_loops`` makes exactly that many model calls
in a run, whatever each answers (an answer does not end its loop: the next call goes on from
it, no user message between), running the tools of each. What the upstream saw is asserted
at each request; nothing waits for a directive. Its ``max_loops`` declared as the run's
``max_iterations``: test_model_endpoint_own_limits."""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import GRACE_LEFT, LOOP_NOTE, instructions
from tests.frameworks.test_model_endpoint_text_actions import LEFT, new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-swarms-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "REPORT: searched 3 times; the rest remains."
STOPPED = "The agent-watchdog stopped this run"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: swarms
budgets:
  - agents: ["swarms-budget*"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["swarms-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)
WORKSPACE = "/tmp/swarms-endpoint-tests"  # its workspace (logs, state), else ./agent_workspace


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("swarms"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def pointed(endpoint: str, agent: str) -> dict[str, str]:
    """What a user sets to point swarms' ``Agent`` (``model_name="openai/<model>"``, LiteLLM's
    OpenAI provider) at the model endpoint ``endpoint``, named ``agent``, its telemetry off:
    its environment. The tests run it so, and docs/agents.md shows it (``swarms-env``, checked
    in tests/test_docs.py)."""
    return {"OPENAI_BASE_URL": f"{endpoint}/agent/{agent}/v1", "SWARMS_TELEMETRY_ON": "false"}


def run_swarms(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
               mode: str = "run", max_loops: int = 6) -> tuple[dict[str, Any],
                                                              list[dict[str, Any]]]:
    case = next(_CASES)
    model = llm.script(f"swarms-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "WORKSPACE_DIR": WORKSPACE}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           **pointed(sidecar.url("model"), agent),
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           "ENDPOINT_OWN_LIMIT": str(max_loops)}
    result = drive_command("swarms", "endpoint_swarms", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(answer: str = ANSWER, report: str = REPORT) -> fakellm.Script:
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body) or body.get("tool_choice") == "none":
            return fakellm.answer(report if "[budget" in instructions(body)
                                  or "agent-watchdog" in instructions(body) else answer)
        return fakellm.call("search", q=f"term {_results(body)}")
    return pick


def _results(body: dict[str, Any]) -> int:
    return sum(message.get("role") == "tool" for message in body["messages"])


def counted(body: dict[str, Any]) -> list[tuple[str, str]]:
    return LEFT.findall(instructions(body))


def test_one_run_of_its_max_loops_calls_with_its_counts(sidecar: RunningServer,
                                                        llm: FakeLLM) -> None:
    """``max_loops=3``: two searches then the answer, three model calls; one run, completed,
    the answer its output. Its tools are offered as API tools (and listed again as text in an
    assistant message of its own ahead of the task)."""
    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms", fakellm.steps(
        fakellm.call("search", q="alpha"), fakellm.call("search", q="beta"),
        fakellm.answer(ANSWER)), max_loops=3)
    assert said == {"ran": ["alpha", "beta"], "output": ANSWER}
    assert len(requests) == 3 and all(fakellm.offers_tools(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (3, 2, "completed", ANSWER), run


def test_its_calls_after_an_answer_go_on_in_the_run(sidecar: RunningServer,
                                                    llm: FakeLLM) -> None:
    """``max_loops=5``: the answer at the 3rd call does not end its loop; the 4th and 5th go on
    from it (the answer last, no user message): one run of 5 model calls, its last answer the
    output."""
    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms", fakellm.steps(
        fakellm.call("search", q="alpha"), fakellm.call("search", q="beta"),
        fakellm.answer(ANSWER), fakellm.answer("again"), fakellm.answer(REPORT)), max_loops=5)
    assert said == {"ran": ["alpha", "beta"], "output": REPORT}
    assert [body["messages"][-1]["role"] for body in requests] == [
        "user", "tool", "tool", "assistant", "assistant"]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (5, 2, "completed", REPORT), run


@pytest.mark.parametrize("mode", ["run", "stream"])
def test_a_budget_counts_down_and_the_report_is_its_output(sidecar: RunningServer,
                                                           llm: FakeLLM, mode: str) -> None:
    """A budget of 3 tool calls under ``max_loops=6``: counted down truly at each request, 3
    searches, the 4th request withdraws the tools (``tool_choice: none``) and its answer, the
    report, ends the run ``tool_limit_reached``. Its 5th and 6th calls go on from the report:
    each gets the report again from the endpoint, never the upstream; the report is the
    output."""
    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms-budget", searching(), mode)
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}
    assert all(bool(body.get("stream")) == (mode == "stream") for body in requests)
    assert [counted(body) for body in requests] == [[("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    assert requests[-1]["tool_choice"] == "none"
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        3, "tool_limit_reached", REPORT), run


def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(sidecar: RunningServer,
                                                                   llm: FakeLLM) -> None:
    """The same call on and on under ``max_loops=10``: tool-cycle fires at the 4th, its grace
    of 2 counts down, the 7th request withdraws the tools and its answer is the output; the
    upstream gets nothing after it (its 8th to 10th calls get the report again)."""
    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms", fakellm.looping(
        "search", lambda _i: {"q": "the file"}, REPORT), max_loops=10)
    assert said == {"ran": ["the file"] * 6, "output": REPORT}
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and notes[:6] == [False] * 4 + [True] * 2, notes
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [
        []] * 4 + [["2"], ["1"], []]
    assert not fakellm.offers_tools(requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["has_final_answer"]) == (
        6, "loop_detected", True), run


def test_an_abort_is_answered_with_the_stop_note(sidecar: RunningServer,
                                                 llm: FakeLLM) -> None:
    """The abort rule at 2 searches under ``max_loops=6``: the 3rd request gets the stop note as
    the model's answer, the upstream nothing; its 4th to 6th calls go on from the note and get
    it again; the output is the stop note, the run ``aborted`` with its 2 model calls."""
    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms-abort", searching())
    assert said["ran"] == ["term 0", "term 1"]
    assert len(requests) == 2
    assert said["output"].startswith(f"{STOPPED}: Stopped by the test's rule after 2 tool calls")
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        2, 2, "aborted"), run


def test_past_three_stop_answers_it_gets_the_error_and_fails_with_the_note(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Under ``max_loops=7`` the abort's stop answer is given again 3 times; its 7th call gets
    the error, whose message is the stop note: swarms raises its ``AgentLLMError`` with it."""
    case = next(_CASES)
    model = llm.script(f"swarms-abort-past-{case}", searching())
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "WORKSPACE_DIR": WORKSPACE}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           **pointed(sidecar.url("model"), "swarms-abort"),
           "ENDPOINT_TASK": f"Find the file. (case {case})", "ENDPOINT_OWN_LIMIT": "7"}
    before = run_ids(sidecar)
    result = drive_command("swarms", "endpoint_swarms", "run", base, env, check=False)
    assert result.returncode != 0
    assert "AgentLLMError" in result.stderr and STOPPED in result.stderr, result.stderr[-2000:]
    assert len(llm.requests(model)) == 2
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_a_sequential_workflow_is_a_run_per_agent(sidecar: RunningServer,
                                                  llm: FakeLLM) -> None:
    """A ``SequentialWorkflow`` of a researcher (``search``) and a writer (no tools), each
    ``max_loops=2``: the researcher searches then answers, a run; the writer, given the
    researcher's answer in its task, answers twice (its 2nd call goes on from its 1st), a run
    of its own; the writer's last answer is the output."""
    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        if "You write the report." in instructions(body):
            return fakellm.answer(REPORT)
        if _results(body):
            return fakellm.answer(ANSWER)
        return fakellm.call("search", q="alpha")

    before = run_ids(sidecar)
    said, requests = run_swarms(sidecar, llm, "swarms-budget-team", pick, "sequential",
                                max_loops=2)
    assert said == {"ran": ["alpha"], "output": REPORT}
    assert len(requests) == 4
    # (the writer, offered no tools, is told no countdown)
    assert [counted(body) for body in requests] == [[("3", "3")], [("2", "3")], [], []]
    assert ANSWER in json.dumps(requests[2]["messages"])
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in runs) == [
        (2, 0, "completed", REPORT), (2, 1, "completed", ANSWER)], runs

