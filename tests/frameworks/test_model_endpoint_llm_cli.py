"""Simon Willison's ``llm`` CLI (PyPI ``llm`` 0.36) steered through the model endpoint by base
URL alone, run as its users run it: ``llm -m watched --functions CODE "prompt"`` (its tool
chain loop: each answer's tool calls run, their results sent back, until a text answer or its
``--chain-limit``, default 5), on an OpenAI-compatible model its ``extra-openai-models.yaml``
defines (``api_base`` the sidecar's URL and ``/v1``, with ``/agent/<name>/`` in it; the key by
``api_key_name`` from its ``keys.json``), under a temp ``LLM_USER_PATH``; Chat Completions,
streamed, the conversation sent whole. Its tool (``--functions``: a Python function in the
command line) really runs, in a temp dir (each call appends to ``ran.log``). No OpenTelemetry:
it is steered and read through the endpoint alone. Behind the sidecar, the scripted upstream
(:mod:`tests.frameworks.fakellm`); its recorded request bodies are what the model read.

* a budget of 3 tool calls: the true countdown at each request, 3 calls run, the 4th request
  final (tools withdrawn), its answer the text ``llm`` prints; one run, ``tool_limit_reached``;
* loop (``--chain-limit 0``: no limit of its own): wound down, then final; ``loop_detected``;
* abort: a rule's abort after 2 calls is answered with the stop note as the final answer;
* its own ``--chain-limit``: it stops after that many model calls, the last answer's calls
  handed over and never run, exit 1 (``Error: Chain limit of N exceeded.``) — even when the
  last answer is text. Nothing on the wire tells that stop: the run is held for the call it
  handed over, ended ``abandoned`` at ``run_end_timeout``. A pack's ``max_iterations`` equal
  to the chain limit makes its last request the final one: the run ends at its answer,
  ``tool_limit_reached``, the report printed (then ``llm``'s error all the same).
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
import yaml

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, VENVS, clean_environ
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-llm-cli-0123456789abcdefSECRET"
REPORT = "REPORT: 3 steps noted; the rest remains."
NOTE = "Stopped by the test's rule after 2 calls"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: llm-cli
budgets:
  - agents: ["llm-budget"]
    max_tool_calls: 3
  - agents: ["llm-chain"]
    max_iterations: 3
rules:
  - name: two-calls-then-abort
    agents: ["llm-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{NOTE}"
"""
# its tool, as a user gives it: a Python function in the command line
NOTE_TOOL = '''\
def note(text: str) -> str:
    "Append a line of text to ran.log."
    with open("ran.log", "a") as log:
        log.write(text + "\\n")
    return "noted " + text
'''
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
LOOP_NOTE = "Loop: the same sequence of tool calls 4 times in a row"  # tool-cycle's
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("llm-cli"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def llm_cli(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
            tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str],
                                                    list[str], list[dict[str, Any]]]:
    """``llm`` once with its ``note`` tool, in a temp dir of its own, its settings under a
    temp ``LLM_USER_PATH``, on a model scripted by ``script`` named ``agent`` by its base
    URL. Returns the process, the calls its tool really ran (ran.log) and the requests the
    upstream got."""
    model = llm.script(f"llm-{agent}-{next(_CASES)}", script)
    home, work = tmp_path / "llm", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "extra-openai-models.yaml").write_text(yaml.safe_dump(models(
        f"{sidecar.url('model')}/agent/{agent}/v1", model), sort_keys=False))
    (home / "keys.json").write_text(json.dumps({"openai": KEY}))  # (`llm keys set openai`)
    result = subprocess.run(
        [str(VENVS / "llm_cli" / "bin" / "llm"), "-m", "watched", "--functions", NOTE_TOOL,
         *options, "Note the steps."],
        cwd=work, env={**clean_environ("LLM_"), "LLM_USER_PATH": str(home)},
        capture_output=True, text=True, timeout=DRIVER_TIMEOUT, stdin=subprocess.DEVNULL,
        check=False)
    ran = work / "ran.log"
    return result, ran.read_text().splitlines() if ran.exists() else [], llm.requests(model)


def models(api_base: str, model: str) -> list[dict[str, Any]]:
    """Its ``extra-openai-models.yaml``, as docs/agents.md shows it: the model ``watched``,
    ``model`` at ``api_base`` (the model endpoint's with the agent's name in it), its key the
    one ``llm keys set openai`` stored."""
    return [{"model_id": "watched", "model_name": model, "api_base": api_base,
             "api_key_name": "openai", "supports_tools": True}]


def instructions(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def final(body: dict[str, Any]) -> bool:
    return body.get("tool_choice") == "none" or not fakellm.offers_tools(body)


def notes(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """A note per request while tools are offered (step 0, 1, ...); the report once they are
    withdrawn (the final request)."""
    if final(body):
        return fakellm.answer(REPORT)
    done = sum(message["role"] == "tool" for message in body["messages"])
    return fakellm.call("note", text=f"step{done}")


def looping(_index: int, body: dict[str, Any]) -> fakellm.Step:
    return fakellm.answer(REPORT) if final(body) else fakellm.call("note", text="again")


def the_run(sidecar: RunningServer, before: set[str]) -> dict[str, Any]:
    runs = new_runs(sidecar, before, lambda runs: all(run["state"] == "ended" for run in runs))
    assert len(runs) == 1, f"one run per invocation, the sidecar has {json.dumps(runs)}"
    return runs[0]


def test_a_budget_ends_in_the_report_it_prints(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = llm_cli(sidecar, llm, "llm-budget", notes, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ran == ["step0", "step1", "step2"]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [final(body) for body in requests] == [False, False, False, True]
    assert "Tools are withdrawn" in instructions(requests[-1])
    assert result.stdout.strip() == REPORT  # the final request's answer: its output
    # (the countdown in the system message alone, never in the user's)
    assert all(body["messages"][1] == {"role": "user", "content": "Note the steps."}
               for body in requests)
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {"note": 3}, run["signals"]


def test_a_loop_is_wound_down_then_ended_in_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = llm_cli(sidecar, llm, "llm-loop", looping, tmp_path,
                                    "--chain-limit", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    marked = [LOOP_NOTE in instructions(body) for body in requests]
    assert len(requests) == 7 and marked == [False] * 4 + [True] * 3, marked
    assert [final(body) for body in requests] == [False] * 6 + [True]
    assert ran == ["again"] * 6 and result.stdout.strip() == REPORT
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


def test_an_abort_is_answered_as_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    result, ran, requests = llm_cli(sidecar, llm, "llm-abort", notes, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (ran, len(requests)) == (["step0", "step1"], 2)  # the 3rd: not the upstream's
    assert NOTE in result.stdout
    run = the_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_own_chain_limit_leaves_the_run_held_for_the_call_it_never_ran(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap: ``--chain-limit 2`` ends ``llm`` after 2 model calls, the 2nd answer's call
    handed over and never run, with nothing more on the wire: its run waits for that call's
    result (active, in flight), to end ``abandoned`` at ``run_end_timeout`` (15 min)."""
    before = run_ids(sidecar)
    result, ran, requests = llm_cli(sidecar, llm, "llm-plain", notes, tmp_path,
                                    "--chain-limit", "2")
    assert result.returncode == 1 and "Chain limit of 2 exceeded" in result.stderr
    assert (ran, len(requests)) == (["step0"], 2)
    runs = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 2)
    assert len(runs) == 1, runs
    run = runs[0]
    assert (run["state"], run["tool_calls"], run["signals"]["in_flight"]) == (
        "active", 1, 1), run


def test_a_pack_limit_of_model_calls_as_its_chain_limit_ends_the_run_in_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``max_iterations: 3`` for ``--chain-limit 3``: its 3rd request is the final one, the
    run ends at its answer, which ``llm`` prints (then stops at its limit all the same, exit
    1: it counts the answer that ends the chain too)."""
    before = run_ids(sidecar)
    result, ran, requests = llm_cli(sidecar, llm, "llm-chain", notes, tmp_path,
                                    "--chain-limit", "3")
    assert result.returncode == 1 and "Chain limit of 3 exceeded" in result.stderr
    assert result.stdout.strip() == REPORT
    assert ran == ["step0", "step1"]
    assert [final(body) for body in requests] == [False, False, True]
    run = the_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        3, 2, "tool_limit_reached"), run  # (a budget, of model calls)
