"""Fake-model scripts for the smolagents and LangChain/LangGraph scenarios (the three of
:mod:`tests.frameworks.scenarios`, with a final-answer tool where the framework answers by one,
and a delegation to a sub-agent).

A scenario registers one script per model its driver uses: the agent under test on ``<name>``,
a sub-agent (delegation, handoff, agent-as-tool) on ``<name>-sub``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Script, Step
from tests.frameworks.scenarios import ANSWER, ERROR_ANSWER, SUMMARY

SUB_ANSWER = "a is known."
KEYS = [{"key": "a"}, {"key": "b"}, {"key": "c"}]


def final(tool: str | None, text: str, **arguments: Any) -> Step:
    """The answer: text, or a call to the framework's final-answer tool."""
    if tool is None:
        return fakellm.answer(text)
    return fakellm.call(tool, **(arguments or {"answer": text}))


def three_tools(final_tool: str | None = None, **arguments: Any) -> Script:
    return fakellm.steps(*(fakellm.call("lookup", **keys) for keys in KEYS),
                         final(final_tool, ANSWER, **arguments))


def limit() -> Script:
    return fakellm.looping("lookup", lambda index: {"key": f"k{index}"},
                           answer_without_tools=SUMMARY)


def tool_error(final_tool: str | None = None, **arguments: Any) -> Script:
    return fakellm.steps(fakellm.call("lookup", key="broken"),
                         final(final_tool, ERROR_ANSWER, **arguments))


def tool_error_handled(final_tool: str | None = None, **arguments: Any) -> Script:
    """A result that merely says "Error" (``missing``), then a failure the framework hands to
    the model as the result (``broken``), then the answer."""
    return fakellm.steps(fakellm.call("lookup", key="missing"),
                         fakellm.call("lookup", key="broken"),
                         final(final_tool, ERROR_ANSWER, **arguments))


def delegate(tool: str, final_tool: str | None = None, **arguments: Any
             ) -> dict[str, Script]:
    """The parent calls ``tool`` (the sub-agent) once, then answers; the sub-agent looks ``a``
    up, then answers."""
    return {"": fakellm.steps(fakellm.call(tool, **arguments), final(final_tool, ANSWER)),
            "-sub": fakellm.steps(fakellm.call("lookup", key="a"), final(final_tool, SUB_ANSWER))}


def register(llm: FakeLLM, name: str, scripts: Script | Mapping[str, Script]) -> str:
    """Serve ``scripts`` (one, or one per model-name suffix) under ``name``; return it."""
    for suffix, script in (scripts.items() if isinstance(scripts, Mapping)
                           else [("", scripts)]):
        llm.script(name + suffix, script)
    return name
