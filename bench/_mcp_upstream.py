"""The upstream MCP server bench_mcp.py measures against (not a benchmark itself)."""

from __future__ import annotations

import functools

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-upstream", version="1.0", log_level="WARNING")


@functools.cache
def _blob(size: int) -> str:
    line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+\n"
    return (line * (size // len(line) + 1))[:size]


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return `text` unchanged."""
    return text


@server.tool(structured_output=False)
def blob(size: int) -> str:
    """Return `size` bytes of text (built once per size, so calls measure transport)."""
    return _blob(size)


if __name__ == "__main__":
    server.run("stdio")
