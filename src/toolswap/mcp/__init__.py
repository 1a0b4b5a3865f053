"""MCP integration: ``toolswap mcp serve`` (the artifact read/grep tools over stdio) and
``toolswap mcp proxy`` (any stdio MCP server, its large results turned into pointers).

The server and the proxy run on plain JSON-RPC and do not import the MCP SDK (they need
``anyio``, which the ``toolswap[mcp]`` extra installs); :func:`create_server` builds the same
tools on the SDK's ``MCPServer`` and needs the SDK. Names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .proxy import McpProxy, run_proxy
    from .serve import run_server
    from .server import create_server

__all__ = ["McpProxy", "create_server", "run_proxy", "run_server"]

_LAZY = {
    "McpProxy": ".proxy",
    "run_proxy": ".proxy",
    "run_server": ".serve",
    "create_server": ".server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolswap.mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
