"""instructor (driver ``endpoint_instructor``) and Atomic Agents (driver ``endpoint_atomic``)
steered through the model endpoint by ``OPENAI_BASE_URL`` alone, on both relays.

instructor's default ``Mode.TOOLS`` forces one function by ``tool_choice`` at each request, the
only one it offers, and reads the call's arguments as the answer: no result of it ever comes
back as a tool's. Such an *answer-shaped* request's call is its answer (never trimmed, its
arguments the run's output), held open as a step the program may act on: a plan/act loop whose
program runs the ``Action`` the model returns and tells the model its result counts it as a
tool call once a request goes on from it. The final request keeps the function forced (never
``tool_choice: none``, which the client cannot parse), the report asked in its fields. Atomic
Agents' ``BaseAgent`` is the same on an instructor client. What the upstream saw is asserted at
each request; nothing waits for a directive.
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
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import LEFT, forced_tool, instructions
from tests.frameworks.test_model_endpoint_text_actions import (
    LOOP_NOTE,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-instructor-0123456789abcdefSECRET"
REPORT = "Report: searched 3 times, the file is not found yet."
STOP = "Stopped by the tests rule after 2 tool calls"
FINAL = "Tools are withdrawn"  # the final-report instruction's
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: instructor
budgets:
  - agents: ["instructor-budget*", "atomic-budget*"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["instructor-abort*"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{STOP}"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    # (loose_run_gap: a run held open on an answer-shaped call ends this long after it with
    # no request; far longer than a step of these runs)
    with endpoint_with_pack(tmp_path_factory.mktemp("instructor"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def pointed(endpoint: str, agent: str) -> dict[str, str]:
    """What a user sets to point instructor's ``from_openai(OpenAI())`` (and Atomic Agents on
    it) at the model endpoint ``endpoint``, named ``agent``: its environment. The tests run it
    so, and docs/agents.md shows it (``instructor-env``, checked in tests/test_docs.py)."""
    return {"OPENAI_BASE_URL": f"{endpoint}/agent/{agent}/v1"}


def run_instructor(sidecar: RunningServer, llm: FakeLLM, agent: str, mode: str,
                   script: fakellm.Script, **extra: str
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One invocation of the driver (``endpoint_atomic`` for an agent named ``atomic…``), its
    ``OPENAI_BASE_URL`` the sidecar's with ``/agent/<agent>/`` in it: what it printed and the
    upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"instructor-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           **pointed(sidecar.url("model"), agent),
           "ENDPOINT_TASK": f"Find the file. (case {case})", **extra}
    venv, driver = ("atomic_agents", "endpoint_atomic") if agent.startswith("atomic") \
        else ("instructor", "endpoint_instructor")
    result = drive_command(venv, driver, mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def acting(same: bool = False) -> fakellm.Script:
    """The plan/act loop's model: an ``Action`` search at each request (``same``: the same
    term each time), the report as its answer once the report is asked for."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if FINAL in instructions(body):
            return fakellm.call("Action", kind="answer", answer=REPORT)
        return fakellm.call("Action", kind="search", q="same" if same else f"term {index}")

    return pick


def atomic_acting(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Atomic Agents' model: its output schema's function (``NextStep``), a search's
    parameters at each request, the report as the answer once the report is asked for."""
    name = body["tools"][0]["function"]["name"]
    if FINAL in instructions(body):
        return fakellm.call(name, action={"chat_message": REPORT})
    return fakellm.call(name, action={"q": f"term {index}"})


def check_budget_of_3(requests: list[dict[str, Any]], function: str) -> None:
    """Each request forces ``function``, its only one — the final one too (the tools
    withdrawn by the report instruction, never by ``tool_choice: none``): the countdown true
    at each request, the report asked in the function's fields."""
    assert len(requests) == 4, len(requests)
    for body in requests:
        assert forced_tool(body) == function, body.get("tool_choice")
        assert [tool["function"]["name"] for tool in body["tools"]] == [function]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    last = instructions(requests[-1])
    assert FINAL in last and f"as a call of the `{function}` function" in last, last


def test_a_plan_act_loop_is_one_run_counted_down_to_its_report_in_its_shape(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A budget of 3 tool calls: each ``Action`` the program acts on (a search, its result
    told in a user message) is a tool call of the one run; the 4th request is final, still
    forcing ``Action``, and the model's report in it is the loop's answer: the run ends
    ``tool_limit_reached``, 3 searches run."""
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "instructor-budget", "loop", acting())
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT, "error": ""}
    check_budget_of_3(requests, "Action")
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {"Action": 3}, run["signals"]
    assert json.loads(run["final_output"]) == {"kind": "answer", "answer": REPORT}, run


def test_atomic_agents_loop_is_one_run_counted_down_to_its_report_in_its_shape(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Atomic Agents: each ``run()`` forces its output schema's function; the program runs
    the search its answer asks for and adds the output to the agent's memory as a system
    message. The same as instructor's loop: one run, 3 tool calls, the 4th request final with
    ``NextStep`` still forced, the report the agent's answer, ``tool_limit_reached``."""
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "atomic-budget", "loop", atomic_acting)
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT, "error": ""}
    check_budget_of_3(requests, "NextStep")
    assert [message["role"] for message in requests[-1]["messages"]] == [
        "system", "user"] + ["assistant", "system"] * 3
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_a_loop_of_the_same_action_is_wound_down_then_answered_in_its_shape(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The same ``Action`` again and again: the default pack's tool-cycle fires at the 4th,
    the next 2 requests are wound down with its grace of 2, the 7th is final (``Action`` still
    forced), and its report ends the loop; the upstream gets nothing more. The run ends
    ``loop_detected`` with the 6 actions the grace allowed."""
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "instructor-looping", "loop",
                                    acting(same=True))
    assert said == {"ran": ["same"] * 6, "output": REPORT, "error": ""}
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and notes[:6] == [False] * 4 + [True] * 2, notes
    grace = [re.findall(r"\[grace: (\d+) tool calls? left", instructions(body))
             for body in requests]
    assert grace == [[]] * 4 + [["2"], ["1"], []], grace
    assert FINAL in instructions(requests[-1]) and forced_tool(requests[-1]) == "Action"
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


def test_an_abort_is_the_apis_error_which_the_client_raises(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The rule aborts after 2 tool calls. No call of ``Action`` honestly carries a stop note
    (the answer must follow its schema), so the 3rd request is answered with the API's error,
    HTTP 400 ``watchdog_aborted``, the note its message, as for a ``json_schema`` answer:
    instructor raises it (``InstructorRetryException``), the upstream got 2 requests."""
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "instructor-abort", "loop", acting())
    assert said["ran"] == ["term 0", "term 1"] and said["output"] == "", said
    assert said["error"].startswith("InstructorRetryException: Error code: 400"), said
    assert f"The agent-watchdog stopped this run: {STOP}" in said["error"], said
    assert "watchdog_aborted" in said["error"] and len(requests) == 2
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_extraction_is_one_run_completed_with_its_answer(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """One ``create(response_model=Found)``: its forced call is the answer, no tool call; held
    open for a request that may act on it (its answer read, the call in flight meanwhile, as
    a text action's), none comes, and the run ends ``completed`` with the call's argument as
    its output ``loose_run_gap`` after it, no tool call counted (never ``abandoned``)."""
    with endpoint_with_pack(tmp_path, PACK, llm.base_url, model_relay,
                            loose_run_gap=0.3) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_instructor(sidecar, llm, "instructor-extract", "extract",
                                        fakellm.steps(fakellm.call("Found", path="/srv/a")))
        [active] = new_runs(sidecar, before, lambda runs: True)
        run = the_ended_run(sidecar, before)
    assert said == {"ran": [], "output": "/srv/a", "error": ""} and len(requests) == 1
    assert forced_tool(requests[0]) == "Found"
    assert (active["has_final_answer"], active["final_output"]) == (True, "/srv/a"), active
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (1, 0, "completed", "/srv/a"), run


def test_a_validation_retry_counts_the_rejected_call_as_a_step_known_limit(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Known limit (docs/agents.md#instructor-and-atomic-agents): with ``max_retries=2`` a
    call that fails its validation is sent back, the call and a ``tool`` message with the
    error, and asked again: a request that goes on from the call, as a plan/act loop's, so the
    rejected call counts as one tool call of the run. The run is one, its answer the valid
    call's."""
    before = run_ids(sidecar)
    said, requests = run_instructor(
        sidecar, llm, "instructor-retried", "extract",
        fakellm.steps(fakellm.call("Found", where="/srv/a"), fakellm.call("Found", path="/b")),
        INSTRUCTOR_RETRIES="2")
    assert said == {"ran": [], "output": "/b", "error": ""} and len(requests) == 2
    assert [message["role"] for message in requests[1]["messages"]] == [
        "system", "user", "assistant", "tool"]
    assert requests[1]["messages"][3]["content"].startswith("Validation Error found")
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 2)
    assert (run["tool_calls"], run["has_final_answer"], run["final_output"]) == (
        1, True, "/b"), run


@pytest.mark.parametrize("mode", ["JSON", "MD_JSON"])
def test_json_modes_answer_in_text_which_ends_the_run(
        sidecar: RunningServer, llm: FakeLLM, mode: str) -> None:
    """``Mode.JSON`` (``response_format`` ``json_object``) and ``Mode.MD_JSON`` (the schema in
    the prompt) offer no tools: the answer is text, the run's answer, ``completed`` at once."""
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "instructor-json", "extract",
                                    fakellm.steps(fakellm.answer('{"path": "/srv/c"}')),
                                    INSTRUCTOR_MODE=mode)
    assert said == {"ran": [], "output": "/srv/c", "error": ""} and len(requests) == 1
    assert "tools" not in requests[0] and "tool_choice" not in requests[0]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (0, "completed"), run
