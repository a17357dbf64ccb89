"""Loops across agents (DESIGN §13) with the real OpenAI Agents SDK, traced by OpenInference
and exported over OTLP to a real sidecar (driver ``openai_agents_sdk``).

``ping_pong``: the triage agent hands the request off to billing, billing hands it back, with the
same user request every time, eight round trips, until triage answers. Every run on
its own is healthy (one model call, one handoff); the sidecar sees the trace's runs — the triage
run and a child run per later agent — as the cycle ``agents-triage → agents-billing`` and, at 3
repeats, tells the triage run (the one the handoffs hang from) to wind down. ``chain``: triage
→ billing → researcher, who answers: nothing is flagged. ``ping_pong_limit``: triage and billing
hand off until ``max_turns`` stops the loop; the SDK then opens one more triage agent span, with
nothing below it, that fails with ``MaxTurnsExceeded``: a child run of its own, and the trace's
run keeps its agent (triage) and its model call, and ends at that limit (as the child that ended
last did, the way a handing-off run takes its answer from it).
"""

from __future__ import annotations

from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect as Run
from tests.frameworks.harness import check_recorded, check_runs, replay, run_driver
from tests.frameworks.scenarios import ANSWER
from tests.harness import RunningServer
from tests.recorded import recording

DRIVER = "openai_agents_sdk"
TRIAGE, BILLING, RESEARCHER = "agents-triage", "agents-billing", "agents-researcher"
DELAY = 0.25  # seconds per model response: the agents' turns take time, as a real model's do
ROUND_TRIPS = 8  # in ping_pong: triage answers at its 8th turn
THRESHOLD = 3  # agent-ping-pong: session.agent_cycle_repeats >= 3
ROUND_TRIPS_AFTER = 2  # the loop is caught within this many round trips after the threshold
SCRIPTS = {
    "ping_pong": {"": fakellm.steps(*[fakellm.call("transfer_to_agents_billing")]
                                    * (ROUND_TRIPS - 1), fakellm.answer(ANSWER)),
                  "-billing": fakellm.steps(fakellm.call("transfer_to_agents_triage"))},
    "ping_pong_limit": {"": fakellm.looping("transfer_to_agents_billing", lambda _i: {}),
                        "-billing": fakellm.looping("transfer_to_agents_triage", lambda _i: {})},
    "chain": {"": fakellm.steps(fakellm.call("transfer_to_agents_billing")),
              "-billing": fakellm.steps(fakellm.call("transfer_to_agents_researcher")),
              "-sub": fakellm.steps(fakellm.answer(ANSWER))},
}
# The runs the sidecar shows: the trace's run (the first triage agent's) is the one the handoffs
# hang from: it gets the wind-down and ends as the rule said (its answer is the last triage
# run's). Every later agent is a child run: one model call, asking for the next handoff (a tool
# call) — the last triage's answers.
PING_PONG = [Run(TRIAGE, 1, 1, 0, "loop_detected", True, "agent-ping-pong", None)] + [
    Run(agent, 1, 1, 0, "no_response", False, None, TRIAGE)
    for agent in [BILLING, TRIAGE] * (ROUND_TRIPS - 2) + [BILLING]] + [
    Run(TRIAGE, 1, 0, 0, "completed", True, None, TRIAGE)]
# max_turns=4: triage, billing, triage, billing; then the failed triage span, nothing below it.
PING_PONG_LIMIT = [Run(TRIAGE, 1, 1, 0, "tool_limit_reached", False, "MaxTurnsExceeded",
                       None)] + [
    Run(agent, 1, 1, 0, "no_response", False, None, TRIAGE)
    for agent in (BILLING, TRIAGE, BILLING)] + [
    Run(TRIAGE, 0, 0, 0, "tool_limit_reached", False, "MaxTurnsExceeded", TRIAGE)]
CHAIN = [Run(TRIAGE, 1, 1, 0, "completed", True, None, None),
         Run(BILLING, 1, 1, 0, "no_response", False, None, TRIAGE),
         Run(RESEARCHER, 1, 0, 0, "completed", True, None, TRIAGE)]


def directives(sidecar: RunningServer, rule: str = "agent-ping-pong") -> list[dict[str, Any]]:
    """Every directive of ``rule`` the sidecar has issued, to any run it knows (those decided
    so far stored first: the API reads them from the store, written moments after the step)."""
    sidecar.stored()
    found = []
    for run in sidecar.get_json("/v1/runs?limit=100")["runs"]:
        polled = sidecar.get_json(f"/v1/runs/{run['id']}/directives?after=0")
        found += [d for d in polled["directives"] if d["rule"] == rule]
    return found


def check_ping_pong(runs: list[dict[str, Any]], issued: list[dict[str, Any]]) -> None:
    """The triage run — the parent of the cycling runs — got the wind-down, naming the cycle."""
    trace_run = runs[0]
    assert [d["run_id"] for d in issued] == [trace_run["id"]], issued
    assert issued[0]["agent"] == TRIAGE  # (the run's agent when it was told)
    wind_down = issued[0]
    assert wind_down["action"] == "wind_down" and wind_down["terminal_state"] == "loop_detected"
    assert wind_down["message"] == (
        f"Loop across agents: {TRIAGE} → {BILLING} 3 times in a row with the same input — stop "
        "handing off or delegating; answer with what you have")
    assert f"{TRIAGE} → {BILLING}" in wind_down["report_prompt"]


def test_ping_pong_is_caught_and_the_orchestrator_wound_down(sidecar: RunningServer,
                                                              llm: FakeLLM) -> None:
    model = f"{DRIVER}-ping_pong"
    seen: list[int] = []  # at each request of the triage agent: the directives issued by then

    def at_triage_request(_index: int) -> None:
        seen.append(len(directives(sidecar)))

    llm.script(model, SCRIPTS["ping_pong"][""], delay=DELAY, on_request=at_triage_request)
    llm.script(model + "-billing", SCRIPTS["ping_pong"]["-billing"], delay=DELAY)
    result = run_driver("openai_agents", DRIVER, "ping_pong", sidecar, llm, model)
    assert f"answer: {ANSWER}" in result.stdout, result.stdout

    runs = check_runs(sidecar, PING_PONG)
    check_ping_pong(runs, directives(sidecar))
    # Triage's request n starts round trip n. The third repeat is complete when billing's third
    # run hands back (round trip 4 starts); the directive is there by round trip 4 + 2 at most.
    assert len(seen) == ROUND_TRIPS
    caught = next(trip for trip, count in enumerate(seen, 1) if count)
    assert caught <= THRESHOLD + 1 + ROUND_TRIPS_AFTER, seen


def test_a_healthy_handoff_chain_is_never_flagged(sidecar: RunningServer, llm: FakeLLM) -> None:
    model = f"{DRIVER}-chain"
    for suffix, script in SCRIPTS["chain"].items():
        llm.script(model + suffix, script)
    run_driver("openai_agents", DRIVER, "chain", sidecar, llm, model)
    check_runs(sidecar, CHAIN)
    assert directives(sidecar, rule="agent-ping-pong") == []


def test_ping_pong_recorded(sidecar: RunningServer) -> None:
    check_recorded(sidecar, DRIVER, "ping_pong", PING_PONG)
    check_ping_pong(check_runs(sidecar, PING_PONG), directives(sidecar))


def test_chain_recorded(sidecar: RunningServer) -> None:
    replay(sidecar, recording(DRIVER, "chain"))
    check_runs(sidecar, CHAIN)
    assert directives(sidecar) == []


def test_the_span_max_turns_fails_leaves_the_trace_run_its_agent(sidecar: RunningServer,
                                                                 llm: FakeLLM) -> None:
    model = f"{DRIVER}-ping_pong_limit"
    for suffix, script in SCRIPTS["ping_pong_limit"].items():
        llm.script(model + suffix, script)
    result = run_driver("openai_agents", DRIVER, "ping_pong_limit", sidecar, llm, model)
    assert "stopped: Max turns (4) exceeded" in result.stdout, result.stdout
    check_runs(sidecar, PING_PONG_LIMIT)


def test_ping_pong_limit_recorded(sidecar: RunningServer) -> None:
    check_recorded(sidecar, DRIVER, "ping_pong_limit", PING_PONG_LIMIT)
