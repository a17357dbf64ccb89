"""The client against the real sidecar: announcing a run, a home-grown loop exported through
``setup_tracing``, reports, and a sidecar restarted under a running agent."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import pytest
from agent_watchdog_client import Directive, Watchdog, WatchdogAbort
from agent_watchdog_client.reporter import Reporter
from agent_watchdog_client.sync import SyncChannel
from agent_watchdog_client.transport import Transport
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from tests.client_runs import ended_run
from tests.harness import (
    RunningServer,
    run_detail,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.ports import free_port


def test_announced_run_is_known_with_its_budget_before_any_span(sidecar: RunningServer) -> None:
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    with wd.run(agent="explorer", max_tool_calls=20, max_seconds=600, session="s-1") as run, \
            wd.run(agent="researcher", max_tool_calls=5) as child:
        detail = wait_until(lambda: run_detail(sidecar.api, run.id), what="the announcement")
        assert detail["state"] == "active" and detail["agent"] == "explorer"
        assert detail["session"] == "s-1"
        assert detail["budget"]["max_tool_calls"] == 20
        assert detail["budget"]["remaining_tool_calls"] == 20
        assert detail["budget"]["max_seconds"] == 600
        child_detail = wait_until(lambda: run_detail(sidecar.api, child.id))
        assert child_detail["parent_run"] == run.id
        assert child_detail["budget"]["max_tool_calls"] == 5
    wd.close()


def test_home_grown_loop_with_setup_tracing_ends_completed(sidecar: RunningServer) -> None:
    wd = Watchdog(sidecar.api)
    provider = wd.setup_tracing("loop-agent", endpoint=sidecar.otlp_http + "/v1/traces",
                                set_global=False)
    processors = provider._active_span_processor._span_processors  # what setup_tracing built
    batch = next(p for p in processors if isinstance(p, BatchSpanProcessor))
    assert batch._batch_processor._schedule_delay_millis == 200  # not the SDK's 5 s
    tracer = provider.get_tracer("my-loop")
    with wd.run(agent="looper", max_tool_calls=10) as run:
        for step in range(3):
            with tracer.start_as_current_span("chat model",
                                              attributes={"gen_ai.operation.name": "chat"}):
                pass
            with tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.arguments": json.dumps({"q": step})}):
                pass
        run.set_final_answer("three searches done")
    # No agent span was started inside the run: the run's own span closes it, with the answer.
    detail = wait_until(lambda: (d := run_detail(sidecar.api, run.id)) and d["state"] == "ended"
                        and d, what="the run to end")
    assert detail["terminal_state"] == "completed"
    assert detail["has_final_answer"] is True
    assert detail["final_output"] == "three searches done"
    assert detail["signals"]["tool_calls"] == 3 and detail["signals"]["iterations"] == 3
    report = run.report()
    assert isinstance(report, str) and "search" in report
    as_json = run.report(as_json=True)
    assert isinstance(as_json, dict)
    provider.shutdown()
    wd.close()


def test_exception_in_a_run_ends_it_as_error(sidecar: RunningServer) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=sidecar.otlp_http + "/v1/traces")))
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with pytest.raises(KeyError), wd.run(agent="crasher") as run:
        raise KeyError("missing")
    detail = wait_until(lambda: (d := run_detail(sidecar.api, run.id)) and d["state"] == "ended"
                        and d, what="the run to end")
    assert detail["terminal_state"] == "error" and detail["terminal_reason"] == "KeyError"
    provider.shutdown()
    wd.close()


def test_sidecar_restart_loses_and_repeats_no_directive(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = sidecar_config(tmp_path / "state", api_address=f"127.0.0.1:{free_port()}",
                            otlp_http_address=f"127.0.0.1:{free_port()}")
    api = f"http://{config.api_address}"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"http://{config.otlp_http_address}/v1/traces", timeout=5)))
    tracer = provider.get_tracer("agent")
    wd = Watchdog(api, tracer_provider=provider)
    delivered: list[int] = []
    caplog.set_level(logging.INFO, logger="agent_watchdog_client")

    def tool_call(step: int) -> None:
        with tracer.start_as_current_span("execute_tool search", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                "gen_ai.tool.call.arguments": json.dumps({"q": step})}):
            pass

    with running_server(config):
        run = wd.run(agent="explorer", max_tool_calls=4)
        run.start()
        post = run.board.post

        def spy(directive: Directive) -> bool:
            delivered.append(directive.seq)  # every delivery, duplicates included
            return post(directive)

        run.board.post = spy  # type: ignore[method-assign]
        wait_until(lambda: run_detail(api, run.id), what="the announcement")
        tool_call(1)  # 3 of 4 left: the countdown
        assert run.board.wait_for(1, 10)
    # The sidecar is down: the agent goes on (and is told so once).
    assert run.directive() is not None and run.budget_note().startswith("[budget: 3 of 4")
    assert run.report() is None
    with running_server(config):
        tool_call(2)  # 2 of 4 left
        assert run.board.wait_for(2, 10)
        detail = run_detail(api, run.id)
        assert detail is not None and detail["signals"]["tool_calls"] == 2
        run.finish()
    provider.shutdown()
    wd.close()
    assert delivered == [1, 2]
    assert run.budget_note().startswith("[budget: 2 of 4")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("budget", [0, 1])
def test_a_turn_peeked_then_taken_is_the_same_turn(sidecar: RunningServer, budget: int) -> None:
    """An adapter peeks at the turn (``acknowledge=False``: which tools to offer) and then
    takes it for the same request; at the budget that is the final turn both times — the
    sidecar's word on the stop the run reported by itself is no news for that request (a
    budget of 0 had raised ``WatchdogAbort`` at the second ask, the OpenAI Agents SDK
    adapter's run crashing with no report)."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    with wd.run(agent="peeker", max_tool_calls=budget) as run:
        for _ in range(budget):
            run.before_model_call()
            run.before_tool_call("search")
        peeked = run.before_model_call(acknowledge=False)
        taken = run.before_model_call()
        assert peeked.final and taken is peeked
        run.set_final_answer("report")
    wd.close()


def test_the_iterations_note_is_recounted_at_each_request(sidecar: RunningServer) -> None:
    """The sidecar's last-call note (``1 of 2 model calls left``) is true at the request after
    the first call; at the requests past the limit the model reads the true count, not that
    note again."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    seen = _instructions_of_four_calls(wd, max_iterations=2)
    assert "model calls" not in seen[0]
    assert "[budget: 1 of 2 model calls left — finalize now]" in seen[1]
    for past in seen[2:]:
        assert "1 of 2 model calls left" not in past
        assert "[budget: all 2 model calls used — give your final answer now]" in past


def test_the_model_calls_are_counted_down_from_two_left(sidecar: RunningServer) -> None:
    """The default pack counts a model-call budget down from 2 left (once a call has been
    made): with 3 allowed, the second request reads 2 left, the third its last call, the
    fourth that all are used."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    seen = _instructions_of_four_calls(wd, max_iterations=3)
    assert "model calls" not in seen[0]
    assert "[budget: 2 of 3 model calls left — wrap up soon]" in seen[1]
    assert "[budget: 1 of 3 model calls left — finalize now]" in seen[2]
    assert "[budget: 2 of 3 model calls left" not in seen[2]
    assert "[budget: all 3 model calls used — give your final answer now]" in seen[3]


def test_the_budget_counts_from_the_first_sync_whenever_the_heartbeat_comes(
        sidecar: RunningServer) -> None:
    """The run's budget goes with its syncs until the sidecar has heard it: with no heartbeat
    reaching the sidecar at all (the reporter's thread, which announces the run, was late under
    load: the second request was made without its note), the first call's sync already counts
    against ``max_iterations``."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    wd.reporter = Reporter(Transport(f"http://127.0.0.1:{free_port()}"))  # nothing listens
    seen = _instructions_of_four_calls(wd, max_iterations=2)
    assert "[budget: 1 of 2 model calls left — finalize now]" in seen[1]
    assert wd.syncer.failures == 0


def _instructions_of_four_calls(wd: Watchdog, **budget: int) -> list[str]:
    """What a hand-written loop's four model requests were told (a chat span ends after each)."""
    tracer = wd.tracer()
    with wd.run(agent="counter", **budget) as run:
        seen = []
        for _ in range(4):
            seen.append(run.before_model_call().instructions)
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        run.set_final_answer("done")
    wd.close()
    return seen


def test_a_grace_ended_by_the_client_is_a_stopped_run_both_sides(sidecar: RunningServer) -> None:
    """The default pack's ``tool-cycle`` winds the run down with a 2-call grace; once
    the client has used it up (it stops the run by itself: no abort directive comes), the run
    says it was stopped — ``aborted``, ``raise_if_aborted`` — as the sidecar records it."""
    wd = Watchdog(sidecar.api)
    provider = wd.setup_tracing("looper", endpoint=sidecar.otlp_http + "/v1/traces",
                                set_global=False)
    tracer = provider.get_tracer("my-loop")
    with wd.run(agent="looper") as run:
        states = []
        for _ in range(10):
            turn = run.before_model_call()
            states.append(run.aborted)
            if turn.final:
                break
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
            run.before_tool_call("search")
            with tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.arguments": '{"q": "same"}'}):
                pass
        assert turn.final and turn.stop is not None and turn.stop.rule == "tool-cycle"
        assert run.board.abort is None  # the client's own stop, no directive
        assert run.aborted and states == [False] * 6 + [True]
        with pytest.raises(WatchdogAbort) as raised:
            run.raise_if_aborted()
        assert raised.value.directive.terminal_state == "loop_detected"
        run.set_final_answer("## Task\nthe report")
    detail = ended_run(sidecar, provider, run.id)
    provider.shutdown()
    wd.close()
    assert (detail["terminal_state"], detail["terminal_reason"]) == (
        "loop_detected", "tool-cycle")


def test_a_run_whose_announcement_is_refused_still_syncs(sidecar: RunningServer) -> None:
    """A run's announcement the sidecar refuses (a session id over 200 characters: a 400 to the
    heartbeat, and to a sync carrying it) does not stop its syncs: the spans go without it, so
    the run's calls are counted and its directives come back, as before syncs announced."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())  # its spans go by sync only
    tracer = wd.tracer()
    with wd.run(agent="refused", session="s" * 201) as run:
        for _ in range(3):
            run.before_model_call()
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        run_id = run.id
    wd.close()
    assert wd.syncer.sent == 4  # (one per model request, and the last as the run exits)
    assert sidecar.get_json(f"/v1/runs/{run_id}")["iterations"] == 3  # (the last: at exit)


def test_the_heartbeat_announces_a_run_whose_syncs_did_not(sidecar: RunningServer) -> None:
    """A sync answered without its announcement heard (too long for the header here; a sidecar
    that predates the header ignores it) leaves the heartbeat to announce the run: the
    reporter's first heartbeat, come after the syncs, still registers its budget."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    reporter = wd.reporter = Reporter(Transport(f"http://127.0.0.1:{free_port()}"))
    tracer = wd.tracer()
    with wd.run(agent="a" * 5000, max_tool_calls=7) as run:  # (its JSON: over 4,096 chars)
        for _ in range(2):
            run.before_model_call()
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        assert wd.syncer.sent == 2
        reporter.transport = Transport(sidecar.api)  # the heartbeats reach the sidecar now
        detail = wait_until(lambda: (d := run_detail(sidecar.api, run.id)) and d["budget"]
                            and d, what="the heartbeat's announcement")
        assert detail["budget"]["max_tool_calls"] == 7
    wd.close()


@pytest.mark.parametrize("token", [None, "not-the-sidecars-token"], ids=["missing", "wrong"])
def test_a_token_the_sidecar_refuses_is_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, token: str | None) -> None:
    """The sidecar answers every request 401: the agent goes on unwatched, as with a sidecar
    that is down, and the client says so once — with what to set — instead of nothing."""
    config = sidecar_config(tmp_path / "state", api_token="the-sidecars-token-0123456789")
    with running_server(config) as sidecar, \
            caplog.at_level(logging.WARNING, logger="agent_watchdog_client"):
        wd = Watchdog(sidecar.api, token=token, tracer_provider=TracerProvider())
        with wd.run(agent="explorer", max_tool_calls=2) as run:
            for _step in range(3):
                turn = run.before_model_call()
                if turn.final:
                    break
                run.before_tool_call("search")
            assert turn.final and run.remaining_tool_calls() == 0  # the local cap holds
            assert run.report() is None  # refused too, and not said again
            assert wd.reporter.sent == 0 and wd.transport.health.reachable is False
        wd.close()
    said = [r.getMessage() for r in caplog.records if r.name == "agent_watchdog_client"]
    assert len(said) == 1, said
    assert "refused this client (HTTP 401)" in said[0] and "WATCHDOG_API_TOKEN" in said[0]
    assert "the-sidecars-token" not in said[0]


def test_syncs_resume_as_soon_as_the_sidecar_is_heard_again(tmp_path: Path) -> None:
    """The sidecar is not running when the agent starts: the failed sync puts syncs off for a
    retry delay (60 s here). Started later, it is heard (the reporter's heartbeat is answered),
    and the next model request syncs at once, not when the delay has passed."""
    port = free_port()
    wd = Watchdog(f"http://127.0.0.1:{port}", tracer_provider=TracerProvider())
    wd.syncer = SyncChannel(wd.transport, retry_first=60.0)
    with wd.run(agent="explorer", max_tool_calls=5) as run:
        run.before_model_call()
        assert wd.syncer.failures == 1 and wd.syncer.sent == 0
        config = sidecar_config(tmp_path / "state", api_address=f"127.0.0.1:{port}")
        with running_server(config) as sidecar:
            wait_until(lambda: run.announced, what="the reporter's announcement")
            run.before_tool_call("search")
            turn = run.before_model_call()
            assert wd.syncer.sent == 1 and turn.remaining_tool_calls == 4
            assert run_detail(sidecar.api, run.id)["budget"]["max_tool_calls"] == 5
    wd.close()


def test_the_reporter_resumes_as_soon_as_a_sync_hears_the_sidecar(tmp_path: Path) -> None:
    """The reporter's first heartbeat finds no sidecar and waits its retry delay (60 s here);
    a sync answered meanwhile says the sidecar is back, and the reporter announces the run."""
    port = free_port()
    wd = Watchdog(f"http://127.0.0.1:{port}", tracer_provider=TracerProvider())
    wd.reporter = Reporter(wd.transport, retry_first=60.0)
    with wd.run(agent="explorer", max_tool_calls=5) as run:
        wait_until(lambda: wd.transport.health.reachable is False, what="the failed heartbeat")
        config = sidecar_config(tmp_path / "state", api_address=f"127.0.0.1:{port}")
        with running_server(config) as sidecar:
            run.before_model_call()
            assert wd.syncer.sent == 1
            wait_until(lambda: run.announced, what="the reporter's announcement", timeout=10)
            assert wd.reporter.sent >= 1
            assert run_detail(sidecar.api, run.id)["agent"] == "explorer"
    wd.close()


@pytest.mark.parametrize("wrong", ["/v1", "metrics"])
def test_a_url_that_is_not_the_control_api_is_said_once(
        sidecar: RunningServer, caplog: pytest.LogCaptureFixture, wrong: str) -> None:
    """``WATCHDOG_URL`` with the API's ``/v1`` on it, or the metrics port: every step answers
    404 and the agent goes unsteered, which the client says once (as it says a refused token);
    the sidecar's own 404 about a run (ended, or never seen) is no such news."""
    url = sidecar.api + "/v1" if wrong == "/v1" else sidecar.url("metrics")
    with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"):
        wd = Watchdog(url, tracer_provider=TracerProvider())
        with wd.run(agent="lost", max_tool_calls=5) as run:
            for _ in range(3):
                run.before_model_call()
        wd.close()
        said = [r.getMessage() for r in caplog.records if "answers HTTP 404" in r.getMessage()]
        assert len(said) == 1, said
        assert said[0].startswith(f"agent-watchdog: {url} answers HTTP 404 where the control "
                                  f"API has a route: WATCHDOG_URL is the API's base URL")
        caplog.clear()
        transport = Transport(sidecar.api)
        answer = transport.request("GET", "/v1/runs/never-seen")
        assert answer.status == 404  # the API's word on a run
        assert not [r for r in caplog.records if "answers HTTP 404" in r.getMessage()]


def test_a_steered_run_tells_the_sidecar_it_ended_without_an_exporter(
        sidecar: RunningServer) -> None:
    """A run that syncs (an adapter, or a loop asking before_model_call) says its end with its
    last sync, as it exits: with no exporter at all (a broken one), the sidecar still hears the
    run's own span (a home-grown loop's carries its answer), and the run ends then, not at a
    timeout 15 minutes later."""
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())  # no exporter: sync only
    tracer = wd.tracer()
    ended = {}
    for inner in (False, True):
        agent_span = tracer.start_as_current_span("invoke_agent inner", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "inner"}) \
            if inner else contextlib.nullcontext()
        with wd.run(agent="no-exporter") as run, agent_span:
            for _ in range(2):
                run.before_model_call()
                with tracer.start_as_current_span("chat", attributes={
                        "gen_ai.operation.name": "chat"}):
                    pass
            run.set_final_answer("the answer")
        detail = sidecar.get_json(f"/v1/runs/{run.id}")  # (the sync was answered: no wait)
        ended[inner] = (detail["state"], detail["iterations"], detail["terminal_state"])
    wd.close()
    assert ended[False] == ("ended", 2, "completed")
    assert ended[True][:2] == ("ended", 2)
