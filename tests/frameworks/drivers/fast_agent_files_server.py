"""The stdio MCP server fast-agent's driver (``endpoint_fast_agent``) gets its tool from: the
``mcp`` SDK's ``FastMCP`` with one tool, ``search``, run in the agent's working directory (each
execution appends its term to ``ran.log`` there: the tool's own count, whatever the agent
says). fast-agent starts it as its ``fastagent.config.yaml`` says (``mcp.servers.files``)."""

from __future__ import annotations

from pathlib import Path

from mcp.server.fastmcp import FastMCP

server = FastMCP("files")


@server.tool()
def search(q: str) -> str:
    """Search the files for a term.

    Args:
        q: the term to search for
    """
    log = Path("ran.log")
    with log.open("a") as out:
        out.write(q + "\n")
    count = len(log.read_text().splitlines())
    return f"search #{count}: no file matches {q!r}"


if __name__ == "__main__":
    server.run()  # stdio
