"""The OpenAI Agents SDK traced by OpenInference's instrumentor (or, from
``openai_agents_openllmetry``, by Traceloop's OpenLLMetry), on the chat-completions model
against the scripted model server. Scenarios (argv[1]): ``three_tools``, ``limit``
(``max_turns=3`` -> ``MaxTurnsExceeded``), ``tool_error``, ``handoff`` (a triage agent hands
off to a billing agent), ``agent_as_tool`` (a manager calls the researcher as its tool
``research``: the researcher's run nests inside the tool span), ``ping_pong`` (a triage and a
billing agent hand the same request back and forth, eight round trips, until triage answers),
``ping_pong_limit`` (the same, but triage never answers: ``max_turns=4`` stops the loop),
``chain`` (triage hands off to billing, billing to the researcher, who answers). A scenario ending
``_responses`` runs on the Responses API model (``OpenAIResponsesModel``, the SDK's default
for a model given by name) instead of Chat Completions. A scenario ending
``_nocontent`` runs with message content hidden, as a privacy-minded deployment sets it:
OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES`` (read by its ``TraceConfig``), OpenLLMetry's ``TRACELOOP_TRACE_CONTENT``."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

from _otel import model_settings, setup_tracing
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_trace_processors,
)
from agents.exceptions import MaxTurnsExceeded
from openai import AsyncOpenAI
from opentelemetry.sdk.trace import TracerProvider


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


CONTENT_OFF = {
    **{f"OPENINFERENCE_HIDE_{what}": "true"
       for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES")},
    "TRACELOOP_TRACE_CONTENT": "false",
}


def instrument_openinference(provider: TracerProvider) -> None:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


async def main(scenario: str,
               instrument: Callable[[TracerProvider], None] = instrument_openinference,
               tracing: Callable[[str], TracerProvider] = setup_tracing) -> None:
    """Run ``scenario``; ``tracing`` makes the tracer provider exporting to the sidecar (whose
    ``shutdown`` flushes it), ``instrument`` traces the SDK on it."""
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    # `_responses`: on the Responses API model (the SDK's default for a model given by name)
    model_class: Any = OpenAIChatCompletionsModel
    if scenario.endswith("_responses"):
        model_class = OpenAIResponsesModel
        scenario = scenario.removesuffix("_responses")
    provider = tracing("openai-agents-service")
    set_trace_processors([])  # no export to OpenAI's backend: there is no network here
    instrument(provider)
    base_url, name = model_settings()
    client = AsyncOpenAI(base_url=base_url, api_key="sk-fake")
    researcher = Agent(name="agents-researcher", instructions="Look things up, then answer.",
                       tools=[lookup], model=model_class(name, client))
    start = researcher
    if scenario == "handoff":
        researcher.model = model_class(name + "-billing", client)
        start = Agent(name="agents-triage", instructions="Hand billing questions off.",
                      handoffs=[researcher], model=model_class(name, client))
    elif scenario == "agent_as_tool":
        researcher.model = model_class(name + "-sub", client)
        start = Agent(name="agents-manager", instructions="Use the research tool, then answer.",
                      tools=[researcher.as_tool(tool_name="research",
                                                tool_description="Research a question.")],
                      model=model_class(name, client))
    elif scenario in ("ping_pong", "ping_pong_limit", "chain"):
        billing = Agent(name="agents-billing", instructions="Answer billing questions.",
                        model=model_class(name + "-billing", client))
        start = Agent(name="agents-triage", instructions="Hand billing questions off.",
                      handoffs=[billing], model=model_class(name, client))
        billing.handoffs = [researcher] if scenario == "chain" else [start]
        researcher.model = model_class(name + "-sub", client)
    turns = {"limit": 3, "ping_pong": 20, "ping_pong_limit": 4}.get(scenario, 10)
    try:
        result = await Runner.run(start, "Look up a, b and c.", max_turns=turns)
        print("answer:", result.final_output)
    except MaxTurnsExceeded as exc:
        print("stopped:", exc)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
