"""Hugging Face tiny-agents (npm ``@huggingface/tiny-agents`` 0.3.4), steered through the model
endpoint with no code in it: ``tiny-agents run <dir>``, the directory's ``agent.json`` naming
the model, its OpenAI-compatible ``endpointUrl`` (the sidecar's, naming the agent by
``/agent/<name>/v1``, its key from ``API_KEY``) and its MCP servers: the MCP filesystem server
(npm ``@modelcontextprotocol/server-filesystem``), a stdio server it starts itself, whose tools
are the agent's. Installed by ``make tests/frameworks/ts/tiny_agents/node_modules/.installed``
from ``ts/tiny_agents``' lock; and its Python twin, ``huggingface_hub``'s ``tiny-agents`` CLI
(its ``[mcp]`` extra, ``envs/tiny_agents_py.txt``), on the same ``agent.json`` and MCP server,
in the tests marked so (its loop the same; its REPL prints a model error and goes on).
Its REPL reads each task at its prompt and keeps one conversation
(the tasks before in each request); every model request is streamed (``stream: true``), offers
its exit tools ``task_complete`` and ``ask_question`` before the MCP tools, ``tool_choice:
auto``. After a text answer that followed tool results it asks the model once more, the
conversation ending on that answer, and ends the task when that answer's first chunks hold no
tool call (dropping it). It emits no OpenTelemetry, has no sub-agents, no compaction, no retry,
and no limit of its own on a tool loop (its 10 turns count only answers without a call).

* each task typed at the prompt is a run with a budget of its own: the countdown at the end of
  its system message, 3 tools run (3 files written), the 4th request final (tools withdrawn:
  ``tool_choice: none``, the definitions kept), the report the answer it prints,
  ``tool_limit_reached``; its question after the report gets the report again, nothing
  upstream;
* a loop wound down by ``tool-cycle``, the report printed;
* an abort: the stop answer is printed, its question after it gets it again (not the error),
  and the prompt comes back. Known gaps, tiny-agents': a model error ends its REPL (its loop
  catches none), so ``model_abort: error``, and the next task after an abort (which goes on
  from the stop answer and gets the error), kill the process;
* its ``task_complete`` ends its task with no request after it: declared the pack's
  ``finish:`` it ends the run, the text beside it the run's answer; undeclared, the run stays
  open until ``run_end_timeout`` (known gap);
* ``tiny-agents serve`` (the agent as an OpenAI-compatible server): each POST a run with a
  budget of its own, the report at the end of its stream;
* a failed MCP tool (tiny-agents drops the result's ``isError``, its text alone sent on:
  Node's ``ENOENT: ...``, the SDK's ``MCP error -32602: ...``) is a tool error of the run.

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.steering import GRACE_LEFT, LEFT, instructions, user_text
from tests.frameworks.test_eino import check_the_stop_is_the_output, pointed
from tests.frameworks.test_langchaingo import LOOP_NOTE, STOPPED
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

AGENT_DIR = Path(__file__).resolve().parent / "ts" / "tiny_agents"
CLI = AGENT_DIR / "node_modules" / "@huggingface" / "tiny-agents" / "dist" / "cli.js"
KEY = "sk-tiny-agents-0123456789abcdefSECRET"
REPORT = "REPORT: 3 files written; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: tiny-agents
budgets:
  - agents: ["ta-budget"]
    max_tool_calls: 3
  - agents: ["ta-finish"]
    max_tool_calls: 3
    finish:                     # its exit tool: the call that ends its task
      tool: task_complete
      arguments:
        trigger: "${report}"
rules:
  - name: two-calls-then-abort
    agents: ["ta-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROMPT = b"> "


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("tiny-agents"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


@dataclass(frozen=True)
class Invocation:
    said: list[str]  # per task: what the REPL printed for it (colours taken off)
    requests: list[dict[str, Any]]  # what the upstream read
    returncode: int
    stderr: str


def agent_json(endpoint_url: str, model: str, files: str) -> dict[str, Any]:
    """The ``agent.json`` of a tiny-agents agent on the model at ``endpoint_url`` (the
    sidecar's, naming the agent), its tools the MCP filesystem server's on ``files``
    (docs/agents.md shows it, ``tests/test_docs.py`` checks it is this)."""
    return {"model": model, "endpointUrl": endpoint_url,
            "servers": [{"type": "stdio", "command": "npx",
                         "args": ["@modelcontextprotocol/server-filesystem", files]}]}


def _read_until(process: subprocess.Popen[bytes], mark: bytes, deadline: float,
                anywhere: bool = False) -> bytes:
    """What the agent prints until it prints ``mark`` at the end (its prompt; ``anywhere``:
    in it), or exits."""
    assert process.stdout is not None
    out = b""
    fd = process.stdout.fileno()
    while not (mark in out if anywhere else out.endswith(mark)):
        left = deadline - time.monotonic()
        assert left > 0, f"no prompt from tiny-agents: {out[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # (it exited)
            out += chunk
    return out


@dataclass(frozen=True)
class Cli:
    """A tiny-agents CLI: its command before ``run <dir>``, its prompt, and what ends it at the
    prompt: Ctrl+C once (the TypeScript one's default SIGINT: its input is no terminal), or
    twice (the Python one's: its handler asks for a second)."""

    command: tuple[str, ...]
    prompt: bytes
    interrupts: int
    ended: int  # its exit status so


TS = Cli(("node", str(CLI)), PROMPT, 1, -signal.SIGINT)
PY_VENV = Path(__file__).resolve().parents[2] / ".venvs" / "tiny_agents_py"
PY = Cli((str(PY_VENV / "bin" / "tiny-agents"),), "\u00bb  ".encode(), 2, 0)
CLIS = pytest.mark.parametrize("cli", [TS, PY], ids=["ts", "py"])


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, tasks: tuple[str, ...] = (),
           files: dict[str, str] | None = None, cli: Cli = TS) -> Invocation:
    """``tiny-agents run`` once on an agent directory in ``tmp`` whose ``agent.json`` names the
    sidecar by its ``endpointUrl`` as ``agent``, its model scripted by ``script``, its MCP
    filesystem server given ``tmp / "files"`` (holding ``files``): each task typed at its
    prompt once it shows (by default one), then Ctrl+C at the prompt (SIGINT: its input is no
    terminal), as a user ends it."""
    assert CLI.is_file(), (
        "run `make tests/frameworks/ts/tiny_agents/node_modules/.installed` (part of make test)")
    assert cli is TS or (PY_VENV / ".installed").is_file(), (
        "run `make .venvs/tiny_agents_py/.installed` (part of make test)")
    case = next(_CASES)
    tasks = tasks or (f"Write the sums of 100 and 0, 1, 2 to files (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    (tmp / "files").mkdir()
    for name, text in (files or {}).items():
        (tmp / "files" / name).write_text(text)
    (tmp / "agent").mkdir()
    (tmp / "agent" / "agent.json").write_text(json.dumps(agent_json(
        pointed(sidecar.url("model"), agent), model, str(tmp / "files"))))
    process = subprocess.Popen([*cli.command, "run", str(tmp / "agent")],
                               env={**clean_environ(), "API_KEY": KEY, "HF_TOKEN": KEY},
                               cwd=AGENT_DIR,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stderr is not None
    deadline = time.monotonic() + DRIVER_TIMEOUT
    said: list[str] = []
    try:
        _read_until(process, cli.prompt, deadline)
        for task in tasks:
            process.stdin.write(task.encode() + b"\n")
            process.stdin.flush()
            said.append(ANSI.sub("", _read_until(process, b"\n" + cli.prompt,
                                                 deadline).decode()))
            if process.poll() is not None:
                break
        for time_ in range(cli.interrupts):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # Ctrl+C at its prompt
                if time_ + 1 < cli.interrupts:
                    _read_until(process, b"again", deadline, anywhere=True)
        process.wait(max(deadline - time.monotonic(), 1))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read().decode()
    return Invocation(said, llm.requests(model), process.returncode, stderr)


def writes(index: int, body: dict[str, Any]) -> fakellm.Step:
    """``write_file`` while tools can be called, the report when not."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("write_file", path=f"sum{index}.txt", content=str(100 + index))


def rereading(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """The same ``read_text_file`` call whatever it reads, while tools can be called."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("read_text_file", path="notes.txt")


def printed(said: str) -> str:
    """What the REPL printed after the task's last tool result: the answer the user reads."""
    body = said.removesuffix("\n" + PROMPT.decode()).removesuffix("\n" + PY.prompt.decode())
    last = body.rfind("\nTool[")
    return body[last:].split("\n\n", 1)[1] if last >= 0 else body.lstrip("\n")


def written(tmp: Path) -> list[str]:
    return sorted(path.name for path in (tmp / "files").iterdir())


def budget_left(requests: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [LEFT.findall(instructions(body)) for body in requests]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


COUNTDOWN = [[("3", "3")], [("2", "3")], [("1", "3")], []]
EXIT_TOOLS = ["task_complete", "ask_question"]


# -- one run per task; a budget -------------------------------------------------------------------

def test_each_task_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, cli: Cli = TS) -> None:
    """Two tasks typed at the REPL's prompt, each a run with a budget of 3: the model reads
    the true count at the end of the system message, 3 files are written, the 4th request is
    final (tools withdrawn, their definitions kept) and its report is what the REPL prints;
    its question after the report (the conversation ending on it) gets the report again from
    the endpoint, nothing upstream. The second task's requests carry the first's conversation
    and count down from 3 again."""
    before = run_ids(sidecar)
    tasks = ("Write the sums of 100 and 0, 1, 2.", "Now of 100 and 4, 5, 6.")
    it = invoke(sidecar, llm, "ta-budget", writes, tmp_path, tasks=tasks, cli=cli)
    assert [printed(said) for said in it.said] == [REPORT] * 2, (it.said, it.stderr[-2000:])
    assert written(tmp_path) == [f"sum{index}.txt" for index in (0, 1, 2, 4, 5, 6)]
    assert budget_left(it.requests) == COUNTDOWN * 2
    assert [(fakellm.offers_tools(body), tool_names(body)[:2], len(tool_names(body)),
             body["stream"]) for body in it.requests] == (
        [(True, EXIT_TOOLS, 16, True)] * 3 + [(False, EXIT_TOOLS, 16, True)]) * 2
    assert [body["tool_choice"] for body in it.requests] == ["auto"] * 3 + ["none"] + [
        "auto"] * 3 + ["none"]
    assert [(message["role"], message.get("content")) for message in
            it.requests[4]["messages"][1:]] == [("user", tasks[0])] + [
        pair for index in range(3) for pair in (
            ("assistant", ""), ("tool", f"Successfully wrote to sum{index}.txt"))] + [
        ("assistant", REPORT), ("user", tasks[1])]
    assert all("[budget" not in user_text(body) for body in it.requests)
    assert it.returncode == cli.ended, it.stderr[-3000:]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs


def test_a_loop_is_wound_down_then_its_report_is_printed(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The same ``read_text_file`` again and again (tiny-agents has no limit of its own on
    a tool loop): tool-cycle fires at the 4th identical call, the next 2 requests are wound
    down (grace 2 and 1), the 7th is final, its tools withdrawn; the report is printed and
    the run ends ``loop_detected``."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-loop", rereading, tmp_path, files={"notes.txt": "a note"})
    assert len(it.requests) == 7
    assert [LOOP_NOTE in instructions(body) for body in it.requests] == [False] * 4 + [True] * 3
    assert [GRACE_LEFT.findall(instructions(body)) for body in it.requests] == [[]] * 4 + [
        ["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in it.requests] == [True] * 6 + [False]
    assert [message["content"] for message in it.requests[-1]["messages"]
            if message["role"] == "tool"] == ["a note"] * 6
    assert [printed(said) for said in it.said] == [REPORT]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        6, "loop_detected", REPORT), run


# -- an abort -------------------------------------------------------------------------------------

@CLIS
def test_an_abort_is_the_answer_the_repl_goes_on(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, cli: Cli) -> None:
    """The rule aborts after 2 tool calls: the 3rd request gets the stop answer, not the
    upstream, and the REPL prints it; tiny-agents asks its model once more after a text answer
    that followed tool results (the conversation ending on that answer, nothing after it),
    which gets the stop answer again, not the error: an answer with no tool call ends its
    task, and its prompt comes back (Ctrl+C then ends it)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-abort", writes, tmp_path, cli=cli)
    assert written(tmp_path) == ["sum0.txt", "sum1.txt"]
    assert len(it.requests) == 2
    [said] = it.said
    assert said.endswith("\n" + cli.prompt.decode())
    assert it.returncode == cli.ended, it.stderr[-3000:]
    check_the_stop_is_the_output(sidecar, before, [{"output": printed(said).rstrip("\n"),
                                                    "error": ""}])


def test_after_an_abort_the_next_task_gets_the_error_and_ends_the_repl(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap: the next task typed after an abort goes on from the stop answer (the REPL
    keeps one conversation), which the endpoint cannot tell from a validation retry after it:
    it is the stopped run's and gets the 400 ``watchdog_aborted``, nothing upstream; tiny-agents
    catches no model error, and its process dies of it."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-abort", writes, tmp_path,
                tasks=("Write the sums of 100 and 0, 1, 2.", "Now of 100 and 4, 5, 6."))
    assert len(it.requests) == 2 and written(tmp_path) == ["sum0.txt", "sum1.txt"]
    assert printed(it.said[0]).startswith(STOPPED)
    assert PROMPT.decode() not in it.said[1] and it.returncode not in (0, -signal.SIGINT)
    assert "watchdog_aborted" in it.stderr and "status: 400" in it.stderr, it.stderr[-3000:]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_abort_as_the_apis_error_ends_the_repl(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """Known gap, tiny-agents': with ``model_abort: error`` the 3rd request is answered HTTP
    400 ``watchdog_aborted``; its loop catches no model error, so the REPL's process dies of
    it (the note in the error it prints): keep the default ``model_abort``."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "ta-abort", writes, tmp_path)
        run = the_ended_run(sidecar, before)
    assert len(it.requests) == 2 and written(tmp_path) == ["sum0.txt", "sum1.txt"]
    assert PROMPT.decode() not in it.said[0] and it.returncode not in (0, -signal.SIGINT)
    assert f"{STOPPED}: Stopped by the test's rule after 2 tool calls" in it.stderr, \
        it.stderr[-3000:]
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- its exit tool; tool errors -------------------------------------------------------------------

DONE = "DONE: a.txt written"


def completing(index: int, body: dict[str, Any]) -> fakellm.Step:
    """A file written, then ``task_complete`` with the answer in the text beside it."""
    if index == 0:
        return fakellm.call("write_file", path="a.txt", content="1")
    return fakellm.Step(text=DONE, tool_calls=(fakellm.ToolCall("task_complete",
                                                                {"trigger": True}),))


def test_its_task_complete_declared_its_finish_ends_the_run_with_the_text_beside_it(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``task_complete`` ends tiny-agents' task, no request after it. Declared the pack's
    ``finish:`` (its ``trigger`` the report), the model's own call of it ends the run
    ``completed``, not counted as a tool; it carries no text (a flag), so the run's answer
    is the text the model gave beside it, which the REPL printed."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-finish", completing, tmp_path)
    assert written(tmp_path) == ["a.txt"] and len(it.requests) == 2
    assert f"{DONE}<Tool " in it.said[0] and 'task_complete {"trigger": true}' in it.said[0]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (2, 1, "completed", DONE), run


def test_undeclared_its_task_complete_leaves_the_run_open(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap: undeclared, ``task_complete`` is a tool call like any, whose result never
    comes (the agent's task is over): the run stays open, waiting for it, until
    ``run_end_timeout`` abandons it. Declare it the pack's ``finish:``."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-free", completing, tmp_path)
    assert written(tmp_path) == ["a.txt"] and len(it.requests) == 2
    [run] = new_runs(sidecar, before, lambda runs: len(runs) == 1
                     and runs[0]["iterations"] == 2)
    assert (run["state"], run["tool_calls"], run["signals"]["in_flight"],
            run["final_output"]) == ("active", 1, 1, None), run


def test_its_final_report_declared_comes_as_its_task_complete(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Declared, the budget's final request answers with the report as ``task_complete``
    (its ``trigger`` the report): the REPL prints it as that call's arguments and ends its
    task, no question after it."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-finish", writes, tmp_path)
    assert written(tmp_path) == ["sum0.txt", "sum1.txt", "sum2.txt"] and len(it.requests) == 4
    assert f"task_complete {json.dumps({'trigger': REPORT})}" in it.said[0], it.said
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        3, "tool_limit_reached", REPORT), run


def failing(index: int, body: dict[str, Any]) -> fakellm.Step:
    """A file that is not there, a call without an argument the tool requires, then the
    answer."""
    if index == 0:
        return fakellm.call("read_text_file", path="missing.txt")
    if index == 1:
        return fakellm.call("write_file", path="b.txt")
    return fakellm.answer("FAILED: nothing read or written")


def test_a_failed_mcp_tool_is_a_tool_error(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """tiny-agents sends a failed MCP tool's text on without its ``isError``: Node's
    ``ENOENT: no such file or directory, open ...`` from the filesystem server, the MCP SDK's
    ``MCP error -32602: ...`` for arguments its schema refuses; both read as tool errors."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-free", failing, tmp_path)
    assert [message["content"].split(":")[0] for message in it.requests[2]["messages"]
            if message["role"] == "tool"] == ["ENOENT", "MCP error -32602"]
    [run] = new_runs(sidecar, before, lambda runs: len(runs) == 1
                     and runs[0]["iterations"] >= 3)
    assert (run["tool_calls"], run["errors"]) == (2, 2), run


def answering(index: int, _body: dict[str, Any]) -> fakellm.Step:
    """A file written, an answer, then (to tiny-agents' question after it) another answer."""
    if index == 0:
        return fakellm.call("write_file", path="a.txt", content="1")
    return fakellm.answer(DONE if index == 1 else "MORE: nothing else to do")


def test_its_question_after_a_text_answer_is_the_runs_last_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """After a text answer that followed tool results, tiny-agents asks the model once more,
    the conversation ending on that answer (nothing after it): a model call of the run,
    upstream. Its answer holds no tool call, so tiny-agents drops it and ends the task with the
    answer it printed; known gap: the run's ``final_output`` is the dropped one, the run's
    last answer (nothing in what the agent sends tells that it dropped it)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-free", answering, tmp_path)
    assert [printed(said) for said in it.said] == [DONE]
    assert len(it.requests) == 3 and it.requests[2]["messages"][-1] == {
        "role": "assistant", "content": DONE}
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (3, 1, "completed", "MORE: nothing else to do"), run


def test_served_each_post_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``tiny-agents serve`` (an OpenAI-compatible server of the agent, ``PORT``): each POST
    of a conversation is one ``run`` of it, its system prompt first: a run each, with a
    budget of its own, its stream the tools' results and the report."""
    before = run_ids(sidecar)
    case = next(_CASES)
    model = llm.script(f"ta-budget-serve-{case}", writes)
    (tmp_path / "files").mkdir()
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "agent.json").write_text(json.dumps(agent_json(
        pointed(sidecar.url("model"), "ta-budget"), model, str(tmp_path / "files"))))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(["node", str(CLI), "serve", str(tmp_path / "agent")],
                               env={**clean_environ(), "API_KEY": KEY, "PORT": str(port)},
                               cwd=AGENT_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        _read_until(process, f"listening on http://localhost:{port}".encode(),
                    time.monotonic() + DRIVER_TIMEOUT, anywhere=True)
        streamed = []
        for task in ("Write the sums of 100 and 0, 1, 2.", "Now of 100 and 4, 5, 6."):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
                data=json.dumps({"messages": [{"role": "user", "content": task}],
                                 "stream": True}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=DRIVER_TIMEOUT) as response:
                chunks = [json.loads(line[6:]) for line in response.read().decode().splitlines()
                          if line.startswith("data: ")]
            streamed.append("".join(chunk["choices"][0]["delta"].get("content") or ""
                                    for chunk in chunks
                                    if chunk["choices"][0]["delta"].get("role") != "tool"))
    finally:
        process.terminate()
        process.wait(DRIVER_TIMEOUT)
    requests = llm.requests(model)
    assert streamed == [REPORT] * 2
    assert written(tmp_path) == [f"sum{index}.txt" for index in (0, 1, 2, 4, 5, 6)]
    assert budget_left(requests) == COUNTDOWN * 2
    assert [fakellm.offers_tools(body) for body in requests] == ([True] * 3 + [False]) * 2
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs



def test_in_python_a_model_error_is_printed_and_the_repl_goes_on(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The Python CLI catches a model error where the TypeScript one dies of it: the next task
    after an abort gets the 400 ``watchdog_aborted`` (it goes on from the stop answer: the
    known gap above), which it prints, and its prompt comes back; nothing went upstream."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-abort", writes, tmp_path, cli=PY,
                tasks=("Write the sums of 100 and 0, 1, 2.", "Now of 100 and 4, 5, 6."))
    assert len(it.requests) == 2 and written(tmp_path) == ["sum0.txt", "sum1.txt"]
    assert printed(it.said[0]).startswith(STOPPED)
    assert it.said[1].startswith("\nError during agent run: Bad request:") \
        and "watchdog_aborted" in it.said[1] and it.said[1].endswith("\n" + PY.prompt.decode())
    assert it.returncode == PY.ended, it.stderr[-3000:]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_in_python_a_task_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The Python CLI's task, as the TypeScript one's: the countdown at the end of its system
    message, 3 files written, the 4th request final, the report printed, its question after
    it answered by the endpoint."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "ta-budget", writes, tmp_path, cli=PY)
    assert [printed(said) for said in it.said] == [REPORT], (it.said, it.stderr[-2000:])
    assert written(tmp_path) == ["sum0.txt", "sum1.txt", "sum2.txt"]
    assert budget_left(it.requests) == COUNTDOWN
    assert [(fakellm.offers_tools(body), tool_names(body)[:2], body["stream"])
            for body in it.requests] == [(True, EXIT_TOOLS, True)] * 3 + [
        (False, EXIT_TOOLS, True)]
    assert it.returncode == PY.ended, it.stderr[-3000:]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "tool_limit_reached", REPORT), run
