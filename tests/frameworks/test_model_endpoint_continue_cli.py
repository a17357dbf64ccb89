"""The Continue CLI (``cn``, a TypeScript coding agent bundled on npm) steered through the
sidecar's model endpoint with no code in it (DESIGN §12), on both relays.

``make test`` installs it with ``npm ci`` from ``continue_cli/package-lock.json``
(``@continuedev/cli`` 1.5.47, without its optional image packages). Each test runs ``cn -p``
(headless: it prints the run's last answer and exits) once in a temp dir of its own, its
``HOME`` there, pointed at a real sidecar by its ``config.yaml`` alone (:func:`config`, passed
with ``--config``: a model of ``provider: openai``, its ``apiBase`` the endpoint, its key a
secret it reads from the environment), every tool allowed unasked (``--auto``). No login, no
hub: a config file given by path is read as it is. One request leaves for the network all the
same, and nothing turns it off: at start it asks ``api.continue.dev/cn/info`` for its latest
version (naming the machine by a hash); offline it fails at once and the run goes on. Its
OpenTelemetry (metrics only, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_METRICS_EXPORTER`` is set, or with ``CONTINUE_METRICS_ENABLED=0``) is left off.

It speaks Chat Completions, streamed, and sends the whole conversation on every request: its
system prompt, the task, each tool call with its result; no header names its session. It offers
11 tools; its shell tool is ``Bash`` (``{"command": ...}``, really run in the temp dir: each
appends its term to ``ran.txt``), its file tool ``Read`` (``{"filepath": ...}``). ``cn -p``
asks no title for its session (in 1.5.47 its headless loop never does), and compacts its
history only near the model's context length (:func:`test_a_compacting_cn_is_one_run_and_
keeps_its_budget`). Behind the sidecar is
the scripted upstream (:mod:`tests.frameworks.fakellm`), whose recorded request bodies are what
the model read.

Steered: a budget counts down and ends in the report; a tool cycle is wound down, then its final
request; a rule's abort is answered by the endpoint; a compacted history goes on in its run.
Each invocation is one run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import clean_environ, run_coding_agent
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    BUDGET,
    KEY,
    LEFT,
    REPORT,
    budgeted,
    check_cycle_wound_down,
    check_no_control_text_in_user_messages,
    instructions,
    plain,
    run_ids,
    the_new_run,
)
from tests.frameworks.test_model_endpoint_stop import NOTE, stopping  # noqa: F401
from tests.harness import RunningServer, http_served
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

CONTINUE_DIR = Path(__file__).resolve().parent / "continue_cli"
CN = CONTINUE_DIR / "node_modules" / ".bin" / "cn"
TOOL = "Bash"  # its shell tool: {"command": "..."}
TASK = "Find the file."


def cn() -> Path:
    target = CONTINUE_DIR.relative_to(CONTINUE_DIR.parents[2]) / "node_modules/.installed"
    assert CN.exists(), f"{CN} is missing: `make {target}` installs it (make test does)"
    return CN


def config(base_url: str, model: str) -> str:
    """Its ``config.yaml``: one model, ``provider: openai`` at ``base_url`` (the endpoint, with
    its ``/v1``), its key the secret ``OPENAI_API_KEY``, which it reads from the environment;
    the model's role ``chat``, the one ``cn`` runs its agent on."""
    return (f"name: watchdog\nversion: 0.0.1\nschema: v1\nmodels:\n"
            f"  - name: watchdog\n    provider: openai\n    model: {model}\n"
            f"    apiBase: {base_url}\n"
            "    apiKey: ${{ secrets.OPENAI_API_KEY }}\n    roles:\n      - chat\n")


def telemetry(endpoint: str) -> dict[str, str]:
    """Its OpenTelemetry on, exported to ``endpoint`` (OTLP/JSON over HTTP): metrics alone,
    the only signal it has, sent at its exit (and every 20 s before)."""
    return {"CONTINUE_METRICS_ENABLED": "1", "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}


def run_cn(base_url: str, model: str, tmp: Path, extra: str = "", otel: str | None = None,
           task: str = TASK) -> tuple[list[str], str]:
    """``cn -p`` once in ``tmp`` against the OpenAI-compatible ``base_url``, every tool
    allowed (``--auto``): the terms its shell commands appended to ``ran.txt``, and the answer
    it printed. ``extra``: more of its model's entry in ``config.yaml``; ``otel``: its own
    OpenTelemetry on (:func:`telemetry`), exported there."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir(exist_ok=True)
    home.mkdir()
    (tmp / "config.yaml").write_text(config(base_url, model) + extra)
    env = {**clean_environ("CONTINUE_", "OTEL_"), "HOME": str(home), "OPENAI_API_KEY": KEY,
           **(telemetry(otel) if otel is not None else {"CONTINUE_METRICS_ENABLED": "0"})}
    return run_coding_agent([str(cn()), "-p", "--auto", "--config", str(tmp / "config.yaml"),
                             task], env, work)


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its answer
    requests: list[dict[str, Any]]  # what the upstream read
    run: dict[str, Any]  # the sidecar's one run of it, ended
    after: int  # the requests the upstream had got once the run had ended


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           extra: str = "", otel: str | None = None, task: str = TASK) -> Invocation:
    """``cn -p`` once through ``sidecar``'s model endpoint, its model ``script``."""
    model = llm.script(f"cn-{tmp.name}", script)
    before = run_ids(sidecar)
    ran, printed = run_cn(sidecar.url("model") + "/v1", model, tmp, extra, otel, task)
    requests = llm.requests(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"command": f"echo '{term}' >> ran.txt"}


def searching() -> fakellm.Script:
    return fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT)


def check_its_requests(requests: list[dict[str, Any]]) -> None:
    """As ``cn`` sends each: streamed, its system prompt and the task first, the whole
    conversation so far after them (a call and its result per step)."""
    assert all(body.get("stream") is True for body in requests)
    assert all(body["messages"][0]["role"] == "system"
               and body["messages"][1] == {"role": "user", "content": TASK} for body in requests)
    assert [len(body["messages"]) for body in requests] == [
        2 + 2 * step for step in range(len(requests))]


def test_cn_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    check_its_requests(requests)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what cn -p prints
    # one run: its 4 requests, 3 tool calls
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 1, BUDGET, "tool_limit_reached", True)
    assert it.run["final_output"] == REPORT, it.run
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file tool, with the same arguments round and round (a tool
    cycle; the report when no tools are offered)."""
    (work / "notes.txt").write_text("searched\n")

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call(TOOL, **shell("the file"))
        return fakellm.call("Read", filepath=str(work / "notes.txt"))
    return pick


def test_a_looping_cn_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what ``cn -p`` prints; the
    upstream gets nothing after it."""
    (tmp_path / "work").mkdir()
    it = invoke(plain, llm, cycling(tmp_path / "work"), tmp_path)
    requests = it.requests
    check_cycle_wound_down(requests)
    check_its_requests(requests)
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    # the file tool's half, really run: each result the file's line
    reads = [message["content"] for message in requests[-1]["messages"]
             if message["role"] == "tool" and "searched" in str(message["content"])]
    assert len(reads) == 5, requests[-1]["messages"]
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (11, 10, "loop_detected", True), it.run
    assert it.after == 11  # the upstream got nothing after the final request


def test_a_stopped_cn_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers cn's next request itself, a
    well-formed streamed answer carrying the stop note, which ``cn -p`` prints; the upstream
    got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


SUMMARY = "Ran seq 1 1000 in the directory; the file is not found yet."
COMPACTING = ("    defaultCompletionOptions:\n      contextLength: 4000\n      maxTokens: 500\n")


def compacting() -> fakellm.Script:
    """Its shell tool once, its output long enough to bring the conversation near the context
    length :data:`COMPACTING` gives it; asked for a summary, :data:`SUMMARY`; then, on the
    summary alone, the report."""
    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        messages = body["messages"]
        if "concise summary" in str(messages[-1].get("content")):
            return fakellm.answer(SUMMARY)
        if any(message.get("content") == SUMMARY for message in messages):
            return fakellm.answer(REPORT)
        return fakellm.call(TOOL, command="seq 1 1000")
    return pick


def test_a_compacting_cn_is_one_run_and_keeps_its_budget(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Near its model's context length (:data:`COMPACTING`) ``cn`` compacts its history before
    its next request: it asks for a summary (its history and a user message asking for one,
    its tools offered), then goes on from that summary alone, sent as the model's own message
    (no user message before it), and, once that answer came, from a user message of its own,
    ``continue``. Each conversation opens with the answer the run gave, so each is that run's:
    one run, its budget counted down across the compaction (2 left after its one call). A
    gap, named (docs/agents.md): the summary request, which offers tools and reads as the
    run's next turn, is counted as a model call of the run and carries its note."""
    it = invoke(budgeted, llm, compacting(), tmp_path, COMPACTING)
    requests = it.requests
    assert len(requests) == 4
    asked = requests[1]["messages"][-1]
    assert asked["role"] == "user" and "concise summary" in asked["content"]
    assert requests[2]["messages"][1:] == [{"role": "assistant", "content": SUMMARY}]
    assert requests[3]["messages"][1:] == [{"role": "assistant", "content": SUMMARY},
                                           {"role": "assistant", "content": REPORT},
                                           {"role": "user", "content": "continue"}]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 4
    # the true countdown throughout (the summary request's note: the gap)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("2", "3")], [("2", "3")]]
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"], it.run["final_output"]) == (
        4, 1, "completed", True, REPORT), it.run
    assert it.run["budget"] == {"max_tool_calls": 3, "remaining_tool_calls": 2}, it.run


RECORDINGS = Path(__file__).resolve().parent / "recordings" / "continue_cli"


class Exports:
    """An OTLP/HTTP receiver: each export it gets kept (its path, its OTLP/JSON body), each
    answered 200."""

    def __init__(self) -> None:
        self.kept: list[tuple[str, dict[str, Any]]] = []
        exports = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                exports.kept.append((self.path, json.loads(self.body())))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def body(self) -> bytes:
                """Its body, sent chunked (as its exporter sends it) or with a length."""
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)

        self.handler = Handler


def metric_names(export: dict[str, Any]) -> set[str]:
    return {metric["name"] for resource in export.get("resourceMetrics", [])
            for scope in resource.get("scopeMetrics", []) for metric in scope.get("metrics", [])}


def test_cn_exports_metrics_alone_so_it_is_steered_not_watched(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Its OpenTelemetry on: at its exit it exports metrics (OTLP/JSON, ``/v1/metrics``:
    sessions, tokens, cost, counters of its own), and no span or log record, so nothing of a run
    can be watched from it; steered, it is the endpoint's one run as before. With
    ``RECORD_SPANS`` set, its export is written to ``recordings/continue_cli/``."""
    exports = Exports()
    with http_served(exports.handler) as url:
        # (a task of its own: a third run of the same task in a row in this sidecar would be
        # a loop across runs, agent-ping-pong)
        it = invoke(budgeted, llm, searching(), tmp_path, otel=url, task="Find the file again.")
    assert (it.ran, it.printed) == (["term 0", "term 1", "term 2"], REPORT)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"]) == (
        BUDGET + 1, BUDGET, "tool_limit_reached"), it.run
    assert exports.kept and {path for path, _ in exports.kept} == {"/v1/metrics"}, exports.kept
    names = set().union(*(metric_names(export) for _, export in exports.kept))
    assert "continue_cli_session_count" in names, names
    if os.environ.get("RECORD_SPANS"):
        RECORDINGS.mkdir(parents=True, exist_ok=True)
        (RECORDINGS / "budget.metrics.ndjson").write_text("".join(
            json.dumps(export, separators=(",", ":")) + "\n" for _, export in exports.kept))
