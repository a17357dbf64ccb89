"""The ``watchdog`` command: ``serve``, ``rules check|test``, ``runs``, ``directives``, ``report``
and ``demo``.
Errors are one line on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import logging
import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from watchdog.core.bounds import id_problem
from watchdog.core.durations import DurationError, parse_seconds
from watchdog.core.runs.steps import format_duration
from watchdog.core.tables import GAP, Column, render
from watchdog.core.version import __version__
from watchdog.shell import logs, open_files
from watchdog.shell.config import MAX_SECONDS, Config, load, url_for_logs
from watchdog.shell.errors import WatchdogError

DEFAULT_URL = "http://127.0.0.1:9477"  # the control API's default bind (DESIGN §2)
URL_ENV = "WATCHDOG_URL"
TOKEN_ENV = "WATCHDOG_API_TOKEN"
REQUEST_TIMEOUT = 10.0  # seconds; a sidecar that answers slower than this counts as unreachable
DEFAULT_WATCH_INTERVAL = 2.0
RUNS_PAGE = 1000  # runs per page read (the API's most: GET /v1/runs?limit=)
CLEAR_SCREEN = "\x1b[H\x1b[2J"
EXIT_FAILED = 1  # the watchdog answered with an error
EXIT_UNREACHABLE = 2  # no answer at all (or a configuration error)
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (`| head`): 128 + SIGPIPE, as the shell


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML configuration file (default: none)")
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = f"(default: {config_default(f.name)})".replace("%", "%%")
        if f.name == "insecure":
            parser.add_argument(flag, action="store_true", default=None,
                                help=f"allow non-loopback binds without an api_token {default}")
        elif f.name in ("rules",):
            parser.add_argument(flag, action="append", default=None, metavar="PATH",
                                help="rule file or directory, loaded after the shipped default "
                                     f"pack (repeatable) {default}")
        elif f.name == "webhooks":
            continue  # structured: config file or WATCHDOG_WEBHOOKS (YAML) only
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(),
                                help=f"overrides {f.name} (env WATCHDOG_{f.name.upper()}) "
                                     f"{default}")


def config_default(name: str) -> str:
    """The default of configuration key ``name`` as it would be written in a config file."""
    value = getattr(Config(), name)
    if value is None or value == () or value == {}:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}s"
    return str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="watchdog",
        description="Watch LLM agents through their OpenTelemetry spans; tell stuck ones to stop.")
    parser.add_argument("--version", action="version", version=f"agent-watchdog {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the sidecar",
        # (argparse's own usage lists all 40 flags, 36 lines above a bad flag's error)
        usage="%(prog)s [-h] [--config FILE] [--KEY VALUE ...]",
        description="Run the sidecar. Each key is read from the --config file, then its "
                    "WATCHDOG_<KEY> env var, then its flag (later sources win).")
    _add_config_flags(serve)
    serve.set_defaults(handler=_serve)

    runs = commands.add_parser("runs", help="list runs (from a running sidecar)")
    runs.add_argument("--state", choices=("active", "ended"), help="only active or ended runs")
    runs.add_argument("--agent", help="only runs of this agent")
    runs.add_argument("--session", help="only runs of this session")
    runs.add_argument("--limit", type=_positive_int, default=100,
                      help="at most this many runs (read a page of up to "
                           f"{RUNS_PAGE} at a time)")
    runs.add_argument("--all", action="store_true",
                      help="every run the sidecar holds, however many (page after page)")
    runs.add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    runs.add_argument("--interval", type=_positive_float, default=DEFAULT_WATCH_INTERVAL,
                      metavar="SECONDS", help="seconds between redraws with --watch (default 2)")
    runs.add_argument("--frames", type=_positive_int, default=None, help=argparse.SUPPRESS)
    _add_output_flag(runs)
    _add_url_flag(runs)
    runs.set_defaults(handler=_runs)

    directives = commands.add_parser(
        "directives", help="list a run's directives",
        description="List a run's directives, oldest first. ACKED is yes once the agent's "
                    "client has acked it (POST /v1/runs/{id}/ack): its process put the "
                    "directive into a model request it made (the countdown or wind-down in "
                    "that request's instructions, the final request for the report) or "
                    "stopped the run at it — the same with every adapter. no: not (yet) "
                    "applied, or the agent runs without the client.")
    directives.add_argument("run_id", metavar="RUN_ID", type=_run_id)
    _add_output_flag(directives)
    _add_url_flag(directives)
    directives.set_defaults(handler=_directives)

    rules = commands.add_parser("rules", help="check and test rule packs")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True, metavar="COMMAND")
    check = rules_commands.add_parser(
        "check", help="validate rule packs; every problem is printed as FILE:LINE: rule NAME: ...")
    check.add_argument("paths", nargs="+", metavar="PATH", help="rule pack file or directory")
    check.add_argument("--no-default", action="store_true",
                       help="do not load the shipped default pack first")
    check.set_defaults(handler=_rules_check)
    test = rules_commands.add_parser(
        "test", help="run rule unit tests (synthetic steps in, expected directives out)")
    test.add_argument("files", nargs="+", metavar="FILE", help="rule test file (YAML)")
    test.add_argument("-v", "--verbose", action="store_true", help="also list passing tests")
    test.set_defaults(handler=_rules_test)

    report = commands.add_parser("report", help="print a run's progress report")
    report.add_argument("run_id", metavar="RUN_ID", type=_run_id)
    report.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    _add_url_flag(report)
    report.set_defaults(handler=_report)

    session = commands.add_parser(
        "session", help="print a session's context (what its next run starts from)",
        description="Print what a session's next run starts from: its facts (verbatim), the "
                    "approaches that failed, its checkpoints and whether the last ones made "
                    "progress, and the note a new run is told (GET /v1/sessions/{id}/context). "
                    "A session the sidecar has not seen prints an empty context.")
    session.add_argument("session_id", metavar="SESSION_ID", type=_session_id)
    session.add_argument("--json", action="store_true", help="JSON instead of text")
    _add_url_flag(session)
    session.set_defaults(handler=_session)

    demo = commands.add_parser(
        "demo", help="an embedded sidecar and three simulated agents (slow, looping, error "
                     "loop), watched live; takes about 20 s")
    demo.add_argument("--seconds", type=_positive_float, default=None, metavar="SECONDS",
                      help="how long the slow agent works (default 15; the looping agents "
                           "are stopped within a few seconds whatever this is)")
    demo.set_defaults(handler=_demo)
    return parser


def _add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                        help="table (default; fits the terminal), wide (more columns, nothing "
                             "cut) or json (the control API's answer)")


def _add_url_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=None,
                        help=f"control API of the sidecar (env {URL_ENV}, default {DEFAULT_URL}); "
                             f"a token is read from {TOKEN_ENV}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def _run_id(text: str) -> str:
    """A run id as the sidecar checks it (an empty one read as the list's path, a 404)."""
    problem = id_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"a run id {problem}")
    return text


def _session_id(text: str) -> str:
    """A session id as the sidecar checks it."""
    problem = id_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"a session id {problem}")
    return text


def _positive_float(text: str) -> float:
    """Seconds: a number or a duration (``500ms``, ``1m``), as everywhere else."""
    try:
        value = parse_seconds(text)
    except DurationError:
        value = 0.0
    if not 0 < value <= MAX_SECONDS:  # (time.sleep refuses some 3e11 years)
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds or a "
                                         f"duration like 500ms, 30s, 1m (at most 1y)")
    return value


def _config_from(args: argparse.Namespace) -> Config:
    flags: dict[str, Any] = {f.name: getattr(args, f.name, None) for f in fields(Config)}
    if flags.get("rules"):
        flags["rules"] = tuple(flags["rules"])
    return load(getattr(args, "config", None), flags=flags)


def _serve(args: argparse.Namespace) -> int:
    hangups = catch_hangups()
    config = _config_from(args)
    logs.setup(config.log_level, config.log_format)
    files = open_files.raise_limit(config)
    if (refused := open_files.too_few(files)) is not None:
        raise CommandFailed(refused, EXIT_UNREACHABLE)
    if (warning := open_files.short(files)) is not None:
        logging.getLogger("watchdog").warning("%s", warning)
    from watchdog.shell.server import serve  # the server's dependencies load only when serving

    asyncio.run(serve(config, hangups))
    return 0


def catch_hangups() -> list[int]:
    """The SIGHUPs that come while the sidecar starts (its config read, the server loaded, the
    rules read, the state restored: seconds with a large state), before the server handles
    them: by default one would end the process without a word. The server reloads the rules
    once it has started if any came (see :func:`watchdog.shell.server.serve`)."""
    caught: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, _frame: caught.append(signum))
    return caught


def _rules_check(args: argparse.Namespace) -> int:
    from watchdog.core.rules.pack import RulePackError, load_rules

    try:
        ruleset = load_rules(args.paths, include_default=not args.no_default)
    except RulePackError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(f"{count} problem{'s' if count != 1 else ''} found", file=sys.stderr)
        return EXIT_FAILED
    files = [s.path for s in ruleset.sources if not os.path.isdir(s.path)]
    print(f"ok: {len(ruleset.rules)} rules enabled, {len(ruleset.disabled)} disabled, "
          f"{len(ruleset.budgets)} budgets, from {len(files)} files")
    return 0


def _rules_test(args: argparse.Namespace) -> int:
    from watchdog.core.rule_tests import run_files

    return run_files(args.files, sys.stdout, verbose=args.verbose)


# -- client commands (standard library only: they run where the server's dependencies may not) --

class CommandFailed(Exception):
    """One line for stderr and the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ApiClient:
    """A minimal client of the control API."""

    def __init__(self, url: str, token: str | None = None,
                 timeout: float = REQUEST_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str, query: Mapping[str, str] | None = None,
            accept: str = "application/json") -> bytes:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": accept, "User-Agent": f"agent-watchdog-cli/{__version__}"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as exc:
            raise CommandFailed(_api_error(exc)) from None
        except urllib.error.URLError as exc:
            raise self._unreachable(exc.reason) from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise self._unreachable(exc) from None

    def get_json(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        body = self.get(path, query)
        try:
            return json.loads(body)
        except ValueError:
            raise CommandFailed(f"{self.url}{path} did not answer with JSON; is --url the "
                                f"watchdog's control API?") from None

    def _unreachable(self, reason: object) -> CommandFailed:
        text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return CommandFailed(f"cannot reach the watchdog at {self.url}: {text} (is it running? "
                             f"set --url or {URL_ENV})", EXIT_UNREACHABLE)


def _api_error(exc: urllib.error.HTTPError) -> str:
    try:
        error = json.loads(exc.read())["error"]
        message = f"{error['message']} ({exc.code} {error['code']})"
        if exc.code == 404 and str(error["message"]).startswith("no such endpoint"):
            message += (f"; --url or {URL_ENV} is the control API's base URL, with no path "
                        f"(default {DEFAULT_URL})")  # (e.g. http://127.0.0.1:9477/v1)
    except (ValueError, KeyError, TypeError, OSError):
        message = f"HTTP {exc.code} {exc.reason}"
        if exc.code == 404:  # not the control API's own answer: another port, another server
            message += (f" from {exc.url} (is that the watchdog's control API, default "
                        f"{DEFAULT_URL}? set --url or {URL_ENV})")
    if exc.code == 401:
        message += f"; set {TOKEN_ENV}"
    return message


def _client(args: argparse.Namespace) -> ApiClient:
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    given = "--url" if args.url else URL_ENV if os.environ.get(URL_ENV) else "the default"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        scheme, host, _ = parts.scheme, parts.hostname, parts.port  # (a bad port raises)
    except ValueError:
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:  # (`localhost:9477` reads as a scheme)
        raise CommandFailed(f"{given} {url_for_logs(url)!r} is not the control API's URL: "
                            f"expected http://HOST:PORT, e.g. {DEFAULT_URL}", EXIT_UNREACHABLE)
    if "@" in parts.netloc:  # (urllib would send neither, and might quote them in an error)
        raise CommandFailed(f"{given} {url_for_logs(url)!r} carries credentials, which the "
                            f"control API does not read: set {TOKEN_ENV} instead",
                            EXIT_UNREACHABLE)
    return ApiClient(url.strip(), os.environ.get(TOKEN_ENV, "").strip() or None)  # (a newline)


OUTPUTS = ("table", "wide", "json")
RUN_COLUMNS = (  # -o table: fits the terminal (ids and names are cut with "…")
    Column("ID", min_width=14, middle=True), Column("AGENT", min_width=8), Column("STATE"),
    Column("TOOLS", numeric=True), Column("ERR", numeric=True), Column("COST", numeric=True),
    Column("ELAPSED", numeric=True), Column("IDLE", numeric=True),
    Column("TERMINAL"))  # the states are never cut: a column is dropped instead
# Dropped in this order while the table cannot fit (a long terminal state on a narrow terminal);
# ID, STATE and TERMINAL always stay, whole but for the ID (-o wide shows everything).
DROPPED_FIRST = ("COST", "IDLE", "ERR", "TOOLS", "ELAPSED", "AGENT")
WIDE_RUN_COLUMNS = (  # -o wide: everything, never cut
    Column("ID"), Column("AGENT"), Column("SESSION"), Column("STATE"),
    Column("ITER", numeric=True), Column("TOOLS", numeric=True), Column("ERR", numeric=True),
    Column("TOKENS", numeric=True), Column("COST", numeric=True), Column("ELAPSED", numeric=True),
    Column("IDLE", numeric=True), Column("TERMINAL"), Column("TRACE"))


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` wins; 80 when stdout is not a terminal)."""
    return shutil.get_terminal_size().columns


def runs_table(runs: Sequence[Mapping[str, Any]], wide: bool = False,
               width: int | None = None) -> str:
    """``runs`` (the API's list form) as an aligned text table; ``wide`` adds columns and cuts
    nothing, else the table fits ``width`` (default: the terminal's)."""
    if not runs:
        return "no runs"
    if wide:
        return render(WIDE_RUN_COLUMNS, [_run_row(run, wide=True) for run in runs])
    return _fitted(RUN_COLUMNS, [_run_row(run) for run in runs],
                   terminal_width() if width is None else width)


def _fitted(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> str:
    """``render`` within ``width``, dropping columns (``DROPPED_FIRST``) while even the cut
    table is too wide."""
    kept = list(range(len(columns)))
    for name in (None, *DROPPED_FIRST):
        if name is not None:
            kept = [i for i in kept if columns[i].name != name]
        if _narrowest([columns[i] for i in kept], [[row[i] for i in kept] for row in rows]) \
                <= width:
            break
    return render([columns[i] for i in kept], [[row[i] for i in kept] for row in rows], width)


def _narrowest(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> int:
    """The width of the table with every column that may be cut at its minimum."""
    total = len(GAP) * (len(columns) - 1)
    for index, column in enumerate(columns):
        natural = max(len(column.name), *(len(row[index]) for row in rows))
        total += natural if column.min_width is None else min(
            natural, max(column.min_width, len(column.name)))
    return total


def _run_row(run: Mapping[str, Any], wide: bool = False) -> tuple[str, ...]:
    ended = run.get("state") == "ended"
    terminal = run.get("terminal_state") or "-"
    if ended and run.get("has_final_answer") and terminal != "completed":
        terminal += " (answered)"
    elapsed = format_duration(float(run.get("elapsed_seconds", 0.0)))
    idle = "-" if ended else format_duration(float(run.get("idle_seconds", 0.0)))
    tools, errors = str(run.get("tool_calls", 0)), str(run.get("errors", 0))
    cost = _usd(float(run.get("cost_usd", 0.0)), int(run.get("unpriced_calls", 0)))
    # (an agent chooses its names and ids: one escaped never moves the table or the terminal)
    run_id, agent = one_line(str(run.get("id", ""))), one_line(str(run.get("agent", "")))
    if not wide:
        return (run_id, agent, str(run.get("state", "")),
                tools, errors, cost, elapsed, idle, terminal)
    return (run_id, agent, one_line(str(run.get("session") or "-")),
            str(run.get("state", "")), str(run.get("iterations", 0)), tools, errors,
            _count(int(run.get("total_tokens", 0))), cost, elapsed, idle, terminal,
            one_line(str(run.get("trace_url") or run.get("trace_id") or "-")))  # its link


def _usd(cost: float, unpriced: int) -> str:
    """A run's dollars ("-": no priced call; "<$0.0001": less, never "$0.0000", which reads as
    free), "+N?" for N model calls with no known price."""
    shown = "-" if cost <= 0 and unpriced <= 0 else (
        f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}" if cost >= 0.00005
        else "<$0.0001" if cost > 0 else "")
    return shown + (f"+{unpriced}?" if unpriced > 0 else "")


def _count(value: int) -> str:
    if value < 10_000:
        return str(value)
    if value < 10_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def list_runs(client: ApiClient, query: Mapping[str, str], limit: int | None
              ) -> dict[str, Any]:
    """``GET /v1/runs`` page after page (its ``next``) until ``limit`` runs (None: all of
    them): ``{"runs": [...], "next": ...}``, the ``next`` of the last page read. A run that
    ended while the pages were read, listed among the active runs and again among the ended
    ones, is listed once, as it was first."""
    runs: list[dict[str, Any]] = []
    seen: set[str] = set()
    after: str | None = None
    while True:
        page = dict(query)
        page["limit"] = str(RUNS_PAGE if limit is None else min(RUNS_PAGE, limit - len(runs)))
        if after is not None:
            page["after"] = after
        answer = client.get_json("/v1/runs", page)
        for run in answer.get("runs", []):
            if run.get("id") not in seen:
                seen.add(run.get("id"))
                runs.append(run)
        after = answer.get("next")
        if not after or (limit is not None and len(runs) >= limit):
            return {"runs": runs, "next": after}


def _runs(args: argparse.Namespace) -> int:
    client = _client(args)
    query = {}
    if args.state:
        query["state"] = args.state
    if args.agent:
        query["agent"] = args.agent
    if args.session:
        query["session"] = args.session
    limit = None if args.all else args.limit

    if args.output == "json":
        if args.watch:
            raise CommandFailed("--watch redraws a table; -o json prints one snapshot (run it "
                                "again to poll)", EXIT_UNREACHABLE)
        print(json_text(list_runs(client, query, limit)))
        return 0

    def frame() -> str:
        return runs_table(list_runs(client, query, limit)["runs"], wide=args.output == "wide")

    if not args.watch:
        print(frame())
        return 0
    tty = sys.stdout.isatty()
    drawn = 0
    try:
        while True:
            try:
                body = frame()
            except CommandFailed as exc:
                if drawn == 0:
                    raise  # never reached it at all: fail like the one-shot form
                body = f"watchdog: {one_line(exc.message)} (retrying)"
            stamp = datetime.now().strftime("%H:%M:%S")
            title = f"runs at {stamp}, every {args.interval:g}s (Ctrl-C to stop)"
            if tty:
                sys.stdout.write(CLEAR_SCREEN)
            elif drawn:
                print("-" * 40)
            print(f"{title}\n{body}", flush=True)
            drawn += 1
            if args.frames is not None and drawn >= args.frames:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


DIRECTIVE_COLUMNS = (
    Column("SEQ", numeric=True), Column("CREATED"), Column("ACTION"),
    Column("RULE", min_width=10), Column("ACKED"), Column("MESSAGE", min_width=12))
WIDE_DIRECTIVE_COLUMNS = (
    Column("SEQ", numeric=True), Column("ID"), Column("CREATED"), Column("ACTION"),
    Column("RULE"), Column("SEVERITY"), Column("TERMINAL"), Column("ESCALATION"),
    Column("ACKED"), Column("MESSAGE"))


def directives_table(directives: Sequence[Mapping[str, Any]], wide: bool = False,
                     width: int | None = None) -> str:
    """A run's directives (``GET /v1/runs/{id}``'s ``directives``), oldest first."""
    if not directives:
        return "no directives"
    rows: list[tuple[str, ...]] = []
    for d in directives:
        created = str(d.get("created_at", ""))
        acked = "yes" if d.get("acked") else "no"
        message = " ".join(str(d.get("message", "")).split())  # one line per directive
        if wide:
            rows.append((str(d.get("seq", "")), str(d.get("id", "")), created,
                         str(d.get("action", "")), str(d.get("rule", "")),
                         str(d.get("severity", "")), str(d.get("terminal_state") or "-"),
                         "yes" if d.get("escalation") else "no", acked, message))
        else:
            rows.append((str(d.get("seq", "")), created[11:19] or created,
                         str(d.get("action", "")), str(d.get("rule", "")), acked, message))
    rows = [tuple(one_line(cell) for cell in row) for row in rows]  # (a message quotes a span)
    if wide:
        return render(WIDE_DIRECTIVE_COLUMNS, rows)
    return render(DIRECTIVE_COLUMNS, rows, terminal_width() if width is None else width)


def _directives(args: argparse.Namespace) -> int:
    client = _client(args)
    run = client.get_json("/v1/runs/" + urllib.parse.quote(args.run_id, safe=""))
    directives = run.get("directives", []) if isinstance(run, dict) else []
    omitted = run.get("directives_omitted", 0) if isinstance(run, dict) else 0
    omitted = omitted if isinstance(omitted, int) and not isinstance(omitted, bool) else 0
    if args.output == "json":
        print(json_text({"run_id": args.run_id, "directives": directives,
                         "directives_omitted": omitted}))
    else:
        if omitted:
            print(f"({omitted} older directives left out: the newest {len(directives)} "
                  f"are listed)")
        print(directives_table(directives, wide=args.output == "wide"))
    return 0


def _report(args: argparse.Namespace) -> int:
    client = _client(args)
    path = "/v1/runs/" + urllib.parse.quote(args.run_id, safe="") + "/report"
    if args.json:
        print(json_text(client.get_json(path)))
    else:
        text = shown_text(client.get(path, accept="text/markdown").decode("utf-8", "replace"))
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _session(args: argparse.Namespace) -> int:
    client = _client(args)
    context = client.get_json("/v1/sessions/" + urllib.parse.quote(args.session_id, safe="")
                              + "/context")
    if args.json or not isinstance(context, dict):
        print(json_text(context))
        return 0
    print(shown_text(session_text(context)))
    return 0


def session_text(context: dict[str, Any]) -> str:
    """A session's context as an operator reads it."""
    runs, checkpoints = context.get("runs", 0), context.get("checkpoints", 0)
    lines = [f"session {context.get('session', '')}: {runs} run{'' if runs == 1 else 's'}, "
             f"{checkpoints} checkpoint{'' if checkpoints == 1 else 's'}"]
    if context.get("last_checkpoint_at"):
        lines.append(f"last checkpoint: {context['last_checkpoint_at']}"
                     + (f" (run {context['last_checkpoint_run']})"
                        if context.get("last_checkpoint_run") else ""))
    if context.get("last_remaining") is not None:
        lines.append(f"remaining: {context['last_remaining']}")
    streak = context.get("zero_progress_streak") or 0
    if context.get("zero_progress"):
        lines.append(f"progress: none across the last {streak + 1} checkpoints")
    else:  # (progress is what checkpoints tell: none told, none known)
        lines.append("progress: yes" if checkpoints else "progress: no checkpoint yet")
    active = context.get("active_runs") or []
    if active:
        lines.append("active runs: " + ", ".join(str(run) for run in active))
    facts = context.get("facts") or {}
    if facts:
        lines.append("facts:")
        lines.extend(f"  {key}: {json.dumps(value, ensure_ascii=False)}"
                     for key, value in facts.items())
    failed = context.get("failed_approaches") or []
    if failed:
        lines.append("failed approaches:")
        lines.extend(f"  - {approach}" for approach in failed)
    if context.get("note"):
        lines.append(f"note for the next run: {context['note']}")
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401  (the agents export with it)
    except ImportError:
        raise CommandFailed("the demo's agents need the OTLP/HTTP exporter: pip install "
                            "opentelemetry-exporter-otlp-proto-http") from None
    from watchdog.shell.demo import DEFAULT_SECONDS, run_demo

    return run_demo(args.seconds or DEFAULT_SECONDS)


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit code. Output piped to a reader that stops early (``| head``) ends the
    command quietly with ``EXIT_BROKEN_PIPE``, as a process killed by SIGPIPE reports it."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at interpreter exit, where a broken pipe is only printed
        return code
    except BrokenPipeError:
        # Python's recipe: stdout now points at /dev/null, so the flush at exit writes nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


# A control character (C0, DEL, C1), a line or paragraph separator or a bidirectional control
# shown escaped, as Python writes it in a string: an error, a table's cell is one line whatever
# a path or a name in it holds (a rule file "a\nb" from WATCHDOG_RULES), for every reader that
# splits lines as str.splitlines does. What the commands print comes from the agents' spans
# (names, tool arguments and results, messages): escaped, none of it is a terminal's command
# (ESC's clear screen, a window title, OSC 52's clipboard write, a carriage return drawing over
# a line, a line shown in another order than its characters).
BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = {code: f"\\x{code:02x}" for code in (*range(32), *range(127, 160))} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
    0x2028: "\\u2028", 0x2029: "\\u2029"} | {code: f"\\u{code:04x}" for code in BIDI_CONTROLS}
_IN_TEXT = {code: text for code, text in _ESCAPED.items() if code != ord("\n")}  # lines kept
# -o json: the same as JSON escapes (json.dumps escapes C0 itself), so it stays valid JSON
_IN_JSON = {code: f"\\u{code:04x}" for code in _ESCAPED if code != ord("\n")}


def one_line(message: str) -> str:
    return message.translate(_ESCAPED)


def shown_text(text: str) -> str:
    """Text of several lines (a report, a session's context) as :func:`one_line` shows a line:
    its newlines kept, every other control character escaped."""
    return text.translate(_IN_TEXT)


def json_text(value: Any) -> str:
    """``value`` as indented JSON for a terminal: no raw control character, still JSON."""
    return json.dumps(value, indent=2, ensure_ascii=False).translate(_IN_JSON)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except CommandFailed as exc:
        print(f"watchdog: {one_line(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except WatchdogError as exc:
        print(f"watchdog: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130
