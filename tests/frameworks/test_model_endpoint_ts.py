"""A TypeScript agent steered through the sidecar's model endpoint with no code in it
(DESIGN §12): ``ts/agent.ts``, a tool loop on the ``openai`` npm package (installed by
``make test`` with ``npm ci`` from ``ts/package-lock.json``), run by node and pointed at a real
sidecar by ``OPENAI_BASE_URL`` alone, in front of the scripted upstream. Chat Completions and
the Responses API, streamed and not; the same three scenarios as the Python agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`, whose helpers this module uses), on
both relays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

MODES = ["chat", "chat_stream", "responses", "responses_stream"]
AGENTS = [shared.Agent("ts", "endpoint_ts", mode) for mode in MODES]


def node_modules_installed() -> None:
    if not (shared.TS_DIR / "node_modules" / "openai" / "package.json").exists():
        raise AssertionError(f"{shared.TS_DIR}/node_modules is missing: run `make "
                             f"tests/frameworks/ts/node_modules/.installed` (part of `make test`)")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
          model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    node_modules_installed()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("plain"), llm, False, model_relay)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    node_modules_installed()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("budgeted"), llm, True, model_relay)


def test_the_sidecars_carry_the_tests_relay(plain: RunningServer, budgeted: RunningServer,
                                           model_relay: str) -> None:  # noqa: F811
    shared.test_the_sidecars_carry_the_tests_relay(plain, budgeted, model_relay)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.mode)
def test_one_run_per_invocation_with_its_counts(plain: RunningServer, llm: FakeLLM,
                                                agent: shared.Agent) -> None:
    shared.test_one_run_per_invocation_with_its_counts(plain, llm, agent)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.mode)
def test_budget_counts_down_then_the_report_is_the_output(budgeted: RunningServer,
                                                          llm: FakeLLM,
                                                          agent: shared.Agent) -> None:
    shared.test_budget_counts_down_then_the_report_is_the_output(budgeted, llm, agent)


@pytest.mark.parametrize("agent", AGENTS[::2], ids=lambda agent: agent.mode)
def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(
        plain: RunningServer, llm: FakeLLM, agent: shared.Agent) -> None:
    shared.test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(plain, llm, agent)
