"""CAMEL-AI's ``ChatAgent`` (driver ``endpoint_camel``) steered through the model endpoint by
its model's ``url`` (docs/agents.md's lines), on both relays, beyond what
test_model_endpoint_frameworks checks of it by ``OPENAI_BASE_URL`` (counts, a budget of 3, a
loop wound down): a rule's abort, answered or as the API's error; its own iteration limit; a
``RolePlaying`` society, its user agent instructing its assistant turn by turn. What the
upstream saw is asserted at each request; nothing waits for a directive.
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
from tests.frameworks.test_model_endpoint_frameworks import LEFT, instructions
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-camel-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "Report: searched, nothing found yet."
STOP = "Stopped by the test's rule after 2 tool calls"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: camel
budgets:
  - agents: ["camel-budget*"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["camel-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{STOP}"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("camel"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def url(sidecar: RunningServer, agent: str) -> str:
    """What a user sets as the model's ``url`` to name the agent (docs/agents.md)."""
    return f"{sidecar.url('model')}/agent/{agent}/v1"


def run_camel(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              mode: str = "url", **extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One invocation of the driver, its model at ``url(agent)``: what it printed and the
    upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"camel-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "ENDPOINT_TASK": f"Find the file. (case {case})", "CAMEL_URL": url(sidecar, agent),
           **extra}
    result = drive_command("camel", "endpoint_camel", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(index: int, body: dict[str, Any]) -> fakellm.Step:
    return fakellm.looping("search", lambda i: {"q": f"term {i}"}, REPORT)(index, body)


def test_an_abort_is_answered_with_the_stop_note_which_ends_its_step(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The rule aborts after 2 tool calls: the 3rd request gets the stop note, not the
    upstream, which CAMEL takes as the model's answer: the step's output, no error."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-abort", searching)
    assert said["ran"] == ["term 0", "term 1"] and said["error"] == "", said
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert said["output"].startswith(f"The agent-watchdog stopped this run: {STOP}"), said
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_abort_as_the_apis_error_is_the_steps_error(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``:
    CAMEL's OpenAI client does not retry it (nor does the agent: its retries are for rate
    limits), and ``step`` raises it, the stop note its message."""
    with endpoint_with_pack(tmp_path, PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        said, requests = run_camel(sidecar, llm, "camel-abort", searching)
        run = the_ended_run(sidecar, before)
    assert said["ran"] == ["term 0", "term 1"] and len(requests) == 2
    assert said["output"] == "" and said["error"].startswith(
        f"BadRequestError: Error code: 400 - The agent-watchdog stopped this run: {STOP}"), said
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_own_iteration_limit_leaves_its_run_open_known_gap(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Known gap (docs/agents.md#camel-ai): ``max_iteration`` ends the step after that many
    model calls, the last one's tools run and no request more: nothing tells the endpoint,
    whose run waits for the call it last handed over (``abandoned`` after
    ``run_end_timeout``). The step's output is empty."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-limited", searching,
                               CAMEL_MAX_ITERATION="2")
    assert said == {"ran": ["term 0", "term 1"], "output": "", "error": ""}
    assert len(requests) == 2
    [run] = new_runs(sidecar, before, lambda runs: True)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"]) == (
        "active", 2, 1), run


def test_role_playing_each_turn_of_its_assistant_is_a_run_with_its_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A ``RolePlaying`` society: its user agent (the lead, no tools) instructs, its assistant
    answers with its tools, turn by turn, each agent's conversation sent whole. Each assistant
    turn (a ``ChatAgent.step`` on a new user message) is a run of the assistant's session,
    with a budget of its own: 3 left, 2, 1, then its last request withdraws the tools and the
    report is the turn's answer, which the lead reads; each lead turn is a run of its own
    session, no countdown (it offers no tools)."""
    before = run_ids(sidecar)
    lead = llm.script(f"camel-lead-{next(_CASES)}", fakellm.steps(
        fakellm.answer("Instruction: search for the file.\nInput: None"),
        fakellm.answer("Instruction: search once more.\nInput: None"),
        fakellm.answer("CAMEL_TASK_DONE")))
    said, requests = run_camel(sidecar, llm, "camel-budget-researcher", searching,
                               "roleplay", CAMEL_USER_MODEL=lead,
                               CAMEL_USER_URL=url(sidecar, "camel-budget-lead"))
    assert said == {"ran": ["term 0", "term 1", "term 2", "term 4", "term 5", "term 6"],
                    "output": REPORT, "turns": 3}
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []] * 2
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False] + [
        True] * 3 + [False]
    led = llm.requests(lead)
    assert len(led) == 3 and not [body for body in led if LEFT.findall(instructions(body))]
    # the lead reads the first turn's report as its next user message
    assert led[1]["messages"][-1] == {"role": "user", "content": REPORT}, led[1]["messages"]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 5 and all(
        run["state"] == "ended" for run in runs))
    turns = sorted((run["agent"], run["started_at"], run["iterations"], run["tool_calls"],
                    run["terminal_state"], run["final_output"]) for run in runs)
    assert [turn[:1] + turn[2:] for turn in turns] == [
        ("camel-budget-lead", 1, 0, "completed", "Instruction: search for the file.\nInput: None"),
        ("camel-budget-lead", 1, 0, "completed", "Instruction: search once more.\nInput: None"),
        ("camel-budget-lead", 1, 0, "completed", "CAMEL_TASK_DONE"),
        ("camel-budget-researcher", 4, 3, "tool_limit_reached", REPORT),
        ("camel-budget-researcher", 4, 3, "tool_limit_reached", REPORT)], turns
    sessions = {(run["agent"], run["session"]) for run in runs}
    assert len(sessions) == 2, sessions  # a session per agent, its turns runs of it
