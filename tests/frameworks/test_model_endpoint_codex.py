"""The OpenAI Codex CLI — an agent written in Rust, shipped on npm with its platform binary —
steered through the sidecar's model endpoint with no code in it (DESIGN §12), on both relays.

``make test`` installs it with ``npm ci`` from ``codex/package-lock.json`` (``@openai/codex``
0.171.0: npm picks the linux binary, an optional dependency; nothing is downloaded at its first
run). Each test runs ``codex exec`` once in a temp dir of its own (its ``CODEX_HOME`` there,
sessions not persisted, the sandbox off: it does not work in a container, and the test dir is
the sandbox), pointed at a real sidecar by a custom model provider alone (``base_url``, the
API key from ``OPENAI_API_KEY`` by ``env_key``; the Responses API, streamed, as Codex speaks
it). Nothing reaches the network: no login, no update check, no plugin marketplace sync
(``--disable plugins``: else it runs ``git ls-remote`` on GitHub), no analytics.

Codex sends the whole conversation on every request (``store: false``, no
``previous_response_id``): its own instructions as developer messages, ``reasoning`` with
``include: ["reasoning.encrypted_content"]``, and the model's reasoning items handed back in
the next request's input. Its tool is ``exec_command`` (a shell command, really run in the temp
dir: each appends its term to ``ran.txt``); ``codex exec`` prints the last message of the run on
stdout (and writes it to ``--output-last-message``). Behind the sidecar is the scripted upstream
(:mod:`tests.frameworks.fakellm`), whose recorded request bodies are what the model read.

Steered: a budget counts down and ends in the report; a loop is wound down, then its final
request; a rule's abort is answered by the endpoint; Codex's own context compaction (a request
aside for a summary, then its history replaced by it) stays one run, counted down. Watched: its
own ``[otel]`` traces and log events exported to the sidecar (recorded under
``recordings/codex/`` with ``RECORD_SPANS``), alone and while steered.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    check_runs,
    clean_environ,
    installed_bin,
    otlp_recorder,
    replay_with_logs,
    run_coding_agent,
)
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    AGENT,
    ANSWER,
    BUDGET,
    GRACE_LEFT,
    KEY,
    LEFT,
    LOOP_NOTE,
    REPORT,
    budgeted,
    check_no_control_text_in_user_messages,
    instructions,
    plain,
    run_ids,
    the_new_run,
)
from tests.frameworks.test_model_endpoint_stop import NOTE, stopping  # noqa: F401
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

CODEX_DIR = Path(__file__).resolve().parent / "codex"
CODEX = CODEX_DIR / "node_modules" / ".bin" / "codex"
TOOL = "exec_command"  # Codex's shell tool: {"cmd": "..."}
THOUGHT = "The file may be under /srv; search on."


def codex() -> Path:
    return installed_bin(CODEX)


@contextlib.contextmanager
def recording(sidecar: RunningServer, scenario: str) -> Iterator[tuple[str, str]]:
    """Where Codex exports its OpenTelemetry, and in which protocol: the sidecar's OTLP/HTTP
    receiver, protobuf; with ``RECORD_SPANS`` set, a relay in front of it that writes each
    export request, OTLP/JSON as Codex sent it, to ``recordings/codex/SCENARIO.jsonl`` (its
    traces; its log events, which are no GenAI events, to ``SCENARIO.logs.ndjson``)."""
    if not os.environ.get("RECORD_SPANS"):
        yield sidecar.otlp_http, "binary"
        return
    target = RECORDINGS / "codex"
    with otlp_recorder(sidecar, {"/v1/traces": target / f"{scenario}.jsonl",
                                 "/v1/logs": target / f"{scenario}.logs.ndjson"}) as url:
        yield url, "json"


def run_codex(sidecar: RunningServer, model: str, tmp: Path, base_url: str | None = None,
              otel: tuple[str, str] | None = None, **settings: str) -> tuple[list[str], str]:
    """``codex exec`` once in ``tmp`` against ``sidecar``'s model endpoint (or ``base_url``):
    the terms its shell commands appended to ``ran.txt``, and the last message it printed.
    ``otel``: its own OpenTelemetry on, its logs and traces exported (OTLP/HTTP) to that base
    URL, in that protocol (:func:`recording`)."""
    work, home = tmp / "work", tmp / "codex-home"
    work.mkdir()
    home.mkdir()
    last = tmp / "last-message.txt"
    env = {**clean_environ("CODEX_"), "HOME": str(tmp), "CODEX_HOME": str(home),
           "OPENAI_API_KEY": KEY, "OTEL_SDK_DISABLED": "true"}
    config = {"model_provider": '"watchdog"',
              "model_providers.watchdog.name": '"watchdog"',
              "model_providers.watchdog.base_url": f'"{base_url or sidecar.url("model") + "/v1"}"',
              "model_providers.watchdog.env_key": '"OPENAI_API_KEY"',
              "model_providers.watchdog.wire_api": '"responses"',
              "check_for_update_on_startup": "false",
              "analytics.enabled": "false", **settings}
    if otel is not None:
        url, protocol = otel
        config.update({"otel.environment": '"test"', "otel.log_user_prompt": "true",
                       "otel.exporter": f'{{otlp-http={{endpoint="{url}/v1/logs",'
                                        f'protocol="{protocol}"}}}}',
                       "otel.trace_exporter": f'{{otlp-http={{endpoint="{url}/v1/traces",'
                                              f'protocol="{protocol}"}}}}'})
    command = [str(codex()), "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
               "--dangerously-bypass-approvals-and-sandbox",
               "--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps",
               "-C", str(work), "-o", str(last), "-m", model,
               *(part for key, value in config.items() for part in ("-c", f"{key}={value}")),
               "Find the file."]
    terms, printed = run_coding_agent(command, env, work)
    assert last.read_text().strip() == printed, (last.read_text(), printed)
    return terms, printed


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its last message
    requests: list[dict[str, Any]]  # what the upstream read
    headers: list[dict[str, str]]  # ... with these headers
    run: dict[str, Any]  # the sidecar's one run of it, ended
    after: int  # the requests the upstream had got once the run had ended


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           **options: Any) -> Invocation:
    """``codex exec`` once (:func:`run_codex`, ``options`` its), its model ``script``."""
    model = llm.script(f"codex-{tmp.name}", script)
    before = run_ids(sidecar)
    ran, printed = run_codex(sidecar, model, tmp, **options)
    requests, headers = llm.requests(model), llm.request_headers(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, headers, run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"cmd": f"echo '{term}' >> ran.txt"}


def thinking(script: fakellm.Script) -> fakellm.Script:
    """Each step with the model's reasoning before it (a reasoning item Codex hands back)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        step = script(index, body)
        return fakellm.Step(step.text, step.tool_calls, step.finish_reason, reasoning=THOUGHT)

    return pick


def searching() -> fakellm.Script:
    return thinking(fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT))


def repeating() -> fakellm.Script:
    return thinking(fakellm.looping(TOOL, lambda i: shell("the file"), REPORT))


def reasoning_items(body: dict[str, Any]) -> int:
    return sum(1 for item in body["input"] if item.get("type") == "reasoning")


def test_codex_budget_counts_down_then_the_report_is_its_last_message(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    # what Codex sends: the whole conversation, kept by no server, its reasoning handed back
    assert all(body.get("store") is False and not body.get("previous_response_id")
               and body.get("stream") is True for body in requests)
    assert [reasoning_items(body) for body in requests] == [0, 1, 2, 3]
    # the true number left, in the instructions of every request that offers tools
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what codex exec prints
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 1, BUDGET, "tool_limit_reached", True)
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def test_a_looping_codex_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(plain, llm, repeating(), tmp_path)
    requests = it.requests
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and notes[:6] == [False] * 4 + [True] * 2, notes
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [
        [], [], [], [], ["2"], ["1"], []]
    assert it.ran == ["the file"] * 6
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT
    assert (it.run["tool_calls"], it.run["terminal_state"], it.run["has_final_answer"]) == (
        6, "loop_detected", True), it.run
    assert it.after == 7  # the upstream got nothing after the final request


SUMMARY = "Searched for term 0 and term 1 with the shell; no file found yet."
FULL = 200_000  # the tokens of an answer whose context Codex compacts (above its limit, below
COMPACT_AT = 100_000  # the context window it knows for a model it has no metadata of)


def compacting() -> fakellm.Script:
    """New terms as ``searching``; the second call's answer reports a context near full, so
    Codex compacts it before its next request: a request of its own (the history and its
    compaction prompt, no tools), whose answer, the summary, is all the history its next
    requests carry."""
    calls: list[int] = []

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not body.get("tools"):  # Codex's compaction request (tools: [])
            return fakellm.answer(SUMMARY)
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        calls.append(index)
        return fakellm.Step(tool_calls=(fakellm.ToolCall(TOOL, shell(f"term {len(calls) - 1}")),),
                            reasoning=THOUGHT, tokens=FULL if len(calls) == 2 else 1_000)

    return pick


def test_codex_compacting_its_context_stays_one_run_counted_down(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, compacting(), tmp_path,
                model_auto_compact_token_limit=str(COMPACT_AT))
    requests = it.requests
    assert [bool(body.get("tools")) for body in requests] == [True, True, False, True, True]
    assert it.ran == ["term 0", "term 1", "term 2"]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [], [("1", "3")], []]
    assert "[budget" not in instructions(requests[2])  # the aside: no note
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, False, True, False]
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"]) == (
        5, BUDGET, "tool_limit_reached"), it.run


def counting() -> fakellm.Script:
    return thinking(fakellm.steps(fakellm.call(TOOL, **shell("alpha")),
                                  fakellm.call(TOOL, **shell("beta")), fakellm.answer(ANSWER)))


def looping_traced() -> fakellm.Script:
    return thinking(fakellm.steps(*[fakellm.call(TOOL, **shell("the file"))] * 4,
                                  fakellm.answer(ANSWER)))


@pytest.mark.parametrize(("scenario", "script", "ran", "repeats", "state"), [
    ("two_tools", counting, ["alpha", "beta"], 1, "no_response"),
    ("loop", looping_traced, ["the file"] * 4, 4, "loop_detected")])
def test_codex_traced_by_its_own_opentelemetry_is_one_run_with_its_tools(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path, scenario: str,  # noqa: F811
        script: Any, ran: list[str], repeats: int, state: str) -> None:
    """Codex's ``[otel]`` exporters to the sidecar, its model the scripted upstream itself:
    its trace (a turn's ``run_turn``, each request's HTTP span, each tool's dispatch span) is
    one run of its model calls and tools, each tool's arguments its ``codex.tool_result`` log
    event's: a loop of one command is seen, two commands are not one repeated. Named gaps: no
    span or joinable event of it carries the answer or tokens."""
    with recording(plain, scenario) as otel:
        it = invoke(plain, llm, script(), tmp_path, base_url=llm.base_url, otel=otel)
    assert (it.ran, it.printed) == (ran, ANSWER)
    run = it.run
    tools = len(ran)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        "codex_exec", tools + 1, tools, 0), run
    assert run["signals"]["tools"] == {TOOL: tools}, run["signals"]
    assert run["signals"]["repeated_tool_call"] == repeats, run["signals"]
    # the gaps: its answer is on no span (the run ends without one), nor its tokens; its loop,
    # exported at its exit with its end, ends it as the loop rule does live
    assert (run["has_final_answer"], run["terminal_state"], run["total_tokens"],
            run["unpriced_calls"]) == (False, state, 0, tools + 1), run


@pytest.mark.parametrize("logs_first", [False, True], ids=["spans-first", "logs-first"])
@pytest.mark.parametrize(("scenario", "tools", "repeats"), [("two_tools", 2, 1), ("loop", 4, 4)])
def test_codex_recorded_reads_its_tools_arguments_from_its_log_events(
        sidecar: RunningServer, scenario: str, tools: int, repeats: int,
        logs_first: bool) -> None:
    """Its recordings (``recordings/codex/``: its spans and its log events) exported again, in
    either order, read as the runs they were live: each tool's arguments, from the
    ``codex.tool_result`` event that names the tool's child span and its call id, so the loop
    of one command is seen (without the logs, a tool call of no arguments repeats any). Its
    turn is one run until ``run_turn`` ends: with the logs first, each tool's arguments are known
    as its span comes, so the loop's ``tool-cycle`` rule fires while the run goes on and it ends
    ``loop_detected``; with its spans first they come after its end, and the rule, applied to
    the run as it was at its end, classifies it so too: both orders end alike."""
    folder = RECORDINGS / "codex"
    replay_with_logs(sidecar, folder / f"{scenario}.jsonl",
                     folder / f"{scenario}.logs.ndjson", logs_first)
    state, reason = ("loop_detected", "tool-cycle") if scenario == "loop" \
        else ("no_response", None)
    [run] = check_runs(sidecar, [Expect("codex_exec", tools + 1, tools, 0, state, False,
                                        reason)])
    assert run["signals"]["tools"] == {TOOL: tools}, run["signals"]
    assert run["signals"]["repeated_tool_call"] == repeats, run["signals"]


def test_codex_traced_and_steered_is_one_run_counted_once(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Codex traced by its own OpenTelemetry and steered through the endpoint at once: its
    model requests carry the ``traceparent`` of its turn's trace, so the endpoint's calls are
    that trace's run's — one run, each model call and tool counted once, steered as before."""
    it = invoke(budgeted, llm, searching(), tmp_path, otel=(budgeted.otlp_http, "binary"))
    assert (it.ran, it.printed) == (["term 0", "term 1", "term 2"], REPORT)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in it.requests] == [True] * BUDGET + [False]
    assert all(headers.get("traceparent") for headers in it.headers)
    run = it.run
    # (its spans name no agent, only their service: the run keeps the name the endpoint gave
    # it first, model_agent_name; traced alone, it is named after the service)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["signals"]["tools"]) == (
        AGENT, BUDGET + 1, BUDGET, {TOOL: BUDGET}), run
    # its tools' spans come after the endpoint's answer ended it: at its budget all the same
    assert (run["terminal_state"], run["has_final_answer"], run["final_output"]) == (
        "tool_limit_reached", True, REPORT), run
    assert run["total_tokens"] > 0  # the endpoint's, which no span of it carries


def test_a_stopped_codex_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers Codex's next request itself,
    a well-formed streamed answer carrying the stop note, which ``codex exec`` prints as its
    last message; the upstream got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run
