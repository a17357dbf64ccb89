"""CAMEL-AI's ``ChatAgent`` (driver ``endpoint_camel``) steered through the model endpoint by
its model's ``url`` (docs/agents.md's lines), on both relays, beyond what
test_model_endpoint_frameworks checks of it by ``OPENAI_BASE_URL`` (counts, a budget of 3, a
loop wound down): a rule's abort, answered or as the API's error; its own iteration limit; a
``RolePlaying`` society, its user agent instructing its assistant turn by turn. What the
upstream saw is asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import LEFT, instructions
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-camel-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "Report: searched, nothing found yet."
STOP = "Stopped by the test's rule after 2 tool calls"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: camel
budgets:
  - agents: ["camel-budget*"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["camel-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{STOP}"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("camel"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def url(sidecar: RunningServer, agent: str) -> str:
    """What a user sets as the model's ``url`` to name the agent (docs/agents.md)."""
    return f"{sidecar.url('model')}/agent/{agent}/v1"


def run_camel(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
              mode: str = "url", **extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One invocation of the driver, its model at ``url(agent)``: what it printed and the
    upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"camel-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "ENDPOINT_TASK": f"Find the file. (case {case})", "CAMEL_URL": url(sidecar, agent),
           **extra}
    result = drive_command("camel", "endpoint_camel", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(index: int, body: dict[str, Any]) -> fakellm.Step:
    return fakellm.looping("search", lambda i: {"q": f"term {i}"}, REPORT)(index, body)


def test_an_abort_is_answered_with_the_stop_note_which_ends_its_step(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-abort", searching)
    print(said, len(requests))
    run = the_ended_run(sidecar, before)
    print(run)
    assert 0


def test_an_abort_as_the_apis_error(llm: FakeLLM, tmp_path: Path,
                                    model_relay: str) -> None:  # noqa: F811
    with endpoint_with_pack(tmp_path, PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        said, requests = run_camel(sidecar, llm, "camel-abort", searching)
        print(said, len(requests))
        run = the_ended_run(sidecar, before)
        print(run)
    assert 0


def test_its_own_iteration_limit(sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_camel(sidecar, llm, "camel-limited", searching,
                               CAMEL_MAX_ITERATION="2")
    print(said, len(requests))
    runs = new_runs(sidecar, before, lambda runs: True)
    print(runs)
    assert 0


def test_role_playing(sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    lead = llm.script(f"camel-lead-{next(_CASES)}", fakellm.steps(
        fakellm.answer("Instruction: search for the file.\nInput: None"),
        fakellm.answer("Instruction: search once more.\nInput: None"),
        fakellm.answer("CAMEL_TASK_DONE")))
    said, requests = run_camel(sidecar, llm, "camel-budget-researcher", searching,
                               "roleplay", CAMEL_USER_MODEL=lead,
                               CAMEL_USER_URL=url(sidecar, "camel-budget-lead"))
    print(said)
    for body in requests + llm.requests(lead):
        print(json.dumps(body)[:600])
        print(LEFT.findall(instructions(body)))
    runs = new_runs(sidecar, before, lambda runs: True)
    print(json.dumps(runs)[:3000])
    assert 0
