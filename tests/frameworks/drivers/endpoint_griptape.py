"""A Griptape agent (``griptape.structures.Agent``: one ``PromptTask`` with the tool ``Files``,
activity ``search``: the model sees it as ``Files_search``) on ``OpenAiChatPromptDriver`` made
with no ``base_url``: its OpenAI client reads ``OPENAI_BASE_URL``, so the base URL alone points
it at the sidecar. Mode (argv[1]): ``run`` (``Agent.run``; the task's ``max_subtasks`` 30). See
:mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import TASK, done, model, search
from griptape.artifacts import TextArtifact
from griptape.drivers.prompt.openai import OpenAiChatPromptDriver
from griptape.structures import Agent
from griptape.tasks import PromptTask
from griptape.tools import BaseTool
from griptape.utils.decorators import activity
from schema import Literal, Schema


class Files(BaseTool):
    @activity(config={"description": "Search the files for a term.",
                      "schema": Schema({Literal("q", description="the term"): str})})
    def search(self, q: str) -> TextArtifact:
        return TextArtifact(search(q))


def main(mode: str) -> None:
    assert mode == "run", mode
    agent = Agent(tasks=[PromptTask(tools=[Files()], max_subtasks=30,
                                    prompt_driver=OpenAiChatPromptDriver(model=model()))])
    done(agent.run(TASK).output.value)


if __name__ == "__main__":
    main(sys.argv[1])
