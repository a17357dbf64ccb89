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

* before each model call (``generate``, and ``generate_stream`` for ``stream_outputs=True``)
  the run syncs with the sidecar and the turn's instructions are added as a system message
  right after the agent's system prompt (never a user message);
* on the final request (an abort, or the tool budget used up) the model is offered no tools; its
  text answer — the progress report — is handed to smolagents as a ``final_answer`` call, so it is
  what ``agent.run()`` returns. Asked for another request after that, the run raises
  :class:`~agent_watchdog_client.WatchdogAbort` with the report;
* each tool (not ``final_answer``) is refused past the budget or after an abort: the model gets
  ``"Not run: …"`` as its observation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from typing import Any

from smolagents.models import (
    ChatMessage,
    ChatMessageStreamDelta,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    ChatMessageToolCallStreamDelta,
    MessageRole,
)

from agent_watchdog_client.run import Run, steered_run
from agent_watchdog_client.steer import ToolRefused

ANSWER_TOOL = "final_answer"
REPORT_CALL_ID = "watchdog-report"  # the final_answer call that hands smolagents the report
_MARK = "_watchdog_steered"


def steer_smolagents(agent: Any, run: Run | None = None) -> Any:
    """Steer ``agent`` (idempotent); ``run`` pins a run, else the current one is used. Both of
    its model's ways to ask are steered: ``generate`` and, for ``stream_outputs=True``,
    ``generate_stream``."""
    if getattr(agent, _MARK, False):
        return agent
    model = agent.model
    generate = model.generate

    def the_run() -> Run | None:
        return steered_run(run)

    @functools.wraps(generate)
    def steered_generate(messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        current = the_run()
        if current is None:
            return generate(messages, *args, **kwargs)
        final, messages = _turn(current, messages)
        if not final:
            return generate(messages, *args, **kwargs)
        kwargs["tools_to_call_from"] = None
        answer = generate(messages, *args, **kwargs)
        text = answer.content if isinstance(answer.content, str) else str(answer.content or "")
        current.set_final_answer(text)
        answer.tool_calls = [ChatMessageToolCall(
            id=REPORT_CALL_ID, type="function",
            function=ChatMessageToolCallFunction(name=ANSWER_TOOL, arguments={"answer": text}))]
        return answer

    model.generate = steered_generate
    generate_stream = getattr(model, "generate_stream", None)
    if generate_stream is not None:
        model.generate_stream = _steered_stream(generate_stream, the_run)
    for name, tool in agent.tools.items():
        if name != ANSWER_TOOL:
            _steer_tool(tool, the_run)
    setattr(agent, _MARK, True)
    return agent


def _turn(current: Run, messages: list[Any]) -> tuple[bool, list[Any]]:
    """The request's turn: whether it is the final one, and the messages with its instructions
    as a system message right after the agent's system prompt."""
    current.note_messages(len(messages))
    turn = current.before_model_call()  # WatchdogAbort after the final turn
    if turn.instructions:
        note = ChatMessage(role=MessageRole.SYSTEM,
                           content=[{"type": "text", "text": turn.instructions}])
        at = 1 if messages and _role(messages[0]) == "system" else 0
        messages = [*messages[:at], note, *messages[at:]]
    return turn.final, messages


def _steered_stream(generate_stream: Any, the_run: Any) -> Any:
    """``generate_stream`` steered as ``generate`` is: the final request streams the report's
    text, and ends with the ``final_answer`` call that hands it to smolagents."""

    @functools.wraps(generate_stream)
    def steered_generate_stream(messages: list[Any], *args: Any, **kwargs: Any
                                ) -> Iterator[Any]:
        current = the_run()
        if current is None:
            yield from generate_stream(messages, *args, **kwargs)
            return
        final, messages = _turn(current, messages)
        if not final:
            yield from generate_stream(messages, *args, **kwargs)
            return
        kwargs["tools_to_call_from"] = None
        parts: list[str] = []
        for delta in generate_stream(messages, *args, **kwargs):
            if delta.tool_calls:  # (none was offered: the answer is the report)
                delta = dataclasses.replace(delta, tool_calls=None)
            if delta.content:
                parts.append(delta.content)
            yield delta
        text = "".join(parts)
        current.set_final_answer(text)
        yield ChatMessageStreamDelta(tool_calls=[ChatMessageToolCallStreamDelta(
            index=0, id=REPORT_CALL_ID, type="function",
            function=ChatMessageToolCallFunction(name=ANSWER_TOOL,
                                                 arguments=json.dumps({"answer": text})))])

    return steered_generate_stream


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
