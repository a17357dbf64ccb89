"""Langroid (``langroid``: a ``ChatAgent`` with a ``ToolMessage`` tool, run by a ``Task``,
unattended: ``interactive=False``), set up by ``LR_SETTINGS``, a JSON object: ``llm``, the
keyword arguments of its ``OpenAIGPTConfig`` (its model, and its ``api_base`` or none: the
OpenAI client beneath it reads ``OPENAI_BASE_URL``), ``agent``, those of its
``ChatAgentConfig`` (how the model asks for a tool: by a JSON object in its answer's text,
Langroid's default, ``{"request": "shell", "command": ...}``, or by the API's tool calls,
``use_functions_api``; ``handle_llm_no_tool="done"``: an answer with no tool ends its task, with
that answer as the task's result). Its key from ``OPENAI_API_KEY``, streamed (Langroid's
default), no cache of answers (each scenario's are scripted), from the directory
``LR_WORKDIR``, where its ``shell`` tool really runs each command the model asks for.

``LR_TASKS``, a JSON list of the user's messages, each a ``Task.run`` in turn; ``LR_HELPER``
(settings as ``LR_SETTINGS``'): a lead agent whose only tool is Langroid's ``send_tool``, which
hands its message to the helper agent (a sub-task of the lead's, with the ``shell`` tool),
whose answer is the tool's result; ``LR_DONE_TOOL`` set: the agent has Langroid's ``done_tool``
too, by which the model ends its task. Prints one JSON line: each run's result (its content)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import _langroid  # noqa: F401 (first: tiktoken's file, offline)
import langroid as lr
import langroid.language_models as lm
from langroid.agent.tool_message import ToolMessage
from langroid.agent.tools.orchestration import DoneTool, SendTool

SHELL = "You run shell commands to do what you are asked."


class ShellTool(ToolMessage):
    request: str = "shell"
    purpose: str = "To run the shell <command> in the working directory and see its output."
    command: str

    def handle(self) -> str:
        done = subprocess.run(self.command, shell=True, capture_output=True, text=True,
                              timeout=30, check=False)
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def agent(name: str, settings: dict[str, Any], tool: type[ToolMessage],
          system: str) -> lr.ChatAgent:
    llm = lm.OpenAIGPTConfig(cache_config=None, **settings["llm"])
    made = lr.ChatAgent(lr.ChatAgentConfig(name=name, llm=llm, system_message=system,
                                           **settings["agent"]))
    made.enable_message(tool)
    return made


def main() -> int:
    os.chdir(os.environ["LR_WORKDIR"])
    settings = json.loads(os.environ["LR_SETTINGS"])
    helping = json.loads(os.environ.get("LR_HELPER") or "null")
    results = []
    for message in json.loads(os.environ["LR_TASKS"]):
        if helping is not None:
            lead = agent("Lead", settings, SendTool,
                         "You lead: send the work to the agent named Helper.")
            task = lr.Task(lead, interactive=False)
            task.add_sub_task(lr.Task(agent("Helper", helping, ShellTool, SHELL),
                                      interactive=False))
        else:
            shell = agent("Shell", settings, ShellTool, SHELL)
            if os.environ.get("LR_DONE_TOOL"):
                shell.enable_message(DoneTool)
            task = lr.Task(shell, interactive=False)
        result = task.run(message, turns=40)
        results.append(None if result is None else result.content)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
