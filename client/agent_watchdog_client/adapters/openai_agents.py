"""OpenAI Agents SDK: dynamic instructions, steered tools, run hooks and OpenTelemetry spans.

::

    from agents import Agent, Runner
    from agent_watchdog_client import Watchdog
    from agent_watchdog_client.adapters.openai_agents import (
        WatchdogHooks, instrument_openai_agents, steered)

    wd = Watchdog()
    provider = wd.setup_tracing(service_name="explorer")
    instrument_openai_agents(provider)            # the SDK's spans as OTel spans
    agent = steered(Agent(name="explorer", instructions="You are ...", tools=[...]))
    with wd.run(agent="explorer", max_tool_calls=20):
        result = await Runner.run(agent, "...", hooks=WatchdogHooks())

The SDK's own tracing is not OpenTelemetry, so the watchdog cannot see it as is:
:func:`instrument_openai_agents` installs OpenInference's maintained instrumentor
(``openinference-instrumentation-openai-agents``), which turns the SDK's agent, generation,
response and function spans into OTel spans (AGENT, LLM, TOOL) the sidecar understands; the
client's span processor then stamps them with the run's attributes.

:func:`steered` returns a clone of the agent whose

* instructions (:func:`watchdog_instructions`, evaluated by the SDK before each model call and
  sent as the system instructions, never as conversation) carry the turn's text — the true
  budget countdown, a wind-down's report prompt; at the limit (an abort, or the tool budget used
  up) the request asks for the progress report;
* function tools (:func:`watchdog_tools`) are disabled for that final request (``is_enabled``,
  which the SDK checks before each model call — this is where the run syncs with the sidecar)
  and never run past the budget or after an abort: the model gets ``"Not run: …"`` instead.

The model's answer to the final request is the run's ``final_output``. Asked for another model
call after it, the run raises :class:`WatchdogAbortError` (an ``AgentsException``) with the
report. :class:`WatchdogHooks` tells the sidecar how long the conversation is and puts the final
output on the agent span so the run counts as answered.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, Tool
from agents.exceptions import AgentsException

from agent_watchdog_client.directive import Directive
from agent_watchdog_client.run import Run, steered_run
from agent_watchdog_client.steer import ModelTurn, ToolRefused, WatchdogAbort

Instructions = str | Callable[[RunContextWrapper[Any], Agent[Any]], str | Awaitable[str]] | None


class WatchdogAbortError(WatchdogAbort, AgentsException):
    """The watchdog stopped the run: an ``AgentsException`` (like ``MaxTurnsExceeded``) that is
    also a :class:`~agent_watchdog_client.WatchdogAbort`, with the model's ``report`` if it gave
    one."""

    def __init__(self, directive: Directive, report: str | None = None) -> None:
        WatchdogAbort.__init__(self, directive, report)
        self.message = str(self)


def _turn(run: Run | None, acknowledge: bool = True) -> ModelTurn | None:
    """The turn of the next model request; ``acknowledge`` only where the request is made (the
    instructions): the SDK also lists the tools when no request follows (after an answer)."""
    current = steered_run(run)
    if current is None:
        return None
    try:
        return current.before_model_call(acknowledge=acknowledge)
    except WatchdogAbort as exc:
        raise WatchdogAbortError(exc.directive, exc.report) from None


def watchdog_instructions(base: Instructions = None, run: Run | None = None
                          ) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """``Agent(instructions=watchdog_instructions(base))``: ``base`` followed by the turn's
    instructions (see the module doc)."""

    async def instructions(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        text = ""
        if callable(base):
            result = base(context, agent)
            text = await result if inspect.isawaitable(result) else result
        elif base:
            text = base
        turn = _turn(run)
        extra = turn.instructions if turn is not None else ""
        return f"{text}\n\n{extra}" if text and extra else text or extra

    return instructions


def watchdog_tools(tools: Sequence[Tool], run: Run | None = None) -> list[Tool]:
    """Function tools disabled on the final request and refused past the budget (other tools
    are returned as they are)."""
    return [_steered_tool(tool, run) if isinstance(tool, FunctionTool) else tool
            for tool in tools]


def _steered_tool(tool: FunctionTool, run: Run | None) -> FunctionTool:
    enabled = tool.is_enabled
    invoke = tool.on_invoke_tool

    async def is_enabled(context: RunContextWrapper[Any], agent: Any) -> bool:
        # The SDK also lists the tools after a response, to run the calls it asked for (a tool
        # disabled then is a ModelBehaviorError that ends the run): until one of those calls
        # has come to ``on_invoke_tool`` — which refuses it once the run is stopped — the
        # listing is the last request's, not a new turn (an abort that came during the model
        # call stops the run there). Once the final turn is out, tools stay disabled; it is
        # the next request's instructions that raise.
        current = steered_run(run)
        last = current.turn if current is not None else None
        resolving = last is not None and not last.final \
            and current is not None and current.steering.tools_since_turn == 0
        turn = last if last is not None and (last.final or resolving) \
            else _turn(run, acknowledge=False)
        if turn is not None and turn.final:
            return False
        if isinstance(enabled, bool):
            return enabled
        result = enabled(context, agent)
        return bool(await result if inspect.isawaitable(result) else result)

    async def on_invoke_tool(context: Any, arguments: str) -> Any:
        current = steered_run(run)
        if current is not None:
            try:
                current.before_tool_call(tool.name)
            except ToolRefused as exc:
                return exc.message
        return await invoke(context, arguments)

    return dataclasses.replace(tool, is_enabled=is_enabled, on_invoke_tool=on_invoke_tool)


def steered(agent: Agent[Any], run: Run | None = None) -> Agent[Any]:
    """A clone of ``agent`` with :func:`watchdog_instructions` and :func:`watchdog_tools`."""
    return agent.clone(instructions=watchdog_instructions(agent.instructions, run),
                       tools=watchdog_tools(agent.tools, run))


class WatchdogHooks(RunHooks[Any]):
    """Run hooks: conversation length; the final output on the agent span."""

    def __init__(self, run: Run | None = None) -> None:
        self.run = run

    def _run(self) -> Run | None:
        return steered_run(self.run)

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None, input_items: list[Any]) -> None:
        run = self._run()
        if run is not None:
            run.note_messages(len(input_items) + (1 if system_prompt else 0))

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
