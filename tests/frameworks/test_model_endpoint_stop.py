"""After a stop, the upstream gets nothing for that run — however the agent takes the stop
answer (DESIGN §12). pydantic-ai, pointed at the sidecar by base URL alone, validates its
structured output: the default ``ToolOutput`` wants a call of its output tool, and
``PromptedOutput`` a JSON object of its schema, so the stop answer (the note as text, or
``{"code": "watchdog_aborted", ...}``) fails validation and pydantic-ai sends its retry prompt
as a new user message, on the history that holds the stop answer. That request goes on from
the stop: it is the stopped run's, and it gets the API's error carrying the stop note (the
agent's exception shows it), never a new run at the upstream. ``NativeOutput`` (a JSON
schema) gets that error at the stop itself. Both relays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import (
    AGENT,
    Agent,
    drive,
    run_ids,
    start_sidecar,
)
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from tests.test_model_endpoint import STOP_RULE

NOTE = "[stopped: two tool calls are enough]"
# the endpoint tests' stop at two tool calls, for the agent these drivers are named
STOP_PACK = ("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: endpoint-stop\n"
             + STOP_RULE.replace("'stopper'", f"'{AGENT}'"))


@pytest.fixture(scope="module")
def stopping(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    yield from start_sidecar(tmp_path_factory.mktemp("stopping"), llm, STOP_PACK, model_relay)


@pytest.mark.parametrize("mode", ["tool", "prompted", "native"])
def test_a_validation_retry_after_a_stop_reaches_no_upstream(stopping: RunningServer,
                                                            llm: FakeLLM, mode: str) -> None:
    agent = Agent("pydantic_ai", "endpoint_pydantic_ai_output", mode)
    model = llm.script(f"stop-retry-{mode}", fakellm.looping(
        "search", lambda i: {"q": f"term {i}"}))
    before = run_ids(stopping)
    outcome = drive(agent, stopping, model)
    assert outcome["ran"] == ["term 0", "term 1"], outcome
    # the stop's note reaches the agent: in the error it raises
    assert NOTE in outcome["output"], outcome
    assert "watchdog_aborted" in outcome["output"], outcome
    # the upstream got the run's two calls and nothing after the stop: no retry, no new run
    assert len(llm.requests(model)) == 2
    runs = wait_until(lambda: [run for run in stopping.get_json("/v1/runs?limit=1000")["runs"]
                               if run["id"] not in before and run["state"] == "ended"] or None)
    assert len(runs) == 1, runs
    assert run_ids(stopping) - before == {runs[0]["id"]}
