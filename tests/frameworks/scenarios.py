"""The three scenarios every real framework is driven through, as fake-model scripts.

* ``three_tools``: the tool ``lookup`` called with a, b and c (one call per model response),
  then an answer;
* ``limit``: ``lookup`` on every response, forever, so only the framework's own limit stops the
  run; a request that offers no tools (frameworks ask for a summary that way at their limit) is
  answered with :data:`SUMMARY`;
* ``tool_error``: ``lookup("broken")`` (the drivers' tool raises for it), then an answer.
"""

from __future__ import annotations

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Script

ANSWER = "a, b and c are known."
SUMMARY = "Summary: I looked keys up and found nothing conclusive."
ERROR_ANSWER = "The backend is down."


def script(scenario: str, tool: str = "lookup") -> Script:
    base = scenario.split("_stream")[0].removesuffix("_adapter")
    if base.startswith("three_tools"):
        return fakellm.tools_then_answer(tool, [{"key": "a"}, {"key": "b"}, {"key": "c"}],
                                         ANSWER)
    if base.startswith("limit"):
        return fakellm.looping(tool, lambda index: {"key": f"k{index}"},
                               answer_without_tools=SUMMARY)
    if base.startswith("tool_error"):
        return fakellm.tools_then_answer(tool, [{"key": "broken"}], ERROR_ANSWER)
    raise ValueError(f"unknown scenario {scenario}")


def scripted(llm: FakeLLM, driver: str, scenario: str, tool: str = "lookup") -> str:
    """Register the scenario's script under a model name unique to this driver and scenario."""
    return llm.script(f"{driver}-{scenario}", script(scenario, tool))
