"""The toolswap MCP server's tools, against good, collected, tampered and missing artifacts.

Most tests drive the server through the SDK's in-process client (real JSON-RPC frames over
memory streams, the legacy handshake); one runs ``toolswap mcp serve`` as a subprocess.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent
from mcp_helpers import (
    HANG_GUARD,
    SESSION,
    child_env,
    connect,
    make_errlog,
    raw_peer,
    serve_argv,
)
from upstream_data import big_lines, png

from toolswap import ToolResultExternalizer
from toolswap.cleanup import ArtifactCleanupPolicy
from toolswap.mcp import create_server
from toolswap.tools import TOOL_NAMES

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[IO[str]]:
    with make_errlog(tmp_path) as f:
        yield f


@pytest.fixture
def ext(toolswap_home: Path) -> ToolResultExternalizer:
    return ToolResultExternalizer(toolswap_home / "projects" / "ws" / SESSION, read_hint="mcp")


@pytest.fixture
def text_id(ext: ToolResultExternalizer) -> str:
    return ext.externalize(big_lines(3000), "pytest").artifact.source_id


@asynccontextmanager
async def client(ext: ToolResultExternalizer) -> AsyncIterator[Client]:
    with anyio.fail_after(HANG_GUARD):
        async with Client(create_server(ext), mode="legacy") as c:
            yield c


async def call(ext: ToolResultExternalizer, tool: str, **arguments: Any) -> CallToolResult:
    async with client(ext) as c:
        return await c.call_tool(tool, arguments)


def text(result: CallToolResult, index: int = 0) -> str:
    block = result.content[index]
    assert isinstance(block, TextContent), block
    return block.text


async def test_server_offers_its_tools_read_only_but_query_which_may_save_a_result(
    ext: ToolResultExternalizer,
) -> None:
    async with client(ext) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert tuple(tools) == TOOL_NAMES
    for tool in tools.values():
        assert tool.annotations is not None
        # query_artifact saves a result too large to return as a new artifact.
        assert tool.annotations.read_only_hint is (tool.name != "query_artifact")
        assert not tool.annotations.destructive_hint
        assert tool.output_schema is None
    assert "instead of running the original command again" in (
        tools["read_artifact"].description or ""
    )
    props = tools["read_artifact"].input_schema["properties"]
    assert props["offset"]["minimum"] == 0
    assert "pointer" in props["source_id"]["description"]


async def test_read_artifact_pages_numbered_lines_and_names_the_next_call(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    result = await call(ext, "read_artifact", source_id=text_id, offset=1499, limit=3)
    assert not result.is_error
    lines = text(result).splitlines()
    assert lines[0] == (
        f"[{text_id}: lines 1500-1502 of 3000; pytest output, "
        f"{ext.get_artifact(text_id).byte_size / 1024:.1f} KiB]"
    )
    assert lines[1] == "  1500\tline 001500: ERROR disk quota exceeded while writing shard 1500"
    assert lines[-1] == f'[more: read_artifact(source_id="{text_id}", offset=1502, limit=3)]'


async def test_read_artifact_at_the_end_says_so(ext: ToolResultExternalizer, text_id: str) -> None:
    result = await call(ext, "read_artifact", source_id=text_id, offset=2998, limit=50)
    lines = text(result).splitlines()
    assert lines[0].startswith(f"[{text_id}: lines 2999-3000 of 3000;")
    assert lines[-2].startswith("  3000\tline 003000: ok")
    assert lines[-1] == "[end of artifact]"


async def test_offset_past_the_end_is_a_tool_error_that_gives_the_range(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    result = await call(ext, "read_artifact", source_id=text_id, offset=5000)
    assert result.is_error
    assert "offset 5000 is past the end" in text(result)
    assert "3000 lines; read offsets 0-2999" in text(result)


async def test_negative_offset_and_zero_limit_are_tool_errors(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    async with client(ext) as c:
        negative = await c.call_tool("read_artifact", {"source_id": text_id, "offset": -1})
        zero = await c.call_tool("read_artifact", {"source_id": text_id, "limit": 0})
        after = await c.call_tool("read_artifact", {"source_id": text_id, "limit": 1})
    assert negative.is_error and "offset" in text(negative)
    assert zero.is_error and "limit" in text(zero)
    assert not after.is_error  # the server keeps serving


async def test_grep_artifact_reports_matches_with_line_numbers_and_context(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    result = await call(
        ext, "grep_artifact", source_id=text_id, pattern=r"ERROR \w+ quota", context=1
    )
    assert not result.is_error
    lines = text(result).splitlines()
    assert "1 matching line" in lines[0]
    source = big_lines(3000).splitlines()
    assert lines[1:] == [f"1499-{source[1498]}", f"1500:{source[1499]}", f"1501-{source[1500]}"]


async def test_grep_artifact_says_when_nothing_matches_and_when_it_stopped(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    async with client(ext) as c:
        none = await c.call_tool("grep_artifact", {"source_id": text_id, "pattern": "panic"})
        many = await c.call_tool(
            "grep_artifact", {"source_id": text_id, "pattern": "ok", "max_matches": 5}
        )
    assert not none.is_error
    assert "no line matches 'panic' in 3000 lines" in text(none)
    assert text(many).count("\n") == 6
    assert "stopped after 5 matches" in text(many)


async def test_bad_pattern_is_a_tool_error(ext: ToolResultExternalizer, text_id: str) -> None:
    result = await call(ext, "grep_artifact", source_id=text_id, pattern="(unclosed")
    assert result.is_error
    assert "invalid pattern '(unclosed'" in text(result)


async def test_unknown_and_malformed_source_ids_are_tool_errors_that_say_what_to_do(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    unknown = text_id.replace("tool_result_001", "tool_result_009")
    async with client(ext) as c:
        missing = await c.call_tool("read_artifact", {"source_id": unknown})
        malformed = await c.call_tool("read_artifact", {"source_id": "../../etc/passwd"})
        elsewhere = await c.call_tool(
            "read_artifact", {"source_id": "artifact:other:tool_result_001.txt:0123456789ab"}
        )
    assert missing.is_error and "list_artifacts()" in text(missing)
    assert " ls`" not in text(missing)  # a tool call, not a command the host may not have
    assert malformed.is_error and "Copy the source ID exactly" in text(malformed)
    assert elsewhere.is_error and "no session 'other'" in text(elsewhere)


async def test_collected_artifact_says_when_and_why(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    later = datetime.now(UTC) + timedelta(days=3)
    plan = ext.plan_cleanup([], policy=ArtifactCleanupPolicy(dry_run=False), now=later)
    ext.apply_cleanup(plan, [], now=later)
    async with client(ext) as c:
        read = await c.call_tool("read_artifact", {"source_id": text_id})
        grep = await c.call_tool("grep_artifact", {"source_id": text_id, "pattern": "ERROR"})
        listed = await c.call_tool("list_artifacts", {})
    for result in (read, grep):
        assert result.is_error
        assert "was collected by cleanup at" in text(result)
        assert "run the tool again" in text(result)
    assert "no saved tool outputs" in text(listed)


async def test_tampered_artifact_is_refused_and_nothing_is_returned(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    path = ext.get_artifact(text_id).path
    async with client(ext) as c:
        before = await c.call_tool("read_artifact", {"source_id": text_id, "limit": 1})
        os.chmod(path, 0o600)
        data = bytearray(path.read_bytes())
        data[100] ^= 0x20  # same size, one bit flipped
        path.write_bytes(bytes(data))
        read = await c.call_tool("read_artifact", {"source_id": text_id, "limit": 1})
        grep = await c.call_tool("grep_artifact", {"source_id": text_id, "pattern": "line"})
        raw = await c.call_tool("read_artifact_bytes", {"source_id": text_id, "length": 10})
    assert not before.is_error
    for result in (read, grep, raw):
        assert result.is_error
        assert "SHA-256 mismatch" in text(result)
        assert "run the tool again for a fresh copy" in text(result)
        assert "line 000001" not in text(result)


async def test_missing_artifact_file_is_a_tool_error(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    ext.get_artifact(text_id).path.unlink()
    result = await call(ext, "read_artifact", source_id=text_id)
    assert result.is_error
    assert "the file is missing from tool-results/" in text(result)


async def test_binary_artifact_reads_as_bytes_and_shows_a_whole_image(
    ext: ToolResultExternalizer,
) -> None:
    image = png(64, 64)
    source_id = ext.externalize(image, "screenshot", media_type="image/png").artifact.source_id
    async with client(ext) as c:
        as_lines = await c.call_tool("read_artifact", {"source_id": source_id})
        grep = await c.call_tool("grep_artifact", {"source_id": source_id, "pattern": "x"})
        part = await c.call_tool(
            "read_artifact_bytes", {"source_id": source_id, "start": 8, "length": 16}
        )
        whole = await c.call_tool(
            "read_artifact_bytes", {"source_id": source_id, "length": 1 << 20}
        )
    assert as_lines.is_error and "read_artifact_bytes(" in text(as_lines)
    assert grep.is_error and "binary" in text(grep)
    header, body, more = text(part).splitlines()
    assert header == f"[{source_id}: bytes 8-23 of {len(image):,}; image/png, base64]"
    assert base64.b64decode(body) == image[8:24]
    assert more == f'[more: read_artifact_bytes(source_id="{source_id}", start=24, length=16)]'
    shown = whole.content[1]
    assert isinstance(shown, ImageContent)
    assert base64.b64decode(shown.data) == image


async def test_a_line_longer_than_a_page_continues_through_read_artifact_bytes(
    ext: ToolResultExternalizer,
) -> None:
    record = json.dumps({"items": [{"id": i, "name": f"n{i}"} for i in range(20000)]})
    source_id = ext.externalize(record + "\ntrailer\n", "api").artifact.source_id
    async with client(ext) as c:
        page = await c.call_tool("read_artifact", {"source_id": source_id})
        shown = text(page)
        start = int(shown.rsplit("start=", 1)[1].split(",", 1)[0])
        rest = await c.call_tool(
            "read_artifact_bytes", {"source_id": source_id, "start": start, "length": 100}
        )
    assert len(shown.encode()) <= 64 * 1024
    assert "⟨line continues⟩" in shown
    assert "skip to the next line with offset=1" in shown
    assert text(rest).splitlines()[1] == record[start : start + 100]


async def test_list_artifacts_names_every_saved_output(
    ext: ToolResultExternalizer, text_id: str
) -> None:
    ext.externalize(png(16, 16), "screenshot", media_type="image/png")
    result = await call(ext, "list_artifacts")
    lines = text(result).splitlines()
    assert lines[0] == "[session 's1': 2 saved tool outputs]"
    assert lines[1].startswith(f"{text_id} | pytest | ")
    assert "| screenshot | " in lines[2] and "binary image/png" in lines[2]


async def test_artifacts_of_a_sibling_session_are_readable(
    ext: ToolResultExternalizer, toolswap_home: Path
) -> None:
    other = ToolResultExternalizer(toolswap_home / "projects" / "ws" / "other")
    source_id = other.externalize(big_lines(100), "make").artifact.source_id
    result = await call(ext, "read_artifact", source_id=source_id, limit=1)
    assert not result.is_error
    assert "line 000001" in text(result)


async def test_toolswap_mcp_serve_over_stdio(
    ext: ToolResultExternalizer, text_id: str, errlog: IO[str]
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(serve_argv(), errlog) as session:
            names = [t.name for t in (await session.list_tools()).tools]
            found = await session.call_tool(
                "grep_artifact", {"source_id": text_id, "pattern": "ERROR"}
            )
            ext.get_artifact(text_id).path.unlink()
            gone = await session.call_tool("read_artifact", {"source_id": text_id})
            listed = await session.call_tool("list_artifacts", {})
    assert tuple(names) == TOOL_NAMES
    assert "1500:line 001500: ERROR" in text(found)
    assert gone.is_error and "missing" in text(gone)
    assert text_id in text(listed)


# -- hostile searches ------------------------------------------------------------------


HOSTILE = "(a+)+$"


@pytest.fixture
def hostile_id(ext: ToolResultExternalizer) -> str:
    text = "".join("a" * 40 + "b\n" for _ in range(300))
    return ext.externalize(text, "t").artifact.source_id


@pytest.fixture
def no_grep_path(tmp_path: Path) -> str:
    """A PATH without grep: the server searches with Python's backtracking re, in a child
    process, so the hostile pattern really runs until its deadline."""
    empty = tmp_path / "no-grep-bin"
    empty.mkdir()
    return str(empty)


def _grep_call(source_id: str, request_id: int, timeout: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "grep_artifact",
            "arguments": {"source_id": source_id, "pattern": HOSTILE, "timeout": timeout},
        },
    }


async def test_a_hostile_search_never_delays_concurrent_reads(
    ext: ToolResultExternalizer, text_id: str, hostile_id: str, no_grep_path: str, errlog: IO[str]
) -> None:
    finished: list[str] = []
    answers: dict[str, CallToolResult] = {}
    with anyio.fail_after(HANG_GUARD):
        async with connect(serve_argv(), errlog, env=child_env(PATH=no_grep_path)) as session:

            async def search() -> None:
                # A deadline longer than the guard: only the reads can end this test in time.
                arguments = {"source_id": hostile_id, "pattern": HOSTILE, "timeout": 120}
                await session.call_tool("grep_artifact", arguments)
                finished.append("grep")

            async with anyio.create_task_group() as tg:
                tg.start_soon(search)
                for i in range(3):
                    answers[f"read{i}"] = await session.call_tool(
                        "read_artifact", {"source_id": text_id, "offset": 1499, "limit": 1}
                    )
                    finished.append(f"read{i}")
                tg.cancel_scope.cancel()  # the search is still running

    assert finished == ["read0", "read1", "read2"]
    assert all("ERROR disk quota" in text(answers[f"read{i}"]) for i in range(3))


async def test_a_search_past_its_deadline_is_a_tool_error_that_says_so(
    ext: ToolResultExternalizer, hostile_id: str, no_grep_path: str, errlog: IO[str]
) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(serve_argv(), errlog, env=child_env(PATH=no_grep_path)) as session:
            arguments = {"source_id": hostile_id, "pattern": HOSTILE, "timeout": 1}
            result = await session.call_tool("grep_artifact", arguments)

    assert result.is_error
    assert "did not finish within 1 s" in text(result)


async def test_closing_stdin_ends_the_server_while_a_search_runs(
    ext: ToolResultExternalizer,
    text_id: str,
    hostile_id: str,
    no_grep_path: str,
    errlog: IO[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", no_grep_path)
    async with raw_peer(serve_argv(), errlog) as peer:
        await peer.handshake()
        # A search with the longest deadline allowed, longer than the guard below.
        await peer.send(_grep_call(hostile_id, 1, 120))
        read = {"name": "read_artifact", "arguments": {"source_id": text_id, "limit": 1}}
        answer = json.loads(await peer.request(2, "tools/call", read))  # both are in flight
        assert "line 000001" in answer["result"]["content"][0]["text"]
        assert peer.proc.stdin is not None
        await peer.proc.stdin.aclose()
        with anyio.fail_after(HANG_GUARD):
            status = await peer.proc.wait()

    assert status == 0


def _worker_children(pid: int) -> list[int]:
    """The search workers (toolswap's Python grep fallback) that ``pid`` has running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and b"_grep_worker.py" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_a_cancelled_search_is_killed_and_the_server_keeps_serving(
    ext: ToolResultExternalizer,
    text_id: str,
    hostile_id: str,
    no_grep_path: str,
    errlog: IO[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", no_grep_path)
    async with raw_peer(serve_argv(), errlog) as peer:
        await peer.handshake()
        await peer.send(_grep_call(hostile_id, 1, 120))
        with anyio.fail_after(HANG_GUARD):
            while not _worker_children(peer.proc.pid):
                await anyio.sleep(0.05)  # until the search runs (a poll, not a timing claim)
            await peer.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            )
            while _worker_children(peer.proc.pid):
                await anyio.sleep(0.05)
            read = {"name": "read_artifact", "arguments": {"source_id": text_id, "limit": 1}}
            answer = json.loads(await peer.request(2, "tools/call", read))

    assert "line 000001" in answer["result"]["content"][0]["text"]
