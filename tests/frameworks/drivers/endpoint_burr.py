"""An Apache Burr agent (:mod:`_burr`: ``ask_model``, the tool's action ``search``, ``answer``;
its graph's cap at 30 model calls) whose OpenAI client is made with no ``base_url``: it reads
``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar. Mode (argv[1]): ``run``
(``Application.run``). See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

import _burr
from endpoint_common import INSTRUCTIONS, SEARCH_SCHEMA, TASK, done, model, search
from openai import OpenAI


def main(mode: str) -> None:
    assert mode == "run", mode
    done(_burr.run(_burr.agent(OpenAI(), model(), search, SEARCH_SCHEMA, INSTRUCTIONS, TASK,
                               cap=30)))


if __name__ == "__main__":
    main(sys.argv[1])
