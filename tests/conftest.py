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

import json
import os
import resource
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RunningServer, run_directory, running_server, sidecar_config

# Bytecode is kept: every process the tests start (pytest's workers, sidecars, the framework
# drivers) compiles a module once and leaves its bytecode for the next one, whatever
# PYTHONDONTWRITEBYTECODE said (uv installs the venvs without bytecode: a Haystack driver
# compiled its framework at every start, 5 CPU seconds instead of 2)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

TIERS = ("unit", "integration", "frameworks", "image")

IMAGE = frozenset({"test_dist", "test_image", "test_helm_chart", "test_helm_runbook",
                   "test_helm_model_endpoint", "test_helm_inject"})

INTEGRATION = frozenset({
    "test_adapter_pydantic_ai", "test_alerts", "test_api", "test_bad_input",
    "test_budget_numbers", "test_cli", "test_client", "test_client_sessions",
    "test_client_countdown", "test_client_sidecar", "test_client_span_path", "test_dashboard",
    "test_demo",
    "test_directives_api", "test_directives_e2e", "test_directives_webhooks", "test_docs",
    "test_dockerfile", "test_durability", "test_exporter_faults", "test_footprint",
    "test_forward", "test_fuzz",
    "test_genai_log_events", "test_hostile",
    "test_lazy_grpc",
    "test_model_bench",
    "test_model_trim_stress",
    "test_kill_restart", "test_logs", "test_metrics", "test_model_admission",
    "test_model_continuation", "test_model_countdown",
    "test_model_endpoint", "test_model_faults", "test_model_native_bounds", "test_model_proxy",
    "test_model_shutdown", "test_model_ahead_faults",
    "test_model_runs", "test_model_trim_relays", "test_native", "test_native_fuzz",
    "test_otlp_grpc", "test_otlp_http", "test_persistence", "test_ports", "test_priority",
    "test_prometheus", "test_pydantic_ai_e2e", "test_rebatching", "test_rules_cli",
    "test_rules_e2e", "test_scale_out", "test_served_split", "test_session_e2e", "test_sessions",
    "test_startup",
    "test_sync_api",
    "test_terminal_states", "test_tls_clients", "test_trace_links",
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
    if not hasattr(config, "workerinput"):  # the run's own process: nothing left from another
        shutil.rmtree(run_directory(), ignore_errors=True)


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


# -- where the time went: a summary at the end of every run ----------------------------------------

TIMES = Path(__file__).resolve().parents[1] / ".cache" / "test-times.json"
# test id -> [start, stop, seconds in setup+call+teardown, CPU seconds in them]
_spans: dict[str, list[float]] = {}
_tiers: dict[str, str] = {}
_cpu: list[float] = []  # CPU seconds of each pytest process (a worker's: with its children)


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who)
                     for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_now() -> float:
    """This test process's CPU seconds, with its children's and the driver forks' it asked for."""
    harness = sys.modules.get("tests.frameworks.harness")
    return _cpu_seconds() + (harness.fork_cpu[0] if harness is not None else 0.0)


_mark: list[float] = []  # _cpu_now() when the last phase of a test ended


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _mark[:] = [_cpu_now()]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[pytest.TestReport]:
    """Each phase's report carries the CPU seconds it took (``user_properties``: xdist sends it
    to the controller): this process's, the processes it started and reaped, and the driver
    forks that ran its scenarios."""
    report: pytest.TestReport = yield
    now = _cpu_now()
    report.user_properties = [*report.user_properties, ("cpu", now - (_mark or [now])[0])]
    _mark[:] = [now]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase's report, in the process that shows the summary (xdist's controller too)."""
    span = _spans.setdefault(report.nodeid, [report.start, report.stop, 0.0, 0.0])
    span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
    span[2] += report.duration
    span[3] += sum(value for name, value in report.user_properties if name == "cpu")
    tier = next((name for name in TIERS if name in report.keywords), None)
    if tier is not None:
        _tiers[report.nodeid] = tier


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its CPU seconds to the controller (its connections to the frameworks
    tier's driver processes closed first; those count their own, :func:`_driver_cpu`)."""
    harness = sys.modules.get("tests.frameworks.harness")
    if harness is not None:
        harness._close_driver_processes()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["cpu_seconds"] = _cpu_seconds()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller hears a worker end (pytest-xdist's hook)."""
    _cpu.append(float(getattr(node, "workeroutput", {}).get("cpu_seconds", 0.0)))


def _driver_cpu() -> tuple[int, float]:
    """The frameworks tier's driver processes of this run (they outlive the workers, which
    therefore do not count them) and the CPU seconds they and their forks used."""
    used = [float(path.read_text()) for path in run_directory().glob("*.cpu")]
    return len(used), sum(used)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Per tier: its tests, the wall time from its first test's start to its last test's end,
    the seconds its tests took added up and the CPU seconds they used; then the files whose
    tests used the most CPU, and the CPU seconds of the whole run (workers and every process
    they started, collection included). Kept in .cache/test-times.json for a closer look."""
    if not _spans or hasattr(config, "workerinput"):
        return
    write = terminalreporter.write_line
    started = min(span[0] for span in _spans.values())
    ended = max(span[1] for span in _spans.values())
    tiers: dict[str, list[float]] = {}
    files: dict[str, list[float]] = {}
    for nodeid, (start, stop, seconds, cpu_used) in _spans.items():
        tier = tiers.setdefault(_tiers.get(nodeid, "?"), [0, start, stop, 0.0, 0.0])
        tier[0] += 1
        tier[1], tier[2] = min(tier[1], start), max(tier[2], stop)
        tier[3] += seconds
        tier[4] += cpu_used
        file = files.setdefault(nodeid.split("::", 1)[0], [0, 0.0, 0.0])
        file[0] += 1
        file[1] += seconds
        file[2] += cpu_used
    own = resource.getrusage(resource.RUSAGE_SELF)
    drivers, driver_cpu = _driver_cpu()
    cpu = (sum(_cpu) + own.ru_utime + own.ru_stime if _cpu else _cpu_seconds()) + driver_cpu
    terminalreporter.section("where the time went")
    write(f"{len(_spans)} tests in {ended - started:.0f} s wall, {cpu:.0f} CPU seconds "
          f"(pytest and every process it started; {drivers} framework driver processes and "
          f"their forks: {driver_cpu:.0f})")
    for name in (*FIRST, "?"):
        if name in tiers:
            count, start, stop, seconds, cpu_used = tiers[name]
            write(f"  {name:<12} {count:>5} tests  from {start - started:>4.0f} s "
                  f"to {stop - started:>4.0f} s  {seconds:>6.0f} s in tests, "
                  f"{cpu_used:>5.0f} CPU s")
    write("  the files whose tests used the most CPU (seconds added up):")
    for path, (count, seconds, cpu_used) in sorted(files.items(),
                                                   key=lambda kv: -kv[1][2])[:15]:
        write(f"  {cpu_used:>5.0f} CPU s {seconds:>6.0f} s  {count:>4} tests  {path}")
    TIMES.parent.mkdir(exist_ok=True)
    TIMES.write_text(json.dumps({"wall": ended - started, "cpu_seconds": cpu,
                                 "driver_processes": drivers, "driver_cpu_seconds": driver_cpu,
                                 "tiers": tiers, "files": files,
                                 "tests": {nodeid: [*span, _tiers.get(nodeid, "?")]
                                           for nodeid, span in _spans.items()}}, indent=0))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's own process removes the directories its framework drivers shared
    (tests/frameworks/harness.py ``homes``)."""
    if not hasattr(config, "workerinput"):
        shutil.rmtree(run_directory() / "homes", ignore_errors=True)


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state")) as server:
        yield server
