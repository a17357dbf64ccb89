"""OpenAI Agents SDK: dynamic instructions, run hooks and OpenTelemetry spans.

::

    from agents import Agent, Runner
    from watchdog.client import Watchdog
    from watchdog.client.adapters.openai_agents import (
        WatchdogHooks, instrument_openai_agents, watchdog_instructions)

    wd = Watchdog()
    provider = wd.setup_tracing(service_name="explorer")
    instrument_openai_agents(provider)            # the SDK's spans as OTel spans
    agent = Agent(name="explorer", instructions=watchdog_instructions("You are ..."), tools=[...])
    with wd.run(agent="explorer", max_tool_calls=20):
        result = await Runner.run(agent, "...", hooks=WatchdogHooks())

The SDK's own tracing is not OpenTelemetry, so the watchdog cannot see it as is:
:func:`instrument_openai_agents` installs OpenInference's maintained instrumentor
(``openinference-instrumentation-openai-agents``), which turns the SDK's agent, generation,
response and function spans into OTel spans (AGENT, LLM, TOOL) the sidecar understands; the
client's span processor then stamps them with the run's attributes.

* :func:`watchdog_instructions` wraps the agent's instructions (a string, or the SDK's
  ``(context, agent)`` callable): the SDK evaluates it before each model call and sends the
  result as the system instructions — the budget countdown and, on a wind-down, the report
  prompt are appended there, never to the conversation. After an abort it gives the model one
  last call with the abort's report prompt, then raises :class:`WatchdogAbortError` (an
  ``AgentsException``) out of ``Runner.run`` (``final_report=False``: at once).
* :class:`WatchdogHooks` (``Runner.run(..., hooks=WatchdogHooks())``) stops any tool call after
  an abort (the tool does not run), tells the sidecar how long the conversation is, and puts
  the final output on the agent span so the run counts as answered.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, RunContextWrapper, RunHooks
from agents.exceptions import AgentsException

from watchdog.client.directive import Directive
from watchdog.client.run import Run, WatchdogAbort, current_run

Instructions = str | Callable[[RunContextWrapper[Any], Agent[Any]], str | Awaitable[str]] | None


class WatchdogAbortError(WatchdogAbort, AgentsException):
    """The watchdog aborted the run: an ``AgentsException`` (like ``MaxTurnsExceeded``) that is
    also a :class:`~watchdog.client.WatchdogAbort`."""

    def __init__(self, directive: Directive) -> None:
        WatchdogAbort.__init__(self, directive)
        self.message = str(self)


def _abort_error(exc: WatchdogAbort) -> WatchdogAbortError:
    return WatchdogAbortError(exc.directive)


def watchdog_instructions(base: Instructions = None, run: Run | None = None, *,
                          final_report: bool = True
                          ) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """``Agent(instructions=watchdog_instructions(base))``: ``base`` followed by the run's
    watchdog instructions (see the module doc)."""

    async def instructions(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        text = ""
        if callable(base):
            result = base(context, agent)
            text = await result if inspect.isawaitable(result) else result
        elif base:
            text = base
        current = run or current_run()
        if current is None:
            return text
        try:
            extra = current.steer_model_call(final_report=final_report)
        except WatchdogAbort as exc:
            raise _abort_error(exc) from None
        return f"{text}\n\n{extra}" if text and extra else text or extra

    return instructions


class WatchdogHooks(RunHooks[Any]):
    """Run hooks: no tool after an abort; conversation length; the final output on the span."""

    def __init__(self, run: Run | None = None) -> None:
        self.run = run

    def _run(self) -> Run | None:
        return self.run or current_run()

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None, input_items: list[Any]) -> None:
        run = self._run()
        if run is not None:
            run.note_messages(len(input_items) + (1 if system_prompt else 0))

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                            tool: Any) -> None:
        run = self._run()
        if run is not None:
            try:
                run.check_tool_call()
            except WatchdogAbort as exc:
                raise _abort_error(exc) from None

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        run = self._run()
        if run is not None and output is not None:
            run.set_final_answer(output if isinstance(output, str) else repr(output))


def instrument_openai_agents(tracer_provider: Any = None) -> Any:
    """Turn the SDK's traces into OpenTelemetry spans on ``tracer_provider`` (default: the
    global provider) with OpenInference's instrumentor; returns the instrumentor (call its
    ``uninstrument()`` to undo). Needs ``openinference-instrumentation-openai-agents``."""
    try:
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
    except ImportError as exc:
        raise ImportError("instrument_openai_agents() needs OpenInference's instrumentor: pip "
                          "install openinference-instrumentation-openai-agents") from exc
    instrumentor = OpenAIAgentsInstrumentor()
    kwargs = {"tracer_provider": tracer_provider} if tracer_provider is not None else {}
    instrumentor.instrument(**kwargs)
    return instrumentor
