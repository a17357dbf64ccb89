"""Logging: text or JSON lines on stderr, and the decision events operators search for.

Decisions are logged as events on the ``watchdog.decisions`` logger, each with a fixed set of
fields (DESIGN §2, docs/configuration.md "Logs"):

=================  ==============================================================
``rule_fired``     rule, action, severity, run, agent, terminal_state, escalation
``rule_withdrawn`` rule, run, agent (a ``repeat: each_time`` notify's note taken back)
``directive_sent`` id, run, seq, action, rule, channel (sse, longpoll, webhook), outcome
``directive_acked`` run, seq (what the agent acked), acked_seq (the run's acked seq now)
``run_ended``      run, agent, terminal_state, reason, has_final_answer
``run_resumed``    run, was, reason (an ended run its agent's next request takes back)
``run_merged``     run, into (a run opened by spans that belong to another)
``rule_error``     rule, errors, run, error (a warning; see :class:`RuleErrorLog`)
=================  ==============================================================

With ``log_format: json`` every line is one JSON object: ``time``, ``level``, ``logger``,
``message`` and, for events, ``event`` plus its fields — what Loki/Elasticsearch index without
a parser. Run ids appear here (logs are per event) and never as metric labels. Nothing here
logs a secret: no tokens, no webhook URLs (hooks are named), no directive message bodies.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from watchdog.core.directives.model import Directive

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DECISIONS = "watchdog.decisions"
FIELDS_ATTR = "watchdog_fields"  # where an event's fields travel on the LogRecord
EVENT_ATTR = "watchdog_event"

_decisions = logging.getLogger(DECISIONS)


RULE_ERROR_LOG_INTERVAL = 60.0  # seconds between two rule_error lines of one rule
MAX_RULE_ERROR_LOGS = 1024  # rules whose last rule_error line is remembered (then start over)


def event(name: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log decision event ``name`` with ``fields`` (text: ``name k=v ...``; JSON: fields)."""
    if not _decisions.isEnabledFor(level):
        return
    text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
    _decisions.log(level, "%s %s", name, text, extra={EVENT_ATTR: name, FIELDS_ATTR: fields})


class RuleErrorLog:
    """``rule_error`` warnings: a rule whose condition or message fails to evaluate (it counts as
    not matching) is logged at its first error with what failed and on which run, then at most
    once each :data:`RULE_ERROR_LOG_INTERVAL` with the errors since (every one is counted in
    ``rule_errors_total``)."""

    def __init__(self) -> None:
        self._rules: dict[str, tuple[float, int]] = {}  # rule -> (last logged at, errors since)

    def failed(self, rule: str, errors: int, run: str, error: str, now: float) -> None:
        logged, since = self._rules.get(rule, (float("-inf"), 0))
        since += errors
        if now - logged < RULE_ERROR_LOG_INTERVAL:
            self._rules[rule] = (logged, since)
            return
        if rule not in self._rules and len(self._rules) >= MAX_RULE_ERROR_LOGS:
            self._rules.clear()
        self._rules[rule] = (now, 0)
        event("rule_error", level=logging.WARNING, rule=rule, errors=since, run=run, error=error)


def directive_sent(directive: Directive, channel: str, outcome: str = "sent",
                   **fields: Any) -> None:
    event("directive_sent", id=directive.id, run=directive.run_id, seq=directive.seq,
          action=directive.action, rule=directive.rule, channel=channel, outcome=outcome,
          **fields)


# A value with one of these is quoted as JSON writes a string: a space, a quote or an = would
# read as the next field; a control character (a span names what it likes) would be a line of
# its own (CR, LF), or a terminal's command where the log is tailed (ESC, C1). DEL too, which
# json.dumps leaves as it is.
_QUOTED = re.compile('[ "=\x00-\x1f\x7f-\x9f\u2028\u2029]')


def _text(value: object) -> str:
    text = "-" if value is None else str(value)
    if text and _QUOTED.search(text) is None:
        return text
    return json.dumps(text).replace("\x7f", "\\u007f")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; an exception's traceback is a field, not more lines."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        name = getattr(record, EVENT_ATTR, None)
        if name is not None:
            line["event"] = name
            line.update(getattr(record, FIELDS_ATTR, {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def setup(level: str, log_format: str) -> None:
    """Configure the root logger: ``level`` (debug..error) and ``log_format`` (text | json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("aiohttp.server").addFilter(_bad_http)


def _bad_http(record: logging.LogRecord) -> bool:
    """A request the HTTP parser refused (a request line or header past its limit, bytes that
    are no HTTP) is the client's error, answered 400: one warning line naming it, not an
    error with the parser's traceback, nor the bytes it quotes (a header may hold a key)."""
    from watchdog.shell.connections import parser_refusal  # (aiohttp: imported once it logs)

    error = record.exc_info[1] if record.exc_info else None
    if error is not None and type(error).__module__.startswith("aiohttp") \
            and getattr(error, "code", None) == 400:
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = "bad HTTP request from %s: %s", (
            record.args[0] if isinstance(record.args, tuple) and record.args else "?",
            parser_refusal(error))
        record.exc_info = record.exc_text = None
    return True
