"""pydantic-ai with a structured output (its default ``ToolOutput``: the ``final_result``
tool) and ``end_strategy`` argv[1] (``early``, its default: a call of ``final_result`` ends the
run and the function tools asked beside it are not run; ``exhaustive``: they are run first), on
its OpenAI chat model by name, pointed at the sidecar by ``OPENAI_BASE_URL`` alone. See
:mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from pydantic import BaseModel
from pydantic_ai import Agent


class Report(BaseModel):
    answer: str


async def main(strategy: str) -> None:
    agent = Agent(f"openai-chat:{model()}", instructions=INSTRUCTIONS, tools=[search],
                  output_type=Report, end_strategy=strategy)  # type: ignore[arg-type]
    result = await agent.run(TASK)
    done(result.output.answer)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
