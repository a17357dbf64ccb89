"""Runs from a host whose clock disagrees with the sidecar's (the gateway topology: agents on
other machines): what real frameworks emitted (the committed recordings), replayed as if their
clock were hours or a day behind or ahead of the sidecar's, reads the same runs — none timed
out at its first span by the default pack's 15-minute total timeout (an agent behind), none
0 s old for hours (an agent ahead): each run is as old as its spans say.

And one span whose end is wrong (an instrumentation's unit mix-up: year 2500) among a run's
right ones is not a clock that disagrees: the run is not timed out and its age is right. (Its
answer may read otherwise — a model call ending in 2500 is the run's last: a known gap, apart
from the clock.)
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.frameworks import test_openai_agents, test_pydantic_ai
from tests.frameworks.harness import RECORDINGS, UNCHECKED, Expect, check_runs, replay
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


@pytest.mark.parametrize(("driver", "scenario", "expected"), CASES,
                         ids=[f"{driver}-{scenario}" for driver, scenario, _ in CASES])
def test_one_span_ending_in_year_2500_is_no_clock_skew(sidecar: RunningServer, tmp_path: Path,
                                                        driver: str, scenario: str,
                                                        expected: list[Expect]) -> None:
    lines = (RECORDINGS / driver / f"{scenario}.jsonl").read_text(encoding="utf-8").splitlines()
    requests = [json.loads(line) for line in lines if line.strip()]
    first = requests[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    first["endTimeUnixNano"] = str(YEAR_2500_NS)  # its start stays right
    recording = tmp_path / "corrupt.jsonl"
    recording.write_text("\n".join(json.dumps(request) for request in requests) + "\n",
                         encoding="utf-8")
    replay(sidecar, recording)
    runs = check_runs(sidecar, [replace(expect, terminal_state=UNCHECKED,
                                        has_final_answer=UNCHECKED, terminal_reason=UNCHECKED)
                                for expect in expected])
    check_ages(runs)
    assert not any(run["terminal_state"] == "time_limit_reached" for run in runs), runs
