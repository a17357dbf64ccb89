"""The OpenAI Agents SDK traced by OpenInference's instrumentor (or, from
``openai_agents_openllmetry``, by Traceloop's OpenLLMetry), on the chat-completions model
against the scripted model server. Scenarios (argv[1]): ``three_tools``, ``limit``
(``max_turns=3`` -> ``MaxTurnsExceeded``), ``tool_error``, ``handoff`` (a triage agent hands
off to a billing agent), ``agent_as_tool`` (a manager calls the researcher as its tool
``research``: the researcher's run nests inside the tool span), ``ping_pong`` (a triage and a
billing agent hand the same request back and forth, eight round trips, until triage answers),
``ping_pong_limit`` (the same, but triage never answers: ``max_turns=4`` stops the loop),
``chain`` (triage hands off to billing, billing to the researcher, who answers). A scenario ending
``_nocontent`` runs with message content hidden, as a privacy-minded deployment sets it:
OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES`` (read by its ``TraceConfig``), OpenLLMetry's ``TRACELOOP_TRACE_CONTENT``."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

from _otel import model_settings, setup_tracing
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
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
               instrument: Callable[[TracerProvider], None] = instrument_openinference) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing("openai-agents-service")
    set_trace_processors([])  # no export to OpenAI's backend: there is no network here
    instrument(provider)
    base_url, name = model_settings()
    client = AsyncOpenAI(base_url=base_url, api_key="sk-fake")
    researcher = Agent(name="agents-researcher", instructions="Look things up, then answer.",
                       tools=[lookup], model=OpenAIChatCompletionsModel(name, client))
    start = researcher
    if scenario == "handoff":
        researcher.model = OpenAIChatCompletionsModel(name + "-billing", client)
        start = Agent(name="agents-triage", instructions="Hand billing questions off.",
                      handoffs=[researcher], model=OpenAIChatCompletionsModel(name, client))
    elif scenario == "agent_as_tool":
        researcher.model = OpenAIChatCompletionsModel(name + "-sub", client)
        start = Agent(name="agents-manager", instructions="Use the research tool, then answer.",
                      tools=[researcher.as_tool(tool_name="research",
                                                tool_description="Research a question.")],
                      model=OpenAIChatCompletionsModel(name, client))
    elif scenario in ("ping_pong", "ping_pong_limit", "chain"):
        billing = Agent(name="agents-billing", instructions="Answer billing questions.",
                        model=OpenAIChatCompletionsModel(name + "-billing", client))
        start = Agent(name="agents-triage", instructions="Hand billing questions off.",
                      handoffs=[billing], model=OpenAIChatCompletionsModel(name, client))
        billing.handoffs = [researcher] if scenario == "chain" else [start]
        researcher.model = OpenAIChatCompletionsModel(name + "-sub", client)
    turns = {"limit": 3, "ping_pong": 20, "ping_pong_limit": 4}.get(scenario, 10)
    try:
        result = await Runner.run(start, "Look up a, b and c.", max_turns=turns)
        print("answer:", result.final_output)
    except MaxTurnsExceeded as exc:
        print("stopped:", exc)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
