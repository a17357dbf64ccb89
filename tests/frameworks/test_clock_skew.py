"""Runs from a host whose clock disagrees with the sidecar's (the gateway topology: agents on
other machines): what real frameworks emitted (the committed recordings), replayed as if their
clock were hours or a day behind or ahead of the sidecar's, reads the same runs — none timed
out at its first span by the default pack's 15-minute total timeout (an agent behind), none
0 s old for hours (an agent ahead): each run is as old as its spans say.

And one span whose start or end is wrong (unset, an instrumentation's unit mix-up, year 2500)
among a run's right ones is not a clock that disagrees: the run reads the same, and its age is
right.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.frameworks import test_openai_agents, test_pydantic_ai
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay
from tests.harness import RunningServer

CASES: list[tuple[str, str, list[Expect]]] = [
    ("openai_agents_sdk", "three_tools", test_openai_agents.EXPECTED["three_tools"]),
    ("openai_agents_sdk", "handoff", test_openai_agents.EXPECTED["handoff"]),
    ("pydantic_ai_agent", "limit", test_pydantic_ai.EXPECTED["limit"]),
]
SKEWS = {"behind-2h": 7200.0, "ahead-2h": -7200.0, "behind-1d": 86400.0, "ahead-1d": -86400.0}
YEAR_2500_NS = 16_725_225_600 * 10**9


def check_ages(runs: list[dict[str, object]]) -> None:
    for run in runs:
        elapsed = run["elapsed_seconds"]
        assert isinstance(elapsed, float | int) and 0 < elapsed < 120, run


@pytest.mark.parametrize("skew", list(SKEWS.values()), ids=list(SKEWS))
@pytest.mark.parametrize(("driver", "scenario", "expected"), CASES,
                         ids=[f"{driver}-{scenario}" for driver, scenario, _ in CASES])
def test_a_clock_hours_off_reads_the_same_runs(sidecar: RunningServer, driver: str,
                                               scenario: str, expected: list[Expect],
                                               skew: float) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl", skew=skew)
    check_ages(check_runs(sidecar, expected))


def start_unset(span: dict[str, Any]) -> None:
    span["startTimeUnixNano"] = "0"  # OTLP's "unknown"


def start_in_microseconds(span: dict[str, Any]) -> None:
    span["startTimeUnixNano"] = str(int(span["startTimeUnixNano"]) // 1000)  # January 1970


def start_in_1990(span: dict[str, Any]) -> None:
    span["startTimeUnixNano"] = str(631_152_000 * 10**9)


def end_in_2500(span: dict[str, Any]) -> None:
    span["endTimeUnixNano"] = str(YEAR_2500_NS)  # its start stays right


WRONG_TIMES = [start_unset, start_in_microseconds, start_in_1990, end_in_2500]


@pytest.mark.parametrize("which", [0, -1], ids=["first-span", "last-span"])
@pytest.mark.parametrize("wrong", WRONG_TIMES, ids=[wrong.__name__ for wrong in WRONG_TIMES])
@pytest.mark.parametrize(("driver", "scenario", "expected"), CASES,
                         ids=[f"{driver}-{scenario}" for driver, scenario, _ in CASES])
def test_one_span_with_a_time_that_is_none_reads_the_same_runs(
        sidecar: RunningServer, driver: str, scenario: str, expected: list[Expect],
        wrong: Callable[[dict[str, Any]], None], which: int) -> None:
    """One span's start or end that cannot be its time (unset, other units, a year far off)
    among a run's right ones: the run reads as recorded, as old as its right spans say. Before,
    a start of 0 or in 1970 made a run decades old (timed out at once), and a model call ending
    in 2500 stayed the run's last (its answer read from it)."""
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl",
           edit=lambda spans: wrong(spans[which]))
    runs = check_runs(sidecar, expected)
    check_ages(runs)
