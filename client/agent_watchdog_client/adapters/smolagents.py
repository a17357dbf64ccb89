"""smolagents (``ToolCallingAgent``, ``CodeAgent``): the watchdog at the agent's model and tools.

::

    from smolagents import OpenAIServerModel, ToolCallingAgent
    from agent_watchdog_client import Watchdog
    from agent_watchdog_client.adapters.smolagents import steer_smolagents

    wd = Watchdog()
    wd.setup_tracing(service_name="explorer")
    SmolagentsInstrumentor().instrument()         # openinference-instrumentation-smolagents
    agent = steer_smolagents(ToolCallingAgent(tools=[...], model=OpenAIServerModel(...)))
    with wd.run(agent="explorer", max_tool_calls=20):
        answer = agent.run("...")

smolagents' step callbacks run *after* a step, once its model call and tools are done; the
decision point is before the next model call, so the adapter steers there, on the agent's own
model and tools (:func:`steer_smolagents` patches the one agent object it is given):

* before each model call the run syncs with the sidecar and the turn's instructions are added
  as a system message right after the agent's system prompt (never a user message);
* on the final request (an abort, or the tool budget used up) the model is offered no tools; its
  text answer — the progress report — is handed to smolagents as a ``final_answer`` call, so it is
  what ``agent.run()`` returns. Asked for another request after that, the run raises
  :class:`~agent_watchdog_client.WatchdogAbort` with the report;
* each tool (not ``final_answer``) is refused past the budget or after an abort: the model gets
  ``"Not run: …"`` as its observation.
"""

from __future__ import annotations

import functools
from typing import Any

from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)

from agent_watchdog_client.run import Run, current_run
from agent_watchdog_client.steer import ToolRefused

ANSWER_TOOL = "final_answer"
_MARK = "_watchdog_steered"


def steer_smolagents(agent: Any, run: Run | None = None) -> Any:
    """Steer ``agent`` (idempotent); ``run`` pins a run, else the current one is used."""
    if getattr(agent, _MARK, False):
        return agent
    model = agent.model
    generate = model.generate

    def the_run() -> Run | None:
        return run or current_run()

    @functools.wraps(generate)
    def steered_generate(messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        current = the_run()
        if current is None:
            return generate(messages, *args, **kwargs)
        current.note_messages(len(messages))
        turn = current.before_model_call()  # WatchdogAbort after the final turn
        if turn.instructions:
            note = ChatMessage(role=MessageRole.SYSTEM,
                               content=[{"type": "text", "text": turn.instructions}])
            at = 1 if messages and _role(messages[0]) == "system" else 0
            messages = [*messages[:at], note, *messages[at:]]
        if not turn.final:
            return generate(messages, *args, **kwargs)
        kwargs["tools_to_call_from"] = None
        answer = generate(messages, *args, **kwargs)
        text = answer.content if isinstance(answer.content, str) else str(answer.content or "")
        current.set_final_answer(text)
        answer.tool_calls = [ChatMessageToolCall(
            id="watchdog-report", type="function",
            function=ChatMessageToolCallFunction(name=ANSWER_TOOL, arguments={"answer": text}))]
        return answer

    model.generate = steered_generate
    for name, tool in agent.tools.items():
        if name != ANSWER_TOOL:
            _steer_tool(tool, the_run)
    setattr(agent, _MARK, True)
    return agent


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", "")
    return str(getattr(role, "value", role))


def _steer_tool(tool: Any, the_run: Any) -> None:
    forward = tool.forward

    @functools.wraps(forward)
    def steered_forward(*args: Any, **kwargs: Any) -> Any:
        current = the_run()
        if current is not None:
            try:
                current.before_tool_call(tool.name)
            except ToolRefused as exc:
                return exc.message
        return forward(*args, **kwargs)

    tool.forward = steered_forward
