"""The proxy and third-party result shapes, over real stdio subprocesses:

one result gives one artifact and one pointer within the budget; base64 never reaches
the context; task results (``tasks/result``) and large resource reads are externalized;
the upstream gets exactly the host's environment.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp.types import CallToolResult, TextContent
from mcp_helpers import HANG_GUARD, UPSTREAM, child_env, connect, make_errlog, proxy_argv, raw_peer
from upstream_data import big_lines, inventory, png

from toolswap import ToolResultExternalizer

pytestmark = pytest.mark.anyio

POINTER_MAX = 32 * 1024
"""The pointer budget (head 6 KB + tail 24 KB + the lines around them)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[IO[str]]:
    with make_errlog(tmp_path) as f:
        yield f


@pytest.fixture
def ext(toolswap_home: Path) -> ToolResultExternalizer:
    """The proxy's session, opened after the calls to read what it saved."""
    return ToolResultExternalizer(toolswap_home / "projects" / "ws" / "s1")


def _text(result: CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def _source_id(pointer: str) -> str:
    for line in pointer.splitlines():
        if line.startswith("[Artifact: artifact:"):
            return line.removeprefix("[Artifact: ").removesuffix("]")
    raise AssertionError(pointer[:300])


def _size(result: CallToolResult) -> int:
    """What reaches the context: the text blocks and the structured content, in bytes."""
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    structured = json.dumps(result.structured_content) if result.structured_content else ""
    return sum(len(t.encode()) for t in texts) + len(structured.encode())


async def test_text_wrapped_in_structured_content_is_one_artifact_and_one_pointer(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            await session.list_tools()  # (as a host does; see the unlisted test)
            result = await session.call_tool("wrapped_text", {"lines": 20000})

    source_id = _source_id(_text(result))
    assert result.structured_content == {
        "content": {"toolswap": result.structured_content["content"]["toolswap"]}  # type: ignore[index]
    }
    reference = result.structured_content["content"]["toolswap"]  # type: ignore[index]
    assert reference["source_id"] == source_id
    assert _size(result) <= POINTER_MAX + 2048
    assert [a.source_id for a in ext.list_artifacts()] == [source_id]
    assert ext.get_artifact(source_id).path.read_bytes() == big_lines(20000).encode()


async def test_json_text_repeated_as_a_structured_subtree_is_saved_once_and_pages_by_lines(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    records = inventory(3000)["records"]
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            await session.list_tools()  # (as a host does; see the unlisted test)
            result = await session.call_tool("entities", {"count": 3000})
            source_id = _source_id(_text(result))
            found = await session.call_tool(
                "grep_artifact", {"source_id": source_id, "pattern": '"lost"'}
            )

    assert set(result.structured_content or {}) == {"entities"}
    assert result.structured_content["entities"]["toolswap"]["source_id"] == source_id  # type: ignore[index]
    assert _size(result) <= POINTER_MAX + 2048
    assert [a.source_id for a in ext.list_artifacts()] == [source_id]
    saved = ext.get_artifact(source_id)
    assert json.loads(saved.path.read_bytes()) == records
    assert saved.line_count > 3000
    assert '"status": "lost"' in _text(found)


_SCRIPTED_UPSTREAM = """
import json, os, sys
schema = json.loads(os.environ["UP_SCHEMA"])
text = "".join(f"line {i}: ok\\n" for i in range(5000))
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "up", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "read_text", "inputSchema": {"type": "object"},
                             "outputSchema": schema}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": text}],
                  "structuredContent": {"content": text}}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


@pytest.mark.parametrize("list_first", [True, False], ids=["listed", "called before listing"])
async def test_a_tool_called_before_it_is_listed_gets_structured_content_its_schema_takes(
    errlog: IO[str], tmp_path: Path, list_first: bool
) -> None:
    """server-filesystem's read_text_file declares ``content: string``. A host that called
    it before listing the tools got the reference placed inside (the proxy knew no schema
    yet), and the SDK, listing the tools to check it, refused the result (a review). Until
    a tool is listed, a large structured result is replaced at its root."""
    upstream = tmp_path / "upstream.py"
    upstream.write_text(_SCRIPTED_UPSTREAM, encoding="utf-8")
    schema = {"type": "object", "properties": {"content": {"type": "string"}}}
    env = {**child_env(), "UP_SCHEMA": json.dumps(schema)}
    argv = proxy_argv("--threshold", "20kb", upstream=[sys.executable, str(upstream)])
    with anyio.fail_after(HANG_GUARD):
        async with connect(argv, errlog, env=env) as session:
            if list_first:
                await session.list_tools()
            result = await session.call_tool("read_text", {})  # (the SDK checks the schema)
    assert set(result.structured_content or {}) == {"toolswap"}
    assert _size(result) <= POINTER_MAX + 2048


async def test_text_and_unrelated_structured_content_give_one_pointer_and_an_outlined_note(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("two_parts", {"lines": 5000, "count": 3000})

    pointer, note = (b.text for b in result.content if isinstance(b, TextContent))
    reference = result.structured_content["toolswap"]  # type: ignore[index]
    assert _source_id(pointer) != reference["source_id"]
    assert reference["source_id"] in note and "read_artifact(" in note
    # A one-line note, then the structure's outline (not a second pointer: no raw text).
    first, outline = note.split("\n", 1)
    assert len(first.encode()) < 400
    assert outline.startswith("--- structure: JSON object") and ".records[1000]" in outline
    assert len(outline.encode()) <= 8192 and "--- head" not in outline
    assert _size(result) <= POINTER_MAX + 2048
    saved = {a.source_id: a for a in ext.list_artifacts()}
    assert saved[_source_id(pointer)].path.read_bytes() == big_lines(5000).encode()
    assert json.loads(saved[reference["source_id"]].path.read_bytes()) == inventory(3000)


async def test_media_repeated_in_structured_content_never_reaches_the_context_as_base64(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    image = png(256, 256)
    encoded = base64.b64encode(image).decode()
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            await session.list_tools()  # (as a host does; see the unlisted test)
            result = await session.call_tool("media", {"width": 256, "height": 256})

    shown = result.model_dump_json(by_alias=True)
    for i in range(0, len(encoded) - 64, len(encoded) // 7):
        assert encoded[i : i + 64] not in shown
    assert len(shown.encode()) < 8192
    (saved,) = ext.list_artifacts()
    assert (saved.path.read_bytes(), saved.media_type) == (image, "image/png")
    note = result.structured_content["content"][0]["data"]  # type: ignore[index]
    assert saved.source_id in note
    assert "read_artifact_bytes(" in note


async def test_task_result_arriving_through_tasks_result_is_externalized(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with raw_peer(proxy_argv(), errlog) as peer:
            await peer.handshake()
            created = json.loads(
                await peer.request(
                    1,
                    "tools/call",
                    {"name": "big_text", "arguments": {"lines": 20000}, "task": {"ttl": 60000}},
                )
            )["result"]
            task_id = created["task"]["taskId"]
            frame = await peer.request(2, "tasks/result", {"taskId": task_id})

    result = json.loads(frame)["result"]
    assert len(frame) <= POINTER_MAX + 2048
    assert result["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    (block,) = result["content"]
    source_id = _source_id(block["text"])
    assert "Source: big_text;" in block["text"]
    assert ext.get_artifact(source_id).path.read_bytes() == big_lines(20000).encode()


async def test_large_resource_reads_are_externalized_unless_switched_off(
    errlog: IO[str], ext: ToolResultExternalizer
) -> None:
    frames: dict[str, bytes] = {}
    with anyio.fail_after(HANG_GUARD):
        for label, argv in (
            ("direct", UPSTREAM),
            ("never", proxy_argv("--resource-threshold", "never")),
            ("proxy", proxy_argv()),
        ):
            async with raw_peer(argv, errlog) as peer:
                await peer.handshake()
                frames[label] = await peer.request(1, "resources/read", {"uri": "test://big"})

    assert frames["never"] == frames["direct"]
    (item,) = json.loads(frames["proxy"])["result"]["contents"]
    assert item["uri"] == "test://big"
    assert len(frames["proxy"]) <= POINTER_MAX + 2048
    (saved,) = ext.list_artifacts()
    assert _source_id(item["text"]) == saved.source_id
    assert saved.path.read_bytes() == big_lines(8000).encode()


async def test_upstream_gets_exactly_the_environment_the_host_started_the_proxy_with(
    errlog: IO[str],
) -> None:
    # No locale variables: Python coerces its own locale (PEP 538) and exports LC_CTYPE.
    host = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SOME_HOST_SETTING": "kept as is",
        **child_env(),
    }
    assert not {"LANG", "LC_ALL", "LC_CTYPE", "PYTHONCOERCECLOCALE"} & set(host)
    with anyio.fail_after(HANG_GUARD):
        async with raw_peer(proxy_argv(), errlog, env=host) as peer:
            await peer.handshake()
            frame = await peer.request(1, "tools/call", {"name": "environment", "arguments": {}})

    seen: dict[str, Any] = json.loads(json.loads(frame)["result"]["content"][0]["text"])
    assert seen == host
    assert sys.platform == "linux"  # the upstream reports /proc/self/environ
