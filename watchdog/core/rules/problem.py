"""What is wrong with a rule file, and the spelling it may have meant: the messages of every
reader of rule files (:mod:`watchdog.core.rules.yamldoc` reads YAML) and of merging packs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.core.shown import readable_path


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a file; ``str()`` is the ``FILE:LINE: rule NAME: message`` line."""

    file: str
    line: int | None
    rule: str | None
    message: str

    def __str__(self) -> str:
        file = readable_path(self.file)
        where = file if self.line is None else f"{file}:{self.line}"
        if self.rule is not None:
            return f"{where}: rule {self.rule}: {self.message}"
        return f"{where}: {self.message}"


def suggest(word: object, choices: Iterable[str]) -> str:
    if not isinstance(word, str):
        return ""
    import difflib  # (only a misspelling needs it)

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
