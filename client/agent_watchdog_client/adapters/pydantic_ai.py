"""pydantic-ai: the watchdog as a capability.

::

    from pydantic_ai import Agent
    from agent_watchdog_client import Watchdog
    from agent_watchdog_client.adapters.pydantic_ai import WatchdogCapability

    wd = Watchdog()
    wd.setup_tracing(service_name="explorer")
    Agent.instrument_all()        # pydantic-ai emits no spans without it
    agent = Agent(model, name="explorer", capabilities=[WatchdogCapability()])
    with wd.run(agent="explorer", max_tool_calls=20):
        result = agent.run_sync("...")

At each decision point (DESIGN §8):

* **before each model request** (pydantic-ai evaluates dynamic instructions once per request,
  after the previous tool results are in) the run syncs with the sidecar and the turn's
  instructions go into the *instructions* — the system prompt part pydantic-ai rebuilds for every
  request, never a user message: the true budget countdown, a wind-down's report prompt;
* **at the limit** (an abort, or the tool budget used up — counted in this process, so it holds
  without the sidecar too) the request is the final one: its instructions ask for the progress
  report and it offers no function tools. The model's answer is the run's output. Asked for
  another request after that, the run raises :class:`WatchdogAbortError` (a pydantic-ai
  ``AgentRunError``) whose ``report`` is that answer;
* **before each tool call** a tool past the budget or after an abort does not run: the model
  gets ``"Not run: …"`` as its result.

``WatchdogCapability(run)`` pins a run; without one it serves whatever run is current (so one
agent object can serve many runs).
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
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from agent_watchdog_client.directive import Directive
from agent_watchdog_client.run import Run, steered_run
from agent_watchdog_client.steer import ToolRefused, WatchdogAbort


class WatchdogAbortError(WatchdogAbort, AgentRunError):
    """The watchdog stopped the run: a pydantic-ai ``AgentRunError`` (like
    ``UsageLimitExceeded``) that is also a :class:`~agent_watchdog_client.WatchdogAbort`; ``report``
    is the model's progress report when it gave one."""

    def __init__(self, directive: Directive, report: str | None = None) -> None:
        WatchdogAbort.__init__(self, directive, report)
        self.message = str(self)


def _steer(run: Run | None, ctx: RunContext[Any]) -> str:
    run = steered_run(run)
    if run is None:
        return ""
    run.note_messages(len(ctx.messages))
    try:
        return run.before_model_call().instructions
    except WatchdogAbort as exc:
        raise WatchdogAbortError(exc.directive, exc.report) from None


def watchdog_instructions(run: Run | None = None) -> Callable[[RunContext[Any]], str]:
    """The capability's instructions as a plain function, for
    ``Agent(instructions=[..., watchdog_instructions()])``: the countdown and wind-downs only —
    without the capability the final request still offers tools and tools are not capped."""

    def watchdog(ctx: RunContext[Any]) -> str:
        return _steer(run, ctx)

    return watchdog


@dataclass(init=False)
class WatchdogCapability(AbstractCapability[Any]):
    """Countdown and wind-down in the instructions, the final report request, the tool cap."""

    run: Run | None

    def __init__(self, run: Run | None = None) -> None:
        self.run = run

    def _run(self) -> Run | None:
        return steered_run(self.run)

    def get_instructions(self) -> Any:
        return watchdog_instructions(self.run)

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        run = self._run()
        parameters = request_context.model_request_parameters
        turn = run.turn if run is not None else None
        if turn is None or not turn.final or not parameters.function_tools:
            return request_context
        # The final request is for the report: the model is offered no tools (the turn was
        # decided when the instructions were built, just before this hook).
        return replace(request_context,
                       model_request_parameters=replace(parameters, function_tools=[]))

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                tool_def: ToolDefinition, args: Any, handler: Any) -> Any:
        run = self._run()
        if run is not None:
            try:
                run.before_tool_call(call.tool_name)
            except ToolRefused as exc:
                return exc.message
        return await handler(args)

    async def after_run(self, ctx: RunContext[Any], *,
                        result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        run = self._run()
        turn = run.turn if run is not None else None
        if run is not None and turn is not None and turn.final:
            output = result.output
            run.set_final_answer(output if isinstance(output, str) else repr(output))
        return result
