"""A google-adk ``LlmAgent`` run by ADK's ``InMemoryRunner``; its output is the text of the run's
final response event. Its model, by mode (argv[1]):

* ``litellm``: ADK's ``LiteLlm`` wrapper (``openai/<model>``, ``api_base`` the sidecar's:
  ``OPENAI_BASE_URL``);
* ``chat``: ADK's own ``OpenAILlm`` (Chat Completions), whose ``AsyncOpenAI`` client reads
  ``OPENAI_BASE_URL``: the base URL alone points it at the sidecar;
* ``responses``: ADK's own ``OpenAIResponsesLlm`` (the Responses API; ADK chains its turns by
  ``previous_response_id``), its client the same;

each also with ``_stream`` appended: ``RunConfig(streaming_mode=StreamingMode.SSE)`` (the model
streams, ADK yields partial events and then the whole one). See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # (no price list download)
os.environ.setdefault("LITELLM_TELEMETRY", "False")

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models.base_llm import BaseLlm
from google.adk.runners import InMemoryRunner
from google.genai import types


def llm(api: str) -> BaseLlm:
    if api == "litellm":
        from google.adk.models.lite_llm import LiteLlm
        return LiteLlm(model=f"openai/{model()}", api_base=os.environ["OPENAI_BASE_URL"])
    if api == "chat":
        from google.adk.integrations.openai import OpenAILlm
        return OpenAILlm(model=model())
    from google.adk.integrations.openai import OpenAIResponsesLlm
    return OpenAIResponsesLlm(model=model())


async def run(mode: str) -> str:
    agent = LlmAgent(name="researcher", instruction=INSTRUCTIONS, tools=[search],
                     model=llm(mode.removesuffix("_stream")))
    runner = InMemoryRunner(agent=agent, app_name="endpoint")
    session = await runner.session_service.create_session(app_name="endpoint", user_id="user")
    config = RunConfig(streaming_mode=StreamingMode.SSE if mode.endswith("_stream")
                       else StreamingMode.NONE, max_llm_calls=own_limit(100))
    output = ""
    async for event in runner.run_async(
            user_id="user", session_id=session.id, run_config=config,
            new_message=types.Content(role="user", parts=[types.Part(text=TASK)])):
        if event.is_final_response() and not event.partial and event.content:
            output = "".join(part.text or "" for part in event.content.parts or [])
    await runner.close()
    return output


def main(mode: str) -> None:
    done(asyncio.run(run(mode)))


if __name__ == "__main__":
    main(sys.argv[1])
