"""Shared fixtures (a real sidecar on loopback ports) and the test tiers.

Every test belongs to one tier, chosen here at collection (``pytest -m TIER`` selects one):

* ``frameworks``: everything under tests/frameworks/ (real agent frameworks in their venvs);
* ``image``: the modules in :data:`IMAGE` (``make dist``'s artifacts: wheels, the container
  image, the packaged chart); ``make dist`` runs once for all the workers
  (:func:`tests.test_dist.make_dist`);
* ``integration``: a test that asks for the ``sidecar`` fixture, is marked
  ``@pytest.mark.integration``, or belongs to a module in :data:`INTEGRATION` (they start
  sidecars, servers or processes themselves);
* ``unit``: the rest — in-process and pure, no process, no listening socket. ``make check``
  runs this tier; a unit test that starts a process or binds a socket fails, telling which
  module to list in :data:`INTEGRATION`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RunningServer, running_server, sidecar_config

TIERS = ("unit", "integration", "frameworks", "image")

IMAGE = frozenset({"test_dist", "test_image", "test_helm_chart", "test_helm_runbook",
                   "test_helm_model_endpoint", "test_helm_inject"})

INTEGRATION = frozenset({
    "test_adapter_pydantic_ai", "test_alerts", "test_api", "test_bad_input",
    "test_budget_numbers", "test_cli", "test_client", "test_client_sessions",
    "test_client_sidecar", "test_client_span_path", "test_dashboard", "test_demo",
    "test_directives_api", "test_directives_e2e", "test_directives_webhooks", "test_docs",
    "test_dockerfile", "test_durability", "test_footprint", "test_forward", "test_fuzz",
    "test_genai_log_events", "test_hostile",
    "test_kill_restart", "test_logs", "test_metrics", "test_model_endpoint", "test_model_proxy",
    "test_model_runs", "test_otlp_grpc", "test_otlp_http", "test_persistence", "test_priority",
    "test_prometheus", "test_pydantic_ai_e2e", "test_rebatching", "test_rules_cli",
    "test_rules_e2e", "test_session_e2e", "test_sessions", "test_startup", "test_sync_api",
    "test_terminal_states", "test_trace_links",
})


def tier_of(item: pytest.Item) -> str:
    for tier in TIERS:  # said by the test itself (@pytest.mark.integration)
        if item.get_closest_marker(tier) is not None:
            return tier
    path = Path(str(item.path))
    if "frameworks" in path.parts:
        return "frameworks"
    if path.stem in IMAGE:
        return "image"
    if path.stem in INTEGRATION or "sidecar" in getattr(item, "fixturenames", ()):
        return "integration"
    return "unit"


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: the {tier} tier (tests/conftest.py)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m unit`` (``make check``) does not even import the other tiers' modules."""
    if config.option.markexpr != "unit":
        return None
    if collection_path.name == "frameworks" or collection_path.stem in INTEGRATION | IMAGE:
        return True
    return None


# the slowest tiers run first (`make test` hands the tests out in this order, and an idle
# worker then takes some from a busy one); a module keeps its tests together
FIRST = ("frameworks", "image", "integration", "unit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[Path, int] = {}
    for item in items:
        tier = tier_of(item)
        item.add_marker(getattr(pytest.mark, tier))
        rank[item.path] = min(rank.get(item.path, len(FIRST)), FIRST.index(tier))
    items.sort(key=lambda item: rank[item.path])


# -- the unit tier's guard: no process, no listening socket ------------------------------------

_unit_running: list[str] = []  # the unit test running now, if any
_FORBIDDEN = {"subprocess.Popen": "starts a process", "os.posix_spawn": "starts a process",
              "os.system": "starts a process", "socket.bind": "binds a socket"}


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if _unit_running and event in _FORBIDDEN:
        raise RuntimeError(f"{_unit_running[0]} {_FORBIDDEN[event]} ({event}): a unit test "
                           f"must not; list its module in INTEGRATION (tests/conftest.py)")


sys.addaudithook(_guard)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Iterator[object]:
    unit = tier_of(item) == "unit"
    if unit:
        _unit_running.append(item.nodeid)
    try:
        return (yield)
    finally:
        if unit:
            _unit_running.clear()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state")) as server:
        yield server
