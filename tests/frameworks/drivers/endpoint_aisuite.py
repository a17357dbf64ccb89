"""aisuite (Andrew Ng's ``aisuite``) on the model endpoint, the tool ``search`` a Python
function: ``client.chat.completions.create(model="openai:<model>", messages, tools=[search],
max_turns=ENDPOINT_OWN_LIMIT (default 10))``, its tool loop inside the call. Its OpenAI
provider is the ``openai`` client, given ``base_url`` by the provider config
(``Client({"openai": {"base_url": ...}})``: ``AISUITE_CONFIGS``, JSON, here); with none it
reads ``OPENAI_BASE_URL`` as the client does. Mode (argv[1]): ``create``.

See :mod:`endpoint_common`."""

from __future__ import annotations

import json
import os
import sys

import aisuite as ai
from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search


def main(mode: str) -> None:
    assert mode == "create", mode
    client = ai.Client(json.loads(os.environ.get("AISUITE_CONFIGS") or "{}"))
    response = client.chat.completions.create(
        model=f"openai:{model()}", tools=[search], max_turns=own_limit(10),
        messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": TASK}])
    done(response.choices[0].message.content)


if __name__ == "__main__":
    main(sys.argv[1])
