"""fast-agent (``fast-agent-mcp`` 0.2.36, driver ``endpoint_fast_agent``): an agent declared by
``@fast.agent(...)``, its tool ``search`` from a real stdio MCP server (the ``mcp`` SDK's
``FastMCP``, ``drivers/fast_agent_files_server.py``, which fast-agent starts and whose tool
appends to ``ran.log`` in the agent's working directory), run by ``fast.run()`` and
``agent.send(task)``, steered through the model endpoint by its base URL alone: in its
``fastagent.config.yaml`` (``openai.base_url``, ``anthropic.base_url``) as its docs say, or
by ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (the providers' clients read them when the
config sets none). Its OpenAI provider streams Chat Completions; its Anthropic provider
streams Messages. On both relays: one run per ``send`` with its counts, a budget of 3 counted
down truly at each request then the report as the output, a loop wound down then stopped, a
rule's abort answered, its own ``max_iterations``. What the upstream saw is asserted at each
request; nothing waits for a directive.

mcp-agent (lastmile-ai's ``mcp-agent`` 0.2.6, driver ``endpoint_mcp_agent``, venv
``mcp_agent``: its package is ``mcp_agent`` too, so it cannot share fast-agent's): an
``MCPApp``'s ``Agent`` on the same stdio MCP server, its ``OpenAIAugmentedLLM`` (Chat
Completions, not streamed) asked by ``generate_str``, pointed by its ``mcp_agent.config.yaml``'s
``openai.base_url``: counts, budget, loop, abort, its own ``max_iterations``, on both relays.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, DRIVERS, clean_environ, venv_python
from tests.frameworks.test_model_endpoint_frameworks import (
    ANSWER,
    GRACE_LEFT,
    LEFT,
    LOOP_NOTE,
    REPORT,
    Agent,
    counting,
    instructions,
    repeating,
    searching,
)
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-fast-agent-0123456789abcdefSECRET"
STOPPED = "The agent-watchdog stopped this run"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: fast-agent
budgets:
  - agents: ["fast-agent-budget*", "mcp-agent-budget*"]
    max_tool_calls: 3
  - agents: ["fast-agent-limit*", "mcp-agent-limit*"]
    max_iterations: 3
rules:
  - name: two-calls-then-abort
    agents: ["fast-agent-abort*", "mcp-agent-abort*"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
AGENT = Agent("fast_agent", "endpoint_fast_agent", "send")
PROVIDERS = ("openai", "anthropic")
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("fast-agent"), PACK, llm.base_url,
                            model_relay,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1")) as server:
        yield server


def config(endpoint: str, agent: str, provider: str, model: str, server: str,
           python: str) -> str:
    """What a user writes in ``fastagent.config.yaml`` to point fast-agent's ``provider``
    (``openai`` or ``anthropic``) at the model endpoint ``endpoint``, named ``agent``, its
    tools from the stdio MCP server ``server`` (run by ``python``). The tests run it so, and
    docs/agents.md shows it (``fast-agent-config``, checked in tests/test_docs.py)."""
    base = f"{endpoint}/agent/{agent}" + ("/v1" if provider == "openai" else "")
    return f"""\
default_model: {provider}.{model}
{provider}:
  base_url: {base}
mcp:
  servers:
    files:
      command: {python}
      args: ["{server}"]
"""


def run_fast_agent(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                   tmp_path: Path, provider: str = "openai", by_env: bool = False,
                   own_limit: int | None = None, mode: str = "send", otlp: str | None = None
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ``send`` of fast-agent (``mode``: the driver's) in a working directory of its own
    under ``tmp_path`` (its config, its MCP server's ``ran.log``), on a model scripted by
    ``script``, named ``agent``;
    ``by_env``: the base URL by the provider's environment variable, not the config;
    ``own_limit``: its ``max_iterations``; ``otlp``: its OpenTelemetry on (``otel.enabled``),
    sent to that OTLP/HTTP traces URL. Returns what the driver printed and the upstream's
    requests."""
    case = next(_CASES)
    model = llm.script(f"fast-agent-{agent}-{case}", script)
    work = tmp_path / f"work{case}"
    work.mkdir()
    endpoint = sidecar.url("model")
    python = str(venv_python("fast_agent"))
    text = config(endpoint, agent, provider, model,
                  str(DRIVERS / "fast_agent_files_server.py"), python)
    env = {**clean_environ("ANTHROPIC_"), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
           "OTEL_SDK_DISABLED": "true", "HOME": str(tmp_path),
           f"{provider.upper()}_API_KEY": KEY, "ENDPOINT_TASK": f"Find the file. (case {case})"}
    if by_env:
        base_line = next(line for line in text.splitlines() if "base_url" in line)
        text = text.replace(base_line + "\n", "")
        env[f"{provider.upper()}_BASE_URL"] = base_line.split(": ", 1)[1]
    if otlp is not None:
        text += f"otel:\n  enabled: true\n  otlp_endpoint: {otlp}\n"
        del env["OTEL_SDK_DISABLED"]
    (work / "fastagent.config.yaml").write_text(text)
    if own_limit is not None:
        env["ENDPOINT_OWN_LIMIT"] = str(own_limit)
    result = subprocess.run([python, str(DRIVERS / "endpoint_fast_agent.py"), mode],
                            cwd=work, env=env, capture_output=True, text=True,
                            timeout=DRIVER_TIMEOUT, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"fast-agent exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"fast-agent printed no outcome:\n{result.stdout[-3000:]}"
    return json.loads(lines[-1]), llm.requests(model)


def output_of(ran: list[str], answer: str) -> str:
    """What fast-agent's ``send`` returns for a turn that ran the tool with ``ran`` then
    answered ``answer``: the text of every tool result of the turn, then the answer's (its
    ``_openai_completion`` / ``_anthropic_completion`` gather both into one message)."""
    return "\n".join([*(f"search #{n}: no file matches {term!r}"
                         for n, term in enumerate(ran, 1)), answer])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_run_per_send_with_its_counts(sidecar: RunningServer, llm: FakeLLM,
                                          tmp_path: Path, provider: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent", counting(AGENT), tmp_path,
                                    provider)
    assert said == {"ran": ["alpha", "beta"], "output": output_of(["alpha", "beta"], ANSWER)}
    assert len(requests) == 3
    assert all(body["stream"] for body in requests)
    assert not any("agent-watchdog" in json.dumps(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"],
            run["terminal_state"], run["final_output"]) == (
        "fast-agent", 3, 2, 0, "completed", ANSWER), run


@pytest.mark.parametrize("provider", PROVIDERS)
def test_budget_counts_down_then_the_report_is_the_answer(sidecar: RunningServer, llm: FakeLLM,
                                                          tmp_path: Path, provider: str) -> None:
    """A budget of 3 tool calls: the true number left in the instructions of each request,
    3 MCP tools run, the 4th request offers no tools and its answer, the report, ends the
    turn (the output's last line, the run's final output), ``tool_limit_reached``."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-budget", searching(), tmp_path,
                                    provider)
    ran = ["term 0", "term 1", "term 2"]
    assert said == {"ran": ran, "output": output_of(ran, REPORT)}
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    assert "all 3 tool calls used" in instructions(requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "tool_limit_reached", REPORT), run
    assert len(llm.requests(requests[0]["model"])) == 4  # nothing more upstream


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_base_url_by_the_providers_environment_variable(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, provider: str) -> None:
    """No ``base_url`` in the config: the provider's client reads ``OPENAI_BASE_URL`` /
    ``ANTHROPIC_BASE_URL``; steered the same (the budget of 3)."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-budget-env", searching(),
                                    tmp_path, provider, by_env=True)
    assert said["ran"] == ["term 0", "term 1", "term 2"]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        "fast-agent-budget-env", 3, "tool_limit_reached", REPORT), run


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, provider: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-loop", repeating(), tmp_path,
                                    provider)
    assert said == {"ran": ["the file"] * 6, "output": output_of(["the file"] * 6, REPORT)}
    assert len(requests) == 7
    assert [LOOP_NOTE in instructions(body) for body in requests[:6]] == [False] * 4 + [True] * 2
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [
        []] * 4 + [["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        6, "loop_detected", REPORT), run
    assert len(llm.requests(requests[0]["model"])) == 7  # nothing upstream after the final


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_abort_is_answered_with_the_stop_note_which_ends_the_turn(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, provider: str) -> None:
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-abort", searching(), tmp_path,
                                    provider)
    assert said["ran"] == ["term 0", "term 1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    last = said["output"].split("\n", 2)[-1]
    assert last.startswith(f"{STOPPED}: Stopped by the test's rule after 2 tool calls"), said
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_own_max_iterations_ends_the_turn_on_a_tool_call_unseen(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``RequestParams(max_iterations=3)`` undeclared: fast-agent's loop makes at most 3
    requests and returns what it has, the tools of the 3rd answer run and no request after
    them, no word of its limit in any request: the run waits for the call it last handed over
    (``abandoned`` at ``run_end_timeout``), and the user's output is tool results alone."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-own-limit", searching(),
                                    tmp_path, own_limit=3)
    ran = ["term 0", "term 1", "term 2"]
    assert said == {"ran": ran, "output": output_of(ran, "").rstrip("\n")}
    assert len(requests) == 3 and all(fakellm.offers_tools(body) for body in requests)
    assert not any("agent-watchdog" in json.dumps(body) for body in requests)
    runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
            if run["id"] not in before]
    assert [(run["state"], run["iterations"], run["tool_calls"], run["terminal_state"])
            for run in runs] == [("active", 3, 2, None)], runs


def test_its_own_max_iterations_declared_as_the_runs_model_call_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The same limit declared (``max_iterations: 3`` in the pack, the count of model calls
    fast-agent's ``max_iterations`` allows): the 3rd request is the run's final one, tools
    withdrawn, its answer the report that ends fast-agent's turn; ``tool_limit_reached``."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-limit", searching(), tmp_path,
                                    own_limit=3)
    assert said == {"ran": ["term 0", "term 1"], "output": output_of(["term 0", "term 1"],
                                                                    REPORT)}
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, False]
    assert "Tools are withdrawn" in instructions(requests[-1])
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["has_final_answer"], run["final_output"]) == (
        3, 2, "tool_limit_reached", True, REPORT), run



def test_two_sends_on_one_agent_are_two_runs_each_on_its_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Two ``send`` calls on one agent (its history kept): the second's conversation goes on
    from the first's answer with a new user message, a run of its own, counted down from 3
    again; each ends ``tool_limit_reached`` with the report."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-budget-twice", searching(),
                                    tmp_path, mode="twice")
    assert said["ran"] == ["term 0", "term 1", "term 2", "term 4", "term 5", "term 6"]
    assert said["output"].endswith("\n" + REPORT)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []] * 2
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False] * 2
    assert requests[4]["messages"][-1]["role"] == "user"
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 and all(
        run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in runs) == [
        (4, 3, "tool_limit_reached", REPORT)] * 2, runs


def test_a_chain_is_a_run_per_agent(sidecar: RunningServer, llm: FakeLLM,
                                    tmp_path: Path) -> None:
    """A ``@fast.chain`` of the researcher (the search tool) and a writer (none): the
    researcher's run ends at its budget with the report; the writer's conversation (the
    researcher's output its user message, no tools offered, so no countdown) is a run of its
    own, ``completed`` with the chain's output."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if "write the report" in instructions(body):
            return fakellm.answer(ANSWER)
        return searching()(index, body)

    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-budget-chain", pick, tmp_path,
                                    mode="chain")
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": ANSWER}
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], [], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False] * 2
    # the writer's task: the researcher's whole output, its tool results and the report
    assert [part["text"] for part in requests[-1]["messages"][-1]["content"]] == [
        *output_of(["term 0", "term 1", "term 2"], REPORT).split("\n", 3)[:3], REPORT]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 and all(
        run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in runs) == [
        (1, 0, "completed", ANSWER), (4, 3, "tool_limit_reached", REPORT)], runs



def test_known_gap_its_own_opentelemetry_to_the_sidecar_reads_no_tool_calls(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap: with its OpenTelemetry on and sent to the sidecar (``otel.enabled``,
    ``otlp_endpoint`` the sidecar's OTLP/HTTP), the steering holds (the countdown true at
    each request, 3 tools, the final request without tools, the report its answer), but the
    run is keyed by fast-agent's trace and read from its spans: 4 model calls, no tool call,
    its budget not spent, ``completed`` where it is ``tool_limit_reached``. Its spans: an
    ``endpoint`` root, ``Agent: 'researcher' generate``, an ``openai.chat`` per model call
    (OpenLLMetry's, read), and each tool call only as fast-agent's own ``MCP Tool:
    files/search``, a name no convention reads and no attribute (OpenLLMetry's MCP
    instrumentation, installed, emits no tool span for its MCP client)."""
    before = run_ids(sidecar)
    said, requests = run_fast_agent(sidecar, llm, "fast-agent-budget-otel", searching(),
                                    tmp_path, otlp=f"{sidecar.otlp_http}/v1/traces")
    ran = ["term 0", "term 1", "term 2"]
    assert said == {"ran": ran, "output": output_of(ran, REPORT)}
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    run = the_ended_run(sidecar, before)
    assert run["id"].startswith("trace:"), run
    assert (run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"],
            run["budget"]["remaining_tool_calls"]) == (4, 0, "completed", REPORT, 3), run


# -- mcp-agent (lastmile-ai) --------------------------------------------------------------------

def mcp_agent_config(endpoint: str, agent: str, model: str, server: str, python: str) -> str:
    """What a user writes in ``mcp_agent.config.yaml`` to point mcp-agent's OpenAI LLM at the
    model endpoint ``endpoint``, named ``agent``, its tools from the stdio MCP server
    ``server`` (run by ``python``)."""
    return f"""\
execution_engine: asyncio
mcp:
  servers:
    files:
      command: {python}
      args: ["{server}"]
openai:
  base_url: {endpoint}/agent/{agent}/v1
  default_model: {model}
"""


def run_mcp_agent(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                  tmp_path: Path, own_limit: int | None = None
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ``generate_str`` of mcp-agent in a working directory of its own (its config, the MCP
    server's ``ran.log``), on a model scripted by ``script``, named ``agent``; ``own_limit``:
    its ``max_iterations``. Returns what the driver printed and the upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"mcp-agent-{agent}-{case}", script)
    work = tmp_path / f"work{case}"
    work.mkdir()
    python = str(venv_python("mcp_agent"))
    (work / "mcp_agent.config.yaml").write_text(mcp_agent_config(
        sidecar.url("model"), agent, model, str(DRIVERS / "fast_agent_files_server.py"), python))
    env = {**clean_environ("ANTHROPIC_"), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
           "OTEL_SDK_DISABLED": "true", "HOME": str(tmp_path), "OPENAI_API_KEY": KEY,
           "ENDPOINT_TASK": f"Find the file. (case {case})"}
    if own_limit is not None:
        env["ENDPOINT_OWN_LIMIT"] = str(own_limit)
    result = subprocess.run([python, str(DRIVERS / "endpoint_mcp_agent.py"), "generate"],
                            cwd=work, env=env, capture_output=True, text=True,
                            timeout=DRIVER_TIMEOUT, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"mcp-agent exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert lines, f"mcp-agent printed no outcome:\n{result.stdout[-3000:]}"
    return json.loads(lines[-1].removeprefix("OUTCOME ")), llm.requests(model)


def test_mcp_agent_one_run_with_its_counts(sidecar: RunningServer, llm: FakeLLM,
                                           tmp_path: Path) -> None:
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent", counting(AGENT), tmp_path)
    assert said["ran"] == ["alpha", "beta"]
    assert len(requests) == 3 and not any(body.get("stream") for body in requests)
    assert not any("agent-watchdog" in json.dumps(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"],
            run["terminal_state"], run["final_output"]) == (
        "mcp-agent", 3, 2, 0, "completed", ANSWER), run
    assert said["output"] == ANSWER


def test_mcp_agent_budget_counts_down_then_the_report_is_the_output(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent-budget", searching(), tmp_path)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, True, False]
    assert said["ran"] == ["term 0", "term 1", "term 2"]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "tool_limit_reached", REPORT), run
    assert said["output"] == REPORT


def test_mcp_agent_loop_wound_down_then_stopped_with_an_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent-loop", repeating(), tmp_path)
    assert said == {"ran": ["the file"] * 6, "output": REPORT}
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [
        []] * 4 + [["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        6, "loop_detected", REPORT), run
    assert len(llm.requests(requests[0]["model"])) == 7


def test_mcp_agent_abort_answered_with_the_stop_note(sidecar: RunningServer, llm: FakeLLM,
                                                     tmp_path: Path) -> None:
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent-abort", searching(), tmp_path)
    assert said["ran"] == ["term 0", "term 1"] and len(requests) == 2
    assert said["output"].startswith(
        f"{STOPPED}: Stopped by the test's rule after 2 tool calls"), said
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_mcp_agent_own_max_iterations_unseen_then_declared(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``RequestParams(max_iterations=3)``: mcp-agent makes at most 3 requests, runs the 3rd
    answer's tools and returns an empty string, no request more: undeclared, the run waits
    for the call it last handed over; declared (``max_iterations: 3`` in the pack), the 3rd
    request is the final one, tools withdrawn, and the report is its output."""
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent-own-limit", searching(), tmp_path,
                                   own_limit=3)
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": ""}
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3
    runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
            if run["id"] not in before]
    assert [(run["state"], run["iterations"], run["tool_calls"]) for run in runs] == [
        ("active", 3, 2)], runs
    before = run_ids(sidecar)
    said, requests = run_mcp_agent(sidecar, llm, "mcp-agent-limit", searching(), tmp_path,
                                   own_limit=3)
    assert said == {"ran": ["term 0", "term 1"], "output": REPORT}
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["has_final_answer"]) == (3, 2, "tool_limit_reached", True), run
