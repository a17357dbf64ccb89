"""A DSPy ``dspy.ReAct`` agent on ``dspy.LM("openai/<model>", api_base=...)`` (LiteLLM inside),
``api_base`` the sidecar's (``OPENAI_BASE_URL``); its output is the prediction's ``answer``.
Mode (argv[1]): ``call``.

DSPy's ReAct does not use the API's tool calling: its ChatAdapter offers the tools as text in
the system message and has the model pick one in text fields (``[[ ## next_tool_name ## ]]``,
``[[ ## next_tool_args ## ]]``), each step a request of its own (system message, then one user
message holding the task and the trajectory so far), ReAct's own ``finish`` tool ends the loop
and an extract step (a ``ChainOfThought``) answers. No request offers ``tools`` and no response
calls one, so the endpoint sees no tool call to count, hand over or withdraw. See
:mod:`endpoint_common`."""

from __future__ import annotations

import os
import sys

import dspy
from endpoint_common import TASK, done, model, search


def main(_mode: str) -> None:
    # cache=False: every call reaches the model (DSPy caches answers by request by default)
    lm = dspy.LM(f"openai/{model()}", api_base=os.environ["OPENAI_BASE_URL"], cache=False,
                 num_retries=0)
    dspy.configure(lm=lm)
    agent = dspy.ReAct("question -> answer", tools=[search], max_iters=30)
    done(agent(question=TASK).answer)


if __name__ == "__main__":
    main(sys.argv[1])
