"""The MCP part of ``toolswap demo``: a real MCP session through ``toolswap mcp proxy``.

The SDK's stdio client starts ``toolswap mcp proxy -- python -m toolswap.mcp.demo_upstream``,
calls a tool whose result (an index of this machine's Python standard library) is larger
than MCP hosts accept, receives a pointer instead, and pages the saved result with the
proxy's ``grep_artifact`` and ``read_artifact`` tools.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from ..pointer import human_size
from ..tools import TOOL_NAMES

__all__ = ["run_mcp_demo"]

SESSION = "mcp-demo"
WORKSPACE = "demo"


def _say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}")


def _text(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def _show(text: str, limit: int = 8, width: int = 150) -> None:
    lines = text.splitlines()
    for line in lines[:limit]:
        print("  " + line[:width])
    if len(lines) > limit:
        print(f"  ... ({len(lines) - limit} more lines)")


async def _session(home: Path) -> None:
    upstream = [sys.executable, "-m", "toolswap.mcp.demo_upstream"]
    proxy = [
        "-m",
        "toolswap",
        "mcp",
        "proxy",
        "--workspace",
        WORKSPACE,
        "--session",
        SESSION,
        "--",
        *upstream,
    ]
    params = StdioServerParameters(
        command=sys.executable, args=proxy, env={"TOOLSWAP_HOME": str(home)}
    )
    _say("MCP 1. A host connects to an MCP server through the toolswap proxy")
    print("$ toolswap mcp proxy --session mcp-demo -- python -m toolswap.mcp.demo_upstream")
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        upstream_tools = [t for t in tools if t not in TOOL_NAMES]
        print(f"upstream tools, unchanged: {', '.join(upstream_tools)}")
        print(f"added by toolswap:         {', '.join(t for t in tools if t in TOOL_NAMES)}")

        small = await session.call_tool("python_info", {})
        print(f"python_info() -> {_text(small)!r}  (small: passed through byte for byte)")

        _say("MCP 2. A tool returns more than an MCP host accepts")
        result = await session.call_tool("stdlib_index", {})
        pointer = _text(result)
        source_id = pointer.splitlines()[0].removeprefix("[Artifact: ").removesuffix("]")
        print(
            f"stdlib_index() -> the host receives a pointer of "
            f"{human_size(len(pointer.encode()))} instead of the whole index:"
        )
        _show(pointer, limit=9)
        listing = _text(await session.call_tool("list_artifacts", {}))
        saved = next((ln for ln in listing.splitlines() if ln.startswith(source_id)), "")
        if saved:
            print(f"saved whole: {saved.split(' | ')[2]}")

        _say("MCP 3. The model pages the saved result instead of calling the tool again")
        pattern = "^json/"
        found = await session.call_tool(
            "grep_artifact", {"source_id": source_id, "pattern": pattern, "max_matches": 5}
        )
        print(f'grep_artifact(source_id=..., pattern="{pattern}") ->')
        _show(_text(found), limit=7)
        first = next(
            (
                int(line.split(":", 1)[0])
                for line in _text(found).splitlines()[1:]
                if line.split(":", 1)[0].isdigit()
            ),
            1,
        )
        page = await session.call_tool(
            "read_artifact", {"source_id": source_id, "offset": max(first - 2, 0), "limit": 3}
        )
        print(f"read_artifact(source_id=..., offset={max(first - 2, 0)}, limit=3) ->")
        _show(_text(page), limit=5)
        bad = await session.call_tool(
            "read_artifact", {"source_id": source_id, "offset": 10_000_000}
        )
        print("a bad offset is a tool error the model can act on, not a crash:")
        _show(_text(bad), limit=2)


def run_mcp_demo(home: Path) -> None:
    """Print a short narrated MCP session; artifacts go under ``home`` (TOOLSWAP_HOME)."""
    anyio.run(_session, home)
