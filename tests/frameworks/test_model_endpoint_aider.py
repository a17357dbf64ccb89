"""Aider, an agent whose actions are edit blocks in its answers' text, steered through the model
endpoint by its base URL alone: the ``aider`` CLI (``aider-chat``, LiteLLM beneath it,
``OPENAI_API_BASE``), run as a user runs it (``--message ... --yes-always``), in a temp dir, the
files it edits really edited there. It never uses the API's tool calling: each answer holds
SEARCH/REPLACE blocks (``--edit-format diff``), which Aider applies; then it lints the file
(``--lint-cmd``, here a script that fails until the file reaches its target) and, while the lint
fails, sends the errors back as a new user message, at most 3 times (its reflections). Its
commit messages (``--weak-model``) are side requests, each a conversation of its own.

The sidecar's rule pack declares these agents ``actions: text`` (named by the base URL's
``/agent/<name>/``), with no ``stop_answer``: an answer with no edit block ends Aider's
message, so the stop note alone is its finish. Behind the sidecar, the scripted upstream
(:mod:`tests.frameworks.fakellm`) answers with edits; its recorded request bodies are what the
model read. Nothing waits for a directive.

* one ``--message`` invocation is one run, its reflections included; the commit message a run
  of its own, neither counted in it nor told its budget;
* a budget of 2 tool calls: the true countdown at each request, the 3rd request final and
  asking for the finish; the model reports, which is what the user gets, and Aider ends;
* a reflection loop (the lint failing every time) wound down by a rule, then its final
  request; the model edits on, Aider applies it and reflects, and gets the stop note, which
  ends it cleanly; the upstream gets nothing after;
* abort: a rule aborts after 1 edit: the 2nd request gets the stop note, not the upstream.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_text_actions import (
    final_asked,
    instructions,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-aider-0123456789abcdefSECRET"
TASK = "Bump the version."
REPORT = "REPORT: bumped twice; the lint still fails."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: aider
budgets:
  - agents: ["aider-budget"]
    max_tool_calls: 2
    actions: text
  - agents: ["aider*"]
    actions: text
rules:
  - name: lint-keeps-failing
    agents: ["aider-lint"]
    when: "!run.ended && run.tool_calls >= 1"
    action: wind_down
    message: "The lint fails after an edit: finish up"
    grace: {tool_calls: 1}
    terminal_state: loop_detected
  - name: one-edit-then-abort
    agents: ["aider-abort"]
    when: "!run.ended && run.tool_calls >= 1"
    action: abort
    message: "Stopped by the test's rule after 1 edit"
"""
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
STOPPED = "The agent-watchdog stopped this run"
COMMIT = "Bump the version"  # the weak model's commit message
_CASES = itertools.count(1)


# -- the world ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    # (loose_run_gap: the declared runs stay open this long after an answer; far longer than
    # a step of these runs, so none ends between two of its requests)
    with endpoint_with_pack(tmp_path_factory.mktemp("aider"), PACK, llm.base_url,
                            model_relay, loose_run_gap=120.0) as server:
        yield server


def edit(version: int) -> fakellm.Step:
    """An answer in Aider's diff format: one SEARCH/REPLACE block, v<version> to the next."""
    return fakellm.answer(
        f"I bump it.\n\nhello.py\n```python\n<<<<<<< SEARCH\nprint('v{version}')\n=======\n"
        f"print('v{version + 1}')\n>>>>>>> REPLACE\n```\n")


def editing(obeys: bool = True) -> fakellm.Script:
    """An edit per request (v0 to v1, then v1 to v2, ...); a final request's instruction is
    obeyed (a report, no edit) when ``obeys``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if obeys and final_asked(body):
            return fakellm.answer(REPORT)
        return edit(index)
    return pick


def run_aider(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              tmp_path: Path, lint_passes_at: int = 99, git: bool = False,
              extra: tuple[str, ...] = ()
              ) -> tuple[subprocess.CompletedProcess[str], Path, list[dict[str, Any]],
                         list[dict[str, Any]]]:
    """``aider --message`` once, in ``tmp_path/work`` (``hello.py`` at v0; a git repository
    when ``git``), on a model scripted by ``script`` and a weak model that writes commit
    messages, named ``agent`` by its base URL; the lint fails until ``hello.py`` reaches
    v<lint_passes_at>. Returns the process, the work dir and the requests each model got."""
    case = next(_CASES)
    model = llm.script(f"aider-{agent}-{case}", script)
    weak = llm.script(f"aider-weak-{agent}-{case}", fakellm.steps(fakellm.answer(COMMIT)))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "hello.py").write_text("print('v0')\n")
    lint = tmp_path / "lint.sh"
    lint.write_text(f"grep -q \"v{lint_passes_at}'\" \"$1\" && exit 0\n"
                    "echo \"lint: $1 is not at its target version yet\"\nexit 1\n")
    home = tmp_path / "home"
    # (its copy of LiteLLM's price list, fresh: Aider fetches none)
    (home / ".aider" / "caches").mkdir(parents=True)
    (home / ".aider" / "caches" / "model_prices_and_context_window.json").write_text("{}")
    if git:
        for git_args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v0"]):
            subprocess.run(["git", *git_args], cwd=work, check=True, env=_git_env(home))
    pointed, steered = command(f"{sidecar.url('model')}/agent/{agent}/v1", model, weak)
    args = [*steered, "--lint-cmd", f"sh {lint}", "--auto-lint",
            "--no-check-update", "--no-show-release-notes", "--analytics-disable",
            "--no-show-model-warnings", "--no-pretty", "--no-fancy-input", "--no-gitignore",
            *([] if git else ["--no-git"]), *extra, "hello.py"]
    env = {
        **clean_environ("AIDER_", "LITELLM_"), **_git_env(home), **pointed,
        "OPENAI_API_KEY": KEY,
        "PYTHONPATH": str(DRIVERS),
        "AIDER_WORKDIR": str(work),
        "AIDER_ARGS": json.dumps(args),
    }
    # (the driver process imported LiteLLM with PRELOAD_ENV: its price list from the package)
    result = drive_command("aider", "endpoint_aider", "cli",
                           {**clean_environ(), "PYTHONPATH": str(DRIVERS)}, env)
    return result, work, llm.requests(model), llm.requests(weak)


def command(base_url: str, model: str, weak: str) -> tuple[dict[str, str], list[str]]:
    """What points Aider at the sidecar (its environment: ``base_url``, the model endpoint's
    with the agent's name in it) and its command line, as docs/agents.md shows them; the
    tests add the files, the lint and what keeps it quiet and offline."""
    return {"OPENAI_API_BASE": base_url}, [
        "--model", f"openai/{model}", "--weak-model", f"openai/{weak}", "--edit-format", "diff",
        "--message", TASK, "--yes-always"]


def _git_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_NOSYSTEM": "1"}


def version(work: Path) -> str:
    return (work / "hello.py").read_text().strip()


def reflections(requests: list[dict[str, Any]]) -> list[bool]:
    """Whether each request is a reflection: its last user message the lint's errors."""
    return ["# Fix any errors below" in str(body["messages"][-1]["content"])
            for body in requests]


# -- one invocation, one run ------------------------------------------------------------------

def test_one_invocation_is_one_run_its_reflections_included(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, work, requests, commits = run_aider(sidecar, llm, "aider", editing(), tmp_path,
                                                lint_passes_at=3, git=True)
    assert version(work) == "print('v3')"  # 3 edits, really applied; the lint passed at v3
    assert reflections(requests) == [False, True, True]
    # each edit committed, its message a side request to the weak model
    assert len(commits) == 3 and all(len(body["messages"]) == 2 for body in commits)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=work, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert log[:3] == [COMMIT] * 3, log
    # nothing to steer: each request went upstream as Aider sent it
    assert not any("agent-watchdog" in json.dumps(body) or "[budget:" in json.dumps(body)
                   for body in requests + commits)
    # one run: its 3 model calls and the 3 commit messages, side requests of it (model calls
    # of the run, their tokens its own; neither an action nor its answer)
    runs = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 6)
    assert len(runs) == 1, json.dumps(runs)
    run = runs[0]
    # open until loose_run_gap passes with no request (its last edit's action has no result)
    assert (run["state"], run["tool_calls"]) == ("active", 2), run
    assert run["signals"]["tools"] == {"text_action": 2}, run["signals"]
    assert run["signals"]["in_flight"] == 1, run["signals"]
    assert "Applied edit to hello.py" in result.stdout


def test_the_next_invocation_is_the_next_run_though_it_begins_as_the_last_one_did(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Every Aider request begins with the same messages (its edit format's examples), so two
    invocations of one agent are one conversation to the endpoint; the first one's run is held
    open after its answer (its edit, an action). The next invocation, whose first request is
    longer (one more file, read-only), does not carry that answer: the next run, with a
    budget of its own, the first one's action not answered by it."""
    before = run_ids(sidecar)
    (tmp_path / "first").mkdir()
    (tmp_path / "next" / "work").mkdir(parents=True)
    (tmp_path / "next" / "work" / "notes.md").write_text("The version is bumped by one.\n")
    _, work, first, _ = run_aider(sidecar, llm, "aider", editing(), tmp_path / "first",
                                  lint_passes_at=1)
    _, again, following, _ = run_aider(sidecar, llm, "aider", editing(), tmp_path / "next",
                                       lint_passes_at=1, extra=("--read", "notes.md"))
    assert (version(work), version(again)) == ("print('v1')", "print('v1')")
    assert (len(first), len(following)) == (1, 1)
    assert len(following[0]["messages"]) > len(first[0]["messages"])  # (the notes)
    assert following[0]["messages"][1] == first[0]["messages"][1]  # (the same examples)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2)
    assert sorted((run["iterations"], run["tool_calls"], run["state"]) for run in runs) == [
        (1, 0, "active")] * 2, runs


def test_a_file_it_asks_to_add_is_one_more_step_of_the_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model names a file of the repository that is not in the chat: Aider adds it
    (``--yes-always``) and says so in its next request, as it does a lint's errors; the
    answer that asked is one action of the run, the edit after it another."""
    before = run_ids(sidecar)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.md").write_text("Versions go up by one.\n")
    asks = fakellm.answer("Before I edit anything I need to read notes.md, please.")
    result, work, requests, commits = run_aider(
        sidecar, llm, "aider", lambda index, _body: asks if index == 0 else edit(0), tmp_path,
        lint_passes_at=1, git=True)
    assert (version(work), len(requests), len(commits)) == ("print('v1')", 2, 1), \
        result.stdout[-3000:]
    said = str(requests[1]["messages"][-1]["content"])
    assert said.startswith("I added these files to the chat: notes.md"), said
    assert "Versions go up by one." in json.dumps(requests[1]["messages"])  # (its content)
    runs = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 3)
    assert [(run["iterations"], run["tool_calls"], run["state"]) for run in runs] == [
        (3, 1, "active")], runs  # (its 2 model calls and the commit message)
    assert "Applied edit to hello.py" in result.stdout


# -- budgets ----------------------------------------------------------------------------------

def test_a_budget_counts_edits_down_and_its_final_request_gets_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, work, requests, commits = run_aider(sidecar, llm, "aider-budget", editing(),
                                                tmp_path, git=True)
    assert version(work) == "print('v2')"  # the budget's 2 edits, really applied
    assert len(requests) == 3 and reflections(requests) == [False, True, True]
    # the true count left at each request (the default pack's countdown: from 3 left)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("2", "2")], [("1", "2")], []]
    assert [final_asked(body) for body in requests] == [False, False, True]
    assert "all 2 tool calls used" in instructions(requests[-1])
    # the control text only in the system message
    for body in requests:
        assert not any("[budget:" in str(message["content"]) for message in body["messages"][1:])
    # what the user gets: the report, as the model's answer; no edit after it
    assert REPORT in result.stdout
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        5, 2, "tool_limit_reached"), run  # (its 3 model calls, 2 commit messages)
    # the commit messages: side requests of the run, never told its budget
    assert len(commits) == 2 and not any("[budget:" in json.dumps(body) for body in commits), \
        [instructions(body)[-300:] for body in commits]


# -- a reflection loop, an abort ----------------------------------------------------------------

def test_a_reflection_loop_is_wound_down_then_stopped_with_a_clean_end(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The lint fails after every edit; a rule winds the run down after its first edit, with
    a grace of 1; the model edits on at its final request (the endpoint cannot take an edit
    out of text: Aider applies it and reflects), and Aider's next reflection gets the stop
    note, an answer with no edit: its message ends there, exit status 0, before its own limit
    of 3 reflections. The upstream gets nothing after the final request."""
    before = run_ids(sidecar)
    result, work, requests, commits = run_aider(sidecar, llm, "aider-lint",
                                                editing(obeys=False), tmp_path, git=True)
    assert len(requests) == 3 and reflections(requests) == [False, True, True]
    notes = ["The lint fails after an edit: finish up" in instructions(body)
             for body in requests]
    assert notes == [False, True, True], notes
    grace = [re.findall(r"\[grace: (\d+) tool calls? left", instructions(body))
             for body in requests]
    assert grace == [[], ["1"], []], grace
    assert final_asked(requests[-1])
    assert version(work) == "print('v3')"  # its 3 edits applied, the last past the grace
    # what the user gets: the stop note, after Aider's 3rd edit; nothing applied from it
    assert STOPPED in result.stdout and "Only 3 reflections allowed" not in result.stdout
    assert len(commits) == 3 and not any("[grace:" in json.dumps(body) for body in commits)
    # a named gap (docs/agents.md): the commit of the edit its final answer made comes
    # once the run has ended, a run of its own (one model call, held open as an action)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 and any(
        run["state"] == "ended" for run in runs))
    (run,) = (run for run in runs if run["state"] == "ended")
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        5, 2, "loop_detected"), run  # (its 3 model calls, 2 commit messages)
    assert [(other["iterations"], other["tool_calls"], other["state"]) for other in runs
            if other is not run] == [(1, 0, "active")], runs


def test_an_abort_is_answered_with_the_stop_note_which_ends_aider(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Aider not streaming (``--no-stream``): the stop note comes whole."""
    before = run_ids(sidecar)
    result, work, requests, _ = run_aider(sidecar, llm, "aider-abort", editing(), tmp_path,
                                          extra=("--no-stream",))
    assert [body.get("stream") for body in requests] == [None]  # (its default: whole)
    assert len(requests) == 1  # the 2nd request (its reflection) got the stop note
    assert version(work) == "print('v1')"  # its one edit; none from the stop note
    assert "Stopped by the test's rule after 1 edit" in result.stdout
    assert "Applied edit" in result.stdout and result.stdout.count("Applied edit") == 1
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        1, 1, "aborted"), run
