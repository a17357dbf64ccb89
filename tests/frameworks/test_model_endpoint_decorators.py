"""Two LLM libraries whose user writes the agent loop with the library's decorators, steered
through the model endpoint by base URL alone, on both relays:

* magentic (``magentic`` 0.41.1, driver ``endpoint_magentic``): its OpenAI backend's client
  reads ``MAGENTIC_OPENAI_BASE_URL``; ``@prompt_chain`` runs the functions the model calls
  and asks again until it answers (the loop inside the library), its ``Chat`` (what a
  ``@chatprompt`` is made of) with ``output_types=[FunctionCall[str], str]`` (or
  ``ParallelFunctionCall[str]``) in the loop its docs write by hand, and a pydantic return
  type (structured output: its one function forced, an answer-shaped request), in one
  conversation and as a ``@prompt`` called afresh at each step. magentic always streams.
* Mirascope v1 (``mirascope`` 1.25.7, driver ``endpoint_mirascope``):
  ``@llm.call(provider="openai", model=..., tools=[search], client=OpenAI())``, the client
  reading ``OPENAI_BASE_URL``, in the agent loop its docs write (call, run
  ``response.tools``, append ``response.tool_message_params``, call again), called and
  streamed.

Each invocation of the driver is one run. A rule pack gives the ``*-budget`` agents 3 tool
calls; the default pack's tool-cycle winds a looping agent down; a rule aborts the ``*-abort``
agents after 2 tool calls: the stop answered as the final answer (``model_abort: answer``,
the default), or the API's error (``model_abort: error``; and always for a forced function's
answer, which no stop note fits), which both libraries raise. What the upstream
(:mod:`tests.frameworks.fakellm`) saw at each request is asserted; nothing waits for a
directive.
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

KEY = "sk-decorators-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "Report: searched 3 times, the file is not found yet."
STOP = "Stopped by the tests rule after 2 tool calls"
FINAL = "Tools are withdrawn"  # the final-report instruction's
STOPPED = f"The agent-watchdog stopped this run: {STOP}"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: decorators
budgets:
  - agents: ["*-budget"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["*-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{STOP}"
"""
# (library, mode): magentic's prompt_chain and hand-written loop; Mirascope's loop, called
# and streamed
TOOL_LOOPS = [("magentic", "chain"), ("magentic", "loop"), ("mirascope", "loop"),
              ("mirascope", "stream")]
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("decorators"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def pointed(library: str, endpoint: str, agent: str, model: str) -> dict[str, str]:
    """What a user sets to point ``library`` at the model endpoint ``endpoint``, named
    ``agent``, asking ``model``: its environment (Mirascope's model is the decorator's). The
    tests run it so, and docs/agents.md shows it (``magentic-env``, ``mirascope-env``, checked
    in tests/test_docs.py)."""
    url = f"{endpoint}/agent/{agent}/v1"
    if library == "magentic":
        return {"MAGENTIC_OPENAI_BASE_URL": url, "MAGENTIC_OPENAI_MODEL": model}
    return {"OPENAI_BASE_URL": url}


def run_agent(sidecar: RunningServer, llm: FakeLLM, library: str, mode: str, agent: str,
              script: fakellm.Script, traced: bool = False, **extra: str
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One invocation of ``library``'s driver in ``mode``, named ``agent``: what it printed
    and the upstream's requests. ``traced`` (Mirascope): its OpenTelemetry integration on,
    its spans to the sidecar's OTLP receiver, the service named ``agent``, the model the
    upstream's, not the sidecar's (watched only)."""
    case = next(_CASES)
    model = llm.script(f"{library}-{mode}-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true"}
    env = {**base, "OPENAI_API_KEY": KEY, "MAGENTIC_OPENAI_API_KEY": KEY,
           "ENDPOINT_MODEL": model, **pointed(library, sidecar.url("model"), agent, model),
           "ENDPOINT_TASK": f"Find the file. (case {case})", **extra}
    if traced:
        env.update(MIRASCOPE_OTEL="1", OTEL_SDK_DISABLED="false", OTEL_SERVICE_NAME=agent,
                   OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.otlp_http,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OPENAI_BASE_URL=llm.base_url)
    result = drive_command(library, f"endpoint_{library}", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(calls: int | None = None, same: bool = False) -> fakellm.Script:
    """A search at each request (``same``: the same term each time) until ``calls`` searches,
    then the answer; the report once the report is asked for (no tool offered)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if FINAL in instructions(body) or body.get("tool_choice") == "none":
            return fakellm.answer(REPORT)
        if calls is not None and index >= calls:
            return fakellm.answer(ANSWER)
        return fakellm.call("search", q="same" if same else f"term {index}")
    return pick


def offered(body: dict[str, Any]) -> bool:
    """Whether a request offers the model a tool it may call."""
    return bool(body.get("tools")) and body.get("tool_choice") != "none"


# -- counts ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("library", "mode"), TOOL_LOOPS)
def test_one_invocation_is_one_run_with_its_counts(
        sidecar: RunningServer, llm: FakeLLM, library: str, mode: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, library, mode, f"{library}-{mode}",
                               searching(calls=2))
    assert said == {"ran": ["term 0", "term 1"], "output": ANSWER, "error": ""}, said
    assert len(requests) == 3 and all(offered(body) for body in requests)
    assert not any("[budget:" in json.dumps(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 2, "completed"), run
    assert run["signals"]["tools"] == {"search": 2}, run["signals"]
    assert run["final_output"] == ANSWER


# -- a budget -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("library", "mode"), TOOL_LOOPS)
def test_a_budget_of_three_counts_down_and_the_last_request_offers_no_tool(
        sidecar: RunningServer, llm: FakeLLM, library: str, mode: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, library, mode, f"{library}-{mode}-budget",
                               searching())
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT, "error": ""}, said
    assert len(requests) == 4
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert FINAL in instructions(requests[-1])
    assert [offered(body) for body in requests] == [True] * 3 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


# -- a loop ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("library", "mode"), TOOL_LOOPS)
def test_a_loop_is_wound_down_then_answered(
        sidecar: RunningServer, llm: FakeLLM, library: str, mode: str) -> None:
    """The same search again and again: tool-cycle fires at the 4th, its grace of 2 counts
    down, the 7th request offers no tool and its answer is the agent's; nothing more goes
    upstream."""
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, library, mode, f"{library}-{mode}-looping",
                               searching(same=True))
    assert said == {"ran": ["same"] * 6, "output": REPORT, "error": ""}, said
    assert len(requests) == 7
    assert [LOOP_NOTE in instructions(body) for body in requests[:6]] == [False] * 4 + [True] * 2
    grace = [re.findall(r"\[grace: (\d+) tool calls? left", instructions(body))
             for body in requests]
    assert grace == [[]] * 4 + [["2"], ["1"], []], grace
    assert [offered(body) for body in requests] == [True] * 6 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run
    assert run["final_output"] == REPORT


# -- an abort -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("library", "mode"), TOOL_LOOPS)
def test_an_abort_is_answered_as_the_final_answer(
        sidecar: RunningServer, llm: FakeLLM, library: str, mode: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, library, mode, f"{library}-{mode}-abort",
                               searching())
    assert said["ran"] == ["term 0", "term 1"] and said["error"] == "", said
    assert STOPPED in said["output"], said
    assert len(requests) == 2
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run



@pytest.mark.parametrize(("library", "mode"), [("magentic", "chain"), ("mirascope", "loop")])
def test_with_model_abort_error_the_library_raises_the_apis_error(
        llm: FakeLLM, tmp_path: Path, model_relay: str, library: str,  # noqa: F811
        mode: str) -> None:
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``;
    neither library retries it: the program gets ``BadRequestError``, the note its message."""
    with endpoint_with_pack(tmp_path, PACK, llm.base_url, model_relay,
                            model_abort="error") as server:
        before = run_ids(server)
        said, requests = run_agent(server, llm, library, mode, f"{library}-{mode}-abort",
                                   searching())
        run = the_ended_run(server, before)
    assert said["ran"] == ["term 0", "term 1"] and said["output"] == "", said
    assert said["error"].startswith("BadRequestError: Error code: 400"), said
    assert STOPPED in said["error"] and len(requests) == 2, said
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run

# -- magentic's structured output: a pydantic return type, its one function forced ------------

ACTION = "return_action"  # the function magentic names after the return type


def planning(same: bool = False) -> fakellm.Script:
    """The plan/act loop's model: an ``Action`` search at each request (``same``: the same
    term each time), the report as its answer once the report is asked for."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if FINAL in instructions(body):
            return fakellm.call(ACTION, kind="answer", answer=REPORT)
        return fakellm.call(ACTION, kind="search", q="same" if same else f"term {index}")
    return pick


@pytest.mark.parametrize("mode", ["structured_chat", "structured"])
def test_a_structured_plan_act_loop_is_counted_down_to_its_report_in_its_shape(
        sidecar: RunningServer, llm: FakeLLM, mode: str) -> None:
    """Each step forces the one function ``return_action`` (an answer-shaped request); the
    program runs the search it asks for and tells the model the result: in one conversation
    (``structured_chat``: a user message) or in a prompt of its own at each step
    (``structured``: a ``@prompt`` called afresh, its record of what it did, the search's
    term and result, in the prompt's last lines). Either way each step is a tool call of the
    one run. The 4th request is final, the function still forced (magentic cannot read a
    text answer for a pydantic return type), and the report in its fields is the loop's
    answer."""
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, "magentic", mode, f"magentic-{mode}-budget",
                               planning())
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT, "error": ""}, said
    assert len(requests) == 4
    for body in requests:
        assert forced_tool(body) == ACTION, body.get("tool_choice")
        assert [tool["function"]["name"] for tool in body["tools"]] == [ACTION]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert FINAL in instructions(requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {ACTION: 3}, run["signals"]
    assert json.loads(run["final_output"]) == {"kind": "answer", "answer": REPORT}, run


@pytest.mark.parametrize("mode", ["structured_chat", "structured"])
def test_a_structured_loop_of_the_same_action_is_wound_down_then_answered(
        sidecar: RunningServer, llm: FakeLLM, mode: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, "magentic", mode, f"magentic-{mode}-looping",
                               planning(same=True))
    assert said == {"ran": ["same"] * 6, "output": REPORT, "error": ""}, said
    assert len(requests) == 7
    assert [LOOP_NOTE in instructions(body) for body in requests[:6]] == [False] * 4 + [True] * 2
    assert FINAL in instructions(requests[-1]) and forced_tool(requests[-1]) == ACTION
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


@pytest.mark.parametrize("mode", ["structured_chat", "structured"])
def test_a_structured_abort_is_the_apis_error_which_magentic_raises(
        sidecar: RunningServer, llm: FakeLLM, mode: str) -> None:
    """No call of ``Action`` honestly carries a stop note: the 3rd request gets the API's
    error, HTTP 400 ``watchdog_aborted``, the note (and the run's report) its message, which
    magentic raises (``BadRequestError``) to the program; the upstream got 2 requests."""
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, "magentic", mode, f"magentic-{mode}-abort",
                               planning())
    assert said["ran"] == ["term 0", "term 1"] and said["output"] == "", said
    assert said["error"].startswith(f"BadRequestError: Error code: 400 - {STOPPED}"), said
    assert len(requests) == 2
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_stateless_prompts_that_quote_no_answer_are_runs_of_their_own(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The same ``@prompt`` called for one task after another (a batch: each prompt its own,
    the program acting on no answer, ``structured`` with ``MAGENTIC_FORGET``: its record of
    what it did never written): each is a run of its own, held open on its answer-shaped
    call, the budget of 3 whole at each (nothing in a prompt quotes the answer before it)."""
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, "magentic", "structured",
                               "magentic-batch-budget", planning(), MAGENTIC_FORGET="1")
    assert said == {"ran": [f"term {index}" for index in range(10)], "output": "",
                    "error": ""}, said
    assert [LEFT.findall(instructions(body)) for body in requests] == [[("3", "3")]] * 10
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 10)
    assert {(run["iterations"], run["tool_calls"], run["state"]) for run in runs} == {
        (1, 0, "active")}, runs


# -- magentic's ParallelFunctionCall: several calls in one answer -------------------------------

def two_at_a_time(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Two searches in each answer; the report once no tool is offered."""
    if not offered(body):
        return fakellm.answer(REPORT)
    return fakellm.Step(tool_calls=(fakellm.ToolCall("search", {"q": f"term {index}a"}),
                                    fakellm.ToolCall("search", {"q": f"term {index}b"})))


def test_parallel_calls_count_down_each_and_the_budget_trims_the_answer_past_it(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``ParallelFunctionCall[str] | str``: the model calls ``search`` twice an answer. Both
    of the 1st answer's run (3 of 3 left, then 1); of the 2nd answer's two calls only the one
    the budget has left is handed to magentic (it runs 3 in all), and the 3rd request offers
    no tool: its answer is the output, ``tool_limit_reached``."""
    before = run_ids(sidecar)
    said, requests = run_agent(sidecar, llm, "magentic", "parallel", "magentic-parallel-budget",
                               two_at_a_time)
    assert said == {"ran": ["term 0a", "term 0b", "term 1a"], "output": REPORT, "error": ""}, \
        said
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("1", "3")], []]
    assert [offered(body) for body in requests] == [True, True, False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT



# -- Mirascope traced by its own OpenTelemetry integration --------------------------------------

def test_known_gap_mirascope_with_otel_raises_at_its_first_call(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Known gap, Mirascope's (1.25.7): ``@with_otel()`` on the call, set up as its docs do
    (``configure(processors=[...])``), raises once the model has answered the first call,
    whose last message is the user's: its integration writes that message
    (``json.dumps(result.user_message_param)``, a ``BaseMessageParam``) into the span's
    ``gen_ai.content.prompt`` event. The program gets ``TypeError`` and no tool ran; one
    request went upstream. Its OpenTelemetry is not usable in this loop: watch it through
    the endpoint."""
    said, requests = run_agent(sidecar, llm, "mirascope", "loop", "mirascope-watched",
                               searching(calls=2), traced=True)
    assert said == {"ran": [], "output": "", "error": (
        "TypeError: Object of type BaseMessageParam is not JSON serializable")}, said
    assert len(requests) == 1
