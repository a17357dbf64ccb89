"""Both model relays under the same tests: importing :func:`model_relay` into an endpoint test
module runs each of its tests on ``model_relay: python`` (the aiohttp relay) and ``native``
(the compiled one, which ``make test`` builds): every sidecar the module configures with a
``model_address`` gets the relay of the test's parameter (a module whose sidecars another
module's helpers start passes it to them). A sidecar fixture of a wider scope than the
function names ``model_relay`` among its arguments, so that pytest makes it anew for each relay
(else the second relay's tests get the first one's sidecar)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RELAYS = ("python", "native")


@pytest.fixture(scope="module", params=RELAYS, autouse=True)
def model_relay(request: pytest.FixtureRequest) -> Iterator[str]:
    relay: str = request.param
    module = request.module
    made = getattr(module, "sidecar_config", None)

    def with_relay(state_dir: Path | str, **overrides: Any) -> Any:
        if "model_address" in overrides:
            overrides.setdefault("model_relay", relay)
        return made(state_dir, **overrides)

    with pytest.MonkeyPatch.context() as patch:
        if made is not None:
            patch.setattr(module, "sidecar_config", with_relay)
        yield relay
