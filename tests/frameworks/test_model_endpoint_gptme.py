"""gptme (PyPI ``gptme`` 0.35.1, the ``gptme`` CLI), a terminal agent, steered through the model
endpoint by base URL alone, run as its users run it unattended: ``gptme --non-interactive
-m local/<model> "task"`` (its ``local`` provider: an OpenAI-compatible server at
``OPENAI_BASE_URL``, Chat Completions, every request streamed, the conversation sent whole),
in a temp dir and a temp ``HOME``, its ``shell`` tool really run there (each command appends
to ``ran.log``); ``GPTME_TIKTOKEN_TIMEOUT=0``, as it says for offline use (else each token
count waits on a download of tiktoken's encoding). No OpenTelemetry reaches the sidecar: it is
steered and read through the endpoint alone.

Its tool format for a ``local/`` model is ``tool`` (the API's tool calls; gptme runs a fenced
tool block in an answer's text too); ``--tool-format markdown`` offers no tools and acts by the
fenced blocks in its answers' text alone (```` ```shell ````, ```` ```save path ````...).
Unattended, it ends its task only by its ``complete`` tool (no arguments; a ```` ```complete ````
block in markdown): a text answer is nudged ("No tool call detected in last message. Did you
mean to finish?", a new user message, at once) twice, then it exits.

The rule pack declares ``complete`` as its ``finish`` (a call with no arguments: the report is
the text beside it) for the tool format, and ``actions: text`` with a ```` ```complete ````
block as its ``stop_answer`` for markdown. Behind the sidecar, the scripted upstream
(:mod:`tests.frameworks.fakellm`); its recorded request bodies are what the model read.

* a budget of 3 tool calls: the true countdown at each request, 3 commands run, the 4th request
  final (tools withdrawn), its report given as ``complete`` with the report beside it: gptme
  prints it and exits 0; one run, ``tool_limit_reached``; the upstream gets nothing after;
* undeclared finish: gptme nudges after the report: each nudge a run with a budget of its
  own, up to the third in a row (a known gap); with ``budget_per: conversation`` the nudges
  get the report again (the upstream nothing) and gptme exits at its own limit of nudges;
  one run;
* the model's own ``complete`` is the run's answer: ``completed``, no tool call counted;
* loop: the same failing command, wound down, then final, then ``complete``;
* abort: a rule's abort after 2 commands is answered by ``complete`` with the stop note;
* markdown: the budget counts its blocks; the final request asks for its finish, a
  ```` ```complete ```` block, which ends it; an abort answers with ``stop_answer``.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, VENVS, clean_environ
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-gptme-0123456789abcdefSECRET"
REPORT = "REPORT: 3 steps counted; the rest remains."
NOTE = "Stopped by the test's rule after 2 commands"
COMPLETE = "```complete\n```"
FINISH = """\
    finish:
      tool: complete
      arguments: {}
"""
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: gptme
budgets:
  - agents: ["gptme-budget"]
    max_tool_calls: 3
{FINISH}
  - agents: ["gptme-undeclared"]
    max_tool_calls: 3
  - agents: ["gptme-nudged"]
    max_tool_calls: 3
    budget_per: conversation
  - agents: ["gptme-abort", "gptme-loop", "gptme-done"]
{FINISH}
  - agents: ["gptme-md-budget"]
    max_tool_calls: 3
    actions: text
    stop_answer: {json.dumps("${note}" + chr(10) * 2 + COMPLETE + chr(10))}
  - agents: ["gptme-md-abort"]
    actions: text
    stop_answer: {json.dumps("${note}" + chr(10) * 2 + COMPLETE + chr(10))}
rules:
  - name: two-commands-then-abort
    agents: ["gptme-abort", "gptme-md-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{NOTE}"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
FINISH_ASKED = "end the task now, in the form your instructions give for finishing it"
NUDGE = "No tool call detected in last message"
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    # (loose_run_gap: the markdown runs stay open this long after their last answer)
    with endpoint_with_pack(tmp_path_factory.mktemp("gptme"), PACK, llm.base_url, model_relay,
                            loose_run_gap=120.0) as server:
        yield server


# -- the agent --------------------------------------------------------------------------------

def gptme(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
          tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], list[str],
                                                  list[dict[str, Any]]]:
    """``gptme`` once, unattended, in a temp dir and a temp ``HOME`` of its own, on a model
    scripted by ``script``, named ``agent`` by its base URL. Returns the process (its exit
    status, what it printed), the commands it really ran (ran.log) and the requests the
    upstream got, but its title (asked once, in a side request)."""
    model = llm.script(f"gptme-{agent}-{next(_CASES)}", script)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    pointed, arguments = command(f"{sidecar.url('model')}/agent/{agent}/v1", model)
    env = {**clean_environ("GPTME_", "XDG_", "TOOL_FORMAT"), **pointed,
           "HOME": str(home), "OPENAI_API_KEY": KEY}
    result = subprocess.run(
        [str(VENVS / "gptme" / "bin" / "gptme"), *arguments, *options, "Count the steps."],
        cwd=work, env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
        stdin=subprocess.DEVNULL, check=False)
    ran = work / "ran.log"
    requests = llm.requests(model)
    titles = [body for body in requests if titling(body)]
    assert len(titles) == 1, requests  # its title, asked once: no note in it
    assert "[budget" not in json.dumps(titles) and "agent-watchdog" not in json.dumps(titles)
    return (result, ran.read_text().splitlines() if ran.exists() else [],
            [body for body in requests if not titling(body)])


def command(base_url: str, model: str) -> tuple[dict[str, str], list[str]]:
    """What points gptme at the sidecar (its environment: ``base_url``, the model endpoint's
    with the agent's name in it; no wait on tiktoken's download, offline) and its command
    line but the task, as docs/agents.md shows them."""
    return {"OPENAI_BASE_URL": base_url, "GPTME_TIKTOKEN_TIMEOUT": "0"}, [
        "--non-interactive", "-m", f"local/{model}"]


def instructions(body: dict[str, Any]) -> str:
    """The system messages' text (gptme sends several, each a list of text parts)."""
    return "\n".join(part["text"] for message in body["messages"]
                     if message["role"] == "system" and isinstance(message["content"], list)
                     for part in message["content"]) + "\n".join(
        message["content"] for message in body["messages"]
        if message["role"] == "system" and isinstance(message["content"], str))


TITLE_ASKED = "Generate concise conversation titles."
TITLE = "Counting steps"


def titling(body: dict[str, Any]) -> bool:
    """Whether ``body`` is gptme's side request for the conversation's title (sent once, by
    a thread of its own, after its first answer)."""
    return TITLE_ASKED in instructions(body)


def done(body: dict[str, Any]) -> int:
    """How many actions the conversation holds (its model answers so far)."""
    return sum(message["role"] == "assistant" for message in body["messages"])


def final(body: dict[str, Any]) -> bool:
    return body.get("tool_choice") == "none" or not fakellm.offers_tools(body)


def shell(index: int) -> fakellm.Step:
    return fakellm.call("shell", command=f"echo step{index} >> ran.log && echo done {index}")


def steps_then_complete(count: int) -> fakellm.Script:
    """``count`` commands while tools are offered, then ``complete``; the report when they
    are withdrawn (the final request)."""
    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        if titling(body):
            return fakellm.answer(TITLE)
        if final(body):
            return fakellm.answer(REPORT)
        return shell(done(body)) if done(body) < count else fakellm.call("complete")
    return pick


def looping(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """The same failing command while tools are offered; the report once withdrawn."""
    if titling(body):
        return fakellm.answer(TITLE)
    if final(body):
        return fakellm.answer(REPORT)
    return fakellm.call("shell", command="echo tried >> ran.log && cat missing.txt")


def the_run(sidecar: RunningServer, before: set[str],
            done: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The one run the invocation made, once it has ended (every run it made, if more)."""
    runs = new_runs(sidecar, before, lambda runs: all(
        run["state"] == "ended" if done is None else done(run) for run in runs))
    assert len(runs) == 1, f"one run per invocation, the sidecar has {json.dumps(runs)}"
    return runs[0]


# -- the API's tool calls (its default for a local/ model) ------------------------------------

def test_a_budget_ends_in_the_report_given_as_its_complete_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-budget", steps_then_complete(10),
                                  tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ran == ["step0", "step1", "step2"]  # the budget's 3, really run
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [body.get("tool_choice") for body in requests] == [None, None, None, "none"]
    assert "Tools are withdrawn" in instructions(requests[-1])
    # the report reached gptme as its own finish: the text beside a complete call it ran
    assert REPORT in result.stdout and "@complete(call_watchdog_" in result.stdout
    assert "Session completed via complete tool" in result.stderr + result.stdout
    run = the_run(sidecar, before)
    # its title a model call of the run, whichever came first, it or the run's 2nd request
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        5, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {"shell": 3}, run["signals"]


def test_undeclared_its_nudges_after_the_report_get_the_report_not_a_budget_anew(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """No ``finish``: the report is a text answer, which gptme nudges at once (a new user
    message that keeps the answer: not told from a new task but by ``budget_per:
    conversation``); each nudge gets the report again from the endpoint, and gptme exits at
    its limit of 2 nudges. The upstream got the budget's requests, no more."""
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-nudged", steps_then_complete(10),
                                  tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ran == ["step0", "step1", "step2"]
    assert [final(body) for body in requests] == [False, False, False, True]
    assert "No tools used after 2 auto-reply confirmations" in result.stdout + result.stderr
    assert result.stdout.count(NUDGE) >= 2 and result.stdout.count(REPORT) == 3
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


def test_undeclared_each_nudge_after_the_report_starts_a_run_until_the_third_is_held(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap, the entry declaring neither ``finish`` nor ``budget_per: conversation``: the
    nudge after the report (a new user message at once, the report kept in its history) is
    not told from a new task, so it starts a run with a budget of its own: 3 runs in a row,
    each of 3 commands and its final request, then the conversation's next nudge is held (the
    error with the report: gptme exits 1). 9 commands run for a budget of 3."""
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-undeclared", steps_then_complete(100),
                                  tmp_path)
    assert result.returncode == 1 and REPORT in result.stdout + result.stderr
    assert len(ran) == 9 and [final(body) for body in requests] == [
        False, False, False, True] * 3
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 3
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (3, "tool_limit_reached")] * 3, runs


def test_its_own_complete_is_the_runs_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-done", steps_then_complete(2),
                                  tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (ran, len(requests)) == (["step0", "step1"], 3)
    assert not any("agent-watchdog" in instructions(body) for body in requests)
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 2, "completed"), run  # (its title a model call of it)


def test_a_loop_is_wound_down_then_ended_by_its_complete_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-loop", looping, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    notes = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and notes == [False] * 4 + [True] * 3, notes
    assert [final(body) for body in requests] == [False] * 6 + [True]
    assert ran == ["tried"] * 6
    assert REPORT in result.stdout and "@complete(call_watchdog_" in result.stdout
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


def test_an_abort_is_answered_with_its_complete_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-abort", steps_then_complete(10),
                                  tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (ran, len(requests)) == (["step0", "step1"], 2)  # the 3rd: not the upstream's
    assert NOTE in result.stdout and "@complete(call_watchdog_" in result.stdout
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- markdown: its tools as fenced blocks in its answers' text ---------------------------------

def block(index: int) -> fakellm.Step:
    return fakellm.answer(f"Step {index}.\n\n```shell\necho step{index} >> ran.log\n```")


def blocks_then_complete(count: int) -> fakellm.Script:
    """``count`` shell blocks, then a ```complete block; asked for its finish (the final
    request), the report and a ```complete block."""
    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        if titling(body):
            return fakellm.answer(TITLE)
        if FINISH_ASKED in instructions(body):
            return fakellm.answer(f"{REPORT}\n\n{COMPLETE}")
        return block(done(body)) if done(body) < count else fakellm.answer(
            f"Done.\n\n{COMPLETE}")
    return pick


def test_markdown_a_budget_counts_its_blocks_and_ends_with_its_complete_block(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-md-budget", blocks_then_complete(10),
                                  tmp_path, "--tool-format", "markdown")
    assert result.returncode == 0, result.stderr[-3000:]
    assert ran == ["step0", "step1", "step2"]
    assert not any(fakellm.offers_tools(body) for body in requests)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [FINISH_ASKED in instructions(body) for body in requests] == [False] * 3 + [True]
    assert REPORT in result.stdout
    assert "Session completed via complete tool" in result.stderr + result.stdout
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        5, 3, "tool_limit_reached"), run  # (its title a model call of it)


def test_markdown_an_abort_is_answered_with_its_stop_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = gptme(sidecar, llm, "gptme-md-abort", blocks_then_complete(10),
                                  tmp_path, "--tool-format", "markdown")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (ran, len(requests)) == (["step0", "step1"], 2)
    assert NOTE in result.stdout
    assert "Session completed via complete tool" in result.stderr + result.stdout
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run
