"""langchain-rust (crates.io ``langchain-rust`` 7.0.0, Rust): its ``AgentExecutor`` running an
``OpenAiToolAgent`` (the API's tool calls) or a ``ConversationalAgent`` (its actions as JSON in
the answer's text: a fenced ``{"action": "<tool>", "action_input": ...}``, its end ``{"action":
"Final Answer", "action_input": ...}``), steered through the model endpoint by its base URL
alone: ``OpenAI::default()`` is async-openai's ``OpenAIConfig::default()``, which reads
``OPENAI_BASE_URL``. The agent is tests/frameworks/rust/langchain (``make
langchain-rust-agent``); its one tool, ``search``, really runs, appending its term to
``ran.log`` in a temp dir (a term that begins ``fail`` fails it). Each agent is run by
``invoke`` and by ``stream_events`` (which streams the OpenAiToolAgent's requests; the
ConversationalAgent's plan does not stream); one invocation is one run. Its own step limit,
``with_max_iterations(N)``, counts the actions it ran and stops after the N-th with no request
more ("Max iterations reached").

The sidecar's rule pack declares the ``ConversationalAgent`` ``actions: text`` with
``action_key: action`` and ``answer_tools: ["Final Answer"]``, its ``stop_answer`` that form
(``${note_json}``). Behind the sidecar, the scripted upstream (:mod:`tests.frameworks.fakellm`);
its recorded request bodies are what the model read. Nothing waits for a directive.

* an invocation is one run, each action one tool call, ``completed`` with its answer;
  undeclared, the ConversationalAgent's steps are each a run;
* a budget of 3 tool calls counted down at each request, 3 searches run, the 4th request
  final (tools withdrawn, or told to answer), the report the executor's output,
  ``tool_limit_reached``; a model that goes on is stopped;
* a loop wound down, then stopped; an abort answered as the final answer;
* its ``max_iterations`` declared as model calls; alone, a known gap (the run held open);
* a failing tool is a failed call (its "The tool return the following error:").
"""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.steering import check_ended_at_own_limit, check_last_model_call_final
from tests.frameworks.test_model_endpoint_text_actions import (
    LEFT,
    check_loop_wound_down,
    final_asked,
    instructions,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

AGENT_DIR = Path(__file__).resolve().parent / "rust" / "langchain"
KEY = "sk-langchain-rust-0123456789abcdefSECRET"
REPORT = "REPORT: 3 searches done; the rest remains."
STOP_ANSWER = '```json\n{"action": "Final Answer", "action_input": ${note_json}}\n```'
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: langchain-rust
budgets:
  - agents: ["lcrs-chat-budget"]
    max_tool_calls: 3
    actions: text
    action_key: action
    answer_tools: ["Final Answer"]
    stop_answer: {json.dumps(STOP_ANSWER)}
  - agents: ["lcrs-chat-calls"]
    max_iterations: 3
    actions: text
    action_key: action
    answer_tools: ["Final Answer"]
    stop_answer: {json.dumps(STOP_ANSWER)}
  - agents: ["lcrs-chat*"]
    actions: text
    action_key: action
    answer_tools: ["Final Answer"]
    stop_answer: {json.dumps(STOP_ANSWER)}
  - agents: ["lcrs-tools-budget"]
    max_tool_calls: 3
  - agents: ["lcrs-tools-calls"]
    max_iterations: 3
rules:
  - name: two-actions-then-abort
    agents: ["lcrs-*-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
STOPPED = "The agent-watchdog stopped this run"
MODES = ("tools", "chat", "tools_stream", "chat_stream")  # (_stream: by stream_events)
_CASES = itertools.count(1)


def kind(mode: str) -> str:
    """The agent a mode runs: ``tools`` (the OpenAiToolAgent) or ``chat``."""
    return mode.removesuffix("_stream")


def agent_binary() -> Path:
    """The agent ``make langchain-rust-agent`` built for ``rust/langchain`` as it is now (the
    Makefile's hash: of Cargo.toml, Cargo.lock, then src/*.rs in the order of their paths)."""
    sources = [AGENT_DIR / "Cargo.toml", AGENT_DIR / "Cargo.lock",
               *sorted((AGENT_DIR / "src").glob("*.rs"))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = (AGENT_DIR.parents[3] / ".cache" / "langchain-rust-agent" / digest
              / "langchain-rust-agent")
    assert binary.exists(), f"{binary} is missing: `make langchain-rust-agent` builds it"
    return binary


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("langchain-rust"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def act(term: str, mode: str) -> fakellm.Step:
    """One search: a tool call, or the ConversationalAgent's fenced JSON in the text."""
    if kind(mode) == "tools":
        return fakellm.call("search", input=term)
    return fakellm.answer("```json\n" + json.dumps(
        {"action": "search", "action_input": term}) + "\n```")


def final(text: str, mode: str) -> fakellm.Step:
    """The agent's answer: plain text, or the ConversationalAgent's ``Final Answer``."""
    if kind(mode) == "tools":
        return fakellm.answer(text)
    return fakellm.answer("```json\n" + json.dumps(
        {"action": "Final Answer", "action_input": text}) + "\n```")


def told_to_answer(body: dict[str, Any], mode: str) -> bool:
    return body.get("tool_choice") == "none" if kind(mode) == "tools" else final_asked(body)


def steps_then_answer(count: int, mode: str, obeys: bool = True) -> fakellm.Script:
    """``count`` searches (term 0, 1, ...), then the answer; a final request's instruction is
    obeyed (the report, no action) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and told_to_answer(body, mode):
            return final(REPORT, mode)
        if index >= count:
            return final(f"All {count} searches are done.", mode)
        return act(f"term {index}", mode)
    return pick


def pointed(endpoint: str, agent: str) -> dict[str, str]:
    """What points langchain-rust's ``OpenAI::default()`` at the sidecar's model endpoint
    ``endpoint`` and names the agent (docs/agents.md's ``langchain-rust-env``)."""
    return {"OPENAI_BASE_URL": f"{endpoint}/agent/{agent}/v1"}


def run_agent(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              tmp_path: Path, mode: str, max_iterations: int = 10
              ) -> tuple[dict[str, Any], list[str], list[dict[str, Any]]]:
    """One ``invoke`` of the executor, named ``agent`` by ``OPENAI_BASE_URL``: what it printed
    (``ran``, ``output`` or ``error``), the terms its tool really ran with (ran.log), and the
    requests the upstream got."""
    case = next(_CASES)
    model = llm.script(f"{agent}-{case}", script)
    work = tmp_path / "work"
    work.mkdir()
    env = {**clean_environ(), "HOME": str(tmp_path), "OPENAI_API_KEY": KEY,
           **pointed(sidecar.url("model"), agent),
           "ENDPOINT_MODEL": model, "ENDPOINT_DIR": str(work),
           "ENDPOINT_TASK": f"Search for the terms (case {case})."}
    result = subprocess.run([str(agent_binary()), mode, str(max_iterations)], env=env,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT, check=True)
    said = json.loads(result.stdout.strip().splitlines()[-1])
    ran = work / "ran.log"
    return said, ran.read_text().splitlines() if ran.exists() else [], llm.requests(model)


def looping(mode: str) -> fakellm.Script:
    """The same search, whatever the model is told."""
    return lambda _index, _body: act("missing", mode)


# -- an invoke is a run ---------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_one_invoke_is_one_run_each_action_a_tool_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Either agent: 3 searches then the answer, one run, 4 model calls, 3 tool calls of
    ``search``, ``completed`` with the executor's output (the ``Final Answer``'s
    ``action_input``, not its JSON)."""
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}", steps_then_answer(3, mode),
                                    tmp_path, mode)
    assert said == {"ran": ["term 0", "term 1", "term 2"],
                    "output": "All 3 searches are done."}, said
    assert ran == ["term 0", "term 1", "term 2"]
    assert len(requests) == 4
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests)
    assert [fakellm.offers_tools(body) for body in requests] == [kind(mode) == "tools"] * 4
    # (stream_events streams the OpenAiToolAgent's requests; the ConversationalAgent's plan
    # does not stream)
    assert [bool(body.get("stream")) for body in requests] == [mode == "tools_stream"] * 4
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {"search": 3}, run["signals"]
    assert run["final_output"] == "All 3 searches are done."


def test_undeclared_its_text_agent_makes_a_run_of_each_step(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The ConversationalAgent with no ``actions: text`` entry: its requests offer no tools,
    so each answer reads as final, and each step is a run of its own (4 runs, no tool call)
    — what its pack entry is for."""
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, "langchain-rust-plain",
                                    steps_then_answer(3, "chat"), tmp_path, "chat")
    assert said["output"] == "All 3 searches are done." and len(ran) == 3
    assert len(requests) == 4
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 4)
    assert sorted((run["iterations"], run["tool_calls"]) for run in runs) == [(1, 0)] * 4, runs


# -- a budget -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_budget_of_three_counts_down_and_its_final_request_gets_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}-budget",
                                    steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["term 0", "term 1", "term 2"]  # the budget's 3, really run
    assert said == {"ran": ran, "output": REPORT}, said  # the report: invoke's answer
    assert len(requests) == 4
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert "all 3 tool calls used" in instructions(requests[-1])
    assert [told_to_answer(body, mode) for body in requests] == [False] * 3 + [True]
    for body in requests:  # (never as a user message)
        assert all("[budget:" not in str(message.get("content"))
                   for message in body["messages"][1:]), body
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


@pytest.mark.parametrize("mode", MODES)
def test_an_action_past_the_budget_is_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """The model does not take the final instruction. Tools: its call is taken out of the
    answer, which ends the executor with the stop note. Text: the executor runs the action
    (the endpoint cannot take it out of text); its next request gets the stop answer, a
    ``Final Answer`` with the note, which ends it. The upstream gets nothing more."""
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}-budget",
                                    steps_then_answer(10, mode, obeys=False), tmp_path, mode)
    assert len(requests) == 4 and told_to_answer(requests[-1], mode)
    output = said["output"]
    assert output.startswith(STOPPED) and '"action"' not in output, said
    if kind(mode) == "tools":
        assert ran == ["term 0", "term 1", "term 2"]
    else:
        assert ran == ["term 0", "term 1", "term 2", "term 3"]
        assert "went on after its final request instead of ending (budget-exhausted)" in output
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


# -- a loop, an abort -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_loop_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}", looping(mode), tmp_path,
                                    mode)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert len(llm.requests(str(requests[0]["model"]))) == 7  # nothing after the final
    output = said["output"]
    assert output.startswith(STOPPED) and "6 tool calls" in output, said
    if kind(mode) == "chat":  # its 7th action runs too; the stop answer ends it, saying why
        assert ran == ["missing"] * 7
        assert "went on after its final request instead of ending (tool-cycle)" in output
    else:  # the call past the grace is taken out of the final answer
        assert ran == ["missing"] * 6


@pytest.mark.parametrize("mode", MODES)
def test_an_abort_is_answered_as_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}-abort",
                                    steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["term 0", "term 1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    output = said["output"]
    assert output.startswith(STOPPED), said
    assert "Stopped by the test's rule after 2 actions" in output
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- its own step limit -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_its_max_iterations_declared_as_model_calls_ends_with_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """``with_max_iterations(3)``, one action an answer: 3 model calls at most, so the pack's
    ``max_iterations: 3``: the 3rd call is the run's final request and its answer the
    executor's output, before the executor's own limit cuts the run off."""
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}-calls",
                                    steps_then_answer(10, mode), tmp_path, mode,
                                    max_iterations=3)
    assert said == {"ran": ["term 0", "term 1"], "output": REPORT}, said
    assert ran == ["term 0", "term 1"]
    check_last_model_call_final(requests, 3, answered=kind(mode) == "tools")
    if kind(mode) == "chat":
        assert [final_asked(body) for body in requests] == [False, False, True]
    check_ended_at_own_limit(the_ended_run(sidecar, before), 3, REPORT)


@pytest.mark.parametrize("mode", MODES)
def test_its_max_iterations_alone_stops_with_no_request_more_known_gap(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Known gap: undeclared, ``with_max_iterations(3)`` stops the executor after its 3rd
    action ran, "Max iterations reached", with no request more: nothing tells the endpoint,
    whose run waits for the action it last handed over (``abandoned`` after
    ``run_end_timeout``)."""
    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}", steps_then_answer(10, mode),
                                    tmp_path, mode, max_iterations=3)
    assert said == {"ran": ["term 0", "term 1", "term 2"],
                    "output": "Max iterations reached"}, said
    assert ran == ["term 0", "term 1", "term 2"]
    assert len(requests) == 3
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 3)
    # (the 3rd action awaited: a tool call counts at the request that answers it)
    assert (run["state"], run["terminal_state"], run["tool_calls"],
            run["signals"]["in_flight"]) == ("active", None, 2, 1), run


# -- a failing tool -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_failing_tool_is_a_failed_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """The tool fails (its error: "no index for 'fail 0'"); the executor sends the model
    "The tool return the following error: ..." as its result (in the tool message, or in its
    ``TOOL RESPONSE`` template's user message), and goes on."""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        return act("fail 0", mode) if index == 0 else final("It failed.", mode)

    before = run_ids(sidecar)
    said, ran, requests = run_agent(sidecar, llm, f"lcrs-{kind(mode)}", pick, tmp_path, mode)
    assert said == {"ran": [], "output": "It failed."}, said
    assert ran == []
    assert "The tool return the following error: no index for 'fail 0'" in json.dumps(
        requests[1]["messages"][-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        2, 1, "completed"), run
    assert run["signals"]["errors"] == 1, run["signals"]
