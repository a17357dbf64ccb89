"""The compiled brief (``native/otlp/src/briefs.rs``) answers as ``redact.brief``, its Python
reference: a text with nothing to redact is cut in Rust, every other one goes to Python.

Texts made to find where the two could part (every anchor a secret starts at, in any case, with
a secret after it or none, across the cut at four times the limit and across the limit, not
ASCII, a lone surrogate, a character whose lower case is longer) are briefed both ways; so is
every recorded span, by the compiled normalise's tests (``tests/test_native.py``), which read
each with this brief. A brief made with an anchor left out, or a cut moved, is told apart.
"""

from __future__ import annotations

import random

import pytest

from tests.test_native_signatures import compiled_fold
from watchdog.core import redact
from watchdog.core.spans import native

SECRETS = ["password=hunter2hunter2", "Authorization: Bearer abcdefghijklmnopqrstuvwx",
           "sk-" + "a1" * 20, "https://user:pa55word@host", "AKIAABCDEFGHIJKLMNOP",
           '{"api_key": "xyz-123-456"}', "ghp_" + "x" * 36, "eyJhbGciOi.eyJzdWIi.c2ln",
           "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
           "Cookie: a=b", "token: abcdefghijklmnopqrstuvwxyz0123"]


def texts(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    words = ["the", "result", "is", "42", "ok", "{", "}", '"', ":", ",", "\n", "\\", "Pass",
             "TOKEN", "api", "AuTh", "sk", "-", "k", "xox", "ghp", "eyj", "://", "cred",
             "ential", "é", "İ", "\udc80", "ß", "\u212a", "😀"]
    made: list[tuple[str, int]] = []
    for _ in range(3000):
        limit = rng.choice([1, 2, 5, 40, 500])
        parts = [rng.choice(words) for _ in range(rng.choice([0, 1, 3, 20, 200, 800]))]
        if rng.random() < 0.3:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(SECRETS))
        if rng.random() < 0.3:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(redact.ANCHORS).upper())
        text = " ".join(parts) if rng.random() < 0.5 else "".join(parts)
        made.append((text, limit))
    for anchor in redact.ANCHORS:  # an anchor across the cut and across the limit
        for limit in (5, 40):
            for at in range(4 * limit - len(anchor) - 1, 4 * limit + 2):
                made.append(("x" * at + anchor + " = abcdefgh12345678" + "y" * 10, limit))
            made.append(("y" * (limit - 2) + anchor, limit))
    return made


def briefs(anchors: tuple[str, ...] = redact.ANCHORS) -> object:
    compiled_fold()  # (the compiled module loaded, and said so where it is not built)
    assert native._native is not None
    return native._native.Briefs(list(anchors), redact.brief)


def differs(brief: object, seed: int = 3) -> str | None:
    for text, limit in texts(seed):
        ours, theirs = brief(text, limit), redact.brief(text, limit)  # type: ignore[operator]
        if ours != theirs:
            return f"{text[:60]!r} at {limit}: {ours[:60]!r} != {theirs[:60]!r}"
    return None


def test_the_compiled_brief_answers_as_redact_brief() -> None:
    assert differs(briefs()) is None
    assert differs(briefs(), seed=5) is None


def test_the_compiled_normalise_briefs_with_it() -> None:
    native.use_native(True)
    normaliser = native._normaliser(*native._kernels())
    assert type(normaliser).__module__.endswith("_native")
    assert type(native._native.Briefs).__name__ == "type"
    assert redact.brief("x" * 10, 4) == "xxx…" == briefs()("x" * 10, 4)  # type: ignore[operator]
    secret = "password=hunter2hunter2"
    assert briefs()(secret, 500) == redact.brief(secret, 500) == "password=[REDACTED]"  # type: ignore[operator]


# A secret of each anchor, with no other anchor in it. A secret at "proxy-auth", "set-cookie",
# "refresh" ("refresh_token"), "client" ("client_secret") or "-----begin" ("... PRIVATE KEY")
# holds another anchor ("auth", "cookie", "token", "secret", "private"): a brief blind to one of
# these still hands it to Python (an equivalent mutant).
WITNESSES = {
    "://": "x ://user:pa55word@host", "auth": "authorization: abcdefghijklmnopqrstuvwxyz",
    "cookie": "cookie: a=b", "api": "api_key=abcdefgh12345678",
    "access": "access_key=abcdefgh12345678", "secret": "secret_key=abcdefgh12345678",
    "pass": "password: abcdefghijkl", "pwd": "pwd=abcdefgh12345678",
    "private": "private_key=abcdefgh12345678", "credential": "credential=abcdefgh12345678",
    "signature": "signature=abcdefgh12345678", "token": "token=abcdefgh12345678",
    "bearer": "bearer: Bearer abcdefghijklmnopqrstuvwx",
    "basic": "basic abcdefghijklmnopqrstuvwxyz0123",
    **{prefix: prefix + "abcdefghijklmnopqrstuvwxyz0123456789"
       for prefix in ("sk-", "pk-", "rk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")},
    "xox": "xoxb-1234567890-abcdefghijkl", "akia": "AKIAABCDEFGHIJKLMNOP",
    "asia": "ASIAABCDEFGHIJKLMNOP", "aiza": "AIza" + "SyA" + "b" * 32,
    "eyj": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlMTIz",
}
EQUIVALENT = {"proxy-auth", "set-cookie", "refresh", "client", "-----begin"}


def test_every_anchor_has_a_witness_or_is_inside_another() -> None:
    assert set(WITNESSES) | EQUIVALENT == set(redact.ANCHORS)
    for anchor, text in WITNESSES.items():
        assert [word for word in redact.ANCHORS if word in text.lower()] == [anchor]
        assert redact.redact(text) != text, anchor


@pytest.mark.parametrize("anchor", sorted(WITNESSES))
def test_a_brief_blind_to_one_anchor_is_told_apart(anchor: str) -> None:
    blind = briefs(tuple(word for word in redact.ANCHORS if word != anchor))
    text = WITNESSES[anchor]
    assert blind(text, 500) == text != redact.brief(text, 500)  # type: ignore[operator]
    assert briefs()(text, 500) == redact.brief(text, 500)  # type: ignore[operator]


def fast_path(cut_at: int, limit_at: int) -> object:
    """briefs.rs's logic in Python, its cut at ``4 * limit + cut_at`` and its limit at
    ``limit + limit_at`` (0, 0: as it is)."""
    def brief(text: str, limit: int) -> str:
        if text.isascii():
            cut = text[:4 * limit + cut_at]
            if not any(word in cut.lower() for word in redact.ANCHORS):
                shown = limit + limit_at
                return cut[:shown - 1] + "…" if len(cut) > shown else cut
        return redact.brief(text, limit)
    return brief


def test_the_generated_texts_tell_a_limit_moved() -> None:
    # (the cut at four times the limit moved is no mutant anyone can see: what an anchor at the
    # cut could redact lies past the limit)
    assert differs(fast_path(0, 0)) is None
    for moved in ((0, 1), (0, -1), (1, 1)):
        assert differs(fast_path(*moved)) is not None, moved
