"""Secret redaction and masking for strings that will be stored or shown.

Redaction runs before anything reaches the run state, the store, the API or a report, so a tool
result that echoes an API key never leaves the process unredacted. Masking turns an error
message into a signature that stays the same when only ids, numbers or paths change, which is
what "the same error again" means to a human.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"

# Theory of operation: one pass over the text.
#
# One compiled alternation of *anchor* words (every way a secret can start: "password", "auth",
# "://", "sk-", "eyj", ...) is searched over the lower-cased text; it is grouped by first
# character, so positions that start no anchor cost one table lookup, and a text with no anchor
# (most tool results) is done after that single search. At each anchor the few patterns that
# can start there are tried *anchored* (``match`` at that position) on the original text, and
# the scan continues after whatever was redacted. So a text containing "auth" costs one search
# plus one anchored attempt, not a dozen whole-text regex passes.
#
# Values may sit behind quotes escaped to any depth: a JSON string holding JSON
# (``"{\"password\": \"...\"}"``) is redacted like the plain form. A quoted value of a
# secret-looking key is redacted up to its closing quote (the same quote, escaped as deep), so
# a passphrase with spaces, a short password, a value with commas or ``\u00e4`` escapes, or a
# PEM key in a JSON key file goes whole; an unquoted one ends at a space, quote or separator.
# A secret found inside another (a PEM key after ``private_key=``) extends it: the scan tries
# every anchor, also those inside a value just redacted.

_Q = r"""(?:\\*["'])?"""  # an optional quote, backslash-escaped at any depth
_OPEN = r"""(\\*["'])?"""  # a value's opening quote, captured (group 2) to find its closing
_SEP = _Q + r"\s*[:=]\s*" + _Q
_KEYED_SEP = _Q + r"\s*[:=]\s*" + _OPEN
_VALUE = r"""[^\s"'\\,;&]"""
_SECRET_KEYS = (r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|secret|password|passwd|pwd|"
                r"access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret|"
                r"private[_-]?key|credentials?|signature")


_SECRET_NAME = re.compile(_SECRET_KEYS, re.IGNORECASE)


def secret_name(name: str) -> bool:
    """Whether ``name`` (a fact's key, a field's) names a secret: ``db_password``,
    ``client_secret``, ``AWS_SECRET_ACCESS_KEY``; its value is shown as ``[REDACTED]``."""
    return _SECRET_NAME.search(name) is not None


def _anchored(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# Each keeps a harmless prefix group (1) where there is one, so the text stays readable.
_URL_USERINFO = _anchored(r"(://[^\s:/@]+:)[^\s@/]+(?=@)")  # scheme://user:[REDACTED]@host
_AUTH_HEADER = _anchored(
    r"""((?:proxy-)?authorization""" + _SEP + r"(?:(?:bearer|basic|token|bot|digest)\s+)?)"
    r"""[^\s"'\\,;]{4,}""", re.IGNORECASE)
_COOKIE_HEADER = _anchored(r"((?:set-)?cookie\s*:\s*)[^\r\n]{4,}", re.IGNORECASE)
# key=value / "key": "value" for secret-looking keys, also inside longer names
# (AWS_SECRET_ACCESS_KEY, db_password, x-api-key): the anchor is where the key word starts.
_KEY_VALUE = _anchored(r"((?:" + _SECRET_KEYS + r")" + _KEYED_SEP + r")", re.IGNORECASE)
# {"name": "DB_PASSWORD", "value": "..."} (Kubernetes env, many config dumps)
_NAMED_VALUE = _anchored(
    r"((?:" + _SECRET_KEYS + r""")[\w.-]*\\*["']\s*,\s*\\*["']value""" + _KEYED_SEP + r")",
    re.IGNORECASE)
# a bare token=... (URL query, config) when the value is not just a number: token counts such
# as "token=4096" are not secrets
_BARE_TOKEN = _anchored(r"((?<![a-z])token" + _SEP + r")(?!\d+\b)" + _VALUE + "{8,}",
                        re.IGNORECASE)
# "Bearer xyz" outside an Authorization header. "bearer", "basic" and "token" are also plain
# English words, so the value must look like a credential (see _looks_like_credential).
_SCHEME_CREDENTIAL = _anchored(r"(\b(?:bearer|basic|token)\s+)([A-Za-z0-9\-._~+/]{8,}=*)",
                               re.IGNORECASE)
# well-known token shapes (case-sensitive)
_PROVIDER_KEY = _anchored(r"()\b(?:sk|pk|rk)-(?:[A-Za-z0-9_-]{2,}-)?[A-Za-z0-9_-]{16,}")
_AWS_KEY_ID = _anchored(r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_GITHUB_TOKEN = _anchored(r"()\bgh[pousr]_[A-Za-z0-9]{30,}\b")
_GITHUB_PAT = _anchored(r"()\bgithub_pat_[A-Za-z0-9_]{22,}")
_SLACK_TOKEN = _anchored(r"()\bxox[abprs]-[A-Za-z0-9-]{10,}\b")
_GOOGLE_KEY = _anchored(r"()\bAIza[0-9A-Za-z_-]{35}\b")
_JWT = _anchored(r"()\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_PRIVATE_KEY = _anchored(r"()-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?"
                         r"(?:-----END [A-Z ]*PRIVATE KEY-----|$)")

_KEYED = (_KEY_VALUE, _NAMED_VALUE)
# anchor word (lower case) -> the patterns that can start where it starts, tried in order
_AT_ANCHOR: dict[str, tuple[re.Pattern[str], ...]] = {
    "://": (_URL_USERINFO,),
    "auth": (_AUTH_HEADER, *_KEYED),
    "proxy-auth": (_AUTH_HEADER,),
    "cookie": (_COOKIE_HEADER,),
    "set-cookie": (_COOKIE_HEADER,),
    "api": _KEYED, "access": _KEYED, "secret": _KEYED, "pass": _KEYED, "pwd": _KEYED,
    "refresh": _KEYED, "client": _KEYED, "private": _KEYED, "credential": _KEYED,
    "signature": _KEYED,
    "token": (_BARE_TOKEN, _SCHEME_CREDENTIAL),
    "bearer": (_SCHEME_CREDENTIAL,), "basic": (_SCHEME_CREDENTIAL,),
    "sk-": (_PROVIDER_KEY,), "pk-": (_PROVIDER_KEY,), "rk-": (_PROVIDER_KEY,),
    "akia": (_AWS_KEY_ID,), "asia": (_AWS_KEY_ID,),
    "ghp_": (_GITHUB_TOKEN,), "gho_": (_GITHUB_TOKEN,), "ghu_": (_GITHUB_TOKEN,),
    "ghs_": (_GITHUB_TOKEN,), "ghr_": (_GITHUB_TOKEN,), "github_pat_": (_GITHUB_PAT,),
    "xox": (_SLACK_TOKEN,), "aiza": (_GOOGLE_KEY,), "eyj": (_JWT,),
    "-----begin": (_PRIVATE_KEY,),
}
_CREDENTIAL_MIN_PLAIN_LENGTH = 24  # a run of letters this long is no English word


def _any_substring(words: Iterable[str]) -> re.Pattern[str]:
    """A pattern that finds any of ``words``, with the words grouped by their first character
    (longest first, so "proxy-auth" wins over a shorter word at the same place).

    Grouped, ``re`` skips every position whose character starts no word and tries one branch
    where one does; a flat case-insensitive alternation is ~10x slower.
    """
    by_first: dict[str, list[str]] = {}
    for word in sorted(words, key=len, reverse=True):
        by_first.setdefault(word[0], []).append(re.escape(word[1:]))
    return re.compile("|".join(f"{re.escape(first)}(?:{'|'.join(rests)})"
                               for first, rests in by_first.items()))


_ANCHOR = _any_substring(_AT_ANCHOR)
# Every word a secret can start at, in lower case: a text whose lower case holds none of them is
# its own redaction (the compiled brief, native/otlp/src/briefs.rs, answers such texts alone).
ANCHORS = tuple(_AT_ANCHOR)


def _looks_like_credential(value: str) -> bool:
    """A digit, a capital after the first letter, base64 padding or sheer length: true of
    credentials, false of the words that follow "basic" or "token" in prose."""
    return (any(c.isdigit() for c in value) or any(c.isupper() for c in value[1:])
            or value.endswith("=") or len(value) >= _CREDENTIAL_MIN_PLAIN_LENGTH)


_KEYED_PATTERNS = frozenset(_KEYED)
_UNQUOTED_VALUE = re.compile(_VALUE + "{4,}")
MAX_QUOTED_SECRET_CHARS = 4096  # a quoted value looked through for its closing quote (a PEM
# key in a JSON key file is ~1,700); a longer one is redacted as an unquoted one is


_CLOSINGS: dict[str, re.Pattern[str]] = {}


def _closing(quote: str) -> re.Pattern[str]:
    """The closing quote of a value opened with ``quote`` (``"``, ``\\"``, ...): the same quote
    behind as many backslashes, after any escaped backslashes of the value (``"ab\\\\"`` ends
    at its last quote). Each level of escaping doubles a backslash and adds one to a quote's
    (0, 1, 3, 7 ...), so an escaped backslash of the value is ``2 * (depth + 1)`` of them."""
    pattern = _CLOSINGS.get(quote)
    if pattern is None:
        depth = len(quote) - 1  # the backslashes before the quote character
        escaped = rf"(?:\\{{{2 * (depth + 1)}}})*" if (depth + 1) & depth == 0 else ""
        pattern = re.compile(r"(?<!\\)" + escaped + re.escape(quote))
        if len(_CLOSINGS) < 64:  # (escapes deeper than that are not worth keeping)
            _CLOSINGS[quote] = pattern
    return pattern


def _keyed_value_end(text: str, match: re.Match[str]) -> tuple[int, bool] | None:
    """Where the value after a secret-looking key ends, and whether it was quoted; None when
    there is none to redact.

    Quoted: at its closing quote (not at a quote written twice, SQL's and CSV's escape of one
    inside a value); a line or text that ends first (a value cut short) ends it.
    Unquoted: at a space, a quote or a separator, and only if 4 characters long at least."""
    start = match.end()
    quote = match.group(2)
    if quote:
        limit = min(len(text), start + MAX_QUOTED_SECRET_CHARS)
        newline = text.find("\n", start, limit)
        stop = limit if newline < 0 else newline
        closing = _closing(quote).search(text, start, stop)
        if len(quote) == 1:  # a quote written twice is one inside the value (SQL, CSV): on
            while closing is not None and text.startswith(quote, closing.end(), stop):
                closing = _closing(quote).search(text, closing.end() + 1, stop)
        if closing is not None:  # (the value ends where its closing quote begins)
            end = closing.end() - len(quote)
            return (end, True) if end > start else None
        if stop < limit or limit == len(text):
            return (stop, True) if stop > start else None
    value = _UNQUOTED_VALUE.match(text, start)
    return None if value is None else (value.end(), False)


def _secret_at(text: str, position: int, anchor: str) -> tuple[int, int, bool] | None:
    """The secret that starts at ``position``: (end of the part kept, end of the secret,
    whether another secret starting inside it may go on past its end: an unquoted value, cut
    at a space, may be the first word of one, as ``-----BEGIN`` of a PEM key)."""
    for pattern in _AT_ANCHOR[anchor]:
        match = pattern.match(text, position)
        if match is None:
            continue
        if pattern in _KEYED_PATTERNS:
            value = _keyed_value_end(text, match)
            if value is not None:
                return match.end(), value[0], not value[1]
        elif pattern is not _SCHEME_CREDENTIAL or _looks_like_credential(match.group(2)):
            return match.end(1), match.end(), False
    return None


def redact(text: str) -> str:
    """Replace secrets in ``text`` with ``[REDACTED]``, in one pass (see above)."""
    lowered = text.lower()
    anchor = _ANCHOR.search(lowered)
    if anchor is None:
        return text  # the common case: one search
    start = anchor.start()
    if len(lowered) != len(text):  # a character whose lower case is longer (rare): ASCII only
        lowered = "".join(c.lower() if c.isascii() else c for c in text)
        start = 0
    parts: list[str] = []
    done = 0  # text[:done] is decided
    open_ended = False  # whether a secret found inside the last one may extend it
    for anchor in _ANCHOR.finditer(lowered, start):
        position = anchor.start()
        if position < done and not open_ended:
            continue  # inside what was just redacted
        secret = _secret_at(text, position, anchor.group())
        if secret is None:
            continue
        kept, end, extends = secret
        if position < done:  # a secret that starts inside the last one and goes on past it
            done = max(done, end)
            open_ended = extends
            continue
        parts.append(text[done:kept])
        parts.append(REDACTED)
        done = end
        open_ended = extends
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


# Briefs of the same text again and again are what a looping agent sends (the same result, the
# same error): they are redacted once. Keys are at most 4 x a brief's limit (~2 KB).
_redact_recent = functools.lru_cache(maxsize=1024)(redact)


def brief(text: str, limit: int) -> str:
    """Redacted ``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    if len(text) > limit * 4:
        text = text[: limit * 4]  # never run the regexes over megabytes
    text = _redact_recent(text)
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text


_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
     "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[~.]?/[\w.@+-]+)+/?|(?:[A-Za-z]:\\[\w.\\-]+)"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{12,}\b"), "<id>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


@functools.lru_cache(maxsize=1024)  # (a looping agent's errors repeat; briefs: <= 500 chars)
def mask(message: str) -> str:
    """``message`` with ids, paths and numbers replaced, for grouping identical errors."""
    for pattern, token in _MASKS:
        message = pattern.sub(token, message)
    return message
