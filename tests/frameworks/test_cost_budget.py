"""A dollar budget stops a real framework's loop (DESIGN §13), through the model endpoint.

The OpenAI Agents SDK (Chat Completions, in its venv: ``drivers/endpoint_openai_agents.py``)
runs against a real sidecar by ``OPENAI_BASE_URL`` alone, behind it the scripted upstream
(:mod:`tests.frameworks.fakellm`) answering as ``gpt-4o-mini`` — a model genai-prices knows —
with a search on every request that offers tools. A rule pack gives every agent
``max_cost_usd``: each model call is priced from the usage the upstream reported, and once the
run has spent its dollars the next request withdraws the tools and asks for the report, which
is the agent's output; the run ends ``tool_limit_reached``, its reason the cost budget, its
dollars genai-prices' figure for its tokens.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from genai_prices import Usage, calc_price

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import (
    AGENT,
    REPORT,
    Agent,
    drive,
    instructions,
    run_ids,
    searching,
    the_new_run,
)
from tests.harness import RunningServer, http_request, running_server, sidecar_config

MODEL = "gpt-4o-mini"
BUDGET_USD = 0.0002
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: dollars
budgets:
  - agents: ["*"]
    max_cost_usd: {BUDGET_USD}
"""
AGENT_SDK = Agent("openai_agents", "endpoint_openai_agents", "chat")


@pytest.fixture(scope="module")
def dollars(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM
            ) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("dollars")
    pack = tmp / "dollars.yaml"
    pack.write_text(PACK)
    config = sidecar_config(tmp / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_agent_name=AGENT,
                            rules=(str(pack),), eval_interval=0.2)
    with running_server(config) as server:
        yield server


def test_a_dollar_budget_stops_the_agents_loop_with_its_report(
        dollars: RunningServer, llm: FakeLLM) -> None:
    model = llm.script(MODEL, searching())
    before = run_ids(dollars)
    outcome = drive(AGENT_SDK, dollars, model)
    requests = llm.requests(model)
    # the loop would search for ever (30 turns): the dollars stopped it
    assert 1 <= len(outcome["ran"]) < 10 and len(requests) == len(outcome["ran"]) + 1
    assert all(fakellm.offers_tools(body) for body in requests[:-1])
    assert not fakellm.offers_tools(requests[-1])
    last = instructions(requests[-1])
    assert "Tools are withdrawn" in last and "of the cost budget used" in last
    assert outcome["output"] == REPORT  # the report is the agent's output
    run = the_new_run(dollars, before)
    signals = run["signals"]
    assert (run["terminal_state"], run["terminal_reason"], run["has_final_answer"]) == (
        "tool_limit_reached", "budget-cost-exhausted", True), run
    assert run["budget"]["max_cost_usd"] == BUDGET_USD
    assert run["budget"]["remaining_cost_usd"] == 0
    assert signals["unpriced_calls"] == 0
    expected = float(calc_price(Usage(input_tokens=signals["input_tokens"],
                                      output_tokens=signals["output_tokens"]),
                                MODEL).total_price)
    assert signals["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert signals["cost_usd"] >= BUDGET_USD
    status, body = http_request("GET", dollars.api + f"/v1/runs/{run['id']}/report")
    assert status == 200
    report = body.decode()
    assert "**Cost:** USD 0.0" in report
    assert "tool_limit_reached (budget-cost-exhausted)" in report
