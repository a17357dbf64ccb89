"""PraisonAI Agents (``praisonaiagents``) on the model endpoint, the tool ``search`` a Python
function. Mode (argv[1]):

* ``start``, ``stream``: one ``Agent`` on its default model client, the ``openai`` client itself
  (a model name with no ``provider/``, no ``base_url``): the client reads ``OPENAI_BASE_URL``,
  so the base URL alone points it at the sidecar; ``agent.start(task)`` (a whole response per
  request) or ``agent.start(task, stream=True)`` (the chunks it yields joined). ``PA_AGENT``
  (JSON): more of the ``Agent``'s keyword arguments (``execution``, ...; ``reflection``: its
  ``ReflectionConfig``'s, the reflecting model that model).
* ``sequential``, ``hierarchical``: ``PraisonAIAgents`` with two agents and a task each, the
  researcher's with ``search``, the writer's with none, run by ``team.start()`` in that
  process; hierarchical: a manager on ``manager_llm`` (``openai/<model>``, its LLM class on
  LiteLLM, which reads ``OPENAI_BASE_URL`` too) delegates each task.

See :mod:`endpoint_common`."""

from __future__ import annotations

import json
import os
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from praisonaiagents import Agent, PraisonAIAgents, Task
from praisonaiagents.config import ReflectionConfig


def team(process: str) -> object:
    researcher = Agent(name="Researcher", role="Researcher", goal="Find the file",
                       instructions=INSTRUCTIONS, llm=model(), tools=[search])
    writer = Agent(name="Writer", role="Writer", goal="Report what was found",
                   instructions="You write the report.", llm=model())
    tasks = [Task(name="research", description=TASK, expected_output="Where the file is",
                  agent=researcher),
             Task(name="write", description="Write the report.", expected_output="A report",
                  agent=writer)]
    return PraisonAIAgents(agents=[researcher, writer], tasks=tasks, process=process,
                           manager_llm=f"openai/{model()}").start()


def main(mode: str) -> None:
    assert mode in ("start", "stream", "sequential", "hierarchical"), mode
    if mode in ("sequential", "hierarchical"):
        done(team(mode))
        return
    settings = json.loads(os.environ.get("PA_AGENT") or "{}")
    if "reflection" in settings:  # (else it reflects on gpt-4o-mini, its default model)
        settings["reflection"] = ReflectionConfig(llm=model(), **settings["reflection"])
    agent = Agent(name="researcher", instructions=INSTRUCTIONS, llm=model(), tools=[search],
                  **settings)
    if mode == "stream":
        done("".join(agent.start(TASK, stream=True)))
    else:
        done(agent.start(TASK))


if __name__ == "__main__":
    main(sys.argv[1])
