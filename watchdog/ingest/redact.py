"""Secret redaction and masking for strings that will be stored or shown.

Redaction runs before anything reaches the run state, the store, the API or a report, so a tool
result that echoes an API key never leaves the process unredacted. Masking turns an error
message into a signature that stays the same when only ids, numbers or paths change, which is
what "the same error again" means to a human.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# Each pattern keeps a harmless prefix group (1) where there is one, so the text stays readable.
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # scheme://user:password@host  ->  scheme://user:[REDACTED]@host
    re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"),
    # Authorization: Bearer xxx / Basic xxx
    re.compile(r"(\b(?:[Bb]earer|[Bb]asic|[Tt]oken)\s+)[A-Za-z0-9\-._~+/]{8,}=*"),
    # key=value / "key": "value" for secret-looking keys
    re.compile(
        r"""((?:api[_-]?key|apikey|secret|password|passwd|pwd|access[_-]?token|auth[_-]?token|"""
        r"""refresh[_-]?token|client[_-]?secret|private[_-]?key)["']?\s*[:=]\s*["']?)"""
        r"""[^\s"',;&]{4,}""",
        re.IGNORECASE,
    ),
    # well-known token shapes
    re.compile(r"()\b(?:sk|pk|rk)-(?:[A-Za-z0-9_-]{2,}-)?[A-Za-z0-9_-]{16,}"),  # OpenAI/Anthropic-like
    re.compile(r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"()\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"()\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),  # Slack tokens
    re.compile(r"()\bAIza[0-9A-Za-z_-]{35}\b"),  # Google API key
    re.compile(r"()\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"()-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
)

# Cheap pre-check: most strings contain none of these, and then no regex runs at all.
_TRIGGERS = ("://", "earer", "asic", "oken", "key", "KEY", "Key", "secret", "SECRET", "pass",
             "PASS", "pwd", "sk-", "pk-", "rk-", "AKIA", "ASIA", "gh", "xox", "AIza", "eyJ",
             "-----BEGIN")


def redact(text: str) -> str:
    """Replace secrets in ``text`` with ``[REDACTED]``."""
    if not any(t in text for t in _TRIGGERS):
        return text
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def brief(text: str, limit: int) -> str:
    """Redacted ``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    if len(text) > limit * 4:
        text = text[: limit * 4]  # never run the regexes over megabytes
    text = redact(text)
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text


_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
     "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[~.]?/[\w.@+-]+)+/?|(?:[A-Za-z]:\\[\w.\\ -]+)"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{12,}\b"), "<id>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


def mask(message: str) -> str:
    """``message`` with ids, paths and numbers replaced, for grouping identical errors."""
    for pattern, token in _MASKS:
        message = pattern.sub(token, message)
    return message
