"""AgentScope 2's ``Agent`` (driver ``endpoint_agentscope``) steered through the model endpoint
by its credential's ``base_url`` (docs/agents.md's lines), on both relays, beyond what
test_model_endpoint_frameworks checks of every agent by ``OPENAI_BASE_URL`` (counts, a budget of
3, a loop wound down): a rule's abort; its own ``max_iters``, alone and declared as the pack's
model-call budget (docs/agents.md's pack); and the agent traced by its own ``TracingMiddleware``
at once (its spans and the endpoint's calls one run, each model call counted once). What the
upstream saw is asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.steering import (
    check_ended_at_own_limit,
    check_last_model_call_final,
    documented_pack,
)
from tests.frameworks.test_model_endpoint_text_actions import run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-agentscope-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "Report: searched, nothing found yet."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: agentscope
rules:
  - name: two-calls-then-abort
    agents: ["agentscope-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)
searching = fakellm.looping("search", lambda index: {"q": f"term {index}"}, REPORT)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("agentscope"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def settings(base_url: str, model: str) -> dict[str, dict[str, object]]:
    """What a user sets to point AgentScope's ``OpenAIChatModel`` at the model endpoint: its
    ``OpenAICredential``'s keyword arguments (the key aside) and the model's. The tests run it
    so, and docs/agents.md shows it (``agentscope-config``, checked in tests/test_docs.py)."""
    return {"credential": {"base_url": base_url}, "model": {"model": model}}


def run_agentscope(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                   mode: str = "run", **extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ``Agent.reply``, named ``agent`` by its credential's base URL (:func:`settings`);
    ``mode`` ``traced`` or ``traced_stream``: its spans exported to the sidecar too. Returns
    what the driver printed and the upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"agentscope-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           "AS_SETTINGS": json.dumps(settings(f"{sidecar.url('model')}/agent/{agent}/v1",
                                              model)), **extra}
    if mode.startswith("traced"):
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=sidecar.otlp_http,
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_BSP_SCHEDULE_DELAY="50")
    else:
        env["OTEL_SDK_DISABLED"] = "true"
    result = drive_command("agentscope", "endpoint_agentscope", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def test_an_abort_is_answered_with_the_stop_note_which_ends_its_reply(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_agentscope(sidecar, llm, "agentscope-abort", fakellm.looping(
        "search", lambda index: {"q": f"term {index}"}))
    assert said["ran"] == ["term 0", "term 1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert "Stopped by the test's rule after 2 tool calls" in said["output"]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


@pytest.mark.parametrize("mode", ["traced", "traced_stream"])
def test_traced_at_once_its_spans_and_the_endpoints_calls_are_one_run(
        sidecar: RunningServer, llm: FakeLLM, mode: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_agentscope(
        sidecar, llm, "agentscope-traced",
        fakellm.tools_then_answer("search", [{"q": "a"}, {"q": "b"}], ANSWER), mode)
    assert said == {"ran": ["a", "b"], "output": ANSWER}
    assert len(requests) == 3
    # each request after the first ends with the tool's result of the call before it
    assert [body["messages"][-1]["role"] for body in requests] == ["user", "tool", "tool"], [
        [message["role"] for message in body["messages"]] for body in requests]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (3, 2, "completed", ANSWER), run
    # its spans are in it: they name the agent (the endpoint knows it as agentscope-traced)
    assert run["agent"] == "researcher" and run["signals"]["tools"] == {"search": 2}, run



def test_its_own_iteration_limit_alone_ends_at_the_limit_its_reminder_names(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``max_iters`` (3) with no model-call budget declared: after its 3rd reasoning-acting
    iteration AgentScope asks once more itself, tools withdrawn (``tool_choice: none``, a
    ``<system-reminder>`` user message saying it has reached its maximum: the conventions'
    ``limit_prompts``), and the answer is its reply: the run ends ``tool_limit_reached``,
    answered, its reason ``max_iters``."""
    before = run_ids(sidecar)
    said, requests = run_agentscope(sidecar, llm, "agentscope-own", searching, AS_MAX_ITERS="3")
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}
    assert [body.get("tool_choice") for body in requests] == [None] * 3 + ["none"]
    assert "maximum of 3 reasoning-acting iterations" in json.dumps(requests[-1]["messages"][-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"], run["terminal_reason"],
            run["has_final_answer"], run["final_output"]) == (
        4, 3, "tool_limit_reached", "max_iters", True, REPORT), run


@pytest.mark.parametrize("mode", ["run", "stream"])
def test_its_own_iteration_limit_declared_as_the_packs_ends_at_the_budget_with_the_report(
        llm: FakeLLM, tmp_path: Path, model_relay: str, mode: str) -> None:  # noqa: F811
    """docs/agents.md's pack (``agentscope-limit.yaml``, as pasted): ``max_iterations`` the
    model calls ``max_iters`` allows (its iterations and the one call it makes at its limit to
    ask for the answer). The request with 2 calls left is told so; its last, the one AgentScope
    makes at its limit, is the run's final request, the endpoint's report asked for; its
    answer is the reply, the run ``tool_limit_reached``."""
    pack = documented_pack("agentscope-limit.yaml")
    limit = int(yaml.safe_load(pack)["budgets"][0]["max_iterations"])
    with endpoint_with_pack(tmp_path, pack, llm.base_url, model_relay) as sidecar:
        before = run_ids(sidecar)
        said, requests = run_agentscope(sidecar, llm, "agentscope", searching, mode,
                                        AS_MAX_ITERS=str(limit - 1))
        run = the_ended_run(sidecar, before)
    assert said == {"ran": [f"term {index}" for index in range(limit - 1)], "output": REPORT}
    check_last_model_call_final(requests, limit)
    check_ended_at_own_limit(run, limit, REPORT)
