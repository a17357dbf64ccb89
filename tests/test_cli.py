"""The ``watchdog`` command in-process against a real sidecar: runs, report, errors, serve flags."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    run_detail,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.otel import SECRET, explorer_run, export_http
from tests.ports import free_port
from tests.spans import SpanMaker, chat_attrs, tool_attrs
from watchdog.core.tables import cells
from watchdog.shell.cli import main, runs_table
from watchdog.shell.config import Config

RUN_ID = "job:7"


@pytest.fixture
def fed(sidecar: RunningServer, monkeypatch: pytest.MonkeyPatch) -> RunningServer:
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    export_http(sidecar, explorer_run(RUN_ID))
    export_http(sidecar, explorer_run("job:8", agent="writer", end=True))
    return sidecar


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_runs_table(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "AGENT", "STATE", "TOOLS", "ERR", "COST", "ELAPSED",
                                "IDLE", "TERMINAL"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[RUN_ID][1:5] == ["explorer", "active", "4", "1"]
    assert rows[RUN_ID][-1] == "-"
    assert rows["job:8"][1:3] == ["writer", "ended"] and rows["job:8"][-1] == "completed"
    assert rows["job:8"][-2] == "-"  # an ended run is not idle


def test_the_list_shows_each_runs_cost_as_its_detail_does(
        sidecar: RunningServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    maker = SpanMaker()
    spans = explorer_run(RUN_ID, maker=maker)  # two model calls that name no model: unpriced
    maker.span("chat gpt-4o-mini", chat_attrs(5000, 500, "stop", **{  # a model with a price
        "gen_ai.request.model": "gpt-4o-mini", "watchdog.run.id": RUN_ID,
        "gen_ai.agent.name": "explorer"}), start=time.time() - 5, end=time.time() - 4)
    export_http(sidecar, [*spans, *maker.take()])
    signals = sidecar.get_json(f"/v1/runs/{RUN_ID}")["signals"]
    assert signals["cost_usd"] > 0 and signals["unpriced_calls"] == 2
    [listed] = sidecar.get_json("/v1/runs")["runs"]
    assert (listed["cost_usd"], listed["unpriced_calls"]) == (
        round(signals["cost_usd"], 6), 2)

    assert main(["runs", "--url", sidecar.api]) == 0
    lines = capsys.readouterr().out.splitlines()
    cost = lines[1].split()[lines[0].split().index("COST")]
    assert cost == f"${signals['cost_usd']:.4f}+2?"
    assert main(["runs", "--url", sidecar.api, "-o", "wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[lines[0].split().index("COST")] == cost


def test_runs_filters(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api, "--state", "ended"]) == 0
    out = capsys.readouterr().out
    assert "job:8" in out and RUN_ID not in out
    assert main(["runs", "--url", fed.api, "--agent", "explorer"]) == 0
    out = capsys.readouterr().out
    assert RUN_ID in out and "job:8" not in out
    assert main(["runs", "--url", fed.api, "--agent", "nobody"]) == 0
    assert capsys.readouterr().out == "no runs\n"


def test_url_from_environment(fed: RunningServer, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_URL", fed.api + "/")
    assert main(["runs"]) == 0
    assert RUN_ID in capsys.readouterr().out


def test_watch_draws_frames_with_separators(fed: RunningServer,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api, "--watch", "--interval", "0.05", "--frames", "3"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # not a TTY: no screen clearing
    frames = out.split("-" * 40 + "\n")
    assert len(frames) == 3
    for frame in frames:
        assert frame.startswith("runs at ") and "every 0.05s" in frame
        assert RUN_ID in frame and "explorer" in frame


def test_watch_clears_the_screen_on_a_tty(fed: RunningServer, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(["runs", "--url", fed.api, "--watch", "--interval", "0.01", "--frames", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\x1b[H\x1b[2J") == 2 and "-" * 40 not in out


def test_report_markdown(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", RUN_ID, "--url", fed.api]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# Progress report: {RUN_ID}\n")
    assert "## Step-by-step log" in out and '{"path":"src/app.py"}' in out
    assert SECRET not in out and "[REDACTED]" in out


def test_report_json(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", RUN_ID, "--json", "--url", fed.api]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run"]["id"] == RUN_ID
    assert [t["name"] for t in report["tools"]] == ["search_docs", "read_env", "read_file"]


def test_report_of_unknown_run(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "nope/x", "--url", fed.api]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == 'watchdog: no run "nope/x" (404 not_found)\n'


def test_session_context(sidecar: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    """``watchdog session``: what the session's next run starts from, as text and JSON; two
    checkpoints with the same work left read as no progress; a secret in a fact is redacted."""
    for run in ("run-1", "run-2"):
        status, body = http_request(
            "POST", sidecar.api + "/v1/sessions/ticket-4711/checkpoints", json.dumps({
                "remaining": "deploy the fix to staging", "run_id": run,
                "state": {"project_path": "/srv/checkout", "db_password": SECRET},
                "failed_approaches": ["re-run the CI pipeline"]}).encode(),
            {"Content-Type": "application/json"})
        assert status == 200, body
    assert main(["session", "ticket-4711", "--url", sidecar.api]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "session ticket-4711: 2 runs, 2 checkpoints"
    assert "remaining: deploy the fix to staging" in lines
    assert "progress: none across the last 2 checkpoints" in lines
    assert '  project_path: "/srv/checkout"' in lines and "  - re-run the CI pipeline" in lines
    assert any(line.startswith("note for the next run: No progress") for line in lines)
    assert SECRET not in "\n".join(lines)
    assert main(["session", "ticket-4711", "--json", "--url", sidecar.api]) == 0
    context = json.loads(capsys.readouterr().out)
    assert (context["checkpoints"], context["zero_progress"]) == (2, True)
    assert main(["session", "never-seen", "--url", sidecar.api]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "session never-seen: 0 runs, 0 checkpoints", "progress: no checkpoint yet"]
    with pytest.raises(SystemExit) as exited:
        main(["session", "", "--url", sidecar.api])
    assert exited.value.code == 2


def test_a_url_that_is_not_the_control_api_says_so(fed: RunningServer,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--url`` naming another of the sidecar's ports (its metrics): one line saying which URL
    answered 404 and where the control API is by default."""
    url = fed.url("metrics")
    assert main(["runs", "--url", url]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"watchdog: HTTP 404 Not Found from {url}/v1/runs")
    assert "control API" in line and "--url" in line


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--watch"], ["report", RUN_ID]])
def test_unreachable_sidecar_is_one_line_and_exit_2(argv: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = closed_port_url()
    assert main([*argv, "--url", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"watchdog: cannot reach the watchdog at {url}: ")
    assert "Traceback" not in captured.err


def test_a_url_with_the_apis_path_on_it_says_what_the_url_is(
        fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api + "/v1"]) == 1
    assert capsys.readouterr().err == (
        "watchdog: no such endpoint: GET /v1/v1/runs (404 not_found); --url or WATCHDOG_URL "
        "is the control API's base URL, with no path (default http://127.0.0.1:9477)\n")


def test_bad_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", "not a url"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


@pytest.mark.parametrize("url", ["localhost:9477", "127.0.0.1:9477", "ftp://127.0.0.1:9477",
                                 "http://", "http://[::1", "http://127.0.0.1:99999",
                                 "http://127.0.0.1:port"])
def test_a_url_without_http_says_what_a_url_is(url: str, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``WATCHDOG_URL=localhost:9477`` (no scheme: ``localhost`` reads as one) is named as
    given, with the form it takes, not as a sidecar that does not run."""
    monkeypatch.setenv("WATCHDOG_URL", url)
    assert main(["runs"]) == 2
    assert capsys.readouterr().err == (f"watchdog: WATCHDOG_URL {url!r} is not the control "
                                       f"API's URL: expected http://HOST:PORT, e.g. "
                                       f"http://127.0.0.1:9477\n")
    assert main(["report", "r1", "--url", url]) == 2
    assert capsys.readouterr().err.startswith(f"watchdog: --url {url!r} is not")


def test_token_from_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = sidecar_config(tmp_path / "state", api_token="s3cret")
    with running_server(config) as sidecar:
        export_http(sidecar, explorer_run("job:auth"), token="s3cret")
        monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
        assert main(["runs", "--url", sidecar.api]) == 1
        err = capsys.readouterr().err
        assert "(401 unauthorized)" in err and "WATCHDOG_API_TOKEN" in err
        monkeypatch.setenv("WATCHDOG_API_TOKEN", "s3cret")
        assert main(["runs", "--url", sidecar.api]) == 0
        assert "job:auth" in capsys.readouterr().out


def test_serve_still_validates_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--api-address", "0.0.0.0:9477", "--state-dir", ":memory:"]) == 2
    assert "api_token" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["serve", "--max-runs"], ["serve", "--max-rnus", "5"],
                                  ["serve", "extra"]])
def test_a_bad_serve_flag_is_its_error_under_a_short_usage(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's usage of `serve` listed its 40 flags: 36 lines above the error (a flag
    argparse does not know is the command's error, under its own short usage)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()
    assert usage in ("usage: watchdog serve [-h] [--config FILE] [--KEY VALUE ...]",
                     "usage: watchdog [-h] [--version] COMMAND ...")
    assert error.startswith("watchdog") and argv[1] in error, error


def test_a_watch_interval_past_a_year_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`runs --interval` past what time.sleep takes (an OverflowError, a traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--watch", "--interval", "99999999999999999999y"])
    assert exit_info.value.code == 2
    assert "(at most 1y)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "directives"])
def test_an_empty_run_id_is_a_usage_error(command: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:  # (it was read as the list's path: a 404)
        main([command, "", "--url", "http://127.0.0.1:9"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"watchdog {command}: error: argument RUN_ID: a run id must not be empty\n")


def test_bad_interval_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--watch", "--interval", "0"])
    assert exit_info.value.code == 2
    assert "positive number of seconds" in capsys.readouterr().err


def test_the_watch_interval_is_a_duration_too(fed: RunningServer,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api, "--watch", "--interval", "50ms", "--frames", "2"]) == 0
    assert "every 0.05s" in capsys.readouterr().out


def test_runs_table_formats_numbers() -> None:
    table = runs_table([{"id": "r", "agent": "a", "state": "ended", "iterations": 3,
                         "tool_calls": 20, "errors": 0, "total_tokens": 123_456,
                         "elapsed_seconds": 185.0, "idle_seconds": 0.0,
                         "terminal_state": "tool_limit_reached", "has_final_answer": True}],
                       wide=True)
    assert table.splitlines()[1].split() == ["r", "a", "-", "ended", "3", "20", "0", "123.5k",
                                             "-", "3m05s", "-", "tool_limit_reached",
                                             "(answered)", "-"]
    assert [runs_table([{"id": "r", "agent": "a", "state": "ended", "cost_usd": cost,
                         "unpriced_calls": unpriced}],
                       wide=True).splitlines()[1].split()[8]
            for cost, unpriced in ((0.0123456, 0), (12.345, 2), (0.0, 3), (0.0000027, 0),
                                   (0.00004, 1), (0.00005, 0))] == [
        "$0.0123", "$12.35+2?", "+3?", "<$0.0001", "<$0.0001+1?", "$0.0001"]


TRACE_RUN = "trace:" + "0af7651916cd43dd8448eb211c80319c"
LONG_RUNS = [{"id": TRACE_RUN, "agent": "customer-support-triage-agent", "state": "ended",
              "iterations": 31, "tool_calls": 120, "errors": 12, "total_tokens": 2_345_678,
              "elapsed_seconds": 3725.0, "idle_seconds": 0.0, "session": "ticket-4711",
              "terminal_state": "tool_limit_reached", "has_final_answer": True,
              "trace_id": "0af7651916cd43dd8448eb211c80319c"},
             {"id": "job:7", "agent": "explorer", "state": "active", "iterations": 2,
              "tool_calls": 4, "errors": 1, "total_tokens": 490, "elapsed_seconds": 7.0,
              "idle_seconds": 2.0, "terminal_state": None, "has_final_answer": False}]


def test_wide_characters_take_two_cells_and_the_columns_stay_aligned() -> None:
    """Run ids and agent names in CJK, with emoji or combining marks: every row's columns
    start at the same terminal cell, and a cut keeps the table within the terminal's width."""
    runs = [dict(LONG_RUNS[1], id=run_id, agent=agent) for run_id, agent in (
        ("job:7", "explorer"), ("ジョブ:8", "探索エージェント"), ("job:🚀9", "e\u0301xplorer"))]
    for width in (None, 60):
        table = runs_table(runs, width=width)
        rows = table.splitlines()[1:]
        assert len({column_starts(row) for row in rows}) == 1, table
        if width is not None:
            assert max(cells(row) for row in rows) <= width, table


def column_starts(line: str) -> tuple[int, ...]:
    """The terminal cells where the words of ``line`` after the first begin."""
    starts, at, before = [], 0, "x"
    for char in line:
        if before == " " and char != " ":
            starts.append(at)
        at += cells(char)
        before = char
    return tuple(starts)


def test_the_table_fits_80_columns_and_wide_cuts_nothing() -> None:
    table = runs_table(LONG_RUNS, width=80)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 80, table
    first = lines[1].split()
    assert first[0].startswith("trace:0") and first[0].endswith("80319c") and "…" in first[0]
    assert first[1] == "custome…"
    # the whole terminal state needs room: IDLE and ERR are dropped, nothing of it is cut
    assert lines[0].split() == ["ID", "AGENT", "STATE", "TOOLS", "ELAPSED", "TERMINAL"]
    assert first[2:] == ["ended", "120", "1h02m", "tool_limit_reached", "(answered)"]
    assert lines[2].split() == ["job:7", "explorer", "active", "4", "7.0s", "-"]
    wide = runs_table(LONG_RUNS, wide=True)
    assert wide.splitlines()[1].split() == [
        TRACE_RUN, "customer-support-triage-agent", "ticket-4711", "ended", "31", "120", "12",
        "2345.7k", "-", "1h02m", "-", "tool_limit_reached", "(answered)",
        "0af7651916cd43dd8448eb211c80319c"]
    assert runs_table(LONG_RUNS, width=200) == runs_table(LONG_RUNS, width=200).rstrip()
    assert "…" not in runs_table(LONG_RUNS, width=200)


def test_runs_json_and_wide(fed: RunningServer, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["runs", "--url", fed.api, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert {run["id"] for run in answer["runs"]} == {RUN_ID, "job:8"}
    assert answer == fed.get_json("/v1/runs?limit=100") | {"runs": answer["runs"]}
    monkeypatch.setenv("COLUMNS", "40")  # wide ignores the terminal's width
    assert main(["runs", "--url", fed.api, "--output", "wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "AGENT", "SESSION", "STATE", "ITER", "TOOLS", "ERR",
                                "TOKENS", "COST", "ELAPSED", "IDLE", "TERMINAL", "TRACE"]
    row = next(line.split() for line in lines if line.startswith(RUN_ID))
    assert row[3:8] == ["active", "2", "4", "1", "490"]
    assert main(["runs", "--url", fed.api, "-o", "json", "--watch"]) == 2
    assert "-o json prints one snapshot" in capsys.readouterr().err


DIRECTIVE_PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: cli
rules:
  - name: errors-seen
    when: run.errors >= 1
    action: notify
    message: "saw ${run.errors} error: check the
      file path"
  - name: many-tools
    when: run.tool_calls >= 4
    action: wind_down
    severity: warning
    message: "4 tool calls: wrap up"
"""


@contextmanager
def directive_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                      ) -> Iterator[RunningServer]:
    """A sidecar with the two rules of ``DIRECTIVE_PACK``, the explorer's run exported to it
    (the commands' address and token from their flags only)."""
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    pack = tmp_path / "cli.yaml"
    pack.write_text(DIRECTIVE_PACK)
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), default_rules=False,
                            rules_watch_interval=0.0)
    with running_server(config) as sidecar:
        export_http(sidecar, explorer_run(RUN_ID))
        yield sidecar


def test_directives_of_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    with directive_sidecar(tmp_path, monkeypatch) as sidecar:
        detail = wait_until(lambda: (d := run_detail(sidecar.api, RUN_ID))
                            and len(d["directives"]) == 2 and d, what="two directives")
        status, _ = http_request("POST", f"{sidecar.api}/v1/runs/{RUN_ID}/ack",
                                 json.dumps({"seq": 1}).encode())
        assert status == 200

        assert main(["directives", RUN_ID, "--url", sidecar.api, "-o", "json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["run_id"] == RUN_ID
        assert [(d["seq"], d["rule"], d["acked"]) for d in answer["directives"]] == [
            (1, "errors-seen", True), (2, "many-tools", False)]
        assert [d["id"] for d in answer["directives"]] == [d["id"] for d in detail["directives"]]

        assert main(["directives", RUN_ID, "--url", sidecar.api]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["SEQ", "CREATED", "ACTION", "RULE", "ACKED", "MESSAGE"]
        assert lines[1].split()[2:] == ["notify", "errors-seen", "yes", "saw", "1", "error:",
                                        "check", "the", "file", "path"]
        assert lines[2].split()[2:] == ["wind_down", "many-tools", "no", "4", "tool", "calls:",
                                        "wrap", "up"]

        assert main(["directives", RUN_ID, "--url", sidecar.api, "-o", "wide"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["SEQ", "ID", "CREATED", "ACTION", "RULE", "SEVERITY",
                                    "TERMINAL", "ESCALATION", "ACKED", "MESSAGE"]
        assert lines[2].split()[:9] == [
            "2", answer["directives"][1]["id"], answer["directives"][1]["created_at"],
            "wind_down", "many-tools", "warning", "-", "no", "no"]

        assert main(["directives", "job:none", "--url", sidecar.api]) == 1
        assert capsys.readouterr().err == 'watchdog: no run "job:none" (404 not_found)\n'


def test_directives_past_the_listing_limit_are_said_to_be_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run detail lists the newest directives (the latest is never hidden) and counts the
    older ones in ``directives_omitted``; the command says so in a line of its own."""
    from watchdog.shell.directives import outbox

    monkeypatch.setattr(outbox, "MAX_RUN_DIRECTIVES", 1)
    with directive_sidecar(tmp_path, monkeypatch) as sidecar:
        detail = wait_until(lambda: (d := run_detail(sidecar.api, RUN_ID))
                            and d["directives_omitted"] == 1 and d, what="two directives")
        assert [(d["seq"], d["rule"]) for d in detail["directives"]] == [(2, "many-tools")]

        assert main(["directives", RUN_ID, "--url", sidecar.api, "-o", "json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["directives_omitted"] == 1
        assert [d["seq"] for d in answer["directives"]] == [2]

        assert main(["directives", RUN_ID, "--url", sidecar.api]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "(1 older directives left out: the newest 1 are listed)"
        assert lines[1].split() == ["SEQ", "CREATED", "ACTION", "RULE", "ACKED", "MESSAGE"]
        assert lines[2].split()[2:4] == ["wind_down", "many-tools"] and len(lines) == 3


STATES = ["completed", "no_response", "error", "tool_limit_reached", "time_limit_reached",
          "idle_timeout", "loop_detected", "intervention_required", "aborted", "abandoned"]
EVERY_STATE = [{"id": f"trace:{index:032x}", "agent": "customer-support-triage-agent",
                "state": "ended", "tool_calls": 1234, "errors": 56, "elapsed_seconds": 86399.0,
                "terminal_state": state, "has_final_answer": index % 2 == 0}
               for index, state in enumerate(STATES)]


@pytest.mark.parametrize("width", [80, 72, 64, 56, 40, 20])
def test_the_terminal_state_is_never_cut(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every terminal state, the longest with "(answered)", whole at any width; other columns
    are cut or dropped to make room, and the table fits down to ID + STATE + TERMINAL."""
    monkeypatch.setenv("COLUMNS", str(width))
    lines = runs_table(EVERY_STATE).splitlines()
    for line, run in zip(lines[1:], EVERY_STATE, strict=True):
        terminal = run["terminal_state"] + (" (answered)" if run["has_final_answer"]
                                            and run["terminal_state"] != "completed" else "")
        assert line.endswith(terminal), (line, terminal)
        assert " ended " in line
    narrowest = 14 + 2 + 5 + 2 + len("intervention_required (answered)")  # ID, STATE, TERMINAL
    assert max(len(line) for line in lines) <= max(width, narrowest), "\n".join(lines)
    header = lines[0].split()
    assert header[0] == "ID" and "STATE" in header and header[-1] == "TERMINAL"
    if width >= 80:
        assert header == ["ID", "AGENT", "STATE", "TOOLS", "ELAPSED", "TERMINAL"]


def test_the_table_fits_the_terminal_through_the_command(
        fed: RunningServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    assert main(["runs", "--url", fed.api]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 50, lines
    assert lines[0].split() == ["ID", "AGENT", "STATE", "TOOLS", "ELAPSED", "TERMINAL"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["job:8"][-1] == "completed" and rows[RUN_ID][-1] == "-"


def watchdog_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "watchdog", *args]


@pytest.mark.parametrize("args", [["runs"], ["runs", "-o", "json"], ["runs", "-o", "wide"],
                                  ["directives", RUN_ID], ["report", RUN_ID],
                                  ["report", RUN_ID, "--json"], ["runs", "--help"]])
def test_output_into_a_closed_pipe_is_quiet(fed: RunningServer, args: list[str]) -> None:
    """Every command writing into a pipe whose reader has gone: no traceback, exit 141 (what
    the shell reports for a process that SIGPIPE ended, as `yes | head -1` does)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(watchdog_command(*args, *(["--url", fed.api]
                                                        if "--help" not in args else [])),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
                              check=False)
    finally:
        os.close(write)
    expected = (0, 141) if "--help" in args else (141,)  # argparse's help ignores the pipe
    assert done.stderr == "" and done.returncode in expected, (done.returncode, done.stderr)


def test_runs_piped_to_head(fed: RunningServer, tmp_path: Path) -> None:
    """`watchdog runs | head -1` through a real shell pipe: the first line, nothing on stderr,
    and a --watch that never ends by itself stops when head has its line."""
    for command, status in ((f"runs --url {fed.api}", ("0", "141")),
                            (f"runs --url {fed.api} --watch --interval 0.05", ("141",))):
        done = subprocess.run(
            ["bash", "-c", f"{shlex.join(watchdog_command())} {command} 2>err | head -1; "
                           f"echo \"${{PIPESTATUS[0]}}\"; cat err"],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
        first, code, *err = done.stdout.splitlines()
        assert first.startswith("ID ") or first.startswith("runs at "), done.stdout
        assert code in status and err == [], done.stdout


def test_serve_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    """Each serve flag's help ends with its real default (from Config), as a config file
    would spell it."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = Config()
    for f in fields(Config):
        if f.name == "webhooks":
            assert "--webhooks" not in text
            continue
        flag = "--" + f.name.replace("_", "-")
        start = text.index(f"{flag} ", text.index("options:"))
        after = text[start:]
        end = after.find(" --", len(flag)) % (len(after) + 1)  # the last flag: to the end
        value = getattr(defaults, f.name)
        shown = ("none" if value in (None, (), {}) else
                 str(value).lower() if isinstance(value, bool) else
                 f"{value:g}s" if isinstance(value, float) else str(value))
        assert f"(default: {shown})" in after[:end], (flag, after[:end])
    assert "(default: state)" in text and "(default: 127.0.0.1:9477)" in text
    assert "(default: 900s)" in text and "(default: 10000)" in text
    # the file as the usage line names it (argparse said `--config CONFIG` under `--config FILE`)
    assert "options: -h, --help show this help message and exit --config FILE YAML" in text


@pytest.mark.parametrize("url", ["http://admin:hunter2@127.0.0.1:9477",
                                 "http://admin:hunter2@localhost", "ftp://u:hunter2@h/"])
def test_a_url_with_credentials_is_refused_without_showing_them(
        url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib sends no credentials from a URL, and a password before a portless host read as
    a port (``admin:hunter2@localhost``) was quoted back in its error; the URL is refused,
    its password never shown."""
    monkeypatch.setenv("WATCHDOG_URL", url)
    assert main(["runs"]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err and ":***@" in err, err
    assert main(["report", "r1", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err and err.startswith("watchdog: --url "), err


# What an agent's spans may name, as a terminal would act on it: clear the screen and paint red
# (ESC), retitle the window (OSC ... BEL), draw over the line (CR) and add one (LF), an 8-bit
# CSI (U+009B), DEL, and a right-to-left override that shows a line in another order.
HOSTILE = "ag\x1b[2J\x1b[31mEVIL\x1b]0;pwned\x07\r\nfake line\x9b1m\x7f\u202eX"
QUOTING_PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: quoting
rules:
  - name: quotes-the-error
    when: run.errors >= 1
    action: notify
    message: "failed: ${run.last_error}"
"""


def terminal_commands(text: str) -> set[str]:
    """The characters of ``text`` a terminal acts on rather than shows (its newlines aside)."""
    return {c for c in text if c != "\n" and (
        ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u061c\u200e\u200f\u2028\u2029"
        or "\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069")}


def test_what_the_spans_name_is_printed_escaped_never_as_terminal_commands(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent chooses its name, session, tool names, arguments, results and errors; every
    command prints them with each control character escaped (``\\x1b``), so none clears the
    operator's screen, retitles the window or draws a fake line, and ``-o json`` still parses
    to what the spans said."""
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    pack = tmp_path / "quoting.yaml"
    pack.write_text(QUOTING_PACK)
    with running_server(sidecar_config(tmp_path / "state", rules=(str(pack),))) as sidecar:
        maker = SpanMaker()
        ids = {"watchdog.run.id": RUN_ID, "gen_ai.agent.name": HOSTILE,
               "watchdog.session.id": "s-" + HOSTILE.replace("\x1b", "").replace("\x07", "")
               .replace("\r", "").replace("\n", "").replace("\x9b", "").replace("\x7f", "")}
        t = time.time() - 10
        root = maker.open("invoke_agent x", {"gen_ai.operation.name": "invoke_agent", **ids},
                          start=t)
        maker.span("execute_tool x", tool_attrs("se\x1b[8march", '{"q": "\x1b[5mblink"}',
                                                "res\x1b]52;c;cm0gLXJmIH4=\x07ult", **ids),
                   parent=root, start=t + 1, end=t + 2)
        maker.span("execute_tool x", tool_attrs("read\r\nfake", "{}", **ids), parent=root,
                   start=t + 2, end=t + 3, error="no file\x1b[2J\rOK")
        export_http(sidecar, maker.take())
        wait_until(lambda: (d := run_detail(sidecar.api, RUN_ID)) and d["directives"],
                   what="the rule quoting the error")

        for argv in (["runs"], ["runs", "-o", "wide"], ["report", RUN_ID],
                     ["directives", RUN_ID], ["directives", RUN_ID, "-o", "wide"],
                     ["session", ids["watchdog.session.id"]]):
            assert main([*argv, "--url", sidecar.api]) == 0
            out = capsys.readouterr().out
            assert terminal_commands(out) == set(), (argv, out)
            assert "\\x1b" in out or "\\u202e" in out, (argv, out)
        assert main(["runs", "-o", "wide", "--url", sidecar.api]) == 0
        [row] = capsys.readouterr().out.splitlines()[1:]  # one run, on one line
        assert "ag\\x1b[2J\\x1b[31mEVIL\\x1b]0;pwned\\x07\\r\\nfake line\\x9b1m\\x7f\\u202eX" in row
        assert main(["report", RUN_ID, "--url", sidecar.api]) == 0
        report = capsys.readouterr().out.splitlines()
        agent_line = next(line for line in report if line.startswith("- **Agent:**"))
        assert "EVIL" in agent_line and "fake line" in agent_line  # its newline: no new line
        assert not any(line.startswith("fake") for line in report), "\n".join(report)

        for argv in (["runs", "-o", "json"], ["report", RUN_ID, "--json"],
                     ["directives", RUN_ID, "-o", "json"],
                     ["session", ids["watchdog.session.id"], "--json"]):
            assert main([*argv, "--url", sidecar.api]) == 0
            out = capsys.readouterr().out
            assert terminal_commands(out) == set(), (argv, out)
            json.loads(out)
        assert main(["runs", "-o", "json", "--url", sidecar.api]) == 0
        assert json.loads(capsys.readouterr().out)["runs"][0]["agent"] == HOSTILE
