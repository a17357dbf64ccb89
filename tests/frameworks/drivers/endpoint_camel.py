"""A CAMEL-AI agent (``camel.agents.ChatAgent`` with the tool ``search`` a ``FunctionTool``) on
its OpenAI model (``ModelFactory.create(ModelPlatformType.OPENAI, ...)``: the ``openai`` client
beneath reads ``OPENAI_BASE_URL``), so the base URL alone points it at the sidecar. Mode
(argv[1]): ``step`` (a whole response per request), ``step_stream`` (``stream: True`` in its
model config), ``astep`` and ``astep_stream`` (the same, awaited); ``url``: a ``step`` on an
``OPENAI_COMPATIBLE_MODEL`` made with ``CAMEL_SETTINGS`` (JSON: the keyword arguments of
``ModelFactory.create`` but its platform and key, docs/agents.md's: its ``url``), with
``max_iteration`` ``CAMEL_MAX_ITERATION`` and ``token_limit`` ``CAMEL_TOKEN_LIMIT`` if set,
printing ``error`` too (what the step raised, else ""), and with ``CAMEL_OTEL`` set traced by
opentelemetry-instrumentation-openai-v2 to the sidecar (``OTEL_EXPORTER_OTLP_*``);
``roleplay``: a ``RolePlaying`` society, its assistant (the tool, its model
``CAMEL_SETTINGS``') instructed by its user agent (its model ``CAMEL_USER_SETTINGS``') turn by
turn until the user agent says ``CAMEL_TASK_DONE`` (at most 4 turns), printing ``turns`` too;
``workforce``: a ``Workforce`` (its task agent, its coordinator and one single-agent worker with
the tool, all on the model ``CAMEL_SETTINGS``') processing the task.
See :mod:`endpoint_common`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import _camel  # noqa: F401 (first: tiktoken's file)
from camel.agents import ChatAgent
from camel.models import BaseModelBackend, ModelFactory
from camel.responses import ChatAgentResponse
from camel.societies import RolePlaying
from camel.societies.workforce import Workforce
from camel.tasks import Task
from camel.toolkits import FunctionTool
from camel.types import ModelPlatformType
from endpoint_common import INSTRUCTIONS, RAN, TASK, done, model, search


def compatible(variable: str) -> BaseModelBackend:
    """The model as docs/agents.md sets it: an OpenAI-compatible model, its keyword arguments
    (the key aside) the JSON of the environment variable ``variable``; with ``CAMEL_RUN`` set,
    its client's ``default_headers`` name the run (``x-watchdog-run``)."""
    run = os.environ.get("CAMEL_RUN")
    return ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL,
                               **json.loads(os.environ[variable]),
                               api_key=os.environ["OPENAI_API_KEY"],
                               **({"default_headers": {"x-watchdog-run": run}} if run else {}))


def agent(stream: bool) -> ChatAgent:
    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=model(),
                                  model_config_dict={"stream": stream})
    return ChatAgent(system_message=INSTRUCTIONS, model=backend,
                     tools=[FunctionTool(search)], stream_accumulate=False)


def text(response: ChatAgentResponse) -> str:
    return "".join(message.content for message in response.msgs)


async def astep(camel: ChatAgent, stream: bool) -> str:
    response = await camel.astep(TASK)
    if not stream:
        return text(response)
    return "".join([text(delta) async for delta in response])  # its deltas, as they come


def at_url() -> None:
    provider = None
    if os.environ.get("CAMEL_OTEL"):  # traced as a user of the openai client traces it
        from _otel import setup_tracing
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        provider = setup_tracing(os.environ.get("OTEL_SERVICE_NAME", "camel-agent"))
        OpenAIInstrumentor().instrument()
    limit, tokens = os.environ.get("CAMEL_MAX_ITERATION"), os.environ.get("CAMEL_TOKEN_LIMIT")
    camel = ChatAgent(system_message=INSTRUCTIONS,
                      model=compatible("CAMEL_SETTINGS"),
                      tools=[FunctionTool(search)],
                      max_iteration=int(limit) if limit else None,
                      token_limit=int(tokens) if tokens else None)
    try:
        output, error = text(camel.step(TASK)), ""
    except Exception as exc:  # what the user's code catches: the step's error
        output, error = "", f"{type(exc).__name__}: {exc}"
    if provider is not None:
        provider.shutdown()
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


def role_play() -> None:
    society = RolePlaying(
        assistant_role_name="Researcher", user_role_name="Lead", task_prompt=TASK,
        with_task_specify=False,
        assistant_agent_kwargs={"model": compatible("CAMEL_SETTINGS"),
                                "tools": [FunctionTool(search)]},
        user_agent_kwargs={"model": compatible("CAMEL_USER_SETTINGS")})
    message, turns, output = society.init_chat(), 0, ""
    while turns < 4:
        turns += 1
        assistant, user = society.step(message)
        if user.terminated or assistant.terminated or "CAMEL_TASK_DONE" in text(user):
            break
        message = assistant.msgs[0]
        output = message.content
    print(json.dumps({"ran": RAN, "output": output, "turns": turns}), flush=True)


def workforce() -> None:
    team = Workforce("Research team", coordinator_agent=ChatAgent(model=compatible(
        "CAMEL_SETTINGS")), task_agent=ChatAgent(model=compatible("CAMEL_SETTINGS")),
        default_model=compatible("CAMEL_SETTINGS"))
    team.add_single_agent_worker("A researcher who searches files", worker=ChatAgent(
        INSTRUCTIONS, model=compatible("CAMEL_SETTINGS"), tools=[FunctionTool(search)]))
    task = team.process_task(Task(content=TASK, id="0"))
    done(task.result)


def main(mode: str) -> None:
    assert mode in ("step", "step_stream", "astep", "astep_stream", "url", "roleplay",
                    "workforce"), mode
    if mode == "workforce":
        workforce()
        return
    if mode == "url":
        at_url()
        return
    if mode == "roleplay":
        role_play()
        return
    stream = mode.endswith("_stream")
    camel = agent(stream)
    if mode.startswith("astep"):
        done(asyncio.run(astep(camel, stream)))
    elif stream:
        done("".join(text(delta) for delta in camel.step(TASK)))
    else:
        done(text(camel.step(TASK)))


if __name__ == "__main__":
    main(sys.argv[1])
