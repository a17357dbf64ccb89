"""The handoff loop through the client SDK against a real sidecar: two runs of one session that
end with the same `remaining` are zero progress, and the next run starts knowing it: from its
context, and in its first model request's instructions (the default pack's notify)."""

from __future__ import annotations

from agent_watchdog_client import Watchdog
from opentelemetry.sdk.trace import TracerProvider

from tests.harness import RunningServer


def test_resume_context_carries_facts_and_the_zero_progress_note(sidecar: RunningServer) -> None:
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    try:
        for attempt in range(2):
            with wd.run(agent="fixer", session="ticket-42") as run:
                answer = run.checkpoint(remaining="make tests/test_api.py pass",
                                        state={"project_path": "/srv/app", "attempt": attempt},
                                        failed_approaches=["pin aiohttp<3.10"])
                assert answer is not None
        with wd.run(agent="fixer", session="ticket-42") as run:
            context = run.resume_context()
            first_turn = run.before_model_call()  # its first model request is told
    finally:
        wd.close()
    assert context is not None
    assert context["facts"]["project_path"] == "/srv/app"  # verbatim, across runs
    assert context["failed_approaches"] == ["pin aiohttp<3.10"]
    assert context["zero_progress"] is True
    assert "make tests/test_api.py pass" in context["note"]
    assert ("[session ticket-42: no progress — the last 2 checkpoints reported the same work "
            "left. Don't repeat the approach that led there") in first_turn.instructions
