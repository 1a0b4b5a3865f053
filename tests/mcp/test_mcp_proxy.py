"""The MCP proxy, end to end over real stdio subprocesses:

the SDK's client -> ``toolswap mcp proxy`` -> ``upstream_server.py``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, TextContent
from mcp_helpers import (
    HANG_GUARD,
    SESSION,
    UPSTREAM,
    child_env,
    connect,
    make_errlog,
    proxy_argv,
    raw_peer,
)
from upstream_data import big_lines, inventory, png

from toolswap import ToolResultExternalizer
from toolswap.tools import TOOL_NAMES

pytestmark = pytest.mark.anyio

POINTER_MAX = 32 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def session_path(toolswap_home: Path) -> Path:
    """Where the proxy keeps its session."""
    return toolswap_home / "projects" / "ws" / SESSION


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[IO[str]]:
    with make_errlog(tmp_path) as f:
        yield f


def _text(result: CallToolResult, index: int = 0) -> str:
    block = result.content[index]
    assert isinstance(block, TextContent), block
    return block.text


def _source_id(pointer: str) -> str:
    first = pointer.splitlines()[0]
    assert first.startswith("[Artifact: artifact:"), pointer[:300]
    return first.removeprefix("[Artifact: ").removesuffix("]")


def _artifact_bytes(session_path: Path, source_id: str) -> tuple[bytes, str]:
    ext = ToolResultExternalizer(session_path)
    ref = ext.get_artifact(source_id)
    return ref.path.read_bytes(), ref.media_type


async def test_upstream_tools_are_offered_unchanged_beside_the_artifact_tools(
    errlog: IO[str],
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(UPSTREAM, errlog) as direct:
            upstream = {t.name: t for t in (await direct.list_tools()).tools}
        async with connect(proxy_argv(), errlog) as proxied:
            offered = {t.name: t for t in (await proxied.list_tools()).tools}
            greeting = await proxied.read_resource("test://greeting")

    assert set(offered) == set(upstream) | set(TOOL_NAMES)
    for name, tool in upstream.items():
        assert offered[name].description == tool.description
        assert offered[name].input_schema == tool.input_schema
        assert offered[name].annotations == tool.annotations
    # A structured result may be replaced by a pointer, so its schema is not promised.
    assert upstream["big_structured"].output_schema is not None
    assert offered["big_structured"].output_schema is None
    assert "instead of running the original command again" in (
        offered["read_artifact"].description or ""
    )
    assert greeting.contents[0].text == "hello from upstream"  # type: ignore[union-attr]


async def test_small_results_pass_through_byte_for_byte(errlog: IO[str]) -> None:
    calls = [
        ("tools/call", {"name": "echo", "arguments": {"text": 'héllo ✓ \\n "quoted"'}}),
        ("tools/call", {"name": "fail", "arguments": {}}),
        ("tools/call", {"name": "image", "arguments": {"width": 8, "height": 8}}),
        ("tools/call", {"name": "big_structured", "arguments": {"count": 3}}),
        ("resources/read", {"uri": "test://greeting"}),
        ("ping", {}),
    ]
    frames: dict[str, list[bytes]] = {}
    with anyio.fail_after(HANG_GUARD):
        for label, argv in (("direct", UPSTREAM), ("proxy", proxy_argv())):
            async with raw_peer(argv, errlog) as peer:
                frames[label] = [await peer.handshake()]
                for i, (method, params) in enumerate(calls, start=1):
                    frames[label].append(await peer.request(i, method, params))
    assert frames["proxy"] == frames["direct"]
    assert json.loads(frames["proxy"][2])["result"]["isError"] is True


async def test_large_text_result_becomes_a_pointer_that_pages_through_the_read_tools(
    errlog: IO[str], session_path: Path
) -> None:
    expected = big_lines(20000)
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("big_text", {"lines": 20000})
            pointer = _text(result)
            source_id = _source_id(pointer)
            found = await session.call_tool(
                "grep_artifact", {"source_id": source_id, "pattern": "ERROR", "context": 1}
            )
            page = await session.call_tool(
                "read_artifact", {"source_id": source_id, "offset": 9999, "limit": 2}
            )
            listed = await session.call_tool("list_artifacts", {})

    assert not result.is_error
    assert len(result.content) == 1
    assert len(pointer.encode()) <= POINTER_MAX < len(expected)
    assert "Source: big_text;" in pointer
    assert 'read_artifact(source_id="' in pointer
    # The needle from the omitted middle is in the pointer, with its line number.
    assert "10000: line 010000: ERROR disk quota exceeded" in pointer
    data, media_type = _artifact_bytes(session_path, source_id)
    assert data == expected.encode()
    assert media_type == "text/plain"

    assert not found.is_error
    assert "10000:line 010000: ERROR disk quota exceeded" in _text(found)
    assert "9999-line 009999" in _text(found)
    assert "10001-line 010001" in _text(found)
    lines = _text(page).splitlines()
    assert lines[1] == " 10000\tline 010000: ERROR disk quota exceeded while writing shard 10000"
    assert lines[2].startswith(" 10001\tline 010001: ok")
    assert "offset=10001" in lines[-1]
    assert source_id in _text(listed)


async def test_large_structured_content_is_saved_once_and_replaced_by_a_reference(
    errlog: IO[str], session_path: Path
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("big_structured", {"count": 3000})
            listed = await session.call_tool("list_artifacts", {})

    assert not result.is_error
    reference = result.structured_content["toolswap"]  # type: ignore[index]
    assert reference["externalized"] is True
    source_id = reference["source_id"]
    assert source_id in reference["read_with"]
    # The text block carried the same JSON, so one artifact holds both.
    assert [_source_id(_text(result))] == [source_id]
    assert _text(listed).count("artifact:") == 1
    data, _ = _artifact_bytes(session_path, source_id)
    assert json.loads(data) == inventory(3000)


async def test_large_image_is_saved_as_a_binary_artifact_not_inlined_as_base64(
    errlog: IO[str], session_path: Path
) -> None:
    image = png(256, 256)
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("image", {"width": 256, "height": 256})
            text = _text(result)
            source_id = _source_id(text.split("\n", 1)[1])
            whole = await session.call_tool(
                "read_artifact_bytes", {"source_id": source_id, "length": 1 << 20}
            )
            as_lines = await session.call_tool("read_artifact", {"source_id": source_id})

    assert len(result.content) == 1
    assert text.startswith("[image/png from image, ")
    assert base64.b64encode(image).decode()[:100] not in text
    assert len(text.encode()) < 4096
    data, media_type = _artifact_bytes(session_path, source_id)
    assert (data, media_type) == (image, "image/png")
    shown = whole.content[1]
    assert isinstance(shown, ImageContent)
    assert (base64.b64decode(shown.data), shown.mime_type) == (image, "image/png")
    assert as_lines.is_error
    assert "read_artifact_bytes" in _text(as_lines)


async def test_embedded_resources_are_saved_text_and_binary_alike(
    errlog: IO[str], session_path: Path
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("mixed", {"size": 100_000})

    assert [_text(result, i).splitlines()[0] for i in range(3)] == [
        "two attachments follow",
        "Embedded resource file:///tmp/logs.zip:",
        "Embedded resource file:///tmp/report.txt:",
    ]
    archive_id = _source_id(_text(result, 1).split("\n", 2)[2])
    report_id = _source_id(_text(result, 2).split("\n", 1)[1])
    assert _artifact_bytes(session_path, archive_id) == (
        bytes(range(256)) * (100_000 // 256),
        "application/zip",
    )
    assert _artifact_bytes(session_path, report_id) == (big_lines(3000).encode(), "text/plain")


async def test_failing_tool_keeps_is_error_small_or_large(
    errlog: IO[str], session_path: Path
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            small = await session.call_tool("fail", {})
            large = await session.call_tool("fail", {"lines": 5000})

    assert small.is_error
    assert _text(small) == "Error executing tool fail: tool failed: the widget is broken"
    assert large.is_error
    source_id = _source_id(_text(large))
    data, _ = _artifact_bytes(session_path, source_id)
    assert data.decode().startswith("Error executing tool fail: tool failed: line 000001")


async def test_progress_and_cancellation_pass_through(errlog: IO[str]) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    started = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))
        started.set()

    async def call_slow(session: ClientSession) -> None:
        await session.call_tool("slow", {}, progress_callback=on_progress)

    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call_slow, session)
                await started.wait()
                tg.cancel_scope.cancel()
            # The upstream's slow tool saw the cancellation (it waits for nothing else).
            answer = await session.call_tool("was_cancelled", {})
            after = await session.call_tool("echo", {"text": "still here"})

    assert progress == [(1, 100, "started")]
    assert _text(answer) == "cancelled"
    assert _text(after) == "still here"


async def test_modern_protocol_era_is_proxied_too(errlog: IO[str]) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog, era="modern") as session:
            names = {t.name for t in (await session.list_tools()).tools}
            small = await session.call_tool("echo", {"text": "hi"})
            large = await session.call_tool("big_text", {"lines": 5000})
            page = await session.call_tool(
                "read_artifact", {"source_id": _source_id(_text(large)), "limit": 1}
            )

    assert session.protocol_version == "2026-07-28"
    assert set(TOOL_NAMES) <= names
    assert _text(small) == "hi"
    assert _text(page).splitlines()[1] == "     1\tline 000001: ok, processed record 7919"


async def test_threshold_option_and_per_tool_rules(errlog: IO[str]) -> None:
    text = "x" * 300
    env = child_env(TOOLSWAP_TOOL_THRESHOLDS="big_structured=never")
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv("--threshold", "200"), errlog, env=env) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            over = await session.call_tool("echo", {"text": text})
            under = await session.call_tool("echo", {"text": "y" * 150})
            kept = await session.call_tool("big_structured", {"count": 50})

    assert _text(over).startswith("[Artifact: artifact:s1:")
    assert _text(under) == "y" * 150
    # `never` keeps the result inline and the output schema promised.
    assert tools["big_structured"].output_schema is not None
    assert kept.structured_content == inventory(50)


async def test_upstream_death_fails_the_pending_call_and_the_proxy_exits(
    errlog: IO[str],
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with raw_peer(proxy_argv(), errlog) as peer:
            await peer.handshake()
            frame = await peer.request(1, "tools/call", {"name": "die", "arguments": {"code": 3}})
            rest = await peer.line()
            status = await peer.proc.wait()

    error = json.loads(frame)["error"]
    assert "exited with status 3 before answering" in error["message"]
    assert "Restart the MCP server" in error["message"]
    assert rest == b""
    assert status == 1
    errlog.seek(0)
    log = errlog.read()
    assert "exited with status 3; exiting" in log
    assert "Traceback" not in log


async def test_a_large_result_that_cannot_be_saved_fails_that_call_only(
    errlog: IO[str],
) -> None:
    """A file-size limit (RLIMIT_FSIZE, set by the shell that starts the proxy, SIGXFSZ
    ignored) makes the artifact's write fail with EFBIG: the host gets an error for that
    call, saying why, and the proxy and its upstream go on."""
    argv = ["sh", "-c", "trap '' XFSZ; ulimit -f 64; exec \"$@\"", "sh", *proxy_argv()]
    with anyio.fail_after(HANG_GUARD):
        async with raw_peer(argv, errlog) as peer:
            await peer.handshake()
            big = await peer.request(1, "tools/call", {"name": "big_text", "arguments": {}})
            small = await peer.request(
                2, "tools/call", {"name": "echo", "arguments": {"text": "still here"}}
            )
    error = json.loads(big)["error"]
    assert error["code"] == -32603
    assert "toolswap could not save this large result" in error["message"]
    assert "could not be saved" in error["message"]  # the externalizer's own reason
    assert json.loads(small)["result"]["content"][0]["text"] == "still here"
    errlog.seek(0)
    log = errlog.read()
    assert "a large result could not be saved" in log
    assert "Traceback" not in log


async def test_sdk_client_sees_a_clear_error_when_the_upstream_dies(errlog: IO[str]) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            with pytest.raises(MCPError, match="exited with status 3 before answering"):
                await session.call_tool("die", {"code": 3})
            with pytest.raises(MCPError):
                await session.call_tool("echo", {"text": "anyone?"})


async def test_proxy_exits_cleanly_when_the_host_closes_stdin(errlog: IO[str]) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with raw_peer(proxy_argv(), errlog) as peer:
            await peer.handshake()
            assert peer.proc.stdin is not None
            await peer.proc.stdin.aclose()
            status = await peer.proc.wait()
    assert status == 0
    errlog.seek(0)
    assert "Traceback" not in errlog.read()


async def test_a_schema_a_reference_conforms_to_is_kept_and_a_large_result_conforms(
    errlog: IO[str], session_path: Path
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            # The SDK's client validates structured content against the listed schema.
            result = await session.call_tool("loose_inventory", {"count": 3000})
            text = _text(result)
            answer = await session.call_tool(
                "query_artifact",
                {"source_id": _source_id(text), "expression": ".records[1000].status"},
            )

    assert tools["loose_inventory"].output_schema is not None
    assert "query_artifact" in tools
    assert not result.is_error
    assert result.structured_content["toolswap"]["externalized"] is True  # type: ignore[index]
    # The pointer carries the structure outline, with the odd record's path.
    assert "--- structure: JSON object" in text
    assert "3,000 objects" in text and ".records[1000]" in text
    assert not answer.is_error
    assert '"lost"' in _text(answer)


async def test_structured_content_beside_large_text_gets_its_outline_in_the_note(
    errlog: IO[str],
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog) as session:
            result = await session.call_tool("two_parts", {"lines": 5000, "count": 3000})

    notes = [b.text for b in result.content if isinstance(b, TextContent)]
    assert any("--- structure: JSON object" in n and ".records[1000]" in n for n in notes)
