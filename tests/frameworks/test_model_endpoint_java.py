"""Java agents steered through the sidecar's model endpoint with no code in them (DESIGN §12):
``java/`` (a Maven project, built by ``make test`` from Maven Central into the user's cache,
:mod:`tests.frameworks.jvm`), run by the JDK and pointed at a real sidecar by their base URL
alone, in front of the scripted upstream:

* LangChain4j: an ``AiServices`` agent with a ``@Tool`` method on ``OpenAiChatModel`` (``chat``)
  and ``OpenAiStreamingChatModel`` (``chat_stream``), ``baseUrl(OPENAI_BASE_URL)``, on its
  default HTTP client, the JDK's ``java.net.http.HttpClient``: every request of it is an
  HTTP/1.1 ``POST`` that also offers an upgrade to cleartext HTTP/2 (``Connection: Upgrade,
  HTTP2-Settings``, ``Upgrade: h2c``), which the endpoint declines by answering in HTTP/1.1;
* the anthropic-java SDK (its OkHttp client): a tool loop on Messages, streamed and not, its
  base URL ``ANTHROPIC_BASE_URL``.

The same three scenarios as the Python agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`, whose helpers this module uses), and
the API key nowhere but upstream; each on both relays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks import jvm
from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

RELAYED = (shared,)  # model_relay: the module whose sidecar_config start_sidecar calls
AGENTS = [shared.Agent("java", "langchain4j", "chat"),
          shared.Agent("java", "langchain4j", "chat_stream"),
          shared.Agent("java", "anthropic-java", "messages"),
          shared.Agent("java", "anthropic-java", "messages_stream")]
LOOPING = [agent for agent in AGENTS if not agent.mode.endswith("_stream")]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
          model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    jvm.built()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("plain"), llm, budget=False)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
             model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    jvm.built()
    yield from shared.start_sidecar(tmp_path_factory.mktemp("budgeted"), llm, budget=True)


def test_the_sidecars_carry_the_tests_relay(plain: RunningServer, budgeted: RunningServer,
                                           model_relay: str) -> None:  # noqa: F811
    shared.test_the_sidecars_carry_the_tests_relay(plain, budgeted, model_relay)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.name)
def test_one_run_per_invocation_with_its_counts(plain: RunningServer, llm: FakeLLM,
                                                agent: shared.Agent) -> None:
    shared.test_one_run_per_invocation_with_its_counts(plain, llm, agent)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda agent: agent.name)
def test_budget_counts_down_then_the_report_is_the_output(budgeted: RunningServer,
                                                          llm: FakeLLM,
                                                          agent: shared.Agent) -> None:
    shared.test_budget_counts_down_then_the_report_is_the_output(budgeted, llm, agent)


@pytest.mark.parametrize("agent", LOOPING, ids=lambda agent: agent.name)
def test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(
        plain: RunningServer, llm: FakeLLM, agent: shared.Agent) -> None:
    shared.test_a_looping_agent_is_wound_down_then_stopped_with_an_answer(plain, llm, agent)


def test_the_agents_api_key_is_nowhere_but_upstream(plain: RunningServer,
                                                    budgeted: RunningServer,
                                                    llm: FakeLLM) -> None:
    """Each Java agent's key (``Authorization: Bearer``, ``x-api-key``) reaches the upstream
    and none of the sidecars' answers, metrics, state files or log records."""
    shared.check_the_api_key_is_nowhere_but_upstream(plain, budgeted, llm, LOOPING)
