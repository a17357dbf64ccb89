"""crewai (one agent, one task, one crew) on its native OpenAI provider, pointed at the sidecar
by ``OPENAI_BASE_URL`` alone; crewai's own telemetry and tracing are off by environment
(``CREWAI_DISABLE_TELEMETRY``, ``CREWAI_DISABLE_TRACKING``, ``OTEL_SDK_DISABLED``). Mode
(argv[1]): ``kickoff``. See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool
from endpoint_common import TASK, done, model, own_limit, search


def main(_mode: str) -> None:
    # custom_openai: the model name is not one crewai knows (a real "gpt-4o" needs no flag);
    # the endpoint is still OPENAI_BASE_URL
    llm = LLM(model=f"openai/{model()}", custom_openai=True)
    agent = Agent(role="researcher", goal="Find the file.", backstory="You search files.",
                  tools=[tool("search")(search)], llm=llm, max_iter=own_limit(30), verbose=False)
    task = Task(description=TASK, expected_output="Where the file is.", agent=agent)
    done(Crew(agents=[agent], tasks=[task], verbose=False).kickoff().raw)


if __name__ == "__main__":
    main(sys.argv[1])
