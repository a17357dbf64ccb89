"""LangChain / LangGraph agents (``langchain.agents.create_agent``): the watchdog as middleware.

::

    from langchain.agents import create_agent
    from agent_watchdog_client import Watchdog
    from agent_watchdog_client.adapters.langchain import WatchdogMiddleware

    wd = Watchdog()
    wd.setup_tracing(service_name="explorer")
    LangChainInstrumentor().instrument()          # openinference-instrumentation-langchain
    agent = create_agent(model, tools=[...], system_prompt="You are ...",
                         middleware=[WatchdogMiddleware()])
    with wd.run(agent="explorer", max_tool_calls=20):
        result = agent.invoke({"messages": [{"role": "user", "content": "..."}]})

At each decision point (DESIGN §8):

* ``wrap_model_call`` — before each model request the run syncs with the sidecar; the turn's
  instructions are appended to the request's *system prompt* (never a user message); on the
  final request (an abort, or the tool budget used up) the request offers no tools, and the
  model's answer — the progress report — is the run's final message and final answer. Asked for
  another request after that, the run raises :class:`WatchdogAbortError` with the report;
* ``wrap_tool_call`` — a tool past the budget or after an abort does not run: the model gets
  ``"Not run: …"`` as its result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import SystemMessage, ToolMessage

from agent_watchdog_client.run import Run, steered_run
from agent_watchdog_client.steer import ModelTurn, ToolRefused, WatchdogAbort


class WatchdogAbortError(WatchdogAbort):
    """The watchdog stopped the run (raised out of ``invoke``); ``report`` is the model's
    progress report when it gave one."""


class WatchdogMiddleware(AgentMiddleware):  # type: ignore[misc]  # Any without langchain
    """Turn instructions in the system prompt, the final no-tools request, the tool cap."""

    def __init__(self, run: Run | None = None) -> None:
        super().__init__()
        self.run = run

    def _run(self) -> Run | None:
        return steered_run(self.run)

    def _prepare(self, request: Any) -> tuple[Run | None, ModelTurn | None, Any]:
        run = self._run()
        if run is None:
            return None, None, request
        run.note_messages(len(request.messages) + 1)
        try:
            turn = run.before_model_call()
        except WatchdogAbort as exc:
            raise WatchdogAbortError(exc.directive, exc.report) from None
        changes: dict[str, Any] = {}
        if turn.instructions:
            base = request.system_prompt or ""
            text = f"{base}\n\n{turn.instructions}" if base else turn.instructions
            changes["system_message"] = SystemMessage(content=text)
        if turn.final:
            changes["tools"] = []
        return run, turn, request.override(**changes) if changes else request

    @staticmethod
    def _finish(run: Run | None, turn: ModelTurn | None, response: Any) -> Any:
        if run is not None and turn is not None and turn.final:
            for message in reversed(getattr(response, "result", None) or []):
                text = getattr(message, "text", None)
                if callable(text) and not isinstance(text, str):  # (langchain-core < 1.0)
                    text = text()  # (1.x: a property, still callable, deprecated as a call)
                if isinstance(text, str) and text:
                    run.set_final_answer(text)
                    break
        return response

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        run, turn, request = self._prepare(request)
        return self._finish(run, turn, handler(request))

    async def awrap_model_call(self, request: Any,
                               handler: Callable[[Any], Awaitable[Any]]) -> Any:
        run, turn, request = self._prepare(request)
        return self._finish(run, turn, await handler(request))

    def _refusal(self, request: Any) -> ToolMessage | None:
        run = self._run()
        if run is None:
            return None
        call = request.tool_call
        try:
            run.before_tool_call(str(call.get("name", "")))
        except ToolRefused as exc:
            return ToolMessage(content=exc.message, tool_call_id=call.get("id") or "",
                               name=call.get("name"), status="error")
        return None

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        refusal = self._refusal(request)
        return refusal if refusal is not None else handler(request)

    async def awrap_tool_call(self, request: Any,
                              handler: Callable[[Any], Awaitable[Any]]) -> Any:
        refusal = self._refusal(request)
        return refusal if refusal is not None else await handler(request)
