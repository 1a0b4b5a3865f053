"""The upstream MCP server of the MCP demo: real data from this machine, no network.

``stdlib_index`` lists every module of the installed Python standard library with its
size, line count and the first line of its docstring: a few hundred KB, far more than an
MCP host wants in one tool result. ``python_info`` is a small result.

Run: python -m toolswap.mcp.demo_upstream
"""

from __future__ import annotations

import platform
import re
import sys
import sysconfig
from pathlib import Path

from mcp.server.mcpserver import MCPServer

__all__ = ["server", "stdlib_index"]

server: MCPServer = MCPServer("stdlib-index", version="1.0", log_level="WARNING")

# Comment and blank lines, then the opening quotes of the module docstring and its first line.
_DOCSTRING = re.compile(
    rb"\A(?:\s*#[^\n]*\n|\s*\n)*\s*[rRuU]?(\"\"\"|\'\'\')\s*(.*?)\s*(?:\n|\1)", re.S
)


def _summary(head: bytes) -> str:
    match = _DOCSTRING.match(head)
    if match is None:
        return "(no docstring)"
    return match.group(2).decode("utf-8", "replace").strip() or "(empty first line)"


def stdlib_index() -> str:
    """One line per module of the standard library: path, bytes, lines, docstring summary."""
    root = Path(sysconfig.get_paths()["stdlib"])
    rows = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("site-packages", "dist-packages"):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        lines = data.count(b"\n")
        rows.append(f"{rel}\t{len(data)} bytes\t{lines} lines\t{_summary(data[:4096])}")
    header = f"# Python {platform.python_version()} standard library at {root}: {len(rows)} modules"
    return header + "\n" + "\n".join(rows) + "\n"


@server.tool(name="stdlib_index", structured_output=False)
def stdlib_index_tool() -> str:
    """List every module of the installed Python standard library (path, size, lines,
    first docstring line)."""
    return stdlib_index()


@server.tool(structured_output=False)
def python_info() -> str:
    """Which Python runs this server."""
    return f"Python {platform.python_version()} ({sys.implementation.name}) on {platform.system()}"


if __name__ == "__main__":
    server.run("stdio")
