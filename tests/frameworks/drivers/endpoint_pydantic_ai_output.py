"""pydantic-ai with a structured output (argv[1]: ``tool``, the default ``ToolOutput``;
``prompted``, ``PromptedOutput``; ``native``, ``NativeOutput``) on its OpenAI chat model by
name, pointed at the sidecar by ``OPENAI_BASE_URL`` alone. Its output must validate as
``Report``: an answer that does not is sent back to the model with a retry prompt, as a new
user message (``retries``, here 2). What the run ends with is printed, whatever it is:
``{"ran": [...], "output": the report's text, or "<ExceptionType>: <message>"}``. See
:mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput, PromptedOutput


class Report(BaseModel):
    answer: str


async def main(mode: str) -> None:
    output = {"tool": Report, "prompted": PromptedOutput(Report),
              "native": NativeOutput(Report)}[mode]
    agent = Agent(f"openai-chat:{model()}", instructions=INSTRUCTIONS, tools=[search],
                  output_type=output, retries=2)
    try:
        result = await agent.run(TASK)
    except Exception as exc:  # what the agent raises is the outcome here
        done(f"{type(exc).__name__}: {exc}")
    else:
        done(result.output.answer)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
