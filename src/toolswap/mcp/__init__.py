"""MCP integration (the ``toolswap[mcp]`` extra): a server with the artifact read/grep tools,
and a proxy that wraps any stdio MCP server so its large results become pointers.

Importing this package needs the official MCP SDK (``pip install 'toolswap[mcp]'``); the
rest of toolswap never imports it.
"""

from __future__ import annotations

from .proxy import McpProxy, run_proxy
from .server import create_server, run_server

__all__ = ["McpProxy", "create_server", "run_proxy", "run_server"]
