"""The import rules of docs/architecture.md hold: the pure core imports neither the shell nor an
IO library, and the shell's layers import only downwards (import-linter, its contracts in
pyproject.toml)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def loggers_kept() -> Iterator[None]:
    """import-linter configures logging as a CLI does, disabling every logger that exists
    (the sidecar's among them): put them back for the tests that run after."""
    loggers = [logger for logger in logging.root.manager.loggerDict.values()
               if isinstance(logger, logging.Logger)]
    disabled = [logger.disabled for logger in loggers]
    yield
    for logger, was in zip(loggers, disabled, strict=True):
        logger.disabled = was


def test_the_import_rules_hold(capsys: pytest.CaptureFixture[str]) -> None:
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                        no_logo=True)
    assert code == 0, capsys.readouterr().out


def test_an_import_that_breaks_a_rule_is_named(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The same checker on a rule today's code breaks (the service drives the core): it fails
    and names the import."""
    config = tmp_path / "broken.toml"
    config.write_text('[tool.importlinter]\nroot_package = "watchdog"\n\n'
                      '[[tool.importlinter.contracts]]\nname = "upside down"\n'
                      'type = "forbidden"\nsource_modules = ["watchdog.service"]\n'
                      'forbidden_modules = ["watchdog.core"]\n')
    assert lint_imports(config_filename=str(config), no_cache=True, no_logo=True) == 1
    assert "watchdog.service -> watchdog.core" in capsys.readouterr().out
