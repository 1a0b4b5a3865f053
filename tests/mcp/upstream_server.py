"""A real MCP server, run as a subprocess by the MCP tests and the MCP benchmark.

Its tools cover what the proxy must handle: a large text result, a large structured
result, a large image, a tool that fails (with a small or a large message), a slow tool
that reports progress and waits to be cancelled, a tool that kills the process, and a
small echo that must pass through byte for byte. It also serves one resource, to show
that methods other than tools pass through untouched.

It also has the shapes third-party servers send: text wrapped again in
``structuredContent`` (server-filesystem, server-memory), media repeated there
(``read_media_file``), task-augmented calls whose result arrives through ``tasks/result``
(2025-11-25 tasks, served by a middleware since the SDK types tasks but does not run
them), a large resource, and a tool that reports the environment it was started with.

Usage: python upstream_server.py
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel
from upstream_data import big_lines, inventory, png


class Tasks:
    """2025-11-25 tasks: a ``tools/call`` with ``task`` runs at once and answers with a
    task; ``tasks/get`` and ``tasks/result`` return its state and its result."""

    def __init__(self) -> None:
        self.results: dict[str, HandlerResult] = {}

    def _task(self, task_id: str) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat()
        return {
            "taskId": task_id,
            "status": "completed",
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttl": 60000,
        }

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        if ctx.method == "tools/call" and params.get("task") is not None:
            inner = {k: v for k, v in params.items() if k != "task"}
            task_id = f"task-{len(self.results) + 1}"
            self.results[task_id] = await call_next(replace(ctx, params=inner))
            return {"task": self._task(task_id)}
        if ctx.method == "tasks/get":
            return self._task(params["taskId"])
        if ctx.method == "tasks/result":
            result = self.results[params["taskId"]]
            data = (
                result.model_dump(by_alias=True, mode="json", exclude_none=True)
                if isinstance(result, BaseModel)
                else dict(result or {})
            )
            data["_meta"] = {"io.modelcontextprotocol/related-task": {"taskId": params["taskId"]}}
            return data
        return await call_next(ctx)


server = MCPServer(
    "toolswap-test-upstream", version="1.0", log_level="WARNING", middleware=[Tasks()]
)

# Set by `slow` when its call is cancelled; `was_cancelled` waits for it.
_cancelled = anyio.Event()


class Record(BaseModel):
    id: int
    name: str
    status: str


class Inventory(BaseModel):
    count: int
    records: list[Record]


@server.tool(structured_output=False)
def big_text(lines: int = 20000) -> str:
    """Return `lines` numbered lines of text (about 40 bytes each)."""
    return big_lines(lines)


@server.tool()
def big_structured(count: int = 3000) -> Inventory:
    """Return an inventory of `count` records as structured content."""
    return Inventory.model_validate(inventory(count))


@server.tool()
def loose_inventory(count: int = 3000) -> dict[str, Any]:
    """An inventory whose output schema is any object (a reference object conforms)."""
    return inventory(count)


@server.tool()
def image(width: int = 256, height: int = 256) -> Image:
    """Return a PNG image of the given size."""
    return Image(data=png(width, height), format="png")


@server.tool()
def mixed(size: int = 100_000) -> CallToolResult:
    """A short note, a large embedded archive and a large embedded text resource."""
    archive = bytes(range(256)) * (size // 256)
    return CallToolResult(
        content=[
            TextContent(text="two attachments follow"),
            EmbeddedResource(
                resource=BlobResourceContents(
                    uri="file:///tmp/logs.zip",
                    mime_type="application/zip",
                    blob=base64.b64encode(archive).decode(),
                )
            ),
            EmbeddedResource(
                resource=TextResourceContents(
                    uri="file:///tmp/report.txt", mime_type="text/plain", text=big_lines(3000)
                )
            ),
        ]
    )


@server.tool(structured_output=False)
def fail(lines: int = 0) -> str:
    """Always fail; with `lines` > 0 the error message is that many lines long."""
    detail = big_lines(lines) if lines else "the widget is broken"
    raise ToolError(f"tool failed: {detail}")


@server.tool(structured_output=False)
async def slow(ctx: Context) -> str:
    """Report progress, then wait (practically forever) until the call is cancelled."""
    await ctx.report_progress(1, 100, "started")
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        _cancelled.set()
        raise
    return "finished"


@server.tool(structured_output=False)
async def was_cancelled() -> str:
    """Wait until a `slow` call has been cancelled (at most 30 s), then say so."""
    with anyio.fail_after(30):
        await _cancelled.wait()
    return "cancelled"


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return `text` unchanged."""
    return text


@server.tool(structured_output=False)
def blob(size: int) -> str:
    """Return `size` bytes of text (for the benchmark)."""
    line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+\n"
    return (line * (size // len(line) + 1))[:size]


@server.tool(structured_output=False)
def die(code: int = 3) -> str:
    """Exit the server process at once, without answering."""
    os._exit(code)


@server.tool()
def wrapped_text(lines: int = 20000) -> CallToolResult:
    """Text, repeated as ``structuredContent.content`` (server-filesystem's read_text_file)."""
    text = big_lines(lines)
    return CallToolResult(content=[TextContent(text=text)], structured_content={"content": text})


@server.tool()
def entities(count: int = 3000) -> CallToolResult:
    """Records as indented JSON text, and as ``structuredContent.entities`` (server-memory)."""
    records = inventory(count)["records"]
    return CallToolResult(
        content=[TextContent(text=json.dumps(records, indent=2))],
        structured_content={"entities": records},
    )


@server.tool()
def media(width: int = 256, height: int = 256) -> CallToolResult:
    """An image, repeated in ``structuredContent`` (server-filesystem's read_media_file)."""
    data = base64.b64encode(png(width, height)).decode()
    block = {"type": "image", "data": data, "mimeType": "image/png"}
    return CallToolResult(
        content=[ImageContent(data=data, mime_type="image/png")],
        structured_content={"content": [block]},
    )


@server.tool()
def two_parts(lines: int = 5000, count: int = 3000) -> CallToolResult:
    """Large text and large structured content that do not repeat each other."""
    return CallToolResult(
        content=[TextContent(text=big_lines(lines))], structured_content=inventory(count)
    )


@server.tool(structured_output=False)
def environment() -> str:
    """The environment this process was started with, as JSON."""
    with open("/proc/self/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return json.dumps({os.fsdecode(k): os.fsdecode(v) for k, v in pairs})


@server.resource("test://big", mime_type="text/plain")
def big_resource() -> str:
    """A large text resource."""
    return big_lines(8000)


@server.resource("test://greeting", mime_type="text/plain")
def greeting() -> str:
    """A small resource."""
    return "hello from upstream"


if __name__ == "__main__":
    server.run("stdio")
