"""Semantic Kernel (Python): a ChatCompletionAgent, or the kernel alone, on SK's OpenAI connector,
traced by SK's own OpenTelemetry diagnostics.

Shared by the drivers ``semantic_kernel_agent`` (a current SK: model calls are
``gen_ai.operation.name = "chat"``) and ``semantic_kernel_137_agent`` (SK 1.37, the last
release with SK's own operation names: ``chat.completions``, ``chat.streaming_completions``).

The diagnostics are SK's (``semantic_kernel.utils.telemetry``), turned on the documented way:
``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS`` and ``..._SENSITIVE`` (content:
tool arguments and results, the agent's input and output). They are read once, when SK is
imported, so they are set before. SK traces through the global tracer provider.

The agent's one tool is the kernel function ``lookup`` of the plugin ``Lookup``: the model
sees (and calls) it by its fully qualified name ``Lookup-lookup``. Function calling is SK's
auto-invoke loop (``FunctionChoiceBehavior.Auto``). Scenarios (argv[1]):

* ``three_tools``: ``lookup`` called 3 times, then an answer;
* ``limit``: the model calls ``lookup`` forever; ``maximum_auto_invoke_attempts=3`` stops the
  loop: SK then asks once more without tools, and the model answers that request;
* ``tool_error``: ``lookup`` raises; SK hands the error to the model as the result, and the
  model answers;

each also with ``_stream`` appended: the agent's ``invoke_stream`` instead of ``invoke``; and
any scenario with ``_client`` appended (``three_tools_client``, ``kernel_three_tools_client``...):
the invocation inside a run of the watchdog client SDK (``agent_watchdog_client``, from the
checkout: PYTHONPATH), which prints the model and tool calls its span processor counted.

Without an agent (``kernel_`` + a scenario above: ``kernel_three_tools``, ``kernel_tool_error``,
``kernel_limit_stream``...): ``kernel.invoke_prompt`` (``invoke_prompt_stream``) with the same
plugin and ``FunctionChoiceBehavior.Auto`` in the prompt's execution settings, as most SK code
calls a model with tools. SK wraps the prompt in a kernel function of a random name and invokes
it: no agent span, the trace's root is that function's ``execute_tool``. ``kernel_twice``: two
such invocations in a row (three tools, then the tool error), one trace each.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

AGENT_NAME = "sk-researcher"
SERVICE_NAME = "semantic-kernel-service"  # not the agent name: that must come from the spans
TOOL = "Lookup-lookup"  # the function's fully qualified name: what the model calls
MAX_AUTO_INVOKE = 3
PROMPTS = {
    "three_tools": "Look up a, b and c.",
    "limit": "Look up every key you can find.",
    "tool_error": "Look up broken.",
}
KERNEL_PREFIX = "kernel_"


async def invoke(scenario: str, provider: Any) -> None:
    from _otel import model_settings
    from openai import AsyncOpenAI
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai import FunctionChoiceBehavior
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
    from semantic_kernel.functions import kernel_function

    class Lookup:
        @kernel_function(description="Look a key up.")
        def lookup(self, key: str) -> str:
            if key == "broken":
                raise RuntimeError(f"backend unavailable for {key}")
            return f"value of {key}"

    base_url, model_name = model_settings()
    service = OpenAIChatCompletion(ai_model_id=model_name, async_client=AsyncOpenAI(
        base_url=base_url, api_key="sk-fake"))
    base = scenario.removesuffix("_client")

    async def invoke_one() -> None:
        if base.startswith(KERNEL_PREFIX):
            await invoke_kernel(base.removeprefix(KERNEL_PREFIX), service, Lookup())
            return
        attempts = MAX_AUTO_INVOKE if base.startswith("limit") else 5  # 5: SK's default
        agent = ChatCompletionAgent(
            service=service, name=AGENT_NAME, instructions="You look keys up.",
            plugins=[Lookup()], function_choice_behavior=FunctionChoiceBehavior.Auto(
                maximum_auto_invoke_attempts=attempts))
        prompt = PROMPTS[base.removesuffix("_stream")]
        print("answer:", await answer(agent, prompt, stream=base.endswith("_stream")))

    if base == scenario:
        await invoke_one()
        return
    from agent_watchdog_client import Watchdog

    wd = Watchdog(tracer_provider=provider)
    with wd.run(agent=AGENT_NAME) as run:
        await invoke_one()
    print("client counted:", run.local_model_calls, "model calls,", run.local_tool_calls,
          "tool calls")
    wd.close()


async def answer(agent: Any, prompt: str, stream: bool) -> str:
    text = ""
    if stream:
        async for chunk in agent.invoke_stream(prompt):
            text += str(chunk.message.content or "")
    else:
        async for response in agent.invoke(prompt):
            text = str(response.message.content)
    return text


async def invoke_kernel(scenario: str, service: Any, plugin: Any) -> None:
    """``kernel.invoke_prompt`` with auto function calling: the kernel without an agent."""
    from semantic_kernel import Kernel
    from semantic_kernel.connectors.ai import FunctionChoiceBehavior
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatPromptExecutionSettings
    from semantic_kernel.functions import KernelArguments

    kernel = Kernel()
    kernel.add_service(service)
    kernel.add_plugin(plugin, plugin_name="Lookup")
    attempts = MAX_AUTO_INVOKE if scenario.startswith("limit") else 5
    settings = OpenAIChatPromptExecutionSettings(
        function_choice_behavior=FunctionChoiceBehavior.Auto(
            maximum_auto_invoke_attempts=attempts))
    bases = ["three_tools", "tool_error"] if scenario == "twice" else [scenario]
    for base in bases:
        arguments = KernelArguments(settings=settings)
        prompt = PROMPTS[base.removesuffix("_stream")]
        if base.endswith("_stream"):
            text = ""
            async for chunks in kernel.invoke_prompt_stream(prompt, arguments=arguments):
                text += "".join(str(chunk) for chunk in chunks)
            print("answer:", text)
        else:
            print("answer:", await kernel.invoke_prompt(prompt, arguments=arguments))


def run(scenario: str) -> None:
    os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS"] = "true"
    os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE"] = "true"
    from _otel import setup_tracing

    provider = setup_tracing(SERVICE_NAME)
    asyncio.run(invoke(scenario, provider))
    provider.shutdown()

