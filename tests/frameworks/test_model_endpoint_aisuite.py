"""aisuite (``aisuite`` 0.2.0, driver ``endpoint_aisuite``) steered through the model endpoint
by its provider config's ``base_url`` alone, on both relays, beyond what
test_model_endpoint_frameworks checks of every agent (counts, a budget of 3, a loop wound
down) and test_model_endpoint_own_limits of its own turn limit (``max_turns``): a rule's
abort, and a budget by the agent's name in the provider config's ``base_url``. Its tool loop
runs inside ``client.chat.completions.create``: ``max_turns=N`` allows N model calls, the tools
of each answer run, and at N it returns the last answer whatever it holds (its tool calls
run, no call more). What the upstream saw is asserted at each request; nothing waits for a
directive."""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import instructions
from tests.frameworks.test_model_endpoint_text_actions import LEFT, new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-aisuite-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "REPORT: searched 3 times; the rest remains."
STOPPED = "The agent-watchdog stopped this run"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: aisuite
budgets:
  - agents: ["aisuite-budget"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["aisuite-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("aisuite"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def provider_configs(base_url: str) -> dict[str, Any]:
    """What a user gives aisuite's ``Client`` to point its OpenAI provider at the model endpoint
    ``base_url``: its provider configs. The tests run it so, and docs/agents.md shows it
    (``aisuite-config``, checked in tests/test_docs.py)."""
    return {"openai": {"base_url": base_url}}


def run_aisuite(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                max_turns: int = 10) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ``create`` call with ``max_turns``, its provider config's ``base_url`` the model
    endpoint named ``agent``. Returns what the driver printed and the upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"aisuite-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "AISUITE_CONFIGS": json.dumps(provider_configs(
               f"{sidecar.url('model')}/agent/{agent}/v1")),
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           "ENDPOINT_OWN_LIMIT": str(max_turns)}
    result = drive_command("aisuite", "endpoint_aisuite", "create", base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(index: int, body: dict[str, Any]) -> fakellm.Step:
    """A new term while it has tools; the report when asked with none."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("search", q=f"term {index}")


def test_an_abort_is_answered_with_the_stop_note_which_is_its_output(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_aisuite(sidecar, llm, "aisuite-abort", searching)
    assert said["ran"] == ["term 0", "term 1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert said["output"].startswith(f"{STOPPED}: Stopped by the test's rule after 2 tool calls")
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_a_budget_counts_down_through_its_provider_configs_base_url(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The budget of 3 by the agent's name in the provider config's ``base_url``: counted down
    at each request, the 4th withdraws the tools, the report is ``create``'s answer."""
    before = run_ids(sidecar)
    said, requests = run_aisuite(sidecar, llm, "aisuite-budget", searching)
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    runs = new_runs(sidecar, before, lambda runs: all(run["state"] == "ended" for run in runs))
    assert [(run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (3, "tool_limit_reached")], runs
