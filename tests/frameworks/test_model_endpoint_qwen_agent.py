"""Qwen-Agent (``qwen-agent`` 0.0.34: its ``Assistant`` with a ``BaseTool`` of the application's
own, ``shell``, registered by ``@register_tool``) steered through the model endpoint by its
model's ``model_server`` alone (``llm_cfg = {'model': ..., 'model_server':
'http://127.0.0.1:9478/agent/<name>/v1', 'api_key': ...}``: its ``oai`` model, the ``openai``
client beneath), its commands really run in a temp dir (each appends to ``ran.log``). Every
request it makes is streamed, by ``agent.run`` (a generator) and ``agent.run_nonstream``
alike. It acts two ways, each tested:

* by default, its own function-calling template (``fncall_prompt_type`` ``nous``): no request
  offers ``tools``; the tools are described in the system message, the model calls one by
  writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in its answer's text,
  and the result comes back as ``<tool_response>`` in a user message. The rule pack declares
  it ``actions: text`` with ``action_key: name`` and the ``action_pattern`` of its
  ``<tool_call>`` blocks (docs/agents.md's): each JSON object in them is a call of the tool
  it names; an answer with none is the run's answer, which ends Qwen-Agent's run (no
  ``stop_answer``: the stop note is such an answer);
* ``generate_cfg: {'use_raw_api': True}``: the API's tool calling (``tools``, ``tool_calls``;
  its tool results carry the call's id as ``id``, not ``tool_call_id``).

Its own limit, ``QWEN_AGENT_MAX_LLM_CALL_PER_RUN`` (20 by default, read at import), ends a run
after that many model calls, whatever the last one asked for. Qwen-Agent emits no
OpenTelemetry of its own. Behind the sidecar, the scripted upstream
(:mod:`tests.frameworks.fakellm`); its recorded request bodies are what the model read.
Nothing waits for a directive.
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
from tests.harness import RunningServer, endpoint_with_pack, running_server, sidecar_config
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-qwen-agent-0123456789abcdefSECRET"
REPORT = "REPORT: 3 steps done; the rest remains."
TOOL_CALL = "'(?s)<tool_call>.*</tool_call>'"
REACT = r"'(?s)Action:\s*(.*?)\s*Action Input:\s*(.*)'"  # (docs/agents.md's react-agents)
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: qwen-agent
budgets:
  - agents: ["qwen-budget"]
    max_tool_calls: 3
    actions: text
    action_pattern: {TOOL_CALL}
    action_key: name
  - agents: ["qwen-calls"]
    max_iterations: 4
    actions: text
    action_pattern: {TOOL_CALL}
    action_key: name
  - agents: ["qwen-key-alone"]
    actions: text
    action_key: name
  - agents: ["qwen*"]
    actions: text
    action_pattern: {TOOL_CALL}
    action_key: name
  - agents: ["hermes-budget"]
    max_tool_calls: 3
  - agents: ["hermes-tools"]
    max_iterations: 20
    actions: tools
  - agents: ["react-budget"]
    max_tool_calls: 3
    actions: text
    action_pattern: {REACT}
    stop_answer: "Final Answer: ${{note}}"
  - agents: ["react*"]
    actions: text
    action_pattern: {REACT}
    stop_answer: "Final Answer: ${{note}}"
rules:
  - name: two-actions-then-abort
    agents: ["qwen-abort", "react-abort"]
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
    with endpoint_with_pack(tmp_path_factory.mktemp("qwen-agent"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def act(command: str, mode: str) -> fakellm.Step:
    """One action: ``command`` by the ``shell`` tool, in Qwen-Agent's template in the answer's
    text (after a sentence, as Qwen models write it) or as a tool call."""
    if mode == "tools":
        return fakellm.call("shell", command=command)
    return fakellm.answer("I run the next step.\n<tool_call>\n" + json.dumps(
        {"name": "shell", "arguments": {"command": command}}) + "\n</tool_call>")


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


def looping(mode: str) -> fakellm.Script:
    """The same failing command, whatever the model is told."""
    return lambda _index, _body: act("echo tried >> ran.log && cat missing.txt", mode)


def llm_cfg(model_server: str, model: str, mode: str) -> dict[str, Any]:
    """Qwen-Agent's ``llm_cfg`` as a user writes it for an OpenAI-compatible server (``mode``
    ``tools``: the API's tool calling, ``use_raw_api``). docs/agents.md shows it."""
    cfg: dict[str, Any] = {"model": model, "model_server": model_server, "api_key": KEY}
    if mode == "tools":
        cfg["generate_cfg"] = {"use_raw_api": True}
    return cfg


def run_qwen(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
             tmp_path: Path, mode: str, runner: str = "run", tasks: int = 1,
             extra: dict[str, str] | None = None, traced: str | None = None,
             direct: bool = False
             ) -> tuple[list[list[dict[str, Any]]], list[str], list[dict[str, Any]]]:
    """Qwen-Agent's ``Assistant`` once (``runner``: ``run``, streamed, or ``nonstream``), in a
    temp dir of its own, on a model scripted by ``script``, named ``agent`` by its
    ``model_server``; ``tasks`` user messages in turn, one conversation. Returns each run's
    responses (role, content, the call's tool), the commands really run (ran.log) and the
    requests the upstream got. ``traced``: opentelemetry-instrumentation-openai-v2 on, its
    spans to the sidecar's OTLP receiver (with ``RECORD_SPANS`` set, recorded as
    ``recordings/endpoint_qwen_agent/TRACED.jsonl``); ``direct``: its model the upstream's,
    not the sidecar's (watched only)."""
    case = next(_CASES)
    model = llm.script(f"qwen-{agent}-{case}", script)
    work = tmp_path / "work"
    work.mkdir()
    cfg = llm_cfg(llm.base_url if direct else f"{sidecar.url('model')}/agent/{agent}/v1",
                  model, mode)
    env = {**clean_environ("QWEN_AGENT_", "OPENAI_"), "HOME": str(tmp_path),
           "PYTHONPATH": str(DRIVERS), "QA_WORKDIR": str(work), "QA_LLM": json.dumps(cfg),
           "QA_TASKS": json.dumps([f"Count the steps (case {case}, task {n})."
                                   for n in range(tasks)]),
           "OTEL_SDK_DISABLED": "true", **(extra or {})}
    if traced is not None:  # (the instrumentation's spans name no agent: the service does)
        env.update(QA_OTEL="1", OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.otlp_http,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME=agent,
                   OTEL_BSP_SCHEDULE_DELAY="50", OTEL_SDK_DISABLED="false",
                   OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental",
                   OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="span_only")
        if os.environ.get("RECORD_SPANS"):
            recording = RECORDINGS / "endpoint_qwen_agent" / f"{traced}.jsonl"
            recording.parent.mkdir(exist_ok=True)
            recording.unlink(missing_ok=True)
            env["RECORD_SPANS"] = str(recording)
    result = drive_command("qwen_agent", "endpoint_qwen_agent", runner,
                           {**clean_environ(), "PYTHONPATH": str(DRIVERS)}, env)
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    ran = work / "ran.log"
    return runs, ran.read_text().splitlines() if ran.exists() else [], llm.requests(model)


def instructions(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def said(responses: list[dict[str, Any]]) -> str:
    """The run's answer as Qwen-Agent's caller reads it: its last response's content."""
    return str(responses[-1]["content"])


# -- a run is a run -------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "runner"), [("text", "run"), ("text", "nonstream"),
                                              ("tools", "run")])
def test_one_agent_run_is_one_run_each_tool_it_asks_for_a_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str, runner: str) -> None:
    """Each ``<tool_call>`` in an answer's text is a call of the tool it names, as a tool call
    is: the run's counts are the same either way; the answer with none ends the run at once,
    ``completed``, with that answer, which is also the agent's last response."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen", steps_then_answer(3, mode),
                                          tmp_path, mode, runner)
    assert ran == ["step0", "step1", "step2"]
    assert said(responses) == "All 3 steps are done."
    assert len(requests) == 4 and all(body["stream"] for body in requests)
    # nothing to steer: each request went upstream as it came
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests)
    assert [("tools" in body) for body in requests] == [mode == "tools"] * 4
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {"shell": 3}, run["signals"]
    assert run["final_output"] == "All 3 steps are done."


def test_undeclared_its_template_is_read_by_default(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """An agent the pack does not declare (``assistant``): its requests offer no API tools and
    its instructions carry the Hermes template (``<tools>``, ``<tool_call>``), which the
    endpoint reads by default as the pack's entry would declare it: one run, each
    ``<tool_call>`` a call of its tool, the answer with none its end."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "assistant",
                                          steps_then_answer(2, "text"), tmp_path, "text")
    assert (said(responses), ran, len(requests)) == (
        "All 2 steps are done.", ["step0", "step1"], 3)
    assert all("<tools>" in instructions(body) and "<tool_call>" in instructions(body)
               and "tools" not in body for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == ("assistant", 3, 2, "completed", "All 2 steps are done."), run
    assert run["signals"]["tools"] == {"shell": 2}, run["signals"]


@pytest.mark.parametrize("admitted", [False, True])
def test_undeclared_a_budget_of_three_from_an_entry_that_says_no_actions(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, admitted: bool) -> None:
    """The pack gives the agent (``hermes-budget``) a budget of 3 tool calls and says nothing
    of how it acts: its template read by default, the budget binds as for a declared agent.
    ``admitted``: a request of the agent that offers API tools came first (a run of its own),
    from which the compiled relay learns what a new run's first request of it gets (the
    countdown's note, for one that offers tools): the template's first request, which offers
    none, waits for Python and is told the countdown all the same."""
    if admitted:
        import openai

        model = llm.script(f"hermes-admit-{next(_CASES)}", fakellm.steps(
            fakellm.answer("Nothing to run.")))
        client = openai.OpenAI(base_url=f"{sidecar.url('model')}/agent/hermes-budget/v1",
                               api_key=KEY, max_retries=0)
        before = run_ids(sidecar)
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Admit me ({model})."}],
            tools=[{"type": "function", "function": {
                "name": "shell", "parameters": {"type": "object", "properties": {}}}}])
        assert LEFT.findall(instructions(llm.requests(model)[0])) == [("3", "3")]
        the_ended_run(sidecar, before)
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "hermes-budget",
                                          steps_then_answer(10, "text"), tmp_path, "text")
    assert ran == ["step0", "step1", "step2"] and said(responses) == REPORT
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [final_asked(body) for body in requests] == [False, False, False, True]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


def test_actions_tools_said_each_model_call_is_a_run_of_its_own(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The pack says the agent (``hermes-tools``) acts by the API's tool calls: its template is
    not read; its requests offer no tools, so each answer looks final to the endpoint, its
    ``<tool_call>`` too: each model call is a run of its own, ``completed``, no tool call
    counted."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "hermes-tools",
                                          steps_then_answer(2, "text"), tmp_path, "text")
    assert (said(responses), ran, len(requests)) == (
        "All 2 steps are done.", ["step0", "step1"], 3)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 3
                    and all(run["state"] == "ended" for run in runs))
    assert {(run["iterations"], run["tool_calls"], run["terminal_state"])
            for run in runs} == {(1, 0, "completed")}, runs


HERMES_SYSTEM = ("You are provided with function signatures within <tools></tools> XML tags:\n"
                 '<tools>\n{"type": "function", "function": {"name": "shell"}}\n</tools>\n'
                 "For each function call, return a json object within <tool_call></tool_call> "
                 "XML tags.")
CALL_SAID = 'It is written so:\n<tool_call>\n{"name": "shell", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize("case", ["api-tools", "user-prose"])
def test_the_markers_with_api_tools_or_in_a_users_prose_are_no_template(
        sidecar: RunningServer, llm: FakeLLM, case: str) -> None:
    """An undeclared agent's request (the ``openai`` SDK's) whose instructions carry the
    template's markers but that offers API tools (``api-tools``: it acts by them), or whose
    user message asks about the markers, its instructions free of them (``user-prose``): an
    answer holding a ``<tool_call>`` block is its run's answer, which ends the run at once,
    ``completed``, no tool call counted (not an action held open for ``loose_run_gap``)."""
    import openai

    model = llm.script(f"hermes-{case}-{next(_CASES)}", fakellm.steps(fakellm.answer(CALL_SAID)))
    client = openai.OpenAI(base_url=f"{sidecar.url('model')}/agent/assistant/v1", api_key=KEY,
                           max_retries=0)
    messages: list[Any]
    extra: dict[str, Any] = {}
    if case == "api-tools":
        messages = [{"role": "system", "content": HERMES_SYSTEM},
                    {"role": "user", "content": "Run the shell (tools)."}]
        extra["tools"] = [{"type": "function", "function": {
            "name": "shell", "parameters": {"type": "object", "properties": {}}}}]
    else:
        messages = [{"role": "system", "content": "You answer questions about prompts."},
                    {"role": "user", "content": "How is a call written between <tools> and "
                                                "<tool_call> in Hermes prompts?"}]
    before = run_ids(sidecar)
    answer = client.chat.completions.create(model=model, messages=messages, **extra)
    assert answer.choices[0].message.content == CALL_SAID
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"]) \
        == (1, 0, "completed", CALL_SAID), run
    assert run["signals"]["in_flight"] == 0, run


@pytest.mark.parametrize("agent", ["qwen", "qwen-key-alone"])
def test_json_in_its_answer_is_no_call_outside_a_tool_call_block(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, agent: str) -> None:
    """Its answer holds a JSON object with a ``name`` (a record it reports), no
    ``<tool_call>``: Qwen-Agent ends its run with it. With the pack's ``action_pattern``
    (``<tool_call>`` blocks) beside its ``action_key``, that object is no call: the run ends
    at once, ``completed``, with the answer. With the key alone, it is read as a call of
    ``a.txt``: the run is held open for it (in flight) until ``loose_run_gap`` passes."""
    record = 'The file:\n```json\n{"name": "a.txt", "lines": 2}\n```'

    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        return act("echo step0 >> ran.log", "text") if index == 0 else fakellm.answer(record)

    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, agent, pick, tmp_path, "text")
    assert (said(responses), ran, len(requests)) == (record, ["step0"], 2)
    if agent == "qwen":
        run = the_ended_run(sidecar, before)
        assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
            2, 1, "completed"), run
        assert run["final_output"] == record
    else:
        [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 2)
        # (a call is counted once its result comes: the one in flight is not yet)
        assert (run["state"], run["tool_calls"], run["signals"]["in_flight"]) == (
            "active", 1, 1), run
        assert run["terminal_state"] is None, run


@pytest.mark.parametrize("mode", MODES)
def test_two_tool_calls_in_one_answer_are_two_calls_of_the_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """An answer that asks for two tools at once (two ``<tool_call>`` blocks, or two tool
    calls): Qwen-Agent runs both, and the endpoint counts both: the next request is told 1
    of 3 left, and the one after is the final."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if final_asked(body) or (mode == "tools" and not fakellm.offers_tools(body)):
            return fakellm.answer(REPORT)
        if index == 0:
            commands = [f"echo step{n} >> ran.log" for n in (0, 1)]
            if mode == "tools":
                return fakellm.Step(tool_calls=tuple(
                    fakellm.ToolCall("shell", {"command": command}) for command in commands))
            return fakellm.answer("Two at once:\n" + "\n".join(
                "<tool_call>\n" + json.dumps({"name": "shell", "arguments": {
                    "command": command}}) + "\n</tool_call>" for command in commands))
        return act(f"echo step{index + 1} >> ran.log", mode)

    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-budget", pick, tmp_path, mode)
    assert ran == ["step0", "step1", "step2"] and said(responses) == REPORT
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 3, "tool_limit_reached"), run


@pytest.mark.parametrize("mode", MODES)
def test_a_conversation_goes_on_a_run_per_message(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Two user messages in turn, the conversation going on (``messages`` with the first
    run's responses, then the next message): each ``agent.run`` is a run of its own."""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        if index in (1, 3):
            return fakellm.answer(f"Done with task {index // 2}.")
        return act(f"echo step{index} >> ran.log", mode)

    before = run_ids(sidecar)
    runs, ran, requests = run_qwen(sidecar, llm, "qwen", pick, tmp_path, mode, tasks=2)
    assert [said(responses) for responses in runs] == ["Done with task 0.", "Done with task 1."]
    assert ran == ["step0", "step2"] and len(requests) == 4
    ended = new_runs(sidecar, before, lambda runs: len(runs) == 2
                     and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in ended) == [
        (2, 1, "completed", "Done with task 0."), (2, 1, "completed", "Done with task 1.")]


FORMS = {
    "compact": lambda command: "<tool_call>" + json.dumps(
        {"name": "shell", "arguments": {"command": command}}, separators=(",", ":"))
        + "</tool_call>",
    "arguments first": lambda command: "<tool_call>\n" + json.dumps(
        {"arguments": {"command": command}, "name": "shell"}) + "\n</tool_call>",
    "text after": lambda command: "Step:\n<tool_call>\n" + json.dumps(
        {"name": "shell", "arguments": {"command": command}}) + "\n</tool_call>\nThen I see.",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_its_calls_written_otherwise_read_the_same(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, form: str) -> None:
    """Qwen-Agent sends each answer back in its history as it re-renders it (its text before
    the call, then ``<tool_call>`` and the call as ``json.dumps`` writes it, the name first),
    not as the model wrote it: compact JSON, the arguments first, a sentence after the call.
    Each is still one run of 3 calls: the request carries an answer with the same actions
    (``carries_answer``), so it goes on in the run, not as another invocation's."""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        if index >= 3:
            return fakellm.answer("All 3 steps are done.")
        return fakellm.answer(FORMS[form](f"echo step{index} >> ran.log"))

    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen", pick, tmp_path, "text")
    assert (said(responses), ran, len(requests)) == (
        "All 3 steps are done.", ["step0", "step1", "step2"], 4)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run


# -- a budget -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_budget_of_three_counts_down_and_its_final_request_asks_for_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-budget",
                                          steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    assert said(responses) == REPORT  # the agent's answer: the report
    assert len(requests) == 4
    # the true count left at each request (the default pack's countdown: from 3 left)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert "all 3 tool calls used" in instructions(requests[-1])
    if mode == "text":  # (its answer's text is read for an action: the finish is asked for)
        assert [final_asked(body) for body in requests] == [False, False, False, True]
    else:  # (its tools withdrawn)
        assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False]
    for body in requests:  # (never as a user message)
        assert all("[budget:" not in str(message.get("content"))
                   for message in body["messages"][1:]), body
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


@pytest.mark.parametrize("mode", MODES)
def test_a_reasoning_models_budget_reads_the_same(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """A reasoning model (a Qwen3 served by vLLM with its reasoning parser): each answer's
    reasoning streamed first as ``reasoning_content``, which Qwen-Agent keeps and sends back
    on the assistant messages of its history. Its run reads as without it: the countdown at
    each request, 3 tools run, the report at the final request, ``tool_limit_reached``."""
    plain = steps_then_answer(10, mode)

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        step = plain(index, body)
        return fakellm.Step(step.text, step.tool_calls, reasoning=f"Thinking about step {index}.")

    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-budget", pick, tmp_path, mode)
    assert ran == ["step0", "step1", "step2"] and said(responses) == REPORT
    assert "Thinking about step 0." in json.dumps(requests[1]["messages"])  # (sent back)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_past_the_budget_is_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """The model does not take the final instruction. In text, its answer holds one more
    ``<tool_call>``, which Qwen-Agent runs (the endpoint cannot take an action out of text);
    its next request gets the stop answer, the note with no tool in it, which ends its run as
    its answer; the upstream gets nothing more. By the API, the call is taken out of the
    final answer: none runs."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-budget",
                                          steps_then_answer(10, mode, obeys=False),
                                          tmp_path, mode)
    assert len(requests) == 4
    answer = said(responses)
    assert answer.startswith(STOPPED) and "<tool_call>" not in answer, answer
    if mode == "text":
        assert final_asked(requests[-1])
        assert ran == ["step0", "step1", "step2", "step3"]
        assert "went on after its final request instead of ending (budget-exhausted)" in answer
    else:
        assert ran == ["step0", "step1", "step2"]
        assert "asked for tools again instead of its final report" in answer
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


# -- a loop, an abort -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_loop_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen", looping(mode), tmp_path, mode)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert len(llm.requests(str(requests[0]["model"]))) == 7  # nothing after the final
    answer = said(responses)
    assert answer.startswith(STOPPED) and "6 tool calls" in answer, answer
    if mode == "text":
        # the model loops on: its 7th answer's tool runs too, then the stop answer ends it
        assert ran == ["tried"] * 7
        assert "went on after its final request instead of ending (tool-cycle)" in answer
    else:
        assert ran == ["tried"] * 6


@pytest.mark.parametrize("mode", MODES)
def test_an_abort_is_answered_with_the_stop_note_which_ends_its_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-abort",
                                          steps_then_answer(10, mode), tmp_path, mode)
    assert ran == ["step0", "step1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert "Stopped by the test's rule after 2 actions" in said(responses)
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- its own limit ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_its_own_limit_ends_it_with_no_request_more_known_gap(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Known gap: Qwen-Agent's own limit (``QWEN_AGENT_MAX_LLM_CALL_PER_RUN``, 3 here) ends its
    run after its 3rd model call, that call's tool run and no request more: its caller's last
    response is that tool's result, no answer. Nothing tells the endpoint the agent stopped:
    the run is held open for the call it last handed over (in flight), and ends later (text:
    ``completed`` ``loose_run_gap`` after it, the last answer, its ``<tool_call>``, its
    output; tools: ``abandoned`` after ``run_end_timeout``)."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(
        sidecar, llm, "qwen", steps_then_answer(10, mode), tmp_path, mode,
        extra={"QWEN_AGENT_MAX_LLM_CALL_PER_RUN": "3"})
    assert ran == ["step0", "step1", "step2"] and len(requests) == 3
    assert responses[-1]["role"] == "function"  # (no answer: the last tool's result)
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 3)
    assert (run["state"], run["tool_calls"], run["signals"]["in_flight"]) == (
        "active", 2, 1), run
    if mode == "text":
        assert "<tool_call>" in run["final_output"]


@pytest.mark.parametrize("mode", MODES)
def test_a_budget_of_its_own_limits_model_calls_ends_it_with_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """The pack's ``max_iterations`` at Qwen-Agent's own limit (4 each): the endpoint makes
    the 4th call final (the finish asked for in text, no tools offered by the API), the model
    reports, and Qwen-Agent's run ends with the report as its answer; the run
    ``tool_limit_reached``, not held open."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(
        sidecar, llm, "qwen-calls", steps_then_answer(10, mode), tmp_path, mode,
        extra={"QWEN_AGENT_MAX_LLM_CALL_PER_RUN": "4"})
    assert ran == ["step0", "step1", "step2"] and len(requests) == 4
    assert said(responses) == REPORT
    assert "this is the last of 4" in instructions(requests[-1])
    if mode == "text":
        assert [final_asked(body) for body in requests] == [False] * 3 + [True]
    else:
        assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["final_output"] == REPORT




@pytest.mark.parametrize("mode", MODES)
def test_its_tools_results_are_read(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Three commands, each other, that print the same: the endpoint reads each result (the
    same 3 times: ``repeated_tool_result``), in text from the ``<tool_response>`` after the
    answer, and by the API from its tool messages, which name their call by ``id``, not
    ``tool_call_id``: the calls still waiting answered in the order handed over."""
    def pick(index: int, _body: dict[str, Any]) -> fakellm.Step:
        if index < 3:
            return act(f"echo step{index} >> ran.log && echo same", mode)
        return fakellm.answer("All 3 steps are done.")

    before = run_ids(sidecar)
    _, ran, requests = run_qwen(sidecar, llm, "qwen", pick, tmp_path, mode)
    assert len(ran) == 3 and len(requests) == 4
    if mode == "tools":
        assert [(message.get("tool_call_id"), bool(message.get("id")))
                for message in requests[1]["messages"] if message["role"] == "tool"] == [
            (None, True)]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["signals"]["repeated_tool_result"]) == (3, 3), run


# -- its ReActChat ------------------------------------------------------------------------------

def react(index: int, body: dict[str, Any], count: int = 10, obeys: bool = True
          ) -> fakellm.Step:
    """Its ``ReActChat``'s model: ``count`` steps in ReAct (the ``Thought:`` is its prompt's
    last words), then its ``Final Answer:``; the report as one at a final request."""
    if obeys and final_asked(body):
        return fakellm.answer(f"I now know the final answer\nFinal Answer: {REPORT}")
    if index >= count:
        return fakellm.answer(f"I now know the final answer\nFinal Answer: All {count} done.")
    return fakellm.answer(f"Step {index} next.\nAction: shell\nAction Input: " + json.dumps(
        {"command": f"echo step{index} >> ran.log && echo done {index}"}))


def run_react(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              tmp_path: Path) -> tuple[str, list[str], list[dict[str, Any]]]:
    """Its ``ReActChat`` once: what it answers (its one response: the whole ReAct), the
    commands it ran, the requests the upstream got."""
    [responses], ran, requests = run_qwen(sidecar, llm, agent, script, tmp_path, "text",
                                          extra={"QA_AGENT": "react"})
    return said(responses), ran, requests


def prompt(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def test_react_one_run_its_scratchpad_growing_in_one_prompt(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Its ``ReActChat`` sends the task and the scratchpad in one user message, grown by each
    answer and its ``Observation:`` (a conversation's first request each time, to the
    endpoint): one run of its 3 actions, ended ``completed`` by its ``Final Answer:``."""
    before = run_ids(sidecar)
    answer, ran, requests = run_react(sidecar, llm, "react",
                                      lambda i, body: react(i, body, 3), tmp_path)
    assert ran == ["step0", "step1", "step2"] and len(requests) == 4
    assert answer.endswith("Final Answer: All 3 done.")
    assert [len(body["messages"]) for body in requests] == [2] * 4
    assert "Observation: exit 0\ndone 2" in prompt(requests[3])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "completed"), run
    assert run["signals"]["tools"] == {"text_action": 3}, run["signals"]


def test_react_a_budget_of_three_ends_with_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    answer, ran, requests = run_react(sidecar, llm, "react-budget", react, tmp_path)
    assert ran == ["step0", "step1", "step2"] and len(requests) == 4
    assert answer.endswith(f"Final Answer: {REPORT}")
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [final_asked(body) for body in requests] == [False] * 3 + [True]
    assert all("[budget:" not in prompt(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run


def test_react_a_loop_is_wound_down_then_stopped_by_a_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    def looping_react(_index: int, _body: dict[str, Any]) -> fakellm.Step:
        return fakellm.answer("Again.\nAction: shell\nAction Input: " + json.dumps(
            {"command": "echo tried >> ran.log && cat missing.txt"}))

    before = run_ids(sidecar)
    answer, ran, requests = run_react(sidecar, llm, "react", looping_react, tmp_path)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert ran == ["tried"] * 7  # (its 7th action runs too, then the stop answer ends it)
    assert "Final Answer: " + STOPPED in answer and answer.count("Action: shell") == 7


def test_react_an_abort_is_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    answer, ran, requests = run_react(sidecar, llm, "react-abort", react, tmp_path)
    assert ran == ["step0", "step1"] and len(requests) == 2
    assert "Final Answer: " + STOPPED in answer
    assert "Stopped by the test's rule after 2 actions" in answer
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- traced by the OpenAI client's instrumentation ---------------------------------------------
# Qwen-Agent emits no OpenTelemetry of its own; a user traces its model calls by instrumenting
# the openai client beneath it (opentelemetry-instrumentation-openai-v2): a ``chat <model>``
# span per model call, each a trace of its own, no agent or tool span.

@pytest.mark.parametrize("mode", MODES)
def test_traced_and_steered_at_once_its_calls_are_counted_once(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Steered through the endpoint and traced at once: its requests carry no
    ``traceparent``, but each ``chat`` span names the response the endpoint relayed
    (``gen_ai.response.id``): one run, each model call counted once."""
    before = run_ids(sidecar)
    [responses], ran, requests = run_qwen(sidecar, llm, "qwen-traced",
                                          steps_then_answer(2, mode), tmp_path, mode,
                                          traced=f"steered-{mode}")
    assert said(responses) == "All 2 steps are done." and len(ran) == 2
    assert len(requests) == 3 and not any(
        "traceparent" in headers for headers in llm.request_headers(requests[0]["model"]))
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == ("qwen-traced", 3, 2, "completed",
                                     "All 2 steps are done."), run



@pytest.mark.parametrize("mode", MODES)
def test_traced_alone_its_calls(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, mode: str) -> None:
    """Watched only (its model the upstream's, not the endpoint's), by the instrumentation's
    spans alone: see :func:`watched_alone`."""
    before = run_ids(sidecar)
    [responses], ran, _ = run_qwen(sidecar, llm, "qwen-watched", steps_then_answer(2, mode),
                                   tmp_path, mode, traced=f"watched-{mode}", direct=True)
    assert said(responses) == "All 2 steps are done." and len(ran) == 2
    watched_alone(sidecar, before, mode)


@pytest.mark.parametrize("mode", MODES)
def test_traced_alone_from_its_recording(tmp_path: Path, mode: str) -> None:
    """(A sidecar of its own, with the pack: the recording's response ids are the scripted
    model's, which another run's calls of this test run may have had.)"""
    recording = RECORDINGS / "endpoint_qwen_agent" / f"watched-{mode}.jsonl"
    spans = recorded_spans(recording)
    assert len(spans) == 3 and all(span["name"].startswith("chat ") for span in spans), spans
    assert all(not span.get("parentSpanId") for span in spans)  # (each a trace of its own)
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    with running_server(sidecar_config(tmp_path / "state", eval_interval=0.2,
                                       rules=(str(pack),))) as sidecar:
        replay(sidecar, recording)
        watched_alone(sidecar, set(), mode)


def watched_alone(sidecar: RunningServer, before: set[str], mode: str) -> None:
    """What the instrumentation's spans alone tell of 3 model calls (2 tools, then the
    answer), each a trace of its own: one run of loose calls, ended by the answer, no tool
    call counted (none traced). In text too: the pack says the agent acts in text, so an
    answer whose ``<tool_call>`` it reads as an action is no end of the run (the span
    finished ``stop``), as the endpoint reads it."""
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 1
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(3, 0, "completed", "All 2 steps are done.")], runs
