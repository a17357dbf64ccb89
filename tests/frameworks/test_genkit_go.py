"""Genkit for Go (``github.com/firebase/genkit/go``, its ``compat_oai`` OpenAI plugin) with
Genkit's own OpenTelemetry spans (Genkit traces on the global tracer provider: the agent sets an
SDK provider with the OTLP/HTTP exporter), exported over OTLP/HTTP protobuf: ``go/genkit``, a Go
module of its own, built by ``make test`` (``make genkit-go``) into the user's cache.

What it emits (details: the recordings): the attributes of Genkit for TypeScript
(:mod:`tests.frameworks.test_genkit`): ``genkit:type``, ``genkit:metadata:subtype``,
``genkit:name``, ``genkit:input``/``genkit:output``, ``genkit:state``, ``genkit:path``; a
flow's root also ``genkit:isRoot``. Unlike TypeScript's: a tool's subtype is ``tool.v2``; one
``generate`` span (subtype ``util``) frames the whole tool loop; ``WithMaxTurns`` reached fails
with ``exceeded maximum tool call iterations (3)`` (lower case), a ``*core.GenkitError``. A tool
that returns an error fails its span (``*errors.errorString``) and the whole call with it.

Before the Genkit entry read ``tool.v2`` and the limit's words in either case, every tool call
was missed (``tool_calls`` 0, a failed tool no error of the run) and the ``max_turns`` stop read
as an error. The expectations are DESIGN §3's, as for TypeScript. Each case runs live and from
its committed recording.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import cases, scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    DRIVER_TIMEOUT,
    Expect,
    check_recorded,
    check_runs,
    driver_env,
    top_answers,
)
from tests.harness import RunningServer

DRIVER = "genkit_go"
AGENT = "genkit_researcher"
GENKIT_GO_DIR = Path(__file__).resolve().parent / "go" / "genkit"
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    "three_tools": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    # WithMaxTurns(3): three rounds of tools, the fourth model call asks for more and Genkit
    # fails
    "limit": ([Expect(AGENT, 4, 3, 0, "tool_limit_reached", False, "max_turns", None)], None),
    # the tool fails: Genkit fails the call (and the flow) with it
    "tool_error": ([Expect(AGENT, 1, 1, 1, "error", False, "GenkitError", None)], None),
    "subagent": ([Expect(AGENT, 2, 1, 0, "completed", True, None, None),
                  Expect("genkit_sub", 2, 1, 0, "completed", True, None, AGENT)],
                 scenarios.ANSWER),
}


def genkit_go() -> Path:
    """The agent ``make genkit-go`` built for ``go/genkit`` as it is now (the Makefile's hash:
    of its sources' bytes, its .go files in the order of their paths, then go.mod, go.sum)."""
    sources = [*sorted(GENKIT_GO_DIR.glob("*.go")), GENKIT_GO_DIR / "go.mod",
               GENKIT_GO_DIR / "go.sum"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = GENKIT_GO_DIR.parents[3] / ".cache" / "genkit-go" / digest / "genkit-go"
    assert binary.exists(), f"{binary} is missing: `make genkit-go` builds it (make test does)"
    return binary


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's scripts; its last stdout line."""
    model = f"{DRIVER}-{scenario}"
    if scenario == "subagent":
        cases.register(llm, model, cases.delegate("research", topic="a"))
    else:
        scenarios.scripted(llm, DRIVER, scenario)
    env = driver_env(sidecar, llm, DRIVER, scenario, model)
    result = subprocess.run([str(genkit_go()), scenario], env=env, capture_output=True,
                            text=True, timeout=DRIVER_TIMEOUT, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"{DRIVER} {scenario} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    said: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return said


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    assert top_answers(sidecar)[0] == answer
    assert said["output"] == answer
    if scenario == "limit":  # Genkit's own turn limit stopped the loop
        assert said["error"] == "exceeded maximum tool call iterations (3)"
        assert len(llm.requests(f"{DRIVER}-limit")) == 4
    elif scenario == "tool_error":
        assert said["error"] == ('tool "lookup" failed: error calling tool lookup: backend '
                                 'unavailable for broken')


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, answer = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    assert top_answers(sidecar)[0] == answer
