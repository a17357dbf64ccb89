"""Qwen Code watched through its own OpenTelemetry, read unchanged by the sidecar (no model
endpoint, so no relay to vary: it talks to the scripted upstream directly). Its spans, log events
and metrics go to the sidecar's OTLP/HTTP receiver as OTLP/JSON (in chunked requests); with
``RECORD_SPANS`` set, through a relay that keeps its traces as
``recordings/qwen_code/<scenario>.jsonl`` and its log events as ``<scenario>.logs.jsonl``.
Its spans carry no content: the answer's text is its ``qwen-code.api_response`` log event's, a
tool's arguments its ``qwen-code.tool_call`` event's, each naming its span, and joined to it
(the conventions' ``log_events``). Steered and watched at once:
``test_model_endpoint_qwen_code.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    check_runs,
    recording_to,
    replay_with_logs,
)
from tests.frameworks.test_model_endpoint_frameworks import ANSWER
from tests.frameworks.test_model_endpoint_qwen_code import TOOL, invoke, shell
from tests.harness import RunningServer


def counting() -> fakellm.Script:
    return fakellm.steps(fakellm.call(TOOL, **shell("alpha")), fakellm.call(TOOL, **shell("beta")),
                         fakellm.answer(ANSWER))


def looping() -> fakellm.Script:
    """One command four times, then the answer (Qwen Code halts a run itself at the fifth
    identical call in a row)."""
    return fakellm.steps(*[fakellm.call(TOOL, **shell("again"))] * 4, fakellm.answer(ANSWER))


def test_qwen_code_traced_by_its_own_opentelemetry_is_one_run_with_its_tools(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Qwen Code's own telemetry to the sidecar, its model the scripted upstream itself: its
    trace (``qwen-code.interaction``, an ``invoke_agent`` span; a ``qwen-code.llm_request``
    per model call, with its model and tokens, the HTTP client's span under it; a
    ``qwen-code.tool`` per tool, its execution and hook spans under it) is one run of its model
    calls and tools: named after the agent it names, its session the conversation id; its
    hooks' spans (status error when no hook is configured) no errors; its answer the text its
    ``qwen-code.api_response`` log event brought (no span carries it, nor any message). Once:
    no model relay between it and its upstream."""
    with recording_to(sidecar, "qwen_code", "two_tools") as otel:
        it = invoke(sidecar, llm, counting(), tmp_path, base_url=llm.base_url, otel=otel)
    assert (it.ran, it.printed) == (["alpha", "beta"], ANSWER)
    run = it.run
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        "qwen-code", 3, 2, 0), run
    assert run["signals"]["tools"] == {TOOL: 2}, run["signals"]
    assert run["session"] and run["total_tokens"] > 0 and run["unpriced_calls"] == 3, run
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run
    assert (run["final_output"], run["signals"]["messages"]) == (ANSWER, 0), run
    assert run["signals"]["repeated_tool_call"] == 1, run["signals"]  # (each once)


def test_qwen_code_repeating_one_command_is_seen_as_a_loop(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """One command four times: its tools' arguments (its ``qwen-code.tool_call`` log events')
    are the same each time, a repeated call, not four new ones."""
    with recording_to(sidecar, "qwen_code", "loop") as otel:
        it = invoke(sidecar, llm, looping(), tmp_path, base_url=llm.base_url, otel=otel)
    assert (it.ran, it.printed) == (["again"] * 4, ANSWER)
    run = it.run
    assert (run["iterations"], run["tool_calls"], run["final_output"]) == (5, 4, ANSWER), run
    assert run["signals"]["repeated_tool_call"] == 4, run["signals"]


@pytest.mark.parametrize("logs_first", [False, True], ids=["spans-first", "logs-first"])
@pytest.mark.parametrize(("scenario", "tools", "repeats"), [("two_tools", 2, 1), ("loop", 4, 4)])
def test_qwen_code_recorded_reads_as_the_same_run(sidecar: RunningServer, scenario: str,
                                                  tools: int, repeats: int,
                                                  logs_first: bool) -> None:
    """Its recordings (``recordings/qwen_code/``: its spans and its log events) exported again,
    in either order, read as the runs they were live: the answer, and the loop seen. The loop
    ends ``tool-cycle``'s ``loop_detected`` in either order, as a span-by-span watch ends it:
    its spans first, the tools' arguments (its log events) come after the run ended, and the
    rules read the run as it was at its end (the late reading); its log events first, the
    run's loop and its end come in one batch, and the rules read it at its end alike."""
    folder = RECORDINGS / "qwen_code"
    replay_with_logs(sidecar, folder / f"{scenario}.jsonl",
                     folder / f"{scenario}.logs.jsonl", logs_first)
    state = "loop_detected" if scenario == "loop" else "completed"
    [run] = check_runs(sidecar, [Expect("qwen-code", tools + 1, tools, 0, state, True)])
    assert run["signals"]["tools"] == {TOOL: tools} and run["final_output"] == ANSWER, run
    assert run["signals"]["repeated_tool_call"] == repeats, run["signals"]
