"""swarms (kyegomez's ``swarms``) on the model endpoint, the tool ``search`` a Python function.
Its ``Agent`` calls the model through LiteLLM: the model name ``openai/<model>`` (LiteLLM's
OpenAI provider) reads ``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar.
Its telemetry is off by ``SWARMS_TELEMETRY_ON=false`` (on by default), its workspace
``WORKSPACE_DIR``. Mode (argv[1]):

* ``run``: one ``Agent(..., tools=[search], max_loops=ENDPOINT_OWN_LIMIT (default 6))``,
  ``agent.run(task)``; its ``output_type="final"``: the last answer is the output.
* ``stream``: the same with ``stream=True`` (each request streamed).
* ``sequential``: a ``SequentialWorkflow`` of two agents, the researcher's with ``search``,
  the writer's with none, the researcher's answer the writer's task.

See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from swarms import Agent, SequentialWorkflow


def agent(name: str, prompt: str, tools: list[object] | None = None,
          stream: bool = False) -> Agent:
    return Agent(agent_name=name, system_prompt=prompt, model_name=f"openai/{model()}",
                 tools=tools, max_loops=own_limit(6), output_type="final", print_on=False,
                 stream=stream)


def main(mode: str) -> None:
    assert mode in ("run", "stream", "sequential"), mode
    researcher = agent("Researcher", INSTRUCTIONS, [search], mode == "stream")
    if mode != "sequential":
        done(researcher.run(TASK))
        return
    writer = agent("Writer", "You write the report.")
    done(SequentialWorkflow(agents=[researcher, writer], max_loops=1,
                            output_type="final").run(TASK))


if __name__ == "__main__":
    main(sys.argv[1])
