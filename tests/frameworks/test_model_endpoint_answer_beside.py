"""pydantic-ai's output tool (``final_result``, a final-answer tool of the conventions) asked
in one answer beside a call of the agent's function tool, through the model endpoint by base
URL alone, both relays. No request follows either way; what differs is whether the agent runs
the tool first: with its default ``end_strategy="early"`` it ends at once, the tool never run
(its convention's ``answer_ends_first``); with ``"exhaustive"`` it runs the tool, then ends,
as its rule pack says (``work_beside_answer: run``). The run ends at that answer,
``completed``, its output the answer, with the tool calls the agent ran. (Before, the answer
was taken for work: the run was held open for results that never come.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import (
    ANSWER,
    Agent,
    drive,
    run_ids,
    start_sidecar,
    the_new_run,
)
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: beside
budgets:
  - agents: ["exhaustive-*"]
    max_tool_calls: 3
    work_beside_answer: run       # pydantic-ai's end_strategy="exhaustive"
  - agents: ["*"]
    max_tool_calls: 3
"""


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    yield from start_sidecar(tmp_path_factory.mktemp("beside"), llm, PACK, model_relay)


def search_beside(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The search and the answer, in one answer."""
    return fakellm.Step(tool_calls=(fakellm.ToolCall("search", {"q": "alpha"}),
                                    fakellm.ToolCall("final_result", {"answer": ANSWER})))


@pytest.mark.parametrize(("strategy", "named", "ran"), [
    ("early", "", []), ("exhaustive", "exhaustive-pydantic", ["alpha"])])
def test_its_output_beside_work_ends_the_run_counting_what_the_agent_ran(
        budgeted: RunningServer, llm: FakeLLM, strategy: str, named: str,
        ran: list[str]) -> None:
    agent = Agent("pydantic_ai", "endpoint_pydantic_ai_strategy", strategy)
    model = llm.script(f"beside-{strategy}", search_beside)
    before = run_ids(budgeted)
    extra = {"OPENAI_BASE_URL": f"{budgeted.url('model')}/agent/{named}/v1"} if named else {}
    assert drive(agent, budgeted, model, extra) == {"ran": ran, "output": ANSWER}
    assert len(llm.requests(model)) == 1
    run = the_new_run(budgeted, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        len(ran), "completed", ANSWER), run
