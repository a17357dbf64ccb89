"""pydantic-ai: the watchdog as a capability.

::

    from watchdog.client import Watchdog
    from watchdog.client.adapters.pydantic_ai import WatchdogCapability

    agent = Agent(model, name="explorer", capabilities=[WatchdogCapability()])
    with wd.run(agent="explorer", max_tool_calls=20):
        result = agent.run_sync("...")

What it does on each model request (pydantic-ai evaluates dynamic instructions once per
request, after the previous tool results are in):

* adds the run's :meth:`~watchdog.client.Run.instructions` to the *instructions* (the system
  prompt part pydantic-ai rebuilds for every request, never a user message): the budget
  countdown, and the directive's ``report_prompt`` on a wind-down;
* after an abort, gives the model one last request with the abort's report prompt and no
  function tools (``final_report=True``, the default), so the run ends with a report; the next
  request, or any tool call, raises :class:`WatchdogAbortError` — a pydantic-ai
  ``AgentRunError`` — out of ``agent.run()``. With ``final_report=False`` the abort raises
  before the next request.

``WatchdogCapability(run)`` pins a run; without one it serves whatever run is current (so one
agent object can serve many runs). :func:`watchdog_instructions` is the same text as a plain
instructions function, for ``Agent(instructions=[..., watchdog_instructions()])``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from watchdog.client.directive import Directive
from watchdog.client.run import Run, WatchdogAbort, current_run


class WatchdogAbortError(WatchdogAbort, AgentRunError):
    """The watchdog aborted the run: a pydantic-ai ``AgentRunError`` (like
    ``UsageLimitExceeded``) that is also a :class:`~watchdog.client.WatchdogAbort`."""

    def __init__(self, directive: Directive) -> None:
        WatchdogAbort.__init__(self, directive)
        self.message = str(self)


def _steer(run: Run | None, ctx: RunContext[Any], final_report: bool) -> str:
    run = run or current_run()
    if run is None:
        return ""
    run.note_messages(len(ctx.messages))
    try:
        return run.steer_model_call(final_report=final_report)
    except WatchdogAbort as exc:
        raise WatchdogAbortError(exc.directive) from None


def watchdog_instructions(run: Run | None = None, *, final_report: bool = True
                          ) -> Callable[[RunContext[Any]], str]:
    """A dynamic instructions function: ``Agent(instructions=[..., watchdog_instructions()])``
    or ``agent.instructions(watchdog_instructions())``. It raises :class:`WatchdogAbortError`
    after an abort (see the module doc); tool calls are not stopped without the capability."""

    def watchdog(ctx: RunContext[Any]) -> str:
        return _steer(run, ctx, final_report)

    return watchdog


@dataclass(init=False)
class WatchdogCapability(AbstractCapability[Any]):
    """Budget countdown and wind-down in the instructions, abort through ``AgentRunError``."""

    run: Run | None
    final_report: bool

    def __init__(self, run: Run | None = None, *, final_report: bool = True) -> None:
        self.run = run
        self.final_report = final_report

    def _run(self) -> Run | None:
        return self.run or current_run()

    def get_instructions(self) -> Any:
        return watchdog_instructions(self.run, final_report=self.final_report)

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        run = self._run()
        parameters = request_context.model_request_parameters
        if run is None or not run.aborted or not parameters.function_tools:
            return request_context
        # The last request after an abort is for the report: the model is offered no tools
        # (instructions are already built by now, so this sees the abort they showed).
        return replace(request_context,
                       model_request_parameters=replace(parameters, function_tools=[]))

    async def before_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                  tool_def: ToolDefinition, args: Any) -> Any:
        run = self._run()
        if run is not None:
            try:
                run.check_tool_call()
            except WatchdogAbort as exc:
                raise WatchdogAbortError(exc.directive) from None
        return args
