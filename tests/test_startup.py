"""Startup failures of a real ``python -m watchdog serve`` process: each is exit code 2 and one
line on stderr naming the problem and what to do — never a traceback (DESIGN §2).

Ports are held by real sockets, and by a real second sidecar for gRPC (whose default
SO_REUSEPORT would otherwise let two processes share :4317 and split the agents' spans).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from tests.harness import RunningServer, wait_until
from tests.processes import fresh_ports, running_sidecar, serve_env
from tests.test_directives_store import directive
from watchdog.shell import open_files
from watchdog.shell.config import (
    INT_MAXIMUMS,
    MAX_SECONDS,
    SECONDS_ALLOWED,
    SECONDS_MAXIMUMS,
    Config,
    load,
)
from watchdog.shell.directives.store import DB_FILE as DIRECTIVES_FILE
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.errors import ConfigError
from watchdog.shell.receivers import otlp_grpc
from watchdog.shell.receivers.admission import Admission
from watchdog.shell.state.store import DB_FILE as STATE_FILE
from watchdog.shell.state.store import Store

EXIT_STARTUP = 2
REPO = Path(__file__).resolve().parent.parent


def failed_start(env: dict[str, str], *args: str) -> str:
    """Run ``watchdog serve``; assert it refused to start the right way; return its one line."""
    done = subprocess.run([sys.executable, "-m", "watchdog", "serve", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_STARTUP, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("watchdog: "), lines
    return lines[0]


@contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    """A plain socket listening on ``port``, as any other program would hold it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield sock


@pytest.mark.parametrize("name", ["otlp_http", "api", "metrics", "otlp_grpc"])
def test_a_port_held_by_another_program(tmp_path: Path, name: str) -> None:
    ports = fresh_ports()
    with listening(ports[name]):
        line = failed_start(serve_env(tmp_path / "state", ports))
    key = f"{name}_address"
    assert line.startswith(f"watchdog: {key}='127.0.0.1:{ports[name]}': cannot listen (Address "
                           f"already in use); another process (another watchdog?) holds the "
                           f"port: stop it"), line
    assert f"WATCHDOG_{key.upper()}" in line and f"--{key.replace('_', '-')}" in line


def test_a_second_watchdog_cannot_share_the_grpc_port(tmp_path: Path) -> None:
    first = fresh_ports()
    with running_sidecar(serve_env(tmp_path / "one", first), first["metrics"]):
        second = {**fresh_ports(), "otlp_grpc": first["otlp_grpc"]}
        line = failed_start(serve_env(tmp_path / "two", second))
    assert line.startswith(
        f"watchdog: otlp_grpc_address='127.0.0.1:{first['otlp_grpc']}': cannot listen ("), line
    assert line.endswith("cannot listen (Address already in use); another process (another "
                         "watchdog?) holds the port: stop it — or choose another address with "
                         "WATCHDOG_OTLP_GRPC_ADDRESS or --otlp-grpc-address")


def test_a_sighup_while_it_starts_is_a_reload_once_it_has(tmp_path: Path) -> None:
    """SIGHUP's default action ends a process: one that came while the sidecar read its
    config, loaded the server or restored its state ended it without a word (exit -1). The
    config file is a FIFO, so the start is held reading it while the signal comes."""
    config = tmp_path / "watchdog.yaml"
    os.mkfifo(config)
    ports = fresh_ports()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve", "--config",
                                    str(config)], env=serve_env(tmp_path / "state", ports),
                                   stderr=log, text=True)
        try:
            with open(config, "w", encoding="utf-8") as held:  # (opened once the sidecar reads)
                process.send_signal(signal.SIGHUP)
                held.write("log_level: info\n")
            wait_until(lambda: process.poll() is not None
                       or "rules reloaded" in (log.seek(0), log.read())[1],
                       timeout=30, what="the sidecar to start and reload its rules")
            assert process.poll() is None, (process.returncode, log.seek(0), log.read())
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert process.returncode == 0


def test_a_bad_rule_pack(tmp_path: Path) -> None:
    pack = tmp_path / "broken.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: broken\nrules:\n"
                    "  - {name: a, when: 'run.tool_calss > 1', action: notify, message: m}\n"
                    "  - {name: b, when: 'true', for: 5, action: notify, message: m}\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(), WATCHDOG_RULES=str(pack)))
    assert line.startswith(f"watchdog: bad rule pack: {pack}:5: rule a: when: "), line
    assert "(and 1 more problem)" in line
    assert "`watchdog rules check PATH...` lists every problem" in line


@pytest.mark.parametrize(("brk", "shown"), [("\n", "\\n"), ("\x85", "\\x85"),
                                            ("\u2028", "\\u2028"), ("\x1e", "\\x1e")])
def test_a_path_with_a_line_break_is_shown_escaped_in_the_one_line(
        tmp_path: Path, brk: str, shown: str) -> None:
    """An error is one line whatever it quotes: a rule file named with a line break (a
    WATCHDOG_RULES written over two lines; NEL, a line separator, a record separator, which
    str.splitlines breaks at too) split it in two."""
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(),
                                  WATCHDOG_RULES=f"{tmp_path}/team{brk}ops.yaml"))
    assert line.startswith(f"watchdog: bad rule pack: {tmp_path}/team{shown}ops.yaml: no such "
                           f"file or directory"), line


def test_an_unusable_state_dir(tmp_path: Path) -> None:
    """A file where the state dir, or a directory above it, should be is named as a file (the
    OS says "File exists" or "Not a directory", which does not say which path is wrong)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    advice = ": set state_dir (WATCHDOG_STATE_DIR, --state-dir) to a writable directory, or " \
             ":memory: to keep nothing"
    line = failed_start(serve_env(blocker, fresh_ports()))
    assert line == f"watchdog: state_dir '{blocker}' is a file, not a directory{advice}"
    line = failed_start(serve_env(blocker / "state" / "deeper", fresh_ports()))
    assert line == (f"watchdog: state_dir '{blocker / 'state' / 'deeper'}' is under "
                    f"'{blocker}', which is a file, not a directory{advice}")
    assert blocker.read_text() == "not a directory"  # (left as it was)


def test_a_number_of_seconds_may_be_signed_and_a_negative_one_is_named(tmp_path: Path) -> None:
    """``-0`` is 0 and ``+5`` is 5, as YAML and the integer keys read them: the grammar's lack
    of a sign refused ``model_shutdown_grace=-0`` as "expected >= 0", which it is. A negative
    number is refused as negative; a duration is never signed (Prometheus' grammar)."""
    for value in ("-0", "+5", "-0.0"):
        ports = fresh_ports()
        with running_sidecar(serve_env(tmp_path / "state", ports,
                                       WATCHDOG_MODEL_SHUTDOWN_GRACE=value,
                                       WATCHDOG_EVAL_INTERVAL="+1"), ports["metrics"]):
            pass
    allowed = SECONDS_ALLOWED["model_shutdown_grace"]
    for value, hint in (("-1", "this one is negative"), ("-0.5", "this one is negative"),
                        ("-5m", "a duration is written without a sign"),
                        ("-0s", "a duration is written without a sign")):
        line = failed_start(serve_env(tmp_path / "state", fresh_ports(),
                                      WATCHDOG_MODEL_SHUTDOWN_GRACE=value))
        assert line.startswith(f"watchdog: model_shutdown_grace={value!r} is not allowed: "
                               f"expected {allowed}; "), line
        assert line.endswith(f"; {hint}"), line
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(), WATCHDOG_EVAL_INTERVAL="-0"))
    assert line.startswith("watchdog: eval_interval='-0' is not allowed: expected a positive "
                           "number of seconds"), line


def test_an_empty_state_dir_is_refused(tmp_path: Path) -> None:
    """``WATCHDOG_STATE_DIR=`` (a shell variable that was not set) is no directory: it put the
    state files in the working directory itself."""
    ports = fresh_ports()
    env = serve_env(tmp_path / "state", ports, WATCHDOG_STATE_DIR="")
    done = subprocess.run([sys.executable, "-m", "watchdog", "serve"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == EXIT_STARTUP, done.stderr
    assert done.stderr == ("watchdog: state_dir='' is not allowed: expected a directory "
                           "(relative to the working directory, e.g. state), or :memory: to keep "
                           "nothing\n")
    assert list(tmp_path.iterdir()) == []


def test_a_state_dir_that_takes_no_write_is_one_line(tmp_path: Path) -> None:
    """A full disk at the start (here the file size limit, RLIMIT_FSIZE 0, which fails the
    first write as ENOSPC would): the lock file's pid was a traceback (OSError)."""
    def no_file_growth() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run([sys.executable, "-m", "watchdog", "serve"],
                          env=serve_env(tmp_path / "state", fresh_ports()), capture_output=True,
                          text=True, timeout=60, preexec_fn=no_file_growth)
    assert (done.returncode, done.stderr) == (EXIT_STARTUP, (
        f"watchdog: state_dir '{tmp_path / 'state'}': File too large: set state_dir "
        f"(WATCHDOG_STATE_DIR, --state-dir) to a writable directory, or :memory: to keep "
        f"nothing\n"))


def open_files_limit(soft: int, hard: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("relay", ["native", "python"])
def test_an_open_files_limit_too_low_to_start_is_one_line(tmp_path: Path, relay: str) -> None:
    """``ulimit -n 30`` (hard and soft): the start failed where the next file was opened — a
    traceback from an import, a listener's "cannot listen", "unable to open database file"."""
    ports = {**fresh_ports(), "model": 0}
    done = subprocess.run([sys.executable, "-m", "watchdog", "serve"],
                          env=serve_env(tmp_path / "state", ports, WATCHDOG_MODEL_RELAY=relay),
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=open_files_limit(30, 30))
    assert (done.returncode, done.stderr) == (EXIT_STARTUP, (
        "watchdog: the open-files limit (ulimit -n) is 30 (hard limit 30): the sidecar needs at "
        "least 64 to start (its listeners and state files) and 12152 for what it lets in at "
        "once (max_pending_requests OTLP exports; model_max_concurrent model requests at 4 "
        "each; the control API's directive streams and long-polls): raise it (ulimit -n 12152; "
        "systemd LimitNOFILE=, docker run --ulimit nofile=)\n"))
    assert not (tmp_path / "state").exists()  # refused before anything was opened


@pytest.mark.parametrize("hard", [None, 100], ids=["hard-enough", "hard-100"])
def test_a_low_soft_open_files_limit_is_raised_to_what_the_sidecar_needs(
        tmp_path: Path, hard: int | None) -> None:
    """A soft limit of 30 under a higher hard limit is raised (as far as the hard limit goes)
    to the 11,640 files the default configuration lets in at once (10,000 of them the control
    API's long-polls); a hard limit that is enough to start but not for all of it is a warning,
    and the sidecar serves."""
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert ours == resource.RLIM_INFINITY or ours >= 12152, ours
    raised = 12152 if hard is None else hard
    ports = {**fresh_ports(), "model": 0}
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], stderr=log,
                                   text=True, env=serve_env(tmp_path / "state", ports),
                                   preexec_fn=open_files_limit(30, hard or ours))
        try:
            wait_until(lambda: process.poll() is not None or ready(ports["metrics"]),
                       timeout=30, what="the sidecar to start")
            assert process.poll() is None, (log.seek(0), log.read())
            limits = Path(f"/proc/{process.pid}/limits").read_text()
        finally:
            process.terminate()
            process.wait(timeout=30)
        said = (log.seek(0), log.read())[1]
    (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3] == str(raised), line
    warned = "the open-files limit (ulimit -n) is 100, below the 12152" in said
    assert warned == (hard == 100), said
    assert "Traceback" not in said, said


def seeded_state(state: Path) -> None:
    """A state dir as a sidecar leaves it: runs (enough for pages of their own) and
    directives, both files closed."""
    runs = Store(str(state))
    runs.save([{"key": f"run-{i}", "agent": "a", "ended": False, "last_seen": 1e9 + i,
                "pad": "x" * 2000} for i in range(300)], [])
    runs.close()
    directives = DirectiveStore(str(state))
    directives.add_many([(directive(i, i, run_key=f"run-{i}"), []) for i in range(1, 300)])
    directives.close()


def damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as out:
        if how == "garbage":  # the header too: not a database at all
            out.write(bytes(range(256)) * 4)
        elif how == "truncated":
            out.truncate(size // 2)
        else:  # a page inside, found as the runs are read back
            out.seek(size // 2)
            out.write(b"\xff" * 8192)


@pytest.mark.parametrize(("name", "how"), [
    (STATE_FILE, "garbage"), (STATE_FILE, "truncated"), (STATE_FILE, "damaged-page"),
    (DIRECTIVES_FILE, "garbage"), (DIRECTIVES_FILE, "truncated")])
def test_a_damaged_state_file_is_named_and_left_as_it_is(tmp_path: Path, name: str,
                                                         how: str) -> None:
    """The directory is fine, the file is not: the start is refused naming the file and what
    to do (move it aside to start afresh, keep it to recover), and the file is not touched."""
    state = tmp_path / "state"
    seeded_state(state)
    path = state / name
    damage(path, how)
    before = path.read_bytes()
    line = failed_start(serve_env(state, fresh_ports()))
    assert line.startswith(f"watchdog: {path} cannot be read ("), line
    assert f"move it aside, with its -wal and -shm files if there are any (mv {path} " \
           f"{path}.damaged), and start again" in line
    assert f"keep the moved file to recover what it can give (sqlite3 {path}.damaged " \
           f".recover)" in line
    assert ":memory:" not in line and "writable" not in line
    assert path.read_bytes() == before
    for suffix in ("", "-wal", "-shm"):  # as the line says: then it starts afresh
        moved = Path(f"{path}{suffix}")
        if moved.exists():
            moved.rename(f"{path}.damaged{suffix}")
    ports = fresh_ports()
    with running_sidecar(serve_env(state, ports), ports["metrics"]):
        pass
    assert Path(f"{path}.damaged").read_bytes() == before


def test_a_second_watchdog_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    """Two sidecars on one state dir would steer the same restored runs and mix their writes:
    the second is refused before it reads or writes anything there, naming the first's pid;
    once the first has stopped, the state dir is free."""
    first = fresh_ports()
    with running_sidecar(serve_env(tmp_path / "state", first), first["metrics"]) as process:
        line = failed_start(serve_env(tmp_path / "state", fresh_ports()))
        assert line.startswith(f"watchdog: state_dir '{tmp_path / 'state'}' is in use by "
                               f"another watchdog (pid {process.pid}): give each sidecar a "
                               f"state dir of its own"), line
    second = fresh_ports()
    with running_sidecar(serve_env(tmp_path / "state", second), second["metrics"]):
        pass  # (it starts: the first let go of it)


def test_an_unknown_environment_variable(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "state", fresh_ports(), WATCHDOG_RUN_END_TIMOUT="10m")
    line = failed_start(env)
    assert line.startswith("watchdog: unknown environment variable WATCHDOG_RUN_END_TIMOUT: "
                           "did you mean WATCHDOG_RUN_END_TIMEOUT?"), line


def service_links(service: str, ip: str, ports: dict[str, int]) -> dict[str, str]:
    """The variables the kubelet gives every pod of a namespace for a Service in it
    (enableServiceLinks, on by default; kubelet's envvars.FromServices): ``ports`` by name,
    the first the Service's port."""
    name = service.upper().replace("-", "_")
    first = next(iter(ports.values()))
    links = {f"{name}_SERVICE_HOST": ip, f"{name}_SERVICE_PORT": str(first),
             f"{name}_PORT": f"tcp://{ip}:{first}"}
    for port_name, port in ports.items():
        links[f"{name}_SERVICE_PORT_{port_name.upper().replace('-', '_')}"] = str(port)
        tcp = f"{name}_PORT_{port}_TCP"
        links.update({tcp: f"tcp://{ip}:{port}", f"{tcp}_PROTO": "tcp", f"{tcp}_PORT": str(port),
                      f"{tcp}_ADDR": ip})
    return links


def test_variables_that_are_not_configuration_are_left_alone(tmp_path: Path) -> None:
    """The client SDK's WATCHDOG_URL and Kubernetes' service links share the pod's
    environment: those of a Service named "watchdog", and of one whose name begins
    "watchdog-", as the gateway's (`helm install watchdog`: watchdog-agent-watchdog, which
    the gateway's own pods and every pod of its namespace get: the sidecar refused them as
    unknown variables); the sidecar starts with them."""
    ports = fresh_ports()
    links = {**service_links("watchdog", "10.0.0.7", {"api": 9477}),
             **service_links("watchdog-agent-watchdog", "10.0.0.8", {
                 "otlp-grpc": 4317, "otlp-http": 4318, "api": 9477, "metrics": 9464,
                 "model": 9478})}
    env = serve_env(tmp_path / "state", ports, WATCHDOG_URL="http://127.0.0.1:9477", **links)
    with running_sidecar(env, ports["metrics"]) as process:
        assert process.poll() is None
    # (a variable of that shape without its Service's _SERVICE_HOST is no link: a typo)
    with pytest.raises(ConfigError, match="unknown environment variable WATCHDOG_API_PORT"):
        load(env={"WATCHDOG_API_PORT": "9477"})


@pytest.mark.parametrize(("args", "extra", "expected"), [
    (["--config", "{config}"], {},
     "watchdog: unknown configuration key 'run_end_timout' in {config}; did you mean "
     "run_end_timeout? allowed: "),
    ([], {"WATCHDOG_RUN_END_TIMEOUT": "15 minutes"},
     "watchdog: run_end_timeout='15 minutes' is not allowed: expected a positive number of "
     "seconds or a duration, at most 1y (e.g. 900 or 15m); a duration like 500ms, 30s, 1m30s, "
     "1h, 1d (units ms s m h d w y, largest first)"),
    (["--eval-interval", "1.5h"], {},
     "watchdog: eval_interval='1.5h' is not allowed: expected a positive number of seconds or "
     "a duration, at most 1y (e.g. 1 or 500ms); a duration like 500ms, 30s, 1m30s, 1h, 1d "
     "(units ms s m h d w y, largest first)"),
    (["--max-runs", "many"], {},
     "watchdog: max_runs='many' is not allowed: expected an integer"),
])
def test_an_unknown_key_or_a_bad_value(tmp_path: Path, args: list[str], extra: dict[str, str],
                                       expected: str) -> None:
    config = tmp_path / "watchdog.yaml"
    config.write_text("run_end_timout: 10m\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(), **extra),
                        *(arg.format(config=config) for arg in args))
    assert line.startswith(expected.format(config=config)), line


def test_a_time_too_large_is_refused_with_its_bound(tmp_path: Path) -> None:
    """Every time key has an upper bound: a YAML integer of 400 digits (past a float), and
    durations the compiled relay's timers or a thread's wait cannot hold, are one line each,
    never a traceback."""
    config = tmp_path / "watchdog.yaml"
    config.write_text(f"run_end_timeout: 1{'0' * 400}\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports()), "--config", str(config))
    assert line.startswith("watchdog: run_end_timeout=") and line.endswith(
        "is not allowed: expected a positive number of seconds or a duration, at most 1y (e.g. "
        "900 or 15m); a duration like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, largest "
        "first); this one is too large for a number of seconds"), line
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(),
                                  WATCHDOG_MODEL_ADDRESS="127.0.0.1:0",
                                  WATCHDOG_MODEL_UPSTREAM_TIMEOUT="99999999999999999999y"))
    assert line.startswith("watchdog: model_upstream_timeout='99999999999999999999y' is not "
                           "allowed: expected a positive number of seconds or a duration, at "
                           "most 1y"), line
    for key, allowed in SECONDS_ALLOWED.items():
        with pytest.raises(ConfigError) as refused:
            load(env={f"WATCHDOG_{key.upper()}": "366d"})
        assert refused.value.message == f"{key}='366d' is not allowed: expected {allowed}"
        most = SECONDS_MAXIMUMS.get(key, MAX_SECONDS)
        assert getattr(load(env={f"WATCHDOG_{key.upper()}": str(int(most))}), key) == most


def test_an_integer_of_more_digits_than_python_reads_is_one_line(tmp_path: Path) -> None:
    """YAML's integer of 5,000 digits (past int()'s 4,300: a ValueError out of PyYAML) in the
    config file, and in WATCHDOG_WEBHOOKS' YAML: where it is, never a traceback."""
    config = tmp_path / "watchdog.yaml"
    config.write_text(f"log_level: info\nmax_runs: {'9' * 5000}\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports()), "--config", str(config))
    assert line == (f"watchdog: config file {config}: invalid YAML at line 2, column 11: an "
                    f"integer of 5000 characters is too long to be a number")
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": f"[{{url: 'http://hooks.example/a', secret: "
                                       f"{'9' * 5000}}}]"})
    assert refused.value.message == ("webhooks is not allowed: an integer of 5000 characters is "
                                     "too long to be a number; expected a YAML list of webhooks")


def test_an_integer_too_large_is_refused_with_its_bound(tmp_path: Path) -> None:
    """Every integer key has an upper bound (beyond SQLite's 64-bit integers, the sidecar
    would fail as it reads its state back): said in one line, as any bad value."""
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(),
                                  WATCHDOG_MAX_RUNS="99999999999999999999999"))
    assert line == ("watchdog: max_runs='99999999999999999999999' is not allowed: expected an "
                    "integer from 1 to 100000")
    for key, most in INT_MAXIMUMS.items():
        with pytest.raises(ConfigError) as refused:
            load(env={f"WATCHDOG_{key.upper()}": str(most + 1)})
        message = refused.value.message
        assert message.endswith(f"expected an integer from 1 to {most}"), message
        assert getattr(load(env={f"WATCHDOG_{key.upper()}": str(most)}), key) == most


def test_invalid_yaml_in_the_config_file_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "watchdog.yaml"
    config.write_text("max_runs: 5\nlog_level: [info\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports()), "--config", str(config))
    assert line.startswith(f"watchdog: config file {config}: invalid YAML at line 3, column 1: "
                           ), line


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """A mapping's keys are unique in YAML; PyYAML would keep the last one and drop the first
    without a word (a second ``rules:`` dropped the first's packs). In the file, nested
    (a webhook) and in ``WATCHDOG_WEBHOOKS``; a merge key's values still give way."""
    config = tmp_path / "watchdog.yaml"
    config.write_text("rules: [/etc/rules/team]\nlog_level: info\nrules: [/etc/rules/ops]\n")
    said = f"config file {config}: invalid YAML at line 3, column 1: the key 'rules' is given " \
           f"twice (first on line 1)"
    with pytest.raises(ConfigError) as refused:
        load(str(config), env={})
    assert refused.value.message == said
    hook = "{name: ops, url: 'http://hooks.example/a', secret: 0123456789abcdef0, name: dev}"
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": f"[{hook}]"})
    assert refused.value.message == ("webhooks is not allowed: the key 'name' is given twice "
                                     "(first on line 1); expected a YAML list of webhooks")
    nested = tmp_path / "nested.yaml"
    nested.write_text(f"webhooks:\n  - {hook}\n")
    with pytest.raises(ConfigError) as refused:
        load(str(nested), env={})
    assert "line 2, column 75: the key 'name' is given twice" in refused.value.message
    merged = tmp_path / "merged.yaml"
    merged.write_text("log_level: &level debug\nwebhooks: [{<<: {name: a, secret: "
                      "0123456789abcdef0}, name: b, url: 'http://hooks.example/a'}]\n")
    assert [hook["name"] for hook in load(str(merged), env={}).webhooks] == ["b"]
    line = failed_start(serve_env(tmp_path / "state", fresh_ports()), "--config", str(config))
    assert line == f"watchdog: {said}"


def test_a_time_key_says_what_it_accepts_and_shows_the_value_as_given() -> None:
    """0 and -1s are refused with the same words (positive), and a duration is shown as it
    was written, not converted to seconds."""
    said = []
    for value in ("0", "-1s"):
        with pytest.raises(ConfigError) as refused:
            load(env={"WATCHDOG_RUN_END_TIMEOUT": value})
        said.append(refused.value.message)
        assert refused.value.message.startswith(
            f"run_end_timeout={value!r} is not allowed: expected a positive number of seconds "
            f"or a duration, at most 1y (e.g. 900 or 15m)"), refused.value.message
    with pytest.raises(ConfigError) as refused:
        load(flags={"log_content_wait": "11m"})
    assert refused.value.message.startswith("log_content_wait='11m' is not allowed: expected a "
                                            "positive number of seconds or a duration, at most "
                                            "10m"), refused.value.message
    assert load(env={"WATCHDOG_RULES_WATCH_INTERVAL": "0"}).rules_watch_interval == 0
    # the model endpoint's window for an agent's reply at once (5 s unset, at most 10m)
    assert (load(env={}).model_reply_window,
            load(env={"WATCHDOG_MODEL_REPLY_WINDOW": "30s"}).model_reply_window) == (5.0, 30.0)
    for value in ("0", "11m"):
        with pytest.raises(ConfigError) as refused:
            load(flags={"model_reply_window": value})
        assert refused.value.message.startswith(
            f"model_reply_window={value!r} is not allowed: expected a positive number of "
            f"seconds or a duration, at most 10m"), refused.value.message


def test_an_address_with_whitespace_around_is_taken_and_inside_is_malformed() -> None:
    assert load(env={"WATCHDOG_API_ADDRESS": " 127.0.0.1:0\n"}).api_address == "127.0.0.1:0"
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_API_ADDRESS": "127.0.0.1 x:0"})
    assert refused.value.message.startswith(
        "api_address='127.0.0.1 x:0' is not allowed: expected host:port"), refused.value.message


@pytest.mark.parametrize("name", [STATE_FILE, DIRECTIVES_FILE])
def test_a_state_dir_of_a_newer_build_is_kept_for_it(tmp_path: Path, name: str) -> None:
    """A state file of a newer schema: run the newer build on it; the files stay as they were
    (no advice to throw the state away)."""
    state = tmp_path / "state"
    seeded_state(state)
    with sqlite3.connect(state / name) as db:
        db.execute("PRAGMA user_version=999")
        before = db.execute("SELECT sql FROM sqlite_master").fetchall()
    line = failed_start(serve_env(state, fresh_ports()))
    assert line.startswith(f"watchdog: {state / name} has schema version 999; this build knows "
                           ), line
    assert line.endswith("Run that build (or a newer one) on this state_dir; the files are left "
                         "as they are, with everything they hold"), line
    assert ":memory:" not in line
    with sqlite3.connect(state / name) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (999,)
        assert db.execute("SELECT sql FROM sqlite_master").fetchall() == before


def test_the_grpc_receiver_itself_refuses_a_shared_port(sidecar: RunningServer) -> None:
    """Without the pre-flight check (a race, or another caller): grpcio's default
    SO_REUSEPORT is off, so binding the running sidecar's gRPC port fails."""
    server = sidecar.server
    assert server.service is not None and server.metrics is not None
    config = replace(server.config, otlp_grpc_address=sidecar.grpc_target)

    async def bind() -> None:  # in a loop of its own, as the server does (not the thread's)
        assert server.service is not None and server.metrics is not None
        otlp_grpc.create_server(server.service, server.metrics, Admission(1), config)

    with pytest.raises(RuntimeError, match="Failed to bind"):
        asyncio.run(bind())


def test_a_grpc_address_this_machine_does_not_have(tmp_path: Path) -> None:
    """192.0.2.1 (TEST-NET-1, RFC 5737) is nobody's address: the bind itself fails."""
    env = serve_env(tmp_path / "state", fresh_ports(),
                    WATCHDOG_OTLP_GRPC_ADDRESS="192.0.2.1:4317")
    line = failed_start(env, "--insecure")
    assert line == ("watchdog: otlp_grpc_address='192.0.2.1:4317': cannot listen (Cannot assign "
                    "requested address); is that address this machine's, and the port one this "
                    "user may bind? — or choose another address with WATCHDOG_OTLP_GRPC_ADDRESS "
                    "or --otlp-grpc-address")


def test_every_bad_key_is_reported_at_once(tmp_path: Path) -> None:
    """A config file, env vars and flags with several bad keys and values: one line that names
    each (key, value, what is allowed), exit code 2, no traceback."""
    config = tmp_path / "watchdog.yaml"
    config.write_text("run_end_timout: 10m\nmax_runs: many\nlog_level: loud\n")
    env = serve_env(tmp_path / "state", fresh_ports(), WATCHDOG_EVAL_INTERVAL="soon",
                    WATCHDOG_LOG_FROMAT="json")
    line = failed_start(env, "--config", str(config), "--activity-log-size", "0",
                        "--api-address", "nowhere")
    assert line.startswith("watchdog: 7 configuration problems: (1) "), line
    for part in (
            f"unknown configuration key 'run_end_timout' in {config}; did you mean "
            f"run_end_timeout?",
            "max_runs='many' is not allowed: expected an integer",
            "unknown environment variable WATCHDOG_LOG_FROMAT: did you mean "
            "WATCHDOG_LOG_FORMAT?",
            "eval_interval='soon' is not allowed: expected a positive number of seconds",
            "api_address='nowhere' is not allowed: expected host:port",
            "activity_log_size='0' is not allowed: expected an integer from 1 to 10000",
            "log_level='loud' is not allowed: expected one of debug, info, warning, error"):
        assert part in line, (part, line)
    # the key list, said once, with the unknown key (not after the last problem, as if it were
    # that one's allowed values)
    assert line.count("allowed: activity_log_size, ") == 1
    assert line.index("allowed: activity_log_size") < line.index("(2) ")


def test_the_default_state_dir_is_state_in_the_working_directory(tmp_path: Path) -> None:
    """Without state_dir the sidecar keeps its state in ./state (what `make run` uses, and
    gitignored); the old default name is not created."""
    assert Config().state_dir == "state"
    ports = fresh_ports()
    env = serve_env(tmp_path / "unused", ports)
    del env["WATCHDOG_STATE_DIR"]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], env=env,
                                   cwd=tmp_path, stderr=log, text=True)
        try:
            wait_until(lambda: process.poll() is not None or ready(ports["metrics"]),
                       timeout=60, what="the sidecar to be ready")
            assert process.poll() is None, (log.seek(0), log.read())
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert sorted(p.name for p in (tmp_path / "state").glob("*.sqlite3"))
    assert not (tmp_path / "watchdog-state").exists() and not (tmp_path / "unused").exists()
    ignored = subprocess.run(["git", "check-ignore", "-q", "state/watchdog.sqlite3"],
                             cwd=REPO, check=False)
    assert ignored.returncode == 0, "./state is not gitignored"


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_webhooks_that_are_not_yaml_are_one_problem_among_the_others() -> None:
    """WATCHDOG_WEBHOOKS holds YAML (with secrets): bad YAML is reported by key, without the
    value, next to the other problems."""
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": "[{url: https://h.example, secret: whsec_s3cret",
                  "WATCHDOG_MAX_RUNS": "0"})
    message = refused.value.message
    assert message.startswith("2 configuration problems: (1) webhooks is not allowed: "), message
    assert "expected a YAML list of webhooks" in message and "s3cret" not in message
    assert "(2) max_runs='0' is not allowed: expected an integer from 1 to" in message


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "watchdog.yaml"
    config.write_bytes(b"\xffmax_runs: 5\n")
    line = failed_start(serve_env(tmp_path / "state", fresh_ports()), "--config", str(config))
    assert line == f"watchdog: config file {config}: not UTF-8 text (byte 0); save it as UTF-8"


def test_yaml_nested_past_the_stack_is_one_line_with_its_place(tmp_path: Path) -> None:
    """PyYAML's composer recursed past Python's stack on lists nested 10,000 deep: a
    traceback, for the config file and WATCHDOG_WEBHOOKS alike."""
    config = tmp_path / "watchdog.yaml"
    config.write_text("max_runs: 5\nwebhooks: " + "[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(ConfigError) as refused:
        load(str(config), env={})
    assert refused.value.message == (f"config file {config}: invalid YAML at line 2, column 110:"
                                     f" nested more than 100 levels deep")
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": "[" * 10_000 + "]" * 10_000})
    assert refused.value.message == ("webhooks is not allowed: nested more than 100 levels "
                                     "deep; expected a YAML list of webhooks")


def test_every_problem_of_a_webhook_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": "[{url: 'ftp://x', secret: short, actions: [explode], "
                                       "agents: 5, colour: red}]"})
    message = refused.value.message
    assert message.startswith("5 configuration problems: "), message
    for part in ("webhooks[0]: unknown key 'colour'", "webhooks[0].url='ftp://x'",
                 "webhooks[0].secret (hidden, 5 characters)", "webhooks[0].actions='explode'",
                 "webhooks[0].agents=5"):
        assert part in message, (part, message)
    assert "short" not in message


def test_two_listeners_of_the_sidecar_on_one_port_are_refused_as_such() -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_API_ADDRESS": "127.0.0.1:19999",
                  "WATCHDOG_METRICS_ADDRESS": "0.0.0.0:19999", "WATCHDOG_INSECURE": "1"})
    assert refused.value.message == (
        "metrics_address='0.0.0.0:19999' is the port of api_address too: give each listener a "
        "port of its own")
    load(env={"WATCHDOG_API_ADDRESS": "127.0.0.1:0", "WATCHDOG_METRICS_ADDRESS": "127.0.0.1:0",
              "WATCHDOG_OTLP_HTTP_ADDRESS": "127.0.0.1:0"})  # any free port: no clash
    with pytest.raises(ConfigError, match="metrics_address='localhost:19999' is the port of "
                                          "api_address"):
        load(env={"WATCHDOG_API_ADDRESS": "127.0.0.1:19999",
                  "WATCHDOG_METRICS_ADDRESS": "localhost:19999"})
    # two address families bind one port side by side
    load(env={"WATCHDOG_API_ADDRESS": "[::1]:19999", "WATCHDOG_METRICS_ADDRESS": "0.0.0.0:19999",
              "WATCHDOG_INSECURE": "1"})


def test_values_nested_in_yaml_aliases_are_shown_bounded(tmp_path: Path) -> None:
    """Aliases nested in aliases (a "billion laughs" file of 1 KB): each bad value named in a
    message of bounded size, at once (its whole repr would be gigabytes)."""
    lines = ["forward_headers: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    keys = ["model_abort", "model_relay", "log_level", "log_format", "max_runs",
            "eval_interval", "insecure", "rules"]
    lines += [f"{key}: &a{index} [" + ", ".join([f"*a{index - 1}"] * 10) + "]"
              for index, key in enumerate(keys, start=1)]
    config = tmp_path / "watchdog.yaml"
    config.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as refused:
        load(str(config), env={})
    message = refused.value.message
    assert message.startswith("9 configuration problems: "), message[:300]
    assert len(message) < 4000, len(message)
    for key in keys[:-1]:
        assert f"{key}=[" in message, key


def test_a_token_read_from_a_file_with_its_newline_is_the_token(tmp_path: Path) -> None:
    """A Secret file or $(cat token) ends with a newline that is no part of the token: it is
    dropped (env and config file), and clients sending the token itself get in."""
    token = "s3cret-token-value-0123"
    config = tmp_path / "watchdog.yaml"
    config.write_text("api_token: |\n  " + token + "\n", "utf-8")  # a block scalar keeps "\n"
    assert load(str(config), env={}).api_token == token
    ports = fresh_ports()
    env = serve_env(tmp_path / "state", ports, WATCHDOG_API_TOKEN=f" {token}\r\n")
    with running_sidecar(env, ports["metrics"]):
        url = f"http://127.0.0.1:{ports['api']}/v1/runs"
        asked = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(asked, timeout=10) as answer:
            assert answer.status == 200


@pytest.mark.parametrize(("token", "problem"), [
    (" \n", "it is empty (only whitespace)"),
    ("two words-of-a-token", "it holds whitespace or a control character inside"),
    ("s3cret\x1b-token-value", "it holds whitespace or a control character inside"),
])
def test_a_token_empty_or_with_whitespace_inside_is_refused_at_start(
        tmp_path: Path, token: str, problem: str) -> None:
    line = failed_start(serve_env(tmp_path / "state", fresh_ports(), WATCHDOG_API_TOKEN=token))
    assert line.startswith("watchdog: api_token (hidden) from environment is not allowed: "
                           + problem), line
    assert "words" not in line and "s3cret" not in line


@pytest.mark.parametrize("url", ["http://hooks.example:99999/in", "https://hooks.example:0/in",
                                 "http://hooks.example:x/in"])
def test_a_webhook_url_with_an_impossible_port_is_refused_at_start(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={"WATCHDOG_WEBHOOKS": f"[{{url: '{url}', secret: whsec_"
                                       f"{'A' * 24}}}]"})
    assert refused.value.message.startswith(f"webhooks[0].url={url!r} is not allowed: expected "
                                            f"an http:// or https:// URL with a host (and a "
                                            f"port from 1 to 65535)"), refused.value.message
    load(env={"WATCHDOG_WEBHOOKS": f"[{{url: 'http://hooks.example:65535/in', secret: whsec_"
                                   f"{'A' * 24}}}]"})


def status_of_a_stream(port: int, held: list[socket.socket]) -> int:
    """Open ``GET /v1/directives/stream`` on the API at ``port``: the status it is answered
    with (0: no answer in 5 s); a stream that is taken stays open (in ``held``)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"GET /v1/directives/stream HTTP/1.1\r\nHost: t\r\n"
                 b"Accept: text/event-stream\r\n\r\n")
    try:
        head = sock.recv(12)
    except TimeoutError:
        head = b""
    status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
    if status == 200:
        held.append(sock)
    else:
        sock.close()
    return status


def test_waiting_api_clients_never_take_the_files_the_listeners_need(tmp_path: Path) -> None:
    """Under an open-files limit of 400, the control API's directive streams are bounded to the
    room the rest leaves (64 to start and 64 exports: 136 streams, 136 long-polls): 450 clients
    opening streams get 136 streams and 503s, and an export, the API and ``/readyz`` are still
    answered. Unbounded to the limit, the streams took every file: no listener could accept
    (exports, the API, ``/readyz`` all went unanswered) and asyncio logged a traceback for every
    retry of every listener, hundreds a second."""
    ports = fresh_ports()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], stderr=log,
                                   text=True, env=serve_env(tmp_path / "state", ports),
                                   preexec_fn=open_files_limit(400, 400))
        held: list[socket.socket] = []
        try:
            wait_until(lambda: process.poll() is not None or ready(ports["metrics"]),
                       timeout=30, what="the sidecar to start")
            statuses = [status_of_a_stream(ports["api"], held) for _ in range(450)]
            export = urllib.request.Request(
                f"http://127.0.0.1:{ports['otlp_http']}/v1/traces", data=b"{}", method="POST",
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(export, timeout=5) as answered:
                assert answered.status == 200
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['api']}/v1/runs",
                                        timeout=5) as answered:
                assert answered.status == 200
            assert ready(ports["metrics"])
        finally:
            for sock in held:
                sock.close()
            process.terminate()
            process.wait(timeout=30)
        said = (log.seek(0), log.read())[1]
    assert (statuses.count(200), statuses.count(503)) == (136, 314), statuses
    assert statuses[:136] == [200] * 136, statuses
    assert ("the API holds 136 streams and 136 long-polls (more are answered 503)" in said), said
    assert "Traceback" not in said, said


class FakeLoop:
    def __init__(self) -> None:
        self.passed: list[dict[str, Any]] = []

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.passed.append(context)


def test_a_listener_out_of_files_is_one_warning_line_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    """asyncio logs a listener's failed accept (EMFILE) with its traceback at every retry —
    91 MB of log in a minute, when waiting clients had taken every file: it is one line a
    minute, with how many there were; any other loop error goes to asyncio's handler."""
    now = [100.0]
    failures = open_files.AcceptFailures(clock=lambda: now[0])
    loop = FakeLoop()
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        context = {"message": open_files.ACCEPT_FAILURE, "socket": listener,
                   "exception": OSError(24, "Too many open files")}
        with caplog.at_level(logging.WARNING, logger="watchdog"):
            for second in range(150):
                now[0] = 100.0 + second
                for _ in range(50):
                    failures(cast(asyncio.AbstractEventLoop, loop), context)
    finally:
        listener.close()
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"cannot accept connections on 127.0.0.1:{port} (Too many open files): the open-files "
        f"limit (ulimit -n) is {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}; connections "
        f"wait until files are free: raise it (failed accepts since the last such line: "
        f"{count})" for count in (1, 3000, 3000)], lines
    assert not any(record.exc_info for record in caplog.records)
    other = {"message": "Task exception was never retrieved"}
    failures(cast(asyncio.AbstractEventLoop, loop), other)
    assert loop.passed == [other]
