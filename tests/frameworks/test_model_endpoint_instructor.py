"""instructor and Atomic Agents (driver ``endpoint_instructor``) steered through the model
endpoint by ``OPENAI_BASE_URL`` alone, on both relays. instructor's default ``Mode.TOOLS``
forces one function by ``tool_choice`` at each request and reads the call's arguments as the
answer (no tool result ever goes back): an answer-shaped request. What the upstream saw is
asserted at each request; nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import LEFT, instructions
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-instructor-0123456789abcdefSECRET"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: instructor
budgets:
  - agents: ["instructor-budget*", "atomic-budget*"]
    max_tool_calls: 3
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("instructor"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def run_instructor(sidecar: RunningServer, llm: FakeLLM, agent: str, mode: str,
                   script: fakellm.Script, **extra: str
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    case = next(_CASES)
    model = llm.script(f"instructor-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
            "OTEL_SDK_DISABLED": "true"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           "OPENAI_BASE_URL": f"{sidecar.url('model')}/agent/{agent}/v1",
           "ENDPOINT_TASK": f"Find the file. (case {case})",
           **extra}
    venv = "atomic_agents" if mode == "atomic" else "instructor"
    result = drive_command(venv, "endpoint_instructor", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def acting(answer: str, tool: str = "Action") -> fakellm.Script:
    """A model that searches while a request offers its function unforced or forced and no
    report is asked for, then answers: the plan/act loop's ``Action``."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if "Tools are withdrawn" in instructions(body):
            return fakellm.call(tool, kind="answer", answer=answer)
        return fakellm.call(tool, kind="search", q=f"term {index}")

    return pick


def test_explore(sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_instructor(sidecar, llm, "instructor-budget-x", "loop",
                                    acting("REPORT"))
    print(said)
    for r in requests:
        print(json.dumps({k: r[k] for k in ("tool_choice",)}), [t["function"]["name"] for t in r["tools"]], instructions(r)[-300:].replace("\n"," "))
    import time
    time.sleep(3)
    for r in new_runs(sidecar, before, lambda runs: True):
        print(json.dumps(r)[:1500])
    assert False
