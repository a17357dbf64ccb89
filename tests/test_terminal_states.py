"""Terminal states (DESIGN §7) end to end: runs stopped by the watchdog, by a framework limit,
runs that crashed or never ended, and the same answer from ``GET /v1/runs/{id}`` after a restart
of the sidecar on the same state directory."""

from __future__ import annotations

from pathlib import Path

from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.scripted import ScriptedAgent
from watchdog.core.rules.decision import Action
from watchdog.core.rules.engine import FiredRecord
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import KeySource
from watchdog.shell.clock import ManualClock
from watchdog.shell.config import Config
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store

CUSTOM_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: custom
rules:
  - name: no-deletes
    description: An abort without a terminal_state.
    when: "!run.ended && has(run.tools.delete_branch)"
    action: abort
    message: deleting branches is not allowed here
"""
RUN_END_TIMEOUT = 60.0  # shorter than idle-timeout (300 s): a silent run is abandoned first

Outcome = tuple[str | None, str | None, bool]


def outcome(server: RunningServer, run_id: str) -> Outcome:
    run = server.get_json(f"/v1/runs/{run_id}")
    return run["terminal_state"], run["terminal_reason"], run["has_final_answer"]


def directive_rules(server: RunningServer, run_id: str) -> list[str]:
    found = server.get_json(f"/v1/runs/{run_id}/directives?after=0")["directives"]
    return [d["rule"] for d in found]


def config_for(tmp_path: Path) -> Config:
    pack = tmp_path / "custom.yaml"
    pack.write_text(CUSTOM_PACK)
    return sidecar_config(tmp_path / "state", rules=(str(pack),), eval_interval=3600.0,
                          run_end_timeout=RUN_END_TIMEOUT, rules_watch_interval=0.0)


def stopped_by_the_watchdog(server: RunningServer) -> dict[str, Outcome]:
    otlp = server.otlp_http
    expected: dict[str, Outcome] = {}

    # a rule with a terminal_state decides, whatever the run's own end looks like
    looping = ScriptedAgent(otlp, "error-loop", "builder")
    for attempt in range(5):
        looping.tool("write_file", {"path": f"/tmp/out-{attempt}"},
                     error=f"disk full while writing /tmp/out-{attempt}")
    assert wait_until(lambda: directive_rules(server, "error-loop")) == ["error-loop"]
    looping.finish(error_type="agent_watchdog_client.AbortedByWatchdog")
    expected["error-loop"] = ("loop_detected", "error-loop", False)

    # an abort without a terminal_state ends the run as "aborted"
    deleting = ScriptedAgent(otlp, "custom-abort", "git-bot")
    deleting.tool("delete_branch", {"name": "main"})
    assert wait_until(lambda: directive_rules(server, "custom-abort")) == ["no-deletes"]
    deleting.chat(messages=3, finish_reason="stop")
    deleting.finish(answer="I was stopped before deleting main.")
    expected["custom-abort"] = ("aborted", "no-deletes", True)

    # stopped at the budget with an answer: tool_limit_reached, never completed
    budgeted = ScriptedAgent(otlp, "budget-answered", "explorer", budget={"max_tool_calls": 3})
    for index in range(3):
        budgeted.tool("read_file", {"path": f"/src/{index}.py"})
    # the countdown directives come first: wait for the one that stops the run
    assert "budget-exhausted" in wait_until(
        lambda: "budget-exhausted" in directive_rules(server, "budget-answered")
        and directive_rules(server, "budget-answered"))
    budgeted.chat(messages=8, finish_reason="stop")
    budgeted.finish(answer="Summary of the three files.")
    expected["budget-answered"] = ("tool_limit_reached", "budget-exhausted", True)
    return expected


def stopped_by_the_framework(server: RunningServer) -> dict[str, Outcome]:
    otlp = server.otlp_http
    expected: dict[str, Outcome] = {}
    # pydantic-ai's UsageLimitExceeded ends the agent span: no answer
    limited = ScriptedAgent(otlp, "framework-limit", "researcher")
    limited.tool("search", {"q": "a"})
    limited.chat(messages=4)
    limited.finish(error_type="pydantic_ai.exceptions.UsageLimitExceeded")
    expected["framework-limit"] = ("tool_limit_reached", "UsageLimitExceeded", False)

    # the OpenAI Agents SDK's MaxTurnsExceeded after the model had answered
    answered = ScriptedAgent(otlp, "framework-limit-answered", "researcher")
    answered.chat(messages=4, finish_reason="stop")
    answered.finish(error_type="agents.exceptions.MaxTurnsExceeded")
    expected["framework-limit-answered"] = ("tool_limit_reached", "MaxTurnsExceeded", True)

    # the agent's budget was used up (no rule needed: the framework stopped it, with an answer)
    at_budget = ScriptedAgent(otlp, "announced-budget", "summariser",
                              budget={"max_iterations": 2})
    at_budget.chat(messages=2)
    at_budget.chat(messages=4, finish_reason="stop")
    at_budget.finish(answer="done, at the limit")
    expected["announced-budget"] = ("tool_limit_reached", "budget", True)

    crashed = ScriptedAgent(otlp, "crashed", "researcher")
    crashed.chat(messages=2)
    crashed.finish(error_type="builtins.KeyError")
    expected["crashed"] = ("error", "KeyError", False)

    fine = ScriptedAgent(otlp, "fine", "researcher")
    fine.chat(messages=2, finish_reason="stop")
    fine.finish(answer="42")
    expected["fine"] = ("completed", None, True)

    silent = ScriptedAgent(otlp, "no-answer", "researcher")
    silent.tool("search", {"q": "b"})
    silent.finish()
    expected["no-answer"] = ("no_response", None, False)
    return expected


def test_terminal_states_and_their_replay_after_a_restart(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    clock = ManualClock()
    with running_server(config, clock=clock) as server:
        expected = stopped_by_the_watchdog(server) | stopped_by_the_framework(server)

        # never ended: the agent process died mid-run, nothing more arrives
        vanished = ScriptedAgent(server.otlp_http, "vanished", "researcher")
        vanished.chat(messages=2, finish_reason="stop")
        vanished.close()
        # stopped by the watchdog and then never ended: the forced state wins over abandoned
        stuck = ScriptedAgent(server.otlp_http, "stuck-loop", "researcher")
        for page in range(5):
            stuck.tool("fetch", {"url": f"https://example.com/{page}"},
                       error="HTTP 503 from upstream")
        assert wait_until(lambda: directive_rules(server, "stuck-loop")) == ["error-loop"]
        stuck.close()
        assert server.get_json("/v1/runs/vanished")["state"] == "active"

        clock.advance(RUN_END_TIMEOUT + 1)
        assert server.server.service is not None
        server.call(server.server.service.tick)
        expected["vanished"] = ("abandoned", "run_end_timeout", True)
        expected["stuck-loop"] = ("loop_detected", "error-loop", False)

        seen = {run_id: outcome(server, run_id) for run_id in expected}
        assert seen == expected
        before = {run_id: server.get_json(f"/v1/runs/{run_id}") for run_id in expected}

    with running_server(config, clock=clock) as again:
        for run_id, detail in before.items():
            replay = again.get_json(f"/v1/runs/{run_id}")
            for key in ("state", "terminal_state", "terminal_reason", "has_final_answer",
                        "final_output", "ended_at", "directives"):
                assert replay[key] == detail[key], (run_id, key)


def test_a_stored_abort_restores_the_forced_state_of_a_run_flushed_before_it(
        tmp_path: Path) -> None:
    """A crash between a directive's store (immediate) and the run's next flush (every
    state_flush_interval): the run comes back without its forced state; the directive log
    puts it back, so the run still ends as the rule decided."""
    store = Store(str(tmp_path))
    run = RunState("flushed-before", KeySource.WATCHDOG, "", 1000.0)
    store.save([run.to_dict()], [])
    service = WatchdogService(Config(state_dir=str(tmp_path)), store)
    service.restore()
    service.restore_forced([
        FiredRecord("flushed-before", "no-deletes", "no-deletes", Action.ABORT, 1001.0, 0),
        FiredRecord("flushed-before", "tool-cycle", "tool-cycle", Action.WIND_DOWN, 1002.0, 0,
                    TerminalState.LOOP_DETECTED),
        FiredRecord("unknown-run", "error-loop", "error-loop", Action.ABORT, 1003.0, 0,
                    TerminalState.LOOP_DETECTED),
    ])
    restored = service.tracker.get("flushed-before")
    assert restored is not None
    assert (restored.forced_state, restored.forced_reason) == (TerminalState.ABORTED,
                                                               "no-deletes")
    restored.end(1010.0)
    assert restored.terminal_state is TerminalState.ABORTED
    service.state._lane.close()
    store.close()
