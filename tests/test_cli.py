"""The ``watchdog`` command in-process against a real sidecar: runs, report, errors, serve flags."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.harness import RunningServer, running_server, sidecar_config
from tests.otel import SECRET, explorer_run, export_http
from watchdog.cli import main, runs_table

RUN_ID = "job:7"


@pytest.fixture
def fed(sidecar: RunningServer, monkeypatch: pytest.MonkeyPatch) -> RunningServer:
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    export_http(sidecar, explorer_run(RUN_ID))
    export_http(sidecar, explorer_run("job:8", agent="writer", end=True))
    return sidecar


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_runs_table(fed: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", fed.api]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "AGENT", "STATE", "ITER", "TOOLS", "ERR", "TOKENS",
                                "ELAPSED", "IDLE", "TERMINAL"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[RUN_ID][1:7] == ["explorer", "active", "2", "4", "1", "490"]
    assert rows[RUN_ID][-1] == "-"
    assert rows["job:8"][1:3] == ["writer", "ended"] and rows["job:8"][-1] == "completed"
    assert rows["job:8"][-2] == "-"  # an ended run is not idle


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
    assert captured.err == "watchdog: no run 'nope/x' (404 not_found)\n"


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


def test_bad_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--url", "not a url"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


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


def test_bad_interval_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--watch", "--interval", "0"])
    assert exit_info.value.code == 2
    assert "positive number of seconds" in capsys.readouterr().err


def test_runs_table_formats_numbers() -> None:
    table = runs_table([{"id": "r", "agent": "a", "state": "ended", "iterations": 3,
                         "tool_calls": 20, "errors": 0, "total_tokens": 123_456,
                         "elapsed_seconds": 185.0, "idle_seconds": 0.0,
                         "terminal_state": "tool_limit_reached", "has_final_answer": True}])
    assert table.splitlines()[1].split() == ["r", "a", "ended", "3", "20", "0", "123.5k",
                                             "3m05s", "-", "tool_limit_reached", "(answered)"]
