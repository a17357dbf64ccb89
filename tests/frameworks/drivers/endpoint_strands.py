"""A Strands ``Agent`` on ``strands.models.openai.OpenAIModel`` (no ``base_url`` in its
``client_args``: its OpenAI client reads ``OPENAI_BASE_URL``, so the base URL alone points it at
the sidecar). Strands always streams from the model. Mode (argv[1]): ``run``. See
:mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from strands import Agent, tool
from strands.models.openai import OpenAIModel


def main(_mode: str) -> None:
    agent = Agent(model=OpenAIModel(model_id=model()), tools=[tool(search)],
                  system_prompt=INSTRUCTIONS, callback_handler=None)
    done(str(agent(TASK)).strip())


if __name__ == "__main__":
    main(sys.argv[1])
