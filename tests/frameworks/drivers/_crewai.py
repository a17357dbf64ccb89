"""crewai (one agent, one task, one crew) on its native OpenAI provider.

Shared by the drivers ``crewai_openinference`` (``openinference-instrumentation-crewai``
only: what a user who follows the crewai instrumentation's docs gets) and
``crewai_openinference_openai`` (plus ``openinference-instrumentation-openai``, which adds the
model-call spans crewai's own instrumentation lacks), and ``crewai_openllmetry`` (Traceloop's
``opentelemetry-instrumentation-crewai`` and ``-openai``, as ``Traceloop.init()`` sets them
up), and ``crewai_openlit`` (``openlit.init()``: OpenLIT's crewai and OpenAI instrumentation).
Scenarios (argv[1]):

* ``three_tools``: the tool ``lookup`` called 3 times, then an answer;
* ``limit``: the model calls ``lookup`` forever; the agent's own ``max_iter=3`` stops it (crewai
  then asks the model for a final answer, without tools);
* ``tool_error``: ``lookup`` raises.

A scenario ending ``_nocontent`` runs with message content hidden, as a privacy-minded
deployment sets it: OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/
``_INPUT_MESSAGES``/``_OUTPUT_MESSAGES`` (read by the instrumentors' ``TraceConfig``).

The agent is named by its ``role``.
"""

from __future__ import annotations

import os

AGENT_ROLE = "crewai-researcher"
SERVICE_NAME = "crewai-service"  # not the agent name: the agent name must come from the spans
MAX_ITER = 3
PROMPTS = {
    "three_tools": "Look up a, b and c.",
    "limit": "Look up every key you can find.",
    "tool_error": "Look up broken.",
}
# crewai's own telemetry and tracing service are off (no network); OTel itself stays on.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_STORAGE_DIR", "/tmp/crewai-watchdog-tests")
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true"
               for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES")}


def run(scenario: str, instrument_openai: bool, tracer: str = "openinference") -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    from _otel import model_settings, setup_tracing

    provider = setup_tracing(SERVICE_NAME)
    if tracer == "openlit":
        import openlit
        openlit.init(service_name=SERVICE_NAME, disable_metrics=True, disable_events=True)
    elif tracer == "openllmetry":
        from opentelemetry.instrumentation.crewai import CrewAIInstrumentor as OLMCrewAI
        OLMCrewAI().instrument(tracer_provider=provider)
        if instrument_openai:
            from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OLMOpenAI
            OLMOpenAI().instrument(tracer_provider=provider)
    else:
        from openinference.instrumentation.crewai import CrewAIInstrumentor
        CrewAIInstrumentor().instrument(tracer_provider=provider)
        if instrument_openai:
            from openinference.instrumentation.openai import OpenAIInstrumentor
            OpenAIInstrumentor().instrument(tracer_provider=provider)

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("lookup")
    def lookup(key: str) -> str:
        """Look a key up."""
        if key == "broken":
            raise RuntimeError(f"backend unavailable for {key}")
        return f"value of {key}"

    base_url, model_name = model_settings()
    llm = LLM(model=f"openai/{model_name}", base_url=base_url, api_key="sk-fake")
    agent = Agent(role=AGENT_ROLE, goal="Look keys up.", backstory="You look keys up.",
                  tools=[lookup], llm=llm, max_iter=MAX_ITER if scenario == "limit" else 10,
                  verbose=False)
    task = Task(description=PROMPTS[scenario], expected_output="What the keys are.",
                agent=agent)
    result = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    print("answer:", result.raw)
    provider.shutdown()
