"""The compiled relay (native/relay): see watchdog/shell/model/native.py."""

from typing import Any

class Relay:
    port: int
    fd: int
    in_flight: int

    def __init__(self, host: str, port: int, max_body: int, max_concurrent: int,
                 connect_timeout: float, read_timeout: float, observe_limit: int,
                 threads: int = 2, answer_tools: list[str] = ...,
                 answer_tool_prefixes: list[str] = ...) -> None: ...
    def take(self) -> list[tuple[Any, ...]]: ...
    def respond(self, id: int, status: int, headers: list[tuple[str, str]],
                body: bytes) -> bool: ...
    def forward(self, id: int, method: str, url: str, headers: list[tuple[str, str]],
                body: bytes, observe: bool = False, notify: bool = True,
                direct: bool = False, api: str = "", keep: int = -1,
                watch: bool = False) -> bool: ...
    @staticmethod
    def trimmed(api: str, keep: int, chunks: list[bytes], stream: bool,
                answer_tools: list[str] = ..., answer_tool_prefixes: list[str] = ...
                ) -> tuple[bytes, bool] | None: ...
    def close(self) -> None: ...
