"""Qwen Code — a TypeScript coding agent, a fork of Gemini CLI, bundled on npm — steered
through the sidecar's model endpoint with no code in it (DESIGN §12), on both relays.

``make test`` installs it with ``npm ci`` from ``qwen_code/package-lock.json``
(``@qwen-code/qwen-code`` 0.24.4, its optional native packages omitted). Each test runs
``qwen -p`` once in a temp dir of its own (its ``HOME`` there, with a ``settings.json`` that
picks the OpenAI auth type, turns usage statistics and update checks off; ``--yolo``: its tools
run unasked), pointed at a real sidecar by ``OPENAI_BASE_URL`` alone, its API key and model
from ``OPENAI_API_KEY`` and ``OPENAI_MODEL``. Nothing reaches the network: no login, no update
check, no usage statistics.

Qwen Code speaks Chat Completions, streamed, and sends the whole conversation on every
request: its system prompt, a user message of reminders (its skills) and the task, and each
tool call with its result. It offers 14 tools; its shell tool is ``run_shell_command`` (really
run in the temp dir: each appends its term to ``ran.txt``); ``qwen -p`` prints the run's last
answer on stdout. Behind the sidecar is the scripted upstream (:mod:`tests.frameworks.fakellm`),
whose recorded request bodies are what the model read.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, RECORDINGS, clean_environ
from tests.frameworks.steering import CYCLE_LOOP
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    AGENT,
    ANSWER,
    BUDGET,
    GRACE_LEFT,
    KEY,
    LEFT,
    REPORT,
    budgeted,
    check_no_control_text_in_user_messages,
    instructions,
    plain,
    run_ids,
    the_new_run,
)
from tests.frameworks.test_model_endpoint_stop import NOTE, stopping  # noqa: F401
from tests.harness import RunningServer, http_request, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

QWEN_DIR = Path(__file__).resolve().parent / "qwen_code"
QWEN = QWEN_DIR / "node_modules" / ".bin" / "qwen"
TOOL = "run_shell_command"  # Qwen Code's shell tool: {"command": "..."}
# offline and quiet: the OpenAI auth type (its key from the environment), no usage statistics,
# no update check
SETTINGS = {"security": {"auth": {"selectedType": "openai"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


def qwen() -> Path:
    assert QWEN.exists(), (f"{QWEN} is missing: run `make tests/frameworks/qwen_code/"
                           f"node_modules/.installed` (part of `make test`)")
    return QWEN


def telemetry(url: str) -> dict[str, Any]:
    """Its own OpenTelemetry on, exported to ``url`` (OTLP/HTTP: traces, logs and metrics, as
    OTLP/JSON in chunked requests), prompts logged."""
    return {"telemetry": {"enabled": True, "target": "local", "otlpEndpoint": url,
                          "otlpProtocol": "http", "logPrompts": True}}


def chunked_body(handler: BaseHTTPRequestHandler) -> bytes:
    """A request's body, whether sized or chunked (Qwen Code's OTLP exporters chunk theirs)."""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    body = bytearray()
    while size := int(handler.rfile.readline().split(b";")[0], 16):
        body += handler.rfile.read(size)
        handler.rfile.readline()
    handler.rfile.readline()
    return bytes(body)


@contextlib.contextmanager
def recording(sidecar: RunningServer, scenario: str) -> Iterator[str]:
    """Where Qwen Code exports its OpenTelemetry: the sidecar's OTLP/HTTP receiver; with
    ``RECORD_SPANS`` set, a relay in front of it that writes each export request, OTLP/JSON as
    Qwen Code sent it, to ``recordings/qwen_code/SCENARIO.jsonl`` (its traces; its log events,
    which are no GenAI events, to ``SCENARIO.logs.ndjson``; its metrics are passed on only)."""
    if not os.environ.get("RECORD_SPANS"):
        yield sidecar.otlp_http
        return
    target = RECORDINGS / "qwen_code"
    target.mkdir(parents=True, exist_ok=True)
    files = {"/v1/traces": target / f"{scenario}.jsonl",
             "/v1/logs": target / f"{scenario}.logs.ndjson"}
    for path in files.values():
        path.unlink(missing_ok=True)
    lock = threading.Lock()

    class Relay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = chunked_body(self)
            if self.path in files:
                with lock, files[self.path].open("a", encoding="utf-8") as out:
                    out.write(json.dumps(json.loads(body), separators=(",", ":")) + "\n")
            status, answer = http_request("POST", sidecar.otlp_http + self.path, body,
                                          {"Content-Type": "application/json"})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    relay = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{relay.server_address[1]}"
    finally:
        relay.shutdown()
        relay.server_close()


def run_qwen(base_url: str, model: str, tmp: Path, settings: dict[str, Any] | None = None
             ) -> tuple[list[str], str]:
    """``qwen -p`` once in ``tmp`` against the OpenAI-compatible ``base_url``: the terms its
    shell commands appended to ``ran.txt``, and the answer it printed. ``settings``: more of
    its ``settings.json`` (its telemetry)."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({**SETTINGS, **(settings or {})}))
    env = {**clean_environ("QWEN_", "GEMINI_"), "HOME": str(home),
           "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
           "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
    command = [str(qwen()), "-p", "Find the file.", "--yolo", "--max-session-turns", "20"]
    result = subprocess.run(command, env=env, capture_output=True, text=True,
                            timeout=DRIVER_TIMEOUT, cwd=work, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"qwen -p exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    ran = work / "ran.txt"
    terms = ran.read_text().splitlines() if ran.exists() else []
    return terms, result.stdout.strip()


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its answer
    requests: list[dict[str, Any]]  # what the upstream read
    run: dict[str, Any]  # the sidecar's one run of it, ended
    after: int  # the requests the upstream had got once the run had ended


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           base_url: str | None = None, otel: str | None = None) -> Invocation:
    """``qwen -p`` once through ``sidecar``'s model endpoint (or ``base_url``), its model
    ``script``; ``otel``: its own OpenTelemetry exported there (:func:`telemetry`)."""
    model = llm.script(f"qwen-{tmp.name}", script)
    before = run_ids(sidecar)
    ran, printed = run_qwen(base_url or sidecar.url("model") + "/v1", model, tmp,
                            None if otel is None else telemetry(otel))
    requests = llm.requests(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"command": f"echo '{term}' >> ran.txt"}


def searching() -> fakellm.Script:
    return fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT)


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file-writing tool, with the same arguments round and round (a
    tool cycle; the report when no tools are offered). Not one call again and again: Qwen Code
    halts a run itself at the fifth identical call in a row (an always-on guard of its own,
    exit 1, no answer), before a wind-down's grace would end, and, at the eighth call of one
    tool in a row, at its "action stagnation"."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call(TOOL, **shell("the file"))
        return fakellm.call("write_file", file_path=str(work / "notes.txt"), content="searched")
    return pick


def test_qwen_code_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    # what Qwen Code sends: the whole conversation, streamed, each call with its result
    assert all(body.get("stream") is True for body in requests)
    assert [len(body["messages"]) for body in requests] == [2, 4, 6, 8]
    # the true number left, in the instructions of every request that offers tools
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what qwen -p prints
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 1, BUDGET, "tool_limit_reached", True)
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def test_a_looping_qwen_code_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what ``qwen -p`` prints."""
    it = invoke(plain, llm, cycling(tmp_path / "work"), tmp_path)
    requests = it.requests
    assert len(requests) == 11
    assert [CYCLE_LOOP in instructions(body) for body in requests] == [False] * 8 + [True] * 3
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [[]] * 8 + [
        ["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 10 + [False]
    assert "Tools are withdrawn" in instructions(requests[-1])
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    assert (tmp_path / "work" / "notes.txt").read_text() == "searched"
    check_no_control_text_in_user_messages(it.requests)
    assert it.printed == REPORT
    assert (it.run["tool_calls"], it.run["terminal_state"], it.run["has_final_answer"]) == (
        10, "loop_detected", True), it.run
    assert it.after == 11  # the upstream got nothing after the final request


def test_a_stopped_qwen_code_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers Qwen Code's next request itself,
    a well-formed streamed answer carrying the stop note, which ``qwen -p`` prints; the
    upstream got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


def counting() -> fakellm.Script:
    return fakellm.steps(fakellm.call(TOOL, **shell("alpha")), fakellm.call(TOOL, **shell("beta")),
                         fakellm.answer(ANSWER))


def test_qwen_code_traced_by_its_own_opentelemetry_is_one_run_with_its_tools(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Qwen Code's own telemetry to the sidecar, its model the scripted upstream itself: its
    trace (``qwen-code.interaction``, an ``invoke_agent`` span; a ``qwen-code.llm_request``
    per model call, with its model and tokens, the HTTP client's span under it; a
    ``qwen-code.tool`` per tool, its execution and hook spans under it) is one run of its model
    calls and tools, read unchanged: named after the agent it names, its session the
    conversation id; its hooks' spans (status error when no hook is configured) no errors.
    A named gap: no span carries the answer's text (its ``qwen-code.api_response`` log event
    does, which is no GenAI event), nor any message."""
    with recording(plain, "two_tools") as otel:
        it = invoke(plain, llm, counting(), tmp_path, base_url=llm.base_url, otel=otel)
    assert (it.ran, it.printed) == (["alpha", "beta"], ANSWER)
    run = it.run
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        "qwen-code", 3, 2, 0), run
    assert run["signals"]["tools"] == {TOOL: 2}, run["signals"]
    assert run["session"] and run["total_tokens"] > 0 and run["unpriced_calls"] == 3, run
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run
    assert (run["final_output"], run["signals"]["messages"]) == (None, 0), run  # the gap


def test_qwen_code_traced_and_steered_is_two_runs_each_true(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Qwen Code traced by its own OpenTelemetry and steered through the endpoint at once: it
    is steered as before, and each run is true, but they are two: its HTTP client's spans send
    no ``traceparent`` with its requests (nor anything else that names its trace), so the
    endpoint's run (``model:``) and its trace's run (``trace:``) are never one. A named gap
    (docs/frameworks.md): each counts the same 4 model calls and 3 tools."""
    model = llm.script(f"qwen-{tmp_path.name}", searching())
    before = run_ids(budgeted)
    ran, printed = run_qwen(budgeted.url("model") + "/v1", model, tmp_path,
                            telemetry(budgeted.otlp_http))
    requests = llm.requests(model)
    assert (ran, printed) == (["term 0", "term 1", "term 2"], REPORT)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert not any("traceparent" in headers for headers in llm.request_headers(model))
    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what="its two runs to end")
    assert sorted((run["id"].split(":")[0], run["agent"], run["iterations"], run["tool_calls"],
                   run["terminal_state"], run["has_final_answer"]) for run in runs) == [
        ("model", AGENT, BUDGET + 1, BUDGET, "tool_limit_reached", True),
        ("trace", "qwen-code", BUDGET + 1, BUDGET, "tool_limit_reached", True)], runs
