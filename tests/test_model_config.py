"""The model endpoint's configuration keys (DESIGN §12): defaults, env, and validation messages
that name the key, the value and what is allowed — the same rules as every key."""

from __future__ import annotations

import pytest

from watchdog.shell.config import (
    DEFAULT_MODEL_UPSTREAM,
    DEFAULT_MODEL_UPSTREAM_ANTHROPIC,
    Config,
    load,
)
from watchdog.shell.errors import ConfigError


def test_off_by_default_with_named_defaults() -> None:
    config = load(env={})
    assert config.model_address is None
    assert config.model_upstream == DEFAULT_MODEL_UPSTREAM == "https://api.openai.com/v1"
    assert config.model_upstream_anthropic == DEFAULT_MODEL_UPSTREAM_ANTHROPIC
    assert config.model_abort == "answer" and config.model_agent_name is None


def test_from_the_environment() -> None:
    config = load(env={"WATCHDOG_MODEL_ADDRESS": "127.0.0.1:9478",
                       "WATCHDOG_MODEL_UPSTREAM": "http://llm.internal:8000/v1",
                       "WATCHDOG_MODEL_AGENT_NAME": "checkout-agent",
                       "WATCHDOG_MODEL_ABORT": "error",
                       "WATCHDOG_MODEL_UPSTREAM_TIMEOUT": "2m",
                       "WATCHDOG_MODEL_MAX_CONCURRENT": "8",
                       "WATCHDOG_MODEL_MAX_INFLIGHT_BYTES": "33554432",
                       "WATCHDOG_MODEL_BODY_MIN_RATE": "1024",
                       "WATCHDOG_MODEL_BODY_RATE_WINDOW": "500ms",
                       "WATCHDOG_MODEL_MAX_HELD_RESPONSE_BYTES": "16777216"})
    assert (config.model_address, config.model_upstream, config.model_agent_name,
            config.model_abort, config.model_upstream_timeout, config.model_max_concurrent,
            config.model_max_inflight_bytes, config.model_body_min_rate,
            config.model_body_rate_window, config.model_max_held_response_bytes) == (
        "127.0.0.1:9478", "http://llm.internal:8000/v1", "checkout-agent", "error", 120.0, 8,
        32 << 20, 1024, 0.5, 16 << 20)
    default = load(env={})
    assert (default.model_max_inflight_bytes, default.model_body_min_rate,
            default.model_body_rate_window, default.model_max_held_response_bytes) == (
        64 << 20, 16 << 10, 5.0, 64 << 20)


@pytest.mark.parametrize(("env", "words"), [
    ({"WATCHDOG_MODEL_ADDRESS": "9478"}, ["model_address='9478'", "host:port"]),
    ({"WATCHDOG_MODEL_UPSTREAM": "ftp://x/v1"}, ["model_upstream='ftp://x/v1'", "https://"]),
    ({"WATCHDOG_MODEL_UPSTREAM_ANTHROPIC": "https://u:pw@x"},
     ["model_upstream_anthropic='https://u:***@x'", "user:password@"]),
    ({"WATCHDOG_MODEL_UPSTREAM": "http://x/v1?key=1"}, ["?query"]),
    ({"WATCHDOG_MODEL_UPSTREAM_ANTHROPIC": "https://api.example/v1/"},
     ["model_upstream_anthropic='https://api.example/v1/'", "without /v1"]),
    ({"WATCHDOG_MODEL_UPSTREAM": "http://x:99999/v1"}, ["model_upstream="]),
    ({"WATCHDOG_MODEL_ABORT": "crash"}, ["model_abort='crash'", "answer, error"]),
    ({"WATCHDOG_MODEL_RELAY": "rust"}, ["model_relay='rust'", "native, python"]),
    ({"WATCHDOG_MODEL_MAX_BODY_BYTES": "0"}, ["model_max_body_bytes='0'", "from 1 to"]),
    ({"WATCHDOG_MODEL_MAX_CONCURRENT": "many"}, ["model_max_concurrent='many'", "integer"]),
    ({"WATCHDOG_MODEL_MAX_INFLIGHT_BYTES": "0"}, ["model_max_inflight_bytes='0'", "from 1 to"]),
    ({"WATCHDOG_MODEL_UPSTREAM_TIMEOUT": "0"}, ["model_upstream_timeout='0'", "positive"]),
    ({"WATCHDOG_MODEL_BODY_MIN_RATE": "0"}, ["model_body_min_rate='0'", "from 1 to"]),
    ({"WATCHDOG_MODEL_BODY_RATE_WINDOW": "11m"}, ["model_body_rate_window='11m'", "10m"]),
    ({"WATCHDOG_MODEL_MAX_HELD_RESPONSE_BYTES": "-1"},
     ["model_max_held_response_bytes='-1'", "from 1 to"]),
    ({"WATCHDOG_MODEL_AGENT_NAME": "a\x01b"}, ["model_agent_name", "printable"]),
    ({"WATCHDOG_MODEL_ADDRESS": "0.0.0.0:9478"}, ["model_address='0.0.0.0:9478'",
                                                  "api_token"]),
])
def test_bad_values_are_refused_with_the_key(env: dict[str, str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as failure:
        load(env=env)
    for word in words:
        assert word in str(failure.value), str(failure.value)
    assert "pw" not in str(failure.value)


def test_a_non_loopback_endpoint_with_a_token() -> None:
    config = Config(model_address="0.0.0.0:9478", api_token="x" * 16).validate()
    assert config.model_address == "0.0.0.0:9478"
    with pytest.raises(ConfigError, match="api_token is 5 characters"):
        Config(model_address="0.0.0.0:9478", api_token="short").validate()
