"""Secrets never leave ``normalise()`` unredacted; ordinary text does not change; ``mask()``
groups messages that differ only in ids, numbers and paths.

The secrets below are made-up values in the published shapes of each provider's credentials.
"""

from __future__ import annotations

import json

import pytest

from tests.spans import SpanMaker, record_of, tool_attrs
from watchdog.core.redact import REDACTED, brief, mask, redact
from watchdog.core.spans.values import MAX_BRIEF_CHARS

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
ANTHROPIC_KEY = "sk-ant-api03-" + "x9Y8z7W6v5U4t3S2r1Q0" * 3
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB_TOKEN = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GITHUB_PAT = "github_pat_11ABCDEFG0" + "abcdefghijKLMNOPQRST_uvwxyz0123456789"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
BEARER = "mF_9.B5f-4.1JqM"
BASIC = "dXNlcjpwYXNzd29yZA=="
DB_PASSWORD = "s3cr3t-Pa55"
PASSPHRASE = "correct horse battery staple"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
SLACK_TOKEN = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"

LEAKY_RESULTS = [
    (f"export OPENAI_API_KEY={OPENAI_KEY}", OPENAI_KEY),
    (f"client = OpenAI(api_key='{OPENAI_KEY}')", OPENAI_KEY),
    (f"found key {OPENAI_KEY} in .env", OPENAI_KEY),
    (f"ANTHROPIC_API_KEY: {ANTHROPIC_KEY}", ANTHROPIC_KEY),
    (f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com", BEARER),
    (f"headers={{'authorization': 'Basic {BASIC}'}}", BASIC),
    (f"sent Bearer {BEARER} upstream", BEARER),
    (f"postgresql://app:{DB_PASSWORD}@db.internal:5432/app", DB_PASSWORD),
    (f"redis://default:{DB_PASSWORD}@cache:6379/0", DB_PASSWORD),
    (f"config: password={DB_PASSWORD} user=app", DB_PASSWORD),
    (f"Password: {DB_PASSWORD}", DB_PASSWORD),
    (f'{{"db_password": "{DB_PASSWORD}", "host": "db"}}', DB_PASSWORD),
    (f"api_key={DB_PASSWORD}&q=paris", DB_PASSWORD),
    (f"https://maps.example.com/geo?q=oslo&token=Zm9vYmFy{DB_PASSWORD}", DB_PASSWORD),
    (f"[default]\naws_access_key_id = {AWS_KEY_ID}\n", AWS_KEY_ID),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    (f"git remote set-url origin https://{GITHUB_TOKEN}@github.com/o/r", GITHUB_TOKEN),
    (f"GITHUB_TOKEN={GITHUB_PAT}", GITHUB_PAT),
    (f"token {GITHUB_PAT} expires soon", GITHUB_PAT),
    (f"session cookie: {JWT}", JWT),
    (f"SLACK_BOT={SLACK_TOKEN}", SLACK_TOKEN),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1b2c3\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEA1b2c3"),
    # JSON inside a JSON string, escaped once and twice (issue 10)
    (json.dumps({"payload": json.dumps({"password": DB_PASSWORD})}), DB_PASSWORD),
    (json.dumps({"a": json.dumps({"b": json.dumps({"api_key": DB_PASSWORD})})}), DB_PASSWORD),
    (json.dumps(json.dumps({"Authorization": f"Bearer {BEARER}"})), BEARER),
    # name/value pairs (Kubernetes env, config dumps)
    (json.dumps([{"name": "DB_PASSWORD", "value": DB_PASSWORD}]), DB_PASSWORD),
    # URL query strings
    (f"GET /callback?code=abc&access_token={DB_PASSWORD}&state=x", DB_PASSWORD),
    (f"https://s3.example.com/o?X-Amz-Signature={DB_PASSWORD}ab12", DB_PASSWORD),
    # env-file lines
    (f"# .env\nMODE=prod\nexport STRIPE_SECRET_KEY={DB_PASSWORD}\nPORT=80", DB_PASSWORD),
    (f"APP_CLIENT_SECRET='{DB_PASSWORD}'", DB_PASSWORD),
    # HTTP headers
    (f"X-Api-Key: {DB_PASSWORD}\r\nAccept: */*", DB_PASSWORD),
    (f"X-Auth-Token: {DB_PASSWORD}", DB_PASSWORD),
    (f"Proxy-Authorization: Basic {BASIC}", BASIC),
    (f"Cookie: session={DB_PASSWORD}; theme=dark", DB_PASSWORD),
    (f"set-cookie: sid={DB_PASSWORD}; HttpOnly", DB_PASSWORD),
    # a quoted value goes whole, to its closing quote: spaces, commas, escapes, depth
    (json.dumps({"password": PASSPHRASE, "user": "alice"}), PASSPHRASE),
    (json.dumps({"settings": json.dumps({"db": {"password": PASSPHRASE}})}), PASSPHRASE),
    (f'export DB_PASSWORD="{PASSPHRASE}"', PASSPHRASE),
    (json.dumps({"api_key": "abc,defghijk"}), "abc,defghijk"),
    (json.dumps({"db_password": "pässwort-1234"}), "sswort-1234"),  # "p\u00e4sswort-1234"
    (json.dumps([{"name": "SMTP_PASSWORD", "value": PASSPHRASE}]), PASSPHRASE),
    # a PEM key as a key's value: a service account's JSON key file, an env line
    (json.dumps({"type": "service_account", "private_key": PEM, "client_email": "a@b.c"}),
     "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    (f"private_key = {PEM}", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
]


@pytest.fixture
def otel() -> SpanMaker:
    return SpanMaker()


@pytest.mark.parametrize(("result", "secret"), LEAKY_RESULTS)
def test_secrets_in_tool_results_are_redacted_by_normalise(otel: SpanMaker, result: str,
                                                            secret: str) -> None:
    record = record_of(otel.span("execute_tool shell", tool_attrs("shell", "{}", result)))
    assert record.result_brief is not None
    assert secret not in record.result_brief
    assert secret[4:12] not in record.result_brief  # not even a piece of it
    assert secret[-8:] not in record.result_brief  # (nor its end)
    assert REDACTED in record.result_brief


def test_redaction_keeps_the_readable_part(otel: SpanMaker) -> None:
    record = record_of(otel.span("execute_tool shell", tool_attrs(
        "shell", "{}", f"postgresql://app:{DB_PASSWORD}@db.internal:5432/app")))
    assert record.result_brief == f"postgresql://app:{REDACTED}@db.internal:5432/app"
    record = record_of(otel.span("execute_tool shell", tool_attrs(
        "shell", "{}", f"Authorization: Bearer {BEARER}")))
    assert record.result_brief == f"Authorization: Bearer {REDACTED}"


def test_secrets_in_arguments_errors_and_answers_are_redacted(otel: SpanMaker) -> None:
    call = record_of(otel.span("execute_tool http", tool_attrs(
        "http", json.dumps({"url": "https://x.test", "api_key": DB_PASSWORD}), "ok")))
    assert call.args_brief is not None and DB_PASSWORD not in call.args_brief
    assert "https://x.test" in call.args_brief

    failed = record_of(otel.span("execute_tool http", tool_attrs("http", "{}"),
                                 exception=PermissionError(f"key {OPENAI_KEY} is revoked")))
    assert failed.error_message == f"key {REDACTED} is revoked"

    answer = record_of(otel.span("invoke_agent a", {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": f"use {GITHUB_TOKEN}"}]}]),
    }))
    assert answer.final_output is not None and GITHUB_TOKEN not in answer.final_output


def test_a_secret_at_the_brief_limit_is_not_half_shown(otel: SpanMaker) -> None:
    result = "x" * (MAX_BRIEF_CHARS - 30) + f" {OPENAI_KEY} and more text after it"
    record = record_of(otel.span("execute_tool shell", tool_attrs("shell", "{}", result)))
    assert record.result_brief is not None
    assert len(record.result_brief) == MAX_BRIEF_CHARS
    assert record.result_brief.endswith("…")
    assert OPENAI_KEY[:12] not in record.result_brief


ORDINARY = [
    "Token validation failed for user alice",
    "The basic functionality works; basic tests pass.",
    "We read the token budget carefully",
    "max_tokens=4096, temperature=0.2, token=4096",
    "the bearer instrument is negotiable",
    "Tokenization produced 5 tokens",
    "The risk-assessment-framework-v2 was updated",
    "see https://docs.python.org/3/library/re.html#module-re",
    "wrote 3 files to /tmp/build/out",
    "Use basic auth with username alice",
    "secret_name=prod-db; the password was rotated yesterday",
    "ask-me-anything is a channel",
    "Key points: Paris has 2.1M people",
    '{"path": "/etc/hosts", "lines": 5}',
    "the authentication module and the authorization layer were both reloaded",
    "passing 5 tests; the api is stable; access granted to the private repo",
    '{"name": "PORT", "value": "8080"}',
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_untouched(otel: SpanMaker, text: str) -> None:
    assert redact(text) == text
    record = record_of(otel.span("execute_tool t", tool_attrs("t", "{}", text)))
    assert record.result_brief == text


def test_redaction_keeps_the_json_structure() -> None:
    nested = json.dumps({"payload": json.dumps({"password": DB_PASSWORD, "user": "alice"})})
    inner = json.loads(json.loads(redact(nested))["payload"])  # still valid JSON, twice
    assert inner == {"password": REDACTED, "user": "alice"}


def test_a_quoted_secret_goes_to_its_closing_quote_and_no_further() -> None:
    assert redact('{"password": "xyz", "user": "bob"}') == (
        '{"password": "[REDACTED]", "user": "bob"}')  # short, but quoted: a value all the same
    assert redact('{"password": "", "user": "bob"}') == '{"password": "", "user": "bob"}'
    nested = json.dumps({"cfg": json.dumps({"password": 'say "hi" now', "user": "bob"})})
    assert json.loads(json.loads(redact(nested))["cfg"]) == {"password": REDACTED,
                                                              "user": "bob"}
    # a value cut short (a brief's limit) is redacted to where it was cut
    assert redact('{"password": "correct horse batt') == '{"password": "[REDACTED]'


def test_a_quoted_secret_ending_in_an_escaped_backslash_ends_at_its_quote() -> None:
    # its closing quote follows an escaped backslash: the value ends there, at any depth
    # (it ran on to the next quote, the next key's, and took the JSON's structure with it)
    plain = json.dumps({"password": "ab\\", "user": "bob", "note": "hello world"})
    assert json.loads(redact(plain)) == {"password": REDACTED, "user": "bob",
                                         "note": "hello world"}
    nested = json.dumps({"cfg": json.dumps({"password": 'a"b\\"c\\', "user": "bob"})})
    assert json.loads(json.loads(redact(nested))["cfg"]) == {"password": REDACTED,
                                                              "user": "bob"}


def test_non_ascii_text_is_scanned_at_the_right_places() -> None:
    # "İ".lower() is two characters: the scan must not drift off the original positions
    text = f"İİİ password={DB_PASSWORD} ok"
    assert redact(text) == f"İİİ password={REDACTED} ok"


def test_brief_bounds_length() -> None:
    assert brief("short", 10) == "short"
    cut = brief("a" * 50, 10)
    assert cut == "a" * 9 + "…"


# ---------------------------------------------------------------------------------------------
# mask: what makes two error messages "the same error"


@pytest.mark.parametrize(("first", "second"), [
    ("file /tmp/a1 not found", "file /tmp/b2 not found"),
    ("No such file: /home/u/project/data_01.csv", "No such file: ./data/other.csv"),
    ("timeout after 30s", "timeout after 45.5s"),
    ("job 7f3e9a2b-1c4d-4e5f-8a9b-0c1d2e3f4a5b failed", "job 0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0 "
                                                        "failed"),
    ("object at 0x7f3e9a2b1c4d is closed", "object at 0x10ab is closed"),
    ("commit 3f2c9a1b7d4e8f60 not found", "commit a1b2c3d4e5f60718 not found"),
    ("HTTP 503 from upstream", "HTTP 502 from upstream"),
    (r"cannot open C:\Users\ann\a.txt now", r"cannot open C:\tmp\b.log now"),
])
def test_mask_groups_messages_differing_only_in_ids_numbers_paths(first: str, second: str
                                                                  ) -> None:
    assert mask(first) == mask(second)


@pytest.mark.parametrize(("first", "second"), [
    ("file /tmp/a1 not found", "disk /tmp/a1 full"),
    ("permission denied", "connection refused"),
    (r"cannot open C:\tmp\a.txt: missing", r"cannot open C:\tmp\a.txt: locked"),
    (r"C:\tmp\a.txt is missing", r"C:\tmp\a.txt is locked by another process"),
])
def test_mask_keeps_different_messages_apart(first: str, second: str) -> None:
    assert mask(first) != mask(second)


def test_mask_output_is_readable() -> None:
    assert mask("file /tmp/a1 not found after 3 tries") == "file <path> not found after <n> tries"


def test_a_doubled_quote_inside_a_quoted_secret_does_not_end_it() -> None:
    # SQL (and CSV, and shell-less env files) write a quote inside a quoted value twice: the
    # value goes on past it, to its closing quote
    assert redact("UPDATE users SET password='it''s my secret' WHERE id=7") == (
        f"UPDATE users SET password='{REDACTED}' WHERE id=7")
    assert redact("DB_PASSWORD='a''b''c d' next") == f"DB_PASSWORD='{REDACTED}' next"
    assert redact('{"sql": "SET password=\'x\'\'y z\' WHERE 1"}') == (
        f'{{"sql": "SET password=\'{REDACTED}\' WHERE 1"}}')
    assert redact("api_key='''quoted'' start' ok") == f"api_key='{REDACTED}' ok"
    # an empty value is still empty, and JSON's quotes are not doubled
    assert redact("password='' user='bob'") == "password='' user='bob'"
    assert redact('{"password": "", "user": "bob"}') == '{"password": "", "user": "bob"}'
