"""Qwen-Agent (``qwen-agent``: its ``Assistant`` with one tool of the application's own, a
``BaseTool`` registered as ``shell``, which really runs each command the model asks for in the
directory ``QA_WORKDIR``), its model ``llm_cfg`` the JSON of ``QA_LLM`` as a user writes it:
``model``, ``model_server`` (an OpenAI-compatible server: the sidecar's URL and ``/v1``),
``api_key`` and ``generate_cfg`` (``use_raw_api: true``: the API's tool calling; by default
Qwen-Agent's own ``nous`` template: the tools in the system message, the calls the model writes
as ``<tool_call>{...}</tool_call>`` in its answer's text, their results sent back as
``<tool_response>`` in a user message). Its limit of model calls per run is
``QWEN_AGENT_MAX_LLM_CALL_PER_RUN`` (read at import: 20 unless set).

With ``QA_AGENT=react``, its ``ReActChat`` in place of the ``Assistant``: ReAct in the
answer's text (``Action:`` and ``Action Input:``, its end a ``Final Answer:``), the whole
scratchpad within the one user message, each step's answer and ``Observation:`` appended.

Mode (argv[1]): ``run`` (``agent.run``, a generator: each item the response so far) or
``nonstream`` (``agent.run_nonstream``); each message of the JSON list ``QA_TASKS`` is a run in
turn, the conversation going on (the user's next message after the responses so far). Prints
one JSON line: each run's responses (role, content, the function call's name if any). With
``QA_OTEL`` set, traced by opentelemetry-instrumentation-openai-v2 (the ``openai`` client
beneath it: a ``chat`` span per model call) to the sidecar (``OTEL_EXPORTER_OTLP_*``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from qwen_agent.agents import Assistant, ReActChat
from qwen_agent.tools.base import BaseTool, register_tool

INSTRUCTIONS = "You run shell commands to do what you are asked."


@register_tool("shell")
class Shell(BaseTool):
    description = "Run a shell command in the working directory and see its output."
    parameters = {"type": "object",  # noqa: RUF012 (as Qwen-Agent's own tools write it)
                  "properties": {"command": {"type": "string",
                                             "description": "the shell command"}},
                  "required": ["command"]}

    def call(self, params: str | dict[str, Any], **kwargs: Any) -> str:
        command = self._verify_json_format_args(params)["command"]
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30,
                              check=False)
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def shown(message: Any) -> dict[str, Any]:
    said = dict(message)
    call = said.get("function_call")
    return {"role": said["role"], "content": said.get("content"),
            **({"call": dict(call)["name"]} if call else {})}


def main() -> int:
    provider = None
    if os.environ.get("QA_OTEL"):  # traced as a user of the openai client traces it
        from _otel import setup_tracing
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        provider = setup_tracing(os.environ.get("OTEL_SERVICE_NAME", "qwen-agent"))
        OpenAIInstrumentor().instrument()
    os.chdir(os.environ["QA_WORKDIR"])
    kind = ReActChat if os.environ.get("QA_AGENT") == "react" else Assistant
    agent = kind(llm=json.loads(os.environ["QA_LLM"]), function_list=["shell"],
                 system_message=INSTRUCTIONS)
    messages: list[Any] = []
    runs = []
    for task in json.loads(os.environ["QA_TASKS"]):
        messages.append({"role": "user", "content": task})
        if sys.argv[1] == "nonstream":
            response = agent.run_nonstream(messages)
        else:
            response = []
            for streamed in agent.run(messages):
                response = streamed  # (each item: the responses so far)
        messages.extend(response)
        runs.append([shown(message) for message in response])
    if provider is not None:
        provider.shutdown()
    print(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
