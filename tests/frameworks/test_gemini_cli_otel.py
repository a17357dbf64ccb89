"""Gemini CLI — Google's TypeScript coding agent, bundled on npm — watched through its own
OpenTelemetry, read unchanged by the sidecar. It speaks Google's Gemini API, which the model
endpoint does not serve (DESIGN §12): watched only, its model the scripted upstream itself
(:mod:`tests.frameworks.fakellm`'s ``generateContent``/``streamGenerateContent``).

``make test`` installs it with ``npm ci`` from ``gemini_cli/package-lock.json``
(``@google/gemini-cli`` 0.61.0, its optional native packages omitted). Each test runs
``gemini -p`` once in a temp dir of its own (its ``HOME`` there, with a ``settings.json`` that
picks the Gemini API key auth type and turns usage statistics and update checks off;
``--yolo`` and a trusted workspace: its tools run unasked), pointed at the scripted upstream by
``GOOGLE_GEMINI_BASE_URL``, its key from ``GEMINI_API_KEY``, its model by ``-m``. Nothing
reaches the network: no login, no update check, no usage statistics.

Its telemetry is set by its ``GEMINI_TELEMETRY_*`` variables (OTLP/HTTP, OTLP/JSON: traces,
logs and metrics), with ``GEMINI_TELEMETRY_TRACES_ENABLED`` (else its spans carry no model,
tokens, messages or tool arguments). With ``RECORD_SPANS`` set, through a relay that keeps its
traces as ``recordings/gemini_cli/<scenario>.jsonl`` and its log events as
``<scenario>.logs.jsonl``.

It exports a trace per model call (``llm_call``) and one per batch of tool calls
(``schedule_tool_calls``, a ``tool_call`` span per tool below it), no span for the invocation:
its model calls are loose calls of its agent (``gen_ai.agent.name`` ``gemini-cli``, its session
``gen_ai.conversation.id``), and its tool calls join their run by the call ids the model calls
asked for (the Gemini API's ``functionCall`` parts). Its log events (``gemini_cli.*``, GenAI's
``gen_ai.client.inference.operation.details``) add nothing its spans lack: forwarded only.
"""

from __future__ import annotations

import json
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
    recording_to,
    replay_with_logs,
    run_coding_agent,
)
from tests.frameworks.test_model_endpoint_frameworks import ANSWER, KEY, run_ids, the_new_run
from tests.harness import RunningServer

GEMINI_DIR = Path(__file__).resolve().parent / "gemini_cli"
GEMINI = GEMINI_DIR / "node_modules" / ".bin" / "gemini"
SHELL = "run_shell_command"  # its shell tool: {"command": "..."}
READ = "read_file"  # {"file_path": "..."}
# offline and quiet: the Gemini API key auth type (its key from the environment; a base URL
# alone would pick its gateway auth type), no usage statistics, no update check
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


def gemini() -> Path:
    return installed_bin(GEMINI)


def telemetry(url: str) -> dict[str, str]:
    """Its own OpenTelemetry on, exported to ``url`` (OTLP/HTTP), its spans' content and the
    prompts logged."""
    return {"GEMINI_TELEMETRY_ENABLED": "true", "GEMINI_TELEMETRY_TARGET": "local",
            "GEMINI_TELEMETRY_OTLP_ENDPOINT": url, "GEMINI_TELEMETRY_OTLP_PROTOCOL": "http",
            "GEMINI_TELEMETRY_TRACES_ENABLED": "true", "GEMINI_TELEMETRY_LOG_PROMPTS": "true"}


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its answer
    requests: list[dict[str, Any]]  # what the upstream read
    run: dict[str, Any]  # the sidecar's one run of it, ended


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           otel: str) -> Invocation:
    """``gemini -p`` once in ``tmp/work``, its model ``script``, its telemetry to ``otel``."""
    model = llm.script(f"gemini-{tmp.name}", script)
    before = run_ids(sidecar)
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    env = {**clean_environ("GEMINI_", "GOOGLE_"), "HOME": str(home), "GEMINI_API_KEY": KEY,
           "GOOGLE_GEMINI_BASE_URL": llm.base_url.removesuffix("/v1"),
           "GEMINI_CLI_TRUST_WORKSPACE": "true", **telemetry(otel)}
    ran, printed = run_coding_agent(
        [str(gemini()), "-p", "Find the file.", "--yolo", "-m", model], env, work)
    return Invocation(ran, printed, llm.requests(model), the_new_run(sidecar, before))


def shell(term: str) -> dict[str, Any]:
    return {"command": f"echo '{term}' >> ran.txt"}


def two_tools() -> fakellm.Script:
    return fakellm.steps(fakellm.call(SHELL, **shell("alpha")),
                         fakellm.call(READ, file_path="ran.txt"), fakellm.answer(ANSWER))


def looping() -> fakellm.Script:
    return fakellm.steps(*[fakellm.call(SHELL, **shell("again"))] * 4, fakellm.answer(ANSWER))


def failing() -> fakellm.Script:
    return fakellm.steps(fakellm.call(READ, file_path="missing.txt"), fakellm.answer(ANSWER))


# what it prints after its answer when its metrics are answered 404 (a sidecar with no
# forward_endpoint, as here)
METRICS_REFUSED = "Export failed with non-retryable error: OTLPExporterError: Not Found"


def printed_answer(it: Invocation) -> str:
    """Its answer, the first line it printed; any line after it says its metrics were refused."""
    first, *rest = it.printed.splitlines()
    assert all(line == METRICS_REFUSED for line in rest), it.printed
    return first


def test_gemini_cli_traced_by_its_own_opentelemetry_is_one_run_with_its_tools(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Its shell tool, then its file-reading tool, really run; then the answer. Its traces (a
    trace per model call, one per tool batch) are one run: 3 model calls with their tokens, 2
    tool calls (their arguments and results on its ``tool_call`` spans), named after the agent
    its spans name, its session theirs; answered."""
    with recording_to(sidecar, "gemini_cli", "two_tools") as otel:
        it = invoke(sidecar, llm, two_tools(), tmp_path, otel)
    assert (it.ran, printed_answer(it)) == (["alpha"], ANSWER)
    # what the model read: its tools offered, each call's result in the next request
    assert len(it.requests) == 3
    assert all(body["tools"][0]["functionDeclarations"] for body in it.requests)
    results = [[part["functionResponse"] for content in body["contents"]
                for part in content["parts"] if "functionResponse" in part]
               for body in it.requests]
    assert [[result["name"] for result in batch] for batch in results] == [
        [], [SHELL], [SHELL, READ]]
    assert "alpha" in json.dumps(results[2][1]["response"])  # (the file its shell wrote)
    run = it.run
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        "gemini-cli", 3, 2, 0), run
    assert run["signals"]["tools"] == {SHELL: 1, READ: 1}, run["signals"]
    assert run["session"] and run["total_tokens"] > 0 and run["unpriced_calls"] == 3, run
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run
    # (the scripted upstream streams it a chunk a word, which Gemini CLI records a message each)
    assert run["final_output"] == ANSWER, run
    assert run["signals"]["repeated_tool_call"] == 1, run["signals"]  # (each once)


def test_gemini_cli_repeating_one_command_is_seen_as_a_loop(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """One command four times: its ``tool_call`` spans' arguments are the same each time, a
    repeated call, not four new ones."""
    with recording_to(sidecar, "gemini_cli", "loop") as otel:
        it = invoke(sidecar, llm, looping(), tmp_path, otel)
    assert (it.ran, printed_answer(it)) == (["again"] * 4, ANSWER)
    run = it.run
    assert (run["iterations"], run["tool_calls"], run["errors"]) == (5, 4, 0), run
    assert run["signals"]["tools"] == {SHELL: 4}, run["signals"]
    assert run["signals"]["repeated_tool_call"] == 4, run["signals"]


def test_a_failed_gemini_cli_tool_is_an_error_of_its_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A file that is not there: its ``tool_call`` span ends OK, its outcome says ``error``
    and the model is told so; the run has the error, with its message, and the answer."""
    with recording_to(sidecar, "gemini_cli", "tool_error") as otel:
        it = invoke(sidecar, llm, failing(), tmp_path, otel)
    assert printed_answer(it) == ANSWER
    told = [part["functionResponse"]["response"]
            for part in it.requests[1]["contents"][-1]["parts"]]
    assert [response["error"].startswith("File not found") for response in told] == [True], told
    run = it.run
    assert (run["iterations"], run["tool_calls"], run["errors"]) == (2, 1, 1), run
    assert run["signals"]["last_error"].startswith("tool_error: File not found: "), run["signals"]
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run


@pytest.mark.parametrize("logs_first", [False, True], ids=["spans-first", "logs-first"])
@pytest.mark.parametrize(("scenario", "expected", "tools", "repeats"), [
    ("two_tools", Expect("gemini-cli", 3, 2, 0, "completed", True), {SHELL: 1, READ: 1}, 1),
    ("loop", Expect("gemini-cli", 5, 4, 0, "loop_detected", True), {SHELL: 4}, 4),
    ("tool_error", Expect("gemini-cli", 2, 1, 1, "completed", True), {READ: 1}, 1)])
def test_gemini_cli_recorded_reads_as_the_same_run(
        sidecar: RunningServer, scenario: str, expected: Expect, tools: dict[str, int],
        repeats: int, logs_first: bool) -> None:
    """Its recordings (``recordings/gemini_cli/``: its spans and its log events) exported
    again, in either order, read as the runs they were live; the loop ``tool-cycle``'s
    ``loop_detected`` (its end in the request that shows the loop: the rule read at its end,
    as a span-by-span watch ends it)."""
    folder = RECORDINGS / "gemini_cli"
    replay_with_logs(sidecar, folder / f"{scenario}.jsonl",
                     folder / f"{scenario}.logs.jsonl", logs_first)
    [run] = check_runs(sidecar, [expected])
    assert run["signals"]["tools"] == tools and run["final_output"] == ANSWER, run
    assert run["signals"]["repeated_tool_call"] == repeats, run["signals"]
