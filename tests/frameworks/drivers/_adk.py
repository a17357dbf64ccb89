"""google-adk on its LiteLlm model wrapper (the OpenAI-compatible route to the fake server).

Shared by the drivers ``google_adk_native`` (ADK's own OpenTelemetry spans only) and
``google_adk_openinference`` (``openinference-instrumentation-google-adk``, in its own venv
with google-adk<2.13: see ``envs/google_adk_oi.txt``). Scenarios
(argv[1]):

* ``three_tools``: the tool ``lookup`` called 3 times, then an answer;
* ``limit``: the model calls ``lookup`` forever; ADK's own ``RunConfig(max_llm_calls=3)`` stops
  it by raising ``LlmCallsLimitExceededError`` out of ``runner.run_async`` (caught here: it is
  how the run ends);
* ``tool_error``: ``lookup`` raises; ADK does not catch it: it ends the invocation and comes
  out of ``runner.run_async`` (caught here).

A scenario ending ``_nocontent`` runs it with message content capture off, as privacy-minded
deployments do: ADK's own switches (``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false`` for its
legacy spans, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT`` for its GenAI
semconv spans, the default on google-adk 2.13) and OpenInference's (``OPENINFERENCE_HIDE_INPUTS``
/ ``_OUTPUTS``: ``input.value``/``output.value`` become ``__REDACTED__``, the flattened
``llm.input_messages.*``/``llm.output_messages.*`` are dropped).

The agent is named with ``LlmAgent(name=...)`` (ADK wants an identifier).
"""

from __future__ import annotations

import asyncio
import os

AGENT_NAME = "adk_researcher"
SERVICE_NAME = "adk-service"  # not the agent name: the agent name must come from the spans
MAX_LLM_CALLS = 3
PROMPTS = {
    "three_tools": "Look up a, b and c.",
    "limit": "Look up every key you can find.",
    "tool_error": "Look up broken.",
}
# LiteLLM fetches its model price map from the network unless told to use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key to look up
    """
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


async def invoke(scenario: str) -> None:
    from _otel import model_settings
    from google.adk.agents import LlmAgent
    from google.adk.agents.invocation_context import LlmCallsLimitExceededError
    from google.adk.agents.run_config import RunConfig
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    base_url, model_name = model_settings()
    agent = LlmAgent(name=AGENT_NAME, instruction="You look keys up.", tools=[lookup],
                     model=LiteLlm(model=f"openai/{model_name}", api_base=base_url,
                                   api_key="sk-fake"))
    runner = InMemoryRunner(agent=agent, app_name="watchdog-tests")
    session = await runner.session_service.create_session(app_name="watchdog-tests",
                                                          user_id="tester")
    config = RunConfig(max_llm_calls=MAX_LLM_CALLS) if scenario == "limit" else RunConfig()
    message = types.Content(role="user", parts=[types.Part(text=PROMPTS[scenario])])
    try:
        async for event in runner.run_async(user_id="tester", session_id=session.id,
                                            new_message=message, run_config=config):
            if event.is_final_response() and event.content and event.content.parts:
                print("answer:", event.content.parts[0].text)
    except LlmCallsLimitExceededError as exc:
        print("stopped:", type(exc).__name__, exc)
    except RuntimeError as exc:  # ADK lets a tool's exception end the run
        print("failed:", type(exc).__name__, exc)
    await runner.close()


NO_CONTENT = {
    "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT",
    "OPENINFERENCE_HIDE_INPUTS": "true",
    "OPENINFERENCE_HIDE_OUTPUTS": "true",
}


def run(scenario: str, openinference: bool) -> None:
    from _otel import setup_tracing

    if scenario.endswith("_nocontent"):  # (read when ADK and OpenInference make their configs)
        os.environ.update(NO_CONTENT)
        scenario = scenario.removesuffix("_nocontent")

    provider = setup_tracing(SERVICE_NAME)
    if openinference:
        from openinference.instrumentation.google_adk import GoogleADKInstrumentor
        GoogleADKInstrumentor().instrument(tracer_provider=provider)
    asyncio.run(invoke(scenario))
    provider.shutdown()
