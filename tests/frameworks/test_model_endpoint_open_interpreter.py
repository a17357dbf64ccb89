"""Open Interpreter (``open-interpreter`` 0.4.3, its Python API, ``offline`` and ``auto_run``:
unattended) steered through the model endpoint by its ``api_base`` alone: the code it writes
really runs in a temp dir (each command appends to ``ran.log``). Its model is LiteLLM's
``openai/<model>``, always streamed. It acts two ways, each tested: by the code blocks in its
answers' text (``llm.supports_functions = False``: LiteLLM knows no function calling for an
unknown model; the first block of an answer is run, its output comes back as a user message,
an answer with no block ends its task), and by its ``execute`` tool call (a function-calling
model). One ``interpreter.chat(message)`` is one run; a second ``chat`` in the same process,
its conversation going on, is the session's next run, as each new message a person types.

The sidecar's rule pack declares the agents ``actions: code`` (named by the base URL's
``/agent/<name>/``): an answer's code block is its action, an answer with none its answer
(which ends the run at once, as a text answer ends a tool-calling agent's); no
``stop_answer``: the stop note alone is an answer with no code, which ends Open Interpreter's
task. Behind the sidecar, the scripted upstream
(:mod:`tests.frameworks.fakellm`), streaming each line apart as a model's tokens come (Open
Interpreter parses the fences as they stream); its recorded request bodies are what the model
read. Nothing waits for a directive.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    DRIVERS,
    RECORDINGS,
    clean_environ,
    drive_command,
    recorded_spans,
    replay,
)
from tests.frameworks.test_model_endpoint_text_actions import (
    LEFT,
    check_loop_wound_down,
    final_asked,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import (
    RunningServer,
    endpoint_with_pack,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-open-interpreter-0123456789SECRET"
REPORT = "REPORT: 3 steps done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: open-interpreter
budgets:
  - agents: ["oi-budget"]
    max_tool_calls: 3
    actions: code
  - agents: ["oi-conversation"]
    max_tool_calls: 3
    actions: code
    budget_per: conversation
  - agents: ["oi*"]
    actions: code
rules:
  - name: two-actions-then-abort
    agents: ["oi-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
STOPPED = "The agent-watchdog stopped this run"
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("open-interpreter"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def settings(api_base: str, model: str) -> dict[str, object]:
    """What a user sets on ``interpreter`` to run it unattended on a model at ``api_base``
    (its key from ``OPENAI_API_KEY``, which LiteLLM reads): the tests run it so, and
    docs/agents.md shows it (``open-interpreter-settings``, checked in tests/test_docs.py)."""
    return {"offline": True, "auto_run": True, "llm.model": f"openai/{model}",
            "llm.api_base": api_base}


def act(command: str, mode: str, language: str = "shell") -> fakellm.Step:
    """One action: ``command`` in ``language``, as a code block in the answer's text or as an
    ``execute`` tool call."""
    if mode == "tools":
        return fakellm.call("execute", language=language, code=command)
    return fakellm.Step(text=f"Next, I run this.\n\n```{language}\n{command}\n```",
                        lines_apart=True)


def steps_then_answer(count: int, mode: str, obeys: bool = True,
                      language: str = "shell") -> fakellm.Script:
    """``count`` commands (step 0, 1, ...: each appends to ran.log; in Python, in its Jupyter
    kernel, with ``language="python"``), then the answer; a final request's instruction is
    obeyed (the report, no code) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and (final_asked(body) or body.get("tool_choice") == "none"):
            return fakellm.answer(REPORT)
        if index >= count:
            return fakellm.answer(f"All {count} steps are done.")
        if language == "python":
            return act(f"open('ran.log', 'a').write('step{index}\\n')\nprint('done {index}')",
                       mode, language)
        return act(f"echo step{index} >> ran.log && echo done {index}", mode)
    return pick


def run_oi(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp_path: Path, mode: str, chats: tuple[str, ...] = ("Count the steps.",),
           traced: str | None = None, direct: bool = False
           ) -> tuple[list[list[dict[str, Any]]], list[str], list[dict[str, Any]]]:
    """Open Interpreter once, in a temp dir of its own, on a model scripted by ``script``,
    named ``agent`` by its base URL, each of ``chats`` a ``chat`` of it in turn (the first
    with the case's number: each test's task its own, as the model's). Returns what each
    ``chat`` returned, the commands it really ran (ran.log) and the requests the upstream
    got. ``traced``: LiteLLM's OpenTelemetry callback on, its spans to the sidecar's OTLP
    receiver (with ``RECORD_SPANS`` set, recorded as ``recordings/endpoint_open_interpreter/
    TRACED.jsonl``); ``direct``: the model is the upstream's, not the sidecar's (watched
    only)."""
    case = next(_CASES)
    model = llm.script(f"oi-{agent}-{case}", script)
    chats = (f"{chats[0]} (case {case})", *chats[1:])
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **clean_environ("LITELLM_"),
        "HOME": str(tmp_path),  # (its profiles and conversations: none kept between tests)
        "PYTHONPATH": str(DRIVERS),
        "OI_WORKDIR": str(work),
        "OI_SETTINGS": json.dumps(settings(
            llm.base_url if direct else f"{sidecar.url('model')}/agent/{agent}/v1", model)),
        "OPENAI_API_KEY": KEY,
        "OI_CHATS": json.dumps(chats),
    }
    if traced is not None:  # (as LiteLLM's docs set its exporter up; the agent's name)
        env.update(OI_OTEL="1", OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.otlp_http,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME=agent)
        if os.environ.get("RECORD_SPANS"):
            recording = RECORDINGS / "endpoint_open_interpreter" / f"{traced}.jsonl"
            recording.parent.mkdir(exist_ok=True)
            recording.unlink(missing_ok=True)
            env["RECORD_SPANS"] = str(recording)
    result = drive_command("open_interpreter", "endpoint_open_interpreter", mode,
                           {**clean_environ(), "PYTHONPATH": str(DRIVERS)}, env)
    said: list[list[dict[str, Any]]] = json.loads(result.stdout.strip().splitlines()[-1])
    ran = work / "ran.log"
    return said, (ran.read_text().splitlines() if ran.exists() else []), llm.requests(model)


def instructions(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def last_text(said: list[dict[str, Any]]) -> str:
    return str([m for m in said if m["type"] == "message"][-1]["content"])


MODES = ("text", "tools")
TOOLS = {"text": "text_action", "tools": "execute"}


def looping(mode: str) -> fakellm.Script:
    """The same failing command, whatever the model is told."""
    return lambda _index, _body: act("echo tried >> ran.log && cat missing.txt", mode)


# -- a chat is a run ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_one_chat_is_one_run_each_code_it_runs_an_action(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Its answer with no code ends the run at once, ``completed`` with that answer (it is
    no action held open until ``loose_run_gap``). Its code here is Python, run in its
    Jupyter kernel."""
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi", steps_then_answer(3, mode,
                                                                      language="python"),
                                 tmp_path, mode)
    assert ran == ["step0", "step1", "step2"]
    assert last_text(said[0]) == "All 3 steps are done."
    assert len(requests) == 4
    # nothing to steer: each request went upstream as it came
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests)
    assert all(("tools" in body) == (mode == "tools") for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {TOOLS[mode]: 3}, run["signals"]
    assert run["final_output"] == "All 3 steps are done."


def two_chats(mode: str) -> fakellm.Script:
    """Two steps and an answer, then one step and an answer (a final request: the report)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if final_asked(body) or body.get("tool_choice") == "none":
            return fakellm.answer(REPORT)
        if index in (0, 1, 3):
            return act(f"echo step{index} >> ran.log", mode)
        return fakellm.answer(f"Done, answer {index}.")
    return pick


@pytest.mark.parametrize("mode", MODES)
def test_a_second_chat_going_on_in_the_conversation_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """As each message a person types into its prompt: a task of its own, a run of its own,
    in the same session."""
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi", two_chats(mode), tmp_path, mode,
                                 ("Count the steps.", "Once more, please."))
    assert ran == ["step0", "step1", "step3"]
    assert [last_text(chat) for chat in said] == ["Done, answer 2.", "Done, answer 4."]
    assert len(requests) == 5 and requests[3]["messages"][-1]["content"] == "Once more, please."
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    runs.sort(key=lambda run: run["started_at"])
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(3, 2, "completed", "Done, answer 2."),
                                 (2, 1, "completed", "Done, answer 4.")], runs
    assert runs[0]["session"] == runs[1]["session"]


@pytest.mark.parametrize("mode", MODES)
def test_a_budget_per_conversation_goes_on_through_its_second_chat(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """``budget_per: conversation``: the second ``chat`` (at once, its history kept: nothing
    in it tells a nudge from a new task) goes on in the first one's run, counted down against
    what is left of its budget (1 of 3), not a run with a budget of its own; its final request
    asks for the finish, and the one run ends at the budget."""
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi-conversation", two_chats(mode), tmp_path,
                                 mode, ("Count the steps.", "Once more, please."))
    assert ran == ["step0", "step1", "step3"]  # the budget's 3, across both chats
    assert [last_text(chat) for chat in said] == ["Done, answer 2.", REPORT]
    assert requests[3]["messages"][-1]["content"] == "Once more, please."
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


# -- a budget -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_budget_of_three_counts_down_and_its_final_request_asks_for_the_finish(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi-budget", steps_then_answer(10, mode),
                                 tmp_path, mode)
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    assert last_text(said[0]) == REPORT  # what the user gets: the report, as its answer
    assert len(requests) == 4
    # the true count left at each request (the default pack's countdown: from 3 left)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert "all 3 tool calls used" in instructions(requests[-1])
    if mode == "text":  # (its answer's text is read for an action: the finish is asked for)
        assert [final_asked(body) for body in requests] == [False, False, False, True]
    else:  # (its tools withdrawn, their definitions kept)
        assert [body.get("tool_choice") for body in requests] == [None, None, None, "none"]
    for body in requests:  # (never as a user message)
        assert all("[budget:" not in str(message.get("content"))
                   for message in body["messages"][1:]), body
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_code_past_the_budget_is_run_and_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model does not take the final instruction: its answer holds one more code block,
    which the agent runs (the endpoint cannot take an action out of text); the agent's next
    request gets the stop answer, the note with no code, which ends its task; the upstream
    gets nothing more."""
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi-budget",
                                 steps_then_answer(10, "text", obeys=False), tmp_path, "text")
    assert ran == ["step0", "step1", "step2", "step3"]
    assert len(requests) == 4 and final_asked(requests[-1])
    assert STOPPED in last_text(said[0]) and "```" not in last_text(said[0])
    assert "went on after its final request instead of ending (budget-exhausted)" in last_text(
        said[0]), last_text(said[0])  # saying why, as in tools mode
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


# -- a loop, an abort -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_loop_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi", looping(mode), tmp_path, mode)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert len(llm.requests(str(requests[0]["model"]))) == 7  # nothing after the final
    if mode == "text":
        # the model loops on: its 7th answer's code runs too, then the stop answer ends it,
        # saying why
        assert ran == ["tried"] * 7
        assert "went on after its final request instead of ending (tool-cycle)" in last_text(
            said[0]), last_text(said[0])
    else:
        # the call past the grace is taken out of the final answer: 6 run, the user gets
        # the stop note, saying why
        assert ran == ["tried"] * 6
        assert "asked for tools again instead of its final report" in last_text(said[0])
    # what the user gets: the stop note, the run's progress with it
    assert last_text(said[0]).startswith(STOPPED) and "6 tool calls" in last_text(said[0])


@pytest.mark.parametrize("mode", MODES)
def test_an_abort_is_answered_with_the_stop_note_which_ends_its_task(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_oi(sidecar, llm, "oi-abort", steps_then_answer(10, mode),
                                 tmp_path, mode)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert "Stopped by the test's rule after 2 actions" in last_text(said[0])
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- watched: LiteLLM's OpenTelemetry callback ----------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_watched_and_steered_it_is_one_run_counted_once(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Traced by LiteLLM's callback as well: its spans (a trace per model call, no parent)
    pair with the endpoint's calls by their response ids: one run, each call and code run
    counted once."""
    before = run_ids(sidecar)
    _, ran, _ = run_oi(sidecar, llm, "oi-traced", steps_then_answer(3, mode), tmp_path,
                       mode, traced=f"steered_{mode}")
    assert ran == ["step0", "step1", "step2"]
    run = the_ended_run(sidecar, before)
    # its 4 calls, once each; its 3 code runs; LiteLLM's 8 spans joined to the endpoint's 7
    run = wait_until(lambda: (found := sidecar.get_json(f"/v1/runs/{run['id']}"))["spans"] == 15
                     and found, what="LiteLLM's spans joined to the run")
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {TOOLS[mode]: 3}
    assert run["total_tokens"] > 0  # (LiteLLM's usage: the upstream streams none)


def watched_alone(sidecar: RunningServer, before: set[str], mode: str,
                  declared: bool = True) -> None:
    """What LiteLLM's spans alone tell: its model calls, each a trace of its own with no
    parent; nothing of the code it runs. With tool calls, the calls that ask for one keep the
    agent's run of loose calls open: one run of 4 calls, ended by the answer, no tool call
    counted (none traced). With code blocks, the pack's ``actions: code`` (``declared``) says
    an answer with a code block is an action the agent runs: the same one run; undeclared,
    each answer looks final: a run per model call (nothing in LiteLLM's spans tells an action
    from an answer)."""
    runs_of = 1 if mode == "tools" or declared else 4

    def done(runs: list[dict[str, Any]]) -> bool:
        return len(ours := [run for run in runs if run["agent"] == "oi-watched"]) == runs_of \
            and all(run["state"] == "ended" for run in ours)

    runs = [run for run in new_runs(sidecar, before, done) if run["agent"] == "oi-watched"]
    runs.sort(key=lambda run: run["started_at"])
    calls = 4 // runs_of
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"]) for run in runs] \
        == [(calls, 0, "completed")] * runs_of, runs
    assert runs[-1]["final_output"] == "All 3 steps are done."


@pytest.mark.parametrize("mode", MODES)
def test_watched_alone_its_model_calls_are_one_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    _, ran, requests = run_oi(sidecar, llm, "oi-watched", steps_then_answer(3, mode), tmp_path,
                              mode, traced=f"watched_{mode}", direct=True)
    assert ran == ["step0", "step1", "step2"] and len(requests) == 4
    watched_alone(sidecar, before, mode)


@pytest.mark.parametrize("mode", MODES)
def test_watched_alone_from_its_recording(tmp_path: Path, mode: str) -> None:
    recording = RECORDINGS / "endpoint_open_interpreter" / f"watched_{mode}.jsonl"
    names = {span["name"] for span in recorded_spans(recording)}
    assert names == {"litellm_request", "raw_gen_ai_request"}, names
    # (a sidecar of its own: the live test's runs of the agent would take its calls, late;
    # with the pack, and without: the agent undeclared)
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    for declared in (True, False):
        with running_server(sidecar_config(
                tmp_path / f"state-{declared}", eval_interval=0.2,
                rules=(str(pack),) if declared else ())) as sidecar:
            replay(sidecar, recording)
            watched_alone(sidecar, set(), mode, declared)
