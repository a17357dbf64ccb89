"""Langroid (``langroid``: a ``ChatAgent`` with a ``ToolMessage`` tool, run by a ``Task``,
unattended: ``interactive=False``) against a model at ``LR_API_BASE`` (its ``OpenAIGPTConfig``'s
``api_base``; unset: none given, Langroid's own default and the environment), model ``LR_MODEL``,
its key from ``OPENAI_API_KEY``, streamed (Langroid's default), from the directory
``LR_WORKDIR``, where its ``shell`` tool really runs each command the model asks for. Mode
(argv[1]): ``text``, the model asks for a tool by a JSON object in its answer's text (``{"request":
"shell", "command": ...}``: Langroid's default), or ``tools``, by the API's tool calls
(``use_functions_api=True, use_tools_api=True``). An answer with no tool ends its task, with
that answer as the task's result (``handle_llm_no_tool="done"``).

``LR_TASKS``, a JSON list of the user's messages, each a ``Task.run`` in turn (one agent, its
conversation started anew by each: Langroid's ``restart``); ``LR_SHAPE`` ``two``: a lead agent
whose only tool is Langroid's ``send_tool``, which hands its message to the helper agent (a
sub-task of the lead's, with the ``shell`` tool), whose answer is the tool's result; with
``LR_HELPER_API_BASE``, the helper's model at a base URL of its own (``LR_HELPER_MODEL``: its
model's name). Prints one JSON line:
each run's result (its content) and the requests each agent's model read (their count)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _langroid  # noqa: F401 (first: tiktoken's file, offline)
import langroid as lr
import langroid.language_models as lm
from langroid.agent.tool_message import ToolMessage
from langroid.agent.tools.orchestration import SendTool


class ShellTool(ToolMessage):
    request: str = "shell"
    purpose: str = "To run the shell <command> in the working directory and see its output."
    command: str

    def handle(self) -> str:
        done = subprocess.run(self.command, shell=True, capture_output=True, text=True,
                              timeout=30, check=False)
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def agent(name: str, mode: str, api_base: str | None, tool: type[ToolMessage],
          system: str, model: str) -> lr.ChatAgent:
    llm = lm.OpenAIGPTConfig(chat_model=model, cache_config=None,
                             **({"api_base": api_base} if api_base else {}))
    made = lr.ChatAgent(lr.ChatAgentConfig(
        name=name, llm=llm, system_message=system, handle_llm_no_tool="done",
        use_tools=mode == "text", use_functions_api=mode == "tools",
        use_tools_api=mode == "tools"))
    made.enable_message(tool)
    return made


def main(mode: str) -> int:
    os.chdir(os.environ["LR_WORKDIR"])
    api_base, model = os.environ.get("LR_API_BASE") or None, os.environ["LR_MODEL"]
    results = []
    for message in json.loads(os.environ["LR_TASKS"]):
        if os.environ.get("LR_SHAPE") == "two":
            helper = agent("Helper", mode, os.environ.get("LR_HELPER_API_BASE") or api_base,
                           ShellTool, "You run shell commands to do what you are asked.",
                           os.environ.get("LR_HELPER_MODEL") or model)
            lead = agent("Lead", mode, api_base, SendTool,
                         "You lead: send the work to the agent named Helper.", model)
            task = lr.Task(lead, interactive=False)
            task.add_sub_task(lr.Task(helper, interactive=False))
        else:
            task = lr.Task(agent("Shell", mode, api_base, ShellTool,
                                 "You run shell commands to do what you are asked.", model),
                           interactive=False)
        result = task.run(message, turns=40)
        results.append(None if result is None else result.content)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
