"""AgentScope 2's ``Agent`` (driver ``endpoint_agentscope``) steered through the model endpoint
by its credential's ``base_url`` (docs/agents.md's lines), on both relays, beyond what
test_model_endpoint_frameworks checks of every agent by ``OPENAI_BASE_URL`` (counts, a budget of
3, a loop wound down): a rule's abort, and the agent traced by its own ``TracingMiddleware`` at
once (its spans and the endpoint's calls one run, each model call counted once). What the
upstream saw is asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_text_actions import run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-agentscope-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
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
                   mode: str = "run") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ``Agent.reply``, named ``agent`` by its credential's base URL (:func:`settings`);
    ``mode`` ``traced`` or ``traced_stream``: its spans exported to the sidecar too. Returns
    what the driver printed and the upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"agentscope-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           "AS_SETTINGS": json.dumps(settings(f"{sidecar.url('model')}/agent/{agent}/v1",
                                              model))}
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
