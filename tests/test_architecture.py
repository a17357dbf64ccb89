"""The layout and import rules of docs/architecture.md hold: every module lives in the pure core
or the shell; the core imports neither the shell nor an IO library; each package's layers import
only downwards; only the core's step, rules and runs import the live run (import-linter, its
contracts in pyproject.toml)."""

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
                      'type = "forbidden"\nsource_modules = ["watchdog.shell.service"]\n'
                      'forbidden_modules = ["watchdog.core.step"]\n')
    assert lint_imports(config_filename=str(config), no_cache=True, no_logo=True) == 1
    assert "watchdog.shell.service -> watchdog.core.step" in capsys.readouterr().out


def test_every_module_lives_in_the_core_or_the_shell() -> None:
    top = sorted(path.name for path in (ROOT / "watchdog").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]
    packages = sorted(path.parent.relative_to(ROOT / "watchdog").as_posix()
                      for path in (ROOT / "watchdog").glob("*/__init__.py"))
    assert packages == ["core", "shell"]
    for path in (ROOT / "watchdog").rglob("*.py"):  # a folder without one is not installed
        assert (path.parent / "__init__.py").exists(), path
