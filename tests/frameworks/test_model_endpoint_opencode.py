"""opencode — a TypeScript coding agent on Bun, its binary per platform on npm — steered through
the sidecar's model endpoint with no code in it (DESIGN §12), on both relays.

``make test`` installs it with ``npm ci`` from ``opencode/package-lock.json`` (``opencode-ai``
1.18.33, its platform binary an optional dependency npm picks for this machine, and
``@opencode-ai/plugin``, which opencode otherwise installs from npm into its config directory at
its first run). Each test runs ``opencode run`` once in a temp dir of its own (its ``HOME``
there; its global config directory holds the lock's ``package.json`` and ``package-lock.json``
and links the installed ``node_modules``, so opencode finds its dependency installed and
fetches nothing), pointed at a real sidecar by a custom provider in its ``opencode.json``
alone: ``@ai-sdk/openai-compatible`` (bundled in its binary), its ``baseURL`` the endpoint, its
API key from the environment. Nothing reaches the network: no login, no models.dev fetch
(``OPENCODE_DISABLE_MODELS_FETCH``), no update check, no share, no LSP download.

opencode speaks Chat Completions, streamed, and sends the whole conversation on every request:
its system prompt, the task, each tool call with its result. It offers 10 tools; its shell
tool is ``bash`` (really run in the temp dir: each appends its term to ``ran.txt``); ``opencode
run`` prints the run's last answer on stdout. Every request names its session
(``x-session-id``). Beside the agent's own requests it asks its small model for a title for
the session (a conversation of its own: a system prompt of its own, the task, no tools), at
the same time as its first request: a model call of the run, not a run of its own. Behind the
sidecar is the scripted upstream (:mod:`tests.frameworks.fakellm`), whose recorded request bodies
are what the model read.

Steered: a budget counts down and ends in the report; a tool cycle is wound down, then its final
request; a rule's abort is answered by the endpoint. Watched and steered at once: one run, its
spans paired with the endpoint's calls by response id and tool-call id. Watched alone:
``test_opencode_otel.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
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
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

OPENCODE_DIR = Path(__file__).resolve().parent / "opencode"
OPENCODE = OPENCODE_DIR / "node_modules" / ".bin" / "opencode"
TOOL = "bash"  # opencode's shell tool: {"command": "...", "description": "..."}
TITLE = "Finding the file"  # what its small model answers when asked for a title
# offline and quiet: no models.dev fetch, no update check, no share, no LSP download
QUIET = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
         "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


def opencode() -> Path:
    target = OPENCODE_DIR.relative_to(OPENCODE_DIR.parents[2]) / "node_modules/.installed"
    assert OPENCODE.exists(), f"{OPENCODE} is missing: `make {target}` installs it (make test does)"
    return OPENCODE


def config(base_url: str, model: str, small: str) -> dict[str, Any]:
    """Its ``opencode.json``: a provider ``watchdog`` (OpenAI-compatible, at ``base_url``, its
    key from ``OPENAI_API_KEY``), ``model`` its model and ``small`` its small model (titles),
    every tool allowed unasked, no share, no autoupdate."""
    return {"$schema": "https://opencode.ai/config.json",
            "provider": {"watchdog": {
                "npm": "@ai-sdk/openai-compatible", "name": "watchdog",
                "options": {"baseURL": base_url, "apiKey": "{env:OPENAI_API_KEY}"},
                "models": {model: {"name": model, "tool_call": True},
                           small: {"name": small}}}},
            "model": f"watchdog/{model}", "small_model": f"watchdog/{small}",
            "share": "disabled", "autoupdate": False, "permission": "allow"}


def installed_config_dir(home: Path) -> None:
    """Its global config directory, as it would install it: the lock's ``package.json`` and
    ``package-lock.json`` (which name ``@opencode-ai/plugin``) and the installed
    ``node_modules``; opencode finds its dependency there and runs no ``npm install``."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        (folder / name).write_text((OPENCODE_DIR / name).read_text())
    (folder / "node_modules").symlink_to(OPENCODE_DIR / "node_modules")
    assert (OPENCODE_DIR / "node_modules" / "@opencode-ai" / "plugin").is_dir()


def telemetry() -> dict[str, Any]:
    """Its ``opencode.json`` setting that adds the AI SDK's spans (each model call and tool
    call) to its own (its runtime's: every function it traces), which it exports whenever
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (OTLP/HTTP, JSON: traces and log records)."""
    return {"experimental": {"openTelemetry": True}}


def run_opencode(base_url: str, model: str, small: str, tmp: Path,
                 extra: dict[str, Any] | None = None, otel: str | None = None
                 ) -> tuple[list[str], str]:
    """``opencode run`` once in ``tmp`` against the OpenAI-compatible ``base_url``: the terms
    its shell commands appended to ``ran.txt``, and the answer it printed. ``extra``: more of
    its ``opencode.json``; ``otel``: its own OpenTelemetry on (:func:`telemetry`), exported
    there."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir(exist_ok=True)
    installed_config_dir(home)
    # (its directory is $PWD's, not the process's: the test's, not pytest's)
    env = {**clean_environ("OPENCODE_"), "HOME": str(home), "PWD": str(work),
           "OPENAI_API_KEY": KEY, **QUIET}
    if otel is not None:
        extra = {**(extra or {}), **telemetry()}
        # (its batch span processor's; at its default, 5 s, the spans of a run's last seconds
        # are never exported: opencode run exits without a flush)
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otel, OTEL_BSP_SCHEDULE_DELAY="10")
    (work / "opencode.json").write_text(json.dumps({**config(base_url, model, small),
                                                    **(extra or {})}))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env.pop(name, None)
    result = subprocess.run([str(opencode()), "run", "Find the file."], env=env,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT, cwd=work,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"opencode run exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    # (no first-run download: it found its config directory's dependency installed)
    assert not (home / ".npm").exists(), "opencode ran npm install at its first run"
    ran = work / "ran.txt"
    terms = ran.read_text().splitlines() if ran.exists() else []
    return terms, result.stdout.strip()


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its answer
    requests: list[dict[str, Any]]  # what the upstream read (the agent's model)
    titles: list[dict[str, Any]]  # what its small model read
    run: dict[str, Any]  # the sidecar's one run of it, ended
    after: int  # the requests the upstream had got once the run had ended


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           base_url: str | None = None, otel: str | None = None) -> Invocation:
    """``opencode run`` once through ``sidecar``'s model endpoint (or ``base_url``), its model
    ``script``, its small model answering :data:`TITLE`; ``otel``: its own OpenTelemetry
    exported there."""
    model = llm.script(f"opencode-{tmp.name}", script)
    small = llm.script(f"opencode-small-{tmp.name}", fakellm.steps(fakellm.answer(TITLE)))
    before = run_ids(sidecar)
    ran, printed = run_opencode(base_url or sidecar.url("model") + "/v1", model, small, tmp,
                                otel=otel)
    requests = llm.requests(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, llm.requests(small), run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"command": f"echo '{term}' >> ran.txt", "description": "Note the term"}


def searching() -> fakellm.Script:
    return fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT)


def test_opencode_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    assert all(body.get("stream") is True for body in requests)
    assert [len(body["messages"]) for body in requests] == [2, 4, 6, 8]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what opencode run prints
    check_title(it)
    # one run: the agent's 4 requests and the title, a model call of it (its tokens are the
    # run's), 3 tool calls
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 2, BUDGET, "tool_limit_reached", True)
    assert it.run["final_output"] == REPORT, it.run
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def check_title(it: Invocation) -> None:
    """Its side request, the session's title: once, to its small model, as opencode sent it
    (no tools, no note: not a step of the agent's)."""
    [title] = it.titles
    assert not fakellm.offers_tools(title)
    assert instructions(title).startswith("You are a title generator")
    assert "[budget" not in instructions(title) and "[grace" not in instructions(title)
    # the task, as the agent's first request carries it (opencode run quotes it)
    task = it.requests[0]["messages"][1]["content"]
    assert task == '"Find the file."'
    assert [message["content"] for message in title["messages"][1:]] == [
        "Generate a title for this conversation:\n", task]


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file-reading tool, with the same arguments round and round (a
    tool cycle; the report when no tools are offered)."""
    (work / "notes.txt").write_text("searched\n")

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call(TOOL, **shell("the file"))
        return fakellm.call("read", filePath=str(work / "notes.txt"))
    return pick


def test_a_looping_opencode_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what ``opencode run``
    prints; the upstream gets nothing after it."""
    (tmp_path / "work").mkdir()
    it = invoke(plain, llm, cycling(tmp_path / "work"), tmp_path)
    requests = it.requests
    check_cycle_wound_down(requests)
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    # the read tool's half, really run: each result the file's line
    reads = [message["content"] for message in requests[-1]["messages"]
             if message["role"] == "tool" and "searched" in str(message["content"])]
    assert len(reads) == 5, requests[-1]["messages"]
    check_no_control_text_in_user_messages(requests)
    check_title(it)
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (12, 10, "loop_detected", True), it.run
    assert it.after == 11  # the upstream got nothing after the final request


def test_a_stopped_opencode_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers opencode's next request itself,
    a well-formed streamed answer carrying the stop note, which ``opencode run`` prints; the
    upstream got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    check_title(it)
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


def test_opencode_traced_and_steered_is_one_run(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """opencode traced by its own OpenTelemetry and steered through the endpoint at once: it is
    steered as before, and it is one run, counted once. Its requests carry no
    ``traceparent``, but each model call's span (``ai.streamText.doStream``) carries the id of
    the response the endpoint relayed: the endpoint's run takes its trace, whose model calls
    pair with the endpoint's by that id and whose tool calls (``ai.toolCall``) with the ones
    the endpoint handed over by their call id (``ai.toolCall.id``) — 5 model calls (the
    title's among them) and 3 tools, not 10 and 6."""
    it = invoke(budgeted, llm, searching(), tmp_path, otel=budgeted.otlp_http)
    assert (it.ran, it.printed) == (["term 0", "term 1", "term 2"], REPORT)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in it.requests] == [True] * BUDGET + [False]
    check_title(it)
    run = it.run
    # (named after its calls' functionId, the AI SDK's agent name: its spans came first)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["signals"]["tools"]) == (
        "session.llm", BUDGET + 2, BUDGET, {TOOL: BUDGET}), run
    assert (run["terminal_state"], run["has_final_answer"]) == ("tool_limit_reached", True), run
    # a misread, named and left (docs/frameworks.md): the title's call is an `ai.streamText`
    # span as each step's is, an agent span whose text reads as an answer, so the run's final
    # output is its answer or, as its spans come, the title
    assert run["final_output"] in (REPORT, TITLE), run
    assert run["session"].startswith("ses_"), run  # its session id (its spans', its header)
