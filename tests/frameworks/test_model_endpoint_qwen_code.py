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

Steered: a budget counts down and ends in the report; a tool cycle is wound down, then its final
request; a rule's abort is answered by the endpoint. Watched and steered at once: one run, its
spans paired with the endpoint's calls by response id. Watched alone: ``test_qwen_code_otel.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import clean_environ, installed_bin, run_coding_agent
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    AGENT,
    ANSWER,
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
from tests.harness import RunningServer, wait_until
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
    return installed_bin(QWEN)


def telemetry(url: str) -> dict[str, Any]:
    """Its own OpenTelemetry on, exported to ``url`` (OTLP/HTTP: traces, logs and metrics, as
    OTLP/JSON in chunked requests), prompts logged."""
    return {"telemetry": {"enabled": True, "target": "local", "otlpEndpoint": url,
                          "otlpProtocol": "http", "logPrompts": True}}


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
    return run_coding_agent(
        [str(qwen()), "-p", "Find the file.", "--yolo", "--max-session-turns", "20"], env, work)


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
    check_cycle_wound_down(requests)
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


def test_qwen_code_traced_and_steered_is_one_run(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Qwen Code traced by its own OpenTelemetry and steered through the endpoint at once: it
    is steered as before, and it is one run, counted once. Its requests carry no
    ``traceparent``, but each model-call span carries the id of the response the endpoint
    relayed (``gen_ai.response.id``): the endpoint's run (``model:``) takes its trace, whose
    model calls pair with the endpoint's by that id and whose tool calls with the ones the
    endpoint handed over by call id — 4 model calls and 3 tools, not 8 and 6."""
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

    def joined() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        # (its spans come once qwen has exited: the run has them when its agent is theirs)
        return runs if any(run["agent"] == "qwen-code" and run["state"] == "ended"
                           for run in runs) else None

    runs = wait_until(joined, what="its spans to join its run")
    assert [(run["id"].split(":")[0], run["agent"], run["iterations"], run["tool_calls"],
             run["terminal_state"], run["has_final_answer"]) for run in runs] == [
        ("model", "qwen-code", BUDGET + 1, BUDGET, "tool_limit_reached", True)], runs
    signals = budgeted.get_json(f"/v1/runs/{runs[0]['id']}")["signals"]
    # the tokens the upstream billed (its usage: a quarter of each request's messages), once
    assert signals["input_tokens"] == sum(
        sum(len(json.dumps(message)) for message in body["messages"]) // 4 + 1
        for body in requests), signals
    assert signals["tools"] == {"run_shell_command": BUDGET}, signals
    # (its answer: the report it printed)
    assert budgeted.get_json(f"/v1/runs/{runs[0]['id']}")["final_output"] == REPORT
