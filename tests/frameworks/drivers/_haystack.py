"""Haystack agents (haystack-ai 3.x ``haystack.components.agents.Agent``) on
``OpenAIChatGenerator`` pointed at the scripted model server; the tracing is set up by the
driver (``haystack_native``: Haystack's own tracer; ``haystack_oi``: OpenInference). Scenarios
(argv[1]):

* ``three_tools``: the agent with the ``@tool`` ``lookup`` looks a, b and c up, then answers
  (``agent.run(messages=[...])``); ``three_tools_stream`` the same with a
  ``streaming_callback`` (the model streams);
* ``limit``: the model asks for ``lookup`` forever; ``max_agent_steps=3`` stops the loop
  (Haystack raises nothing: it logs a warning and returns with ``exit_reason`` =
  ``"max_agent_steps"``, the last message the third tool result);
* ``answer_at_cap``: ``max_agent_steps=3`` too, but the model answers in the third step
  (after two lookups): not stopped by the cap;
* ``tool_error``: ``lookup`` raises; by default (``raise_on_tool_invocation_failure=False``)
  Haystack hands the error text to the model as the tool's result, and the model answers;
* ``tool_error_raise``: the same with ``raise_on_tool_invocation_failure=True``: the run raises
  ``ToolInvocationError`` (the driver catches it, as an application would);
* ``pipeline``: the agent of ``three_tools`` as the component ``agent`` of a ``Pipeline`` (after
  a ``ChatPromptBuilder``).
"""

from __future__ import annotations

from typing import Any

from _otel import model_settings
from haystack import Pipeline
from haystack.components.agents import Agent
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools import tool
from haystack.tools.errors import ToolInvocationError
from haystack.utils import Secret

TASKS = {"three_tools": "Look up a, b and c.", "limit": "Look up every key you can find.",
         "tool_error": "Look up broken.", "pipeline": "Look up a, b and c.",
         "answer_at_cap": "Look up a and b."}


def run(scenario: str) -> None:

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        if key == "broken":
            raise RuntimeError(f"backend unavailable for {key}")
        return f"value of {key}"

    base_url, name = model_settings()
    base = scenario.removesuffix("_stream").removesuffix("_raise")
    chunks: list[Any] = []
    generator = OpenAIChatGenerator(api_key=Secret.from_token("sk-fake"), model=name,
                                    api_base_url=base_url)
    agent = Agent(chat_generator=generator, tools=[lookup],
                  system_prompt="You look keys up.",
                  max_agent_steps=3 if base in ("limit", "answer_at_cap") else 100,
                  raise_on_tool_invocation_failure=scenario.endswith("_raise"),
                  streaming_callback=chunks.append if scenario.endswith("_stream") else None)
    messages = [ChatMessage.from_user(TASKS[base])]
    try:
        if base == "pipeline":
            pipeline = Pipeline()
            pipeline.add_component("prompt", ChatPromptBuilder(template=messages))
            pipeline.add_component("agent", agent)
            pipeline.connect("prompt.prompt", "agent.messages")
            result = pipeline.run({"prompt": {}})["agent"]
        else:
            result = agent.run(messages=messages)
        print("answer:", result["last_message"].text, "exit_reason:", result.get("exit_reason"),
              "steps:", result.get("step_count"), "chunks:", len(chunks))
    except ToolInvocationError as error:
        print("stopped:", type(error).__name__, error)
