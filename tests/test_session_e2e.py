"""The hand-off loop, end to end: runs of one session export real OTLP to a running sidecar and
post checkpoints; the same ``remaining`` twice is zero progress, the next run's context carries
the facts verbatim and the note, and a run that checkpoints no progress again is stopped for a
human (``zero-progress``: abort, ``intervention_required``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.scripted import ScriptedAgent, api

SESSION = "ticket-4711"
REMAINING = "Deploy the fix to staging and confirm the health check passes"
FACTS = {"project_path": "/srv/checkout-service", "branch": "fix/timeout-4711",
         "staging_url": "https://staging.example.com/health", "tests_pass": True}


def checkpoint(server: RunningServer, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = api("POST", f"{server.api}/v1/sessions/{SESSION}/checkpoints", body)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


def context(server: RunningServer) -> dict[str, Any]:
    return server.get_json(f"/v1/sessions/{SESSION}/context")  # type: ignore[no-any-return]


def directives(server: RunningServer, run_id: str) -> list[dict[str, Any]]:
    return server.get_json(f"/v1/runs/{run_id}/directives?after=0")[  # type: ignore[no-any-return]
        "directives"]


def one_run(server: RunningServer, run_id: str, remaining: str, **extra: Any) -> None:
    """A run of the session: starts from the context, works, hands over, ends."""
    agent = ScriptedAgent(server.otlp_http, run_id, "deployer", session=SESSION)
    agent.chat(messages=2)
    agent.tool("run_shell", {"cmd": f"kubectl rollout status deploy/checkout ({run_id})"},
               result="error: deployment exceeded its progress deadline")
    checkpoint(server, {"remaining": remaining, "run_id": run_id, **extra})
    agent.chat(messages=4, finish_reason="stop")
    agent.finish(answer="Handing over: the staging deploy is still not healthy.")


def test_the_hand_off_loop_is_noticed_and_the_next_run_is_told(tmp_path: Path) -> None:
    with running_server(sidecar_config(tmp_path / "state")) as server:
        assert context(server)["checkpoints"] == 0  # a first run asks before anything exists

        one_run(server, "run-1", REMAINING, state=FACTS,
                failed_approaches=["re-run the CI pipeline"])
        after_first = context(server)
        assert after_first["zero_progress"] is False and after_first["note"] is None

        one_run(server, "run-2", "  deploy the fix to staging and confirm the health check "
                                 "PASSES", failed_approaches=["restart the staging pods"])
        handed = context(server)
        assert handed["runs"] == 2 and handed["checkpoints"] == 2
        assert handed["zero_progress"] is True and handed["zero_progress_streak"] == 1
        assert handed["facts"] == FACTS  # verbatim: the next run does not rediscover them
        assert handed["failed_approaches"] == ["re-run the CI pipeline",
                                               "restart the staging pods"]
        note = handed["note"]
        assert "deploy the fix to staging" in note.lower()
        assert "new direction" in note and "explain" in note
        assert "re-run the CI pipeline" in note and "restart the staging pods" in note
        for run_id in ("run-1", "run-2"):  # one repeat is a warning, not yet a stop
            run = server.get_json(f"/v1/runs/{run_id}")
            assert (run["terminal_state"], run["directives"]) == ("completed", [])


def test_a_run_that_checkpoints_no_progress_again_is_stopped_for_a_human(
        tmp_path: Path) -> None:
    with running_server(sidecar_config(tmp_path / "state")) as server:
        one_run(server, "run-1", REMAINING, state=FACTS)
        one_run(server, "run-2", REMAINING)

        third = ScriptedAgent(server.otlp_http, "run-3", "deployer", session=SESSION)
        bystander = ScriptedAgent(server.otlp_http, "run-4", "deployer", session=SESSION)
        third.chat(messages=2)
        bystander.chat(messages=2)
        wait_until(lambda: context(server)["runs"] == 4)
        assert context(server)["active_runs"] == ["run-3", "run-4"]
        # a new run of a stalled session is not stopped before it has checkpointed: it is told
        for run_id in ("run-3", "run-4"):
            told = wait_until(lambda run_id=run_id: directives(server, run_id))
            assert [(d["rule"], d["action"]) for d in told] == [("zero-progress-note", "notify")]
            assert told[0]["message"].startswith(
                f"[session {SESSION}: no progress — the last 2 checkpoints reported the same "
                f"work left. Don't repeat the approach that led there")

        answer = checkpoint(server, {"remaining": REMAINING.upper(), "run_id": "run-3"})
        assert answer["zero_progress_streak"] == 2 and answer["fired"] == 1
        stop = wait_until(lambda: directives(server, "run-3")[1:])
        assert [(d["rule"], d["action"], d["terminal_state"]) for d in stop] == [
            ("zero-progress", "abort", "intervention_required")]
        assert f"session {SESSION}" in stop[0]["message"]
        # it reported nothing: left alone (and told once)
        assert [d["rule"] for d in directives(server, "run-4")] == ["zero-progress-note"]

        third.finish(error_type="agent_watchdog_client.Aborted")
        run = server.get_json("/v1/runs/run-3")
        assert (run["terminal_state"], run["terminal_reason"]) == ("intervention_required",
                                                                   "zero-progress")
        # a checkpoint that names no run counts for the session's runs in progress
        answer = checkpoint(server, {"remaining": REMAINING})
        assert answer["zero_progress_streak"] == 3
        assert [d["rule"] for d in wait_until(lambda: directives(server, "run-4")[1:])] == [
            "zero-progress"]
        bystander.finish()
        assert server.get_json("/v1/runs/run-4")["terminal_state"] == "intervention_required"

        # progress (different work left) ends it: no note, no further stops
        answer = checkpoint(server, {"remaining": "only the release notes are left"})
        assert (answer["zero_progress"], answer["zero_progress_streak"], answer["note"]) == (
            False, 0, None)
        assert context(server)["facts"] == FACTS
