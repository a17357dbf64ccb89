"""CAMEL-AI's ``ChatAgent`` (driver ``endpoint_camel``) steered through the model endpoint by
its model's ``url`` (docs/agents.md's lines), on both relays, beyond what
test_model_endpoint_frameworks checks of it by ``OPENAI_BASE_URL`` (counts, a budget of 3, a
loop wound down): a rule's abort, answered or as the API's error; its own iteration limit
declared as the pack's model-call budget (docs/agents.md's pack), and below it; its
client's retry of a rate-limited request; its context summary, the run named and not; a
``RolePlaying`` society, its user agent instructing its assistant turn by turn; a
``Workforce``; traced by the
OpenAI client's instrumentation, alone and steered at once. What the
upstream saw is asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

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
from tests.frameworks.steering import (
    check_ended_at_own_limit,
    check_last_model_call_final,
    documented_pack,
)
from tests.frameworks.test_model_endpoint_frameworks import LEFT, instructions
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack, running_server, sidecar_config
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
  - agents: ["camel-compact*"]
    max_tool_calls: 5
  - agents: ["camel-limited"]
    max_iterations: 4
  - agents: ["camel-limit-compact"]
    max_iterations: 6
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
    """The sidecar's model endpoint with ``/agent/<agent>/`` in it: the agent named."""
    return f"{sidecar.url('model')}/agent/{agent}/v1"


WORKDIR = tempfile.mkdtemp(prefix="camel-")  # its context summaries' files (else ./context_files)


def settings(base_url: str, model: str) -> dict[str, object]:
    """What a user sets to point CAMEL's model at the model endpoint: the keyword arguments of
    ``ModelFactory.create`` for an ``OPENAI_COMPATIBLE_MODEL`` (its platform and key aside).
    The tests run it so, and docs/agents.md shows it (``camel-config``, checked in
    tests/test_docs.py)."""
    return {"model_type": model, "url": base_url}


def run_camel(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              mode: str = "url", traced: str | None = None, direct: bool = False,
              server: int = 0, **extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One invocation of the driver, its model set by :func:`settings` at ``url(agent)``: what
    it printed and the upstream's requests. ``traced``: opentelemetry-instrumentation-openai-v2
    on, its spans to the sidecar's OTLP receiver (with ``RECORD_SPANS`` set, recorded as
    ``recordings/endpoint_camel/TRACED.jsonl``); ``direct``: the model is the upstream's, not
    the sidecar's (watched only); ``server``: which driver process forks it (one runs one
    invocation at a time: two at once, each its own)."""
    case = next(_CASES)
    model = llm.script(f"camel-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true", **({"DRIVER_SERVER": str(server)} if server else {})}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           "CAMEL_SETTINGS": json.dumps(settings(url(sidecar, agent), model)),
           "CAMEL_WORKDIR": WORKDIR, **extra}
    if traced is not None:  # (the instrumentation's spans name no agent: the service does)
        env.update(CAMEL_OTEL="1", OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.otlp_http,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME=agent,
                   OTEL_BSP_SCHEDULE_DELAY="50", OTEL_SDK_DISABLED="false",
                   OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental",
                   OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="span_only")
        if direct:
            env["CAMEL_SETTINGS"] = json.dumps(settings(llm.base_url, model))
        if os.environ.get("RECORD_SPANS"):
            recording = RECORDINGS / "endpoint_camel" / f"{traced}.jsonl"
            recording.parent.mkdir(exist_ok=True)
            recording.unlink(missing_ok=True)
            env["RECORD_SPANS"] = str(recording)
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


def test_its_own_iteration_limit_declared_as_the_packs_ends_at_its_last_call_with_the_report(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """docs/agents.md's pack (``camel-limit.yaml``, as pasted): ``max_iterations`` the agent's
    own ``max_iteration`` (10 model calls). The 9th request is told 2 calls are left, the 10th
    is the run's final request, tools withdrawn, its answer the step's output: CAMEL's own
    limit never cuts the step off, the run ends ``tool_limit_reached`` with the report."""
    pack = documented_pack("camel-limit.yaml")
    limit = int(yaml.safe_load(pack)["budgets"][0]["max_iterations"])
    with endpoint_with_pack(tmp_path, pack, llm.base_url, model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_camel(sidecar, llm, "camel", searching,
                                   CAMEL_MAX_ITERATION=str(limit))
        run = the_ended_run(sidecar, before)
    assert said == {"ran": [f"term {index}" for index in range(limit - 1)], "output": REPORT,
                    "error": ""}, said
    check_last_model_call_final(requests, limit)
    check_ended_at_own_limit(run, limit, REPORT)


def test_its_own_iteration_limit_below_the_packs_leaves_its_run_open_known_gap(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Known gap (docs/agents.md#camel-ai): ``max_iteration`` (2) below the pack's
    ``max_iterations`` (4) ends the step after 2 model calls, the last one's tools run and no
    request more: nothing tells the endpoint, whose run waits for the call it last handed over
    (``abandoned`` after ``run_end_timeout``). The step's output is empty."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-limited", searching,
                               CAMEL_MAX_ITERATION="2")
    assert said == {"ran": ["term 0", "term 1"], "output": "", "error": ""}
    assert len(requests) == 2 and all(fakellm.offers_tools(body) for body in requests)
    [run] = new_runs(sidecar, before, lambda runs: True)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"],
            run["signals"]["budget"]["max_iterations"]) == ("active", 2, 1, 4), run


def test_a_rate_limited_request_retried_by_its_client_is_one_call_of_the_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The upstream refuses the second request (429, ``retry-after-ms``), which passes to the
    agent as it came; CAMEL's OpenAI client sends it again at once (``max_retries``, 3 by
    default): the same run goes on, the refused attempt uncounted (no model call, no error:
    a rate limit says nothing of the request), no new run."""
    before = run_ids(sidecar)
    script = fakellm.steps(fakellm.call("search", q="alpha"), fakellm.Step(status=429),
                           fakellm.call("search", q="beta"), fakellm.answer(ANSWER))
    said, requests = run_camel(sidecar, llm, "camel-retried", script)
    assert said == {"ran": ["alpha", "beta"], "output": ANSWER, "error": ""}
    assert len(requests) == 4 and requests[1]["messages"] == requests[2]["messages"]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["errors"], run["terminal_state"]) == (
        3, 2, 0, "completed"), run


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
                               "roleplay", CAMEL_USER_SETTINGS=json.dumps(
                                   settings(url(sidecar, "camel-budget-lead"), lead)))
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


SUMMARISER = "You are a helpful assistant that summarizes conversations"  # CAMEL's
SUMMARY = "Summary:\n1. **Primary Request and Intent**:\n- Find the file; searched twice."


def summarizing(index: int, body: dict[str, Any]) -> fakellm.Step:
    if not fakellm.offers_tools(body):
        return fakellm.answer(SUMMARY)
    return searching(index, body)


def staffed(index: int, body: dict[str, Any]) -> fakellm.Step:
    """A model a ``Workforce`` talks to, as a real one answers each of its prompts: the task
    agent's decomposition (one subtask, in its ``<tasks>`` format), the coordinator's
    assignment (the JSON it asks for, the worker's id read from the prompt), its quality check
    (a score of 95), and the worker's (its tools offered: the model searches on; withdrawn: its
    result, the report, in the JSON it asks for)."""
    text = str([message for message in body["messages"] if message["role"] == "user"][-1][
        "content"])
    if "decompose a complex task" in text:
        return fakellm.answer("<tasks>\n<task>Search the files for it.</task>\n</tasks>")
    if "assign multiple tasks to worker nodes" in text:
        worker = re.findall(r"<([0-9a-f-]{36})>:", text)[0]
        return fakellm.answer(json.dumps({"assignments": [
            {"task_id": task, "assignee_id": worker, "dependencies": []}
            for task in re.findall(r"Task ID: (\S+)", text)]}))
    if "evaluate its quality" in text:
        return fakellm.answer(json.dumps({"reasoning": "Done.", "recovery_strategy": None,
                                          "quality_score": 95, "issues": []}))
    if fakellm.offers_tools(body):
        return searching(index, body)
    return fakellm.answer(json.dumps({"content": REPORT, "failed": False}))


def test_a_workforce_each_agents_conversation_is_a_run_its_worker_on_the_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A ``Workforce`` on one model (one agent name): its task agent decomposes the task, its
    coordinator assigns the subtask, the worker runs it with its tools, the task agent checks
    the result. Each is a conversation of its own, so a run of its own: the worker's is the
    one with tools, counted down (3, 2, 1 left), its last request without them, its report
    the subtask's result; the others offer no tools, a call each, ``completed``."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-budget-team", staffed, "workforce")
    assert said == {"ran": ["term 2", "term 3", "term 4"],
                    "output": f"--- Subtask 0.1 Result ---\n{REPORT}"}, said
    assert [fakellm.offers_tools(body) for body in requests] == [False] * 2 + [True] * 3 + [
        False] * 2
    assert [LEFT.findall(instructions(body)) for body in requests] == [[]] * 2 + [
        [("3", "3")], [("2", "3")], [("1", "3")], [], []]
    assert "Tools are withdrawn" in instructions(requests[5])
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 4 and all(
        run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"])
                  for run in runs) == [(1, 0, "completed")] * 3 + [
        (4, 3, "tool_limit_reached")], runs


def compacting(sidecar: RunningServer, llm: FakeLLM,
               done: Callable[[list[dict[str, Any]]], bool], **extra: str
               ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A step whose context CAMEL summarises (``token_limit`` 300: over half of it, it asks a
    summariser agent of its own for a summary, a conversation of its own with the history
    written out in one user message and no tools, then goes on from ``[system, assistant:
    "[CONTEXT_SUMMARY] ..." quoting it, user: "Based on the previous CONTEXT_SUMMARY, continue
    with my current message: <task>"]``), under a budget of 5; the model searches on. What the
    driver printed, the upstream's requests and the runs, once ``done`` holds for them."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-compact", summarizing,
                               CAMEL_TOKEN_LIMIT="300", **extra)
    return said, requests, new_runs(sidecar, before, done)


def asides(requests: list[dict[str, Any]]) -> list[int]:
    return [index for index, body in enumerate(requests)
            if body["messages"][0]["content"].startswith(SUMMARISER)]


def test_its_context_summary_with_the_run_named_goes_on_in_the_run_on_its_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The run named by ``x-watchdog-run`` in its client's ``default_headers``: the summary
    request is a request aside of the run (no tools: no countdown) and the compacted
    conversation goes on in it, counted down against what is left: 5 tool calls in all, then
    the final request, one run ``tool_limit_reached``."""
    said, requests, runs = compacting(
        sidecar, llm, lambda runs: all(run["state"] == "ended" for run in runs),
        CAMEL_RUN="camel-compact-1")
    assert said["ran"] == ["term 0", "term 1", "term 2", "term 4", "term 5"], said
    assert asides(requests) == [3, 6]
    assert requests[4]["messages"][1]["content"].startswith("[CONTEXT_SUMMARY]")
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [], [], [("3", "5")], [], [("2", "5")], [("1", "5")], []]
    assert "Tools are withdrawn" in instructions(requests[-1])
    assert said["output"] == SUMMARY  # the final request's answer: the run's report
    [run] = runs
    assert (run["state"], run["tool_calls"], run["terminal_state"]) == (
        "ended", 5, "tool_limit_reached"), run


def test_its_context_summary_unnamed_goes_on_in_the_run_on_its_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Unnamed, as a user sets it up: each summary request, a conversation of its own quoting
    the run's task and latest result under the summariser's instructions, is a request aside
    of the run (its model call the run's, no countdown, no answer of the run: the one after
    the budget is spent too), and each compacted conversation, which opens with the summary
    wrapped in CAMEL's words (the second with both summaries, its first user message the
    first's), goes on in it, counted down against what is left: 5 tool calls in all, then
    the final request, in the conversation compacted twice; one run ``tool_limit_reached``."""
    said, requests, runs = compacting(
        sidecar, llm, lambda runs: bool(runs) and all(run["state"] == "ended" for run in runs))
    assert said["ran"] == ["term 0", "term 1", "term 2", "term 4", "term 5"], said
    assert asides(requests) == [3, 6]
    assert [body["messages"][1]["content"].startswith("[CONTEXT_SUMMARY]")
            for body in requests] == [False] * 4 + [True] * 2 + [False, True]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [], [], [("3", "5")], [], [("2", "5")], [("1", "5")], [], []]
    assert "Tools are withdrawn" in instructions(requests[-1])
    assert said["output"] == SUMMARY  # (the model's answer to the final request, as scripted)
    [run] = runs
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        8, 5, "tool_limit_reached"), run


def test_its_own_iteration_limit_declared_with_a_context_summary_ends_sooner(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``max_iteration`` 6 and the pack's ``max_iterations`` 6, its context summarised: the
    summary request is a model call of the run, not of CAMEL's count, so the run's final
    request (told 2 calls before it) comes at CAMEL's 5th call, before its own limit, its
    answer the step's output; one run ``tool_limit_reached``."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-limit-compact", summarizing,
                               CAMEL_MAX_ITERATION="6", CAMEL_TOKEN_LIMIT="300")
    assert said == {"ran": ["term 0", "term 1", "term 2", "term 4"], "output": SUMMARY,
                    "error": ""}, said
    assert asides(requests) == [3]
    check_last_model_call_final(requests, 6, answered=False)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["has_final_answer"], run["final_output"]) == (
        6, 4, "tool_limit_reached", True, SUMMARY), run


def summarizing_each(index: int, body: dict[str, Any]) -> fakellm.Step:
    """:func:`summarizing`, each summary in words of its own task (its case), as a model
    summarises two histories: the summary of case 3 is not the summary of case 4."""
    if not fakellm.offers_tools(body):
        case = re.findall(r"\(case \d+\)", str(body["messages"][-1]["content"]))
        return fakellm.answer(f"{SUMMARY} {case[0] if case else ''}")
    return searching(index, body)


def test_two_tasks_at_once_each_summarised_stay_two_runs_each_on_its_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Two tasks of one agent at once (two processes, one agent name, their tasks and
    summaries their own, their results alike), each compacting its context: each summary is
    an aside of its own task's run, each compacted conversation goes on in its own run. Two
    runs, each 5 tool calls on its budget of 5, ``tool_limit_reached``; never one run of
    both."""
    before = run_ids(sidecar)
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda server: run_camel(
            sidecar, llm, "camel-compact-twins", summarizing_each, server=server,
            CAMEL_TOKEN_LIMIT="300"), range(2)))
    for said, requests in outcomes:
        assert said["ran"] == ["term 0", "term 1", "term 2", "term 4", "term 5"], said
        assert asides(requests) == [3, 6] and "Tools are withdrawn" in instructions(
            requests[-1])
        assert [LEFT.findall(instructions(body)) for body in requests] == [
            [], [], [("3", "5")], [], [("2", "5")], [("1", "5")], [], []]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 and all(
        run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (8, 5, "tool_limit_reached")] * 2, runs


# -- traced by the OpenAI client's instrumentation ---------------------------------------------
# CAMEL emits no OpenTelemetry of its own; a user traces its model calls by instrumenting the
# openai client beneath it (opentelemetry-instrumentation-openai-v2): a ``chat <model>`` span
# per model call, each a trace of its own, no agent or tool span (the service names the agent).


def test_traced_alone_its_calls_are_one_run_of_loose_calls(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-watched", counting, traced="watched",
                               direct=True)
    assert said == {"ran": ["alpha", "beta"], "output": ANSWER, "error": ""}
    assert len(requests) == 3
    watched_alone(sidecar, before)


def test_traced_alone_from_its_recording(tmp_path: Path) -> None:
    recording = RECORDINGS / "endpoint_camel" / "watched.jsonl"
    spans = recorded_spans(recording)
    assert {span["name"] for span in spans} == {f"chat {span_model(spans)}"}, spans
    with running_server(sidecar_config(tmp_path / "state", eval_interval=0.2)) as sidecar:
        replay(sidecar, recording)
        watched_alone(sidecar, set())


def test_traced_and_steered_at_once_its_calls_are_counted_once(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Steered through the endpoint and traced at once: its requests carry no
    ``traceparent``, but each ``chat`` span names the response the endpoint relayed
    (``gen_ai.response.id``): one run, each model call counted once."""
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-traced", counting, traced="steered")
    assert said == {"ran": ["alpha", "beta"], "output": ANSWER, "error": ""}
    assert len(requests) == 3 and not any("traceparent" in headers
                                          for headers in llm.request_headers(
                                              requests[0]["model"]))
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == ("camel-traced", 3, 2, "completed", ANSWER), run


def counting(index: int, body: dict[str, Any]) -> fakellm.Step:
    return fakellm.tools_then_answer("search", [{"q": "alpha"}, {"q": "beta"}], ANSWER)(
        index, body)


def span_model(spans: list[dict[str, Any]]) -> str:
    return str(spans[0]["name"]).removeprefix("chat ")


def watched_alone(sidecar: RunningServer, before: set[str]) -> None:
    """What the instrumentation's spans alone tell: its 3 model calls, each a trace of its own
    with no parent, the first two asking for a tool: one run of loose calls, ended by the
    answer, no tool call counted (none traced)."""
    def done(runs: list[dict[str, Any]]) -> bool:
        return len(ours := [run for run in runs if run["agent"] == "camel-watched"]) == 1 \
            and ours[0]["state"] == "ended"

    [run] = [run for run in new_runs(sidecar, before, done) if run["agent"] == "camel-watched"]
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (3, 0, "completed", ANSWER), run
