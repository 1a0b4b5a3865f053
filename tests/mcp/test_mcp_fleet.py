"""The MCP proxy and server on sessions kept in a shared S3 store: one host's proxy saves a
large result, another host's server pages and searches it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import anyio
import pytest
from mcp.types import TextContent
from mcp_helpers import HANG_GUARD, SESSION, child_env, connect, make_errlog, proxy_argv, serve_argv
from upstream_data import big_lines

from s3_server import S3Server

pytest.importorskip("boto3")
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[IO[str]]:
    with make_errlog(tmp_path) as f:
        yield f


def _text(result: object) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))  # type: ignore[attr-defined]


async def test_a_result_saved_by_one_host_s_proxy_is_read_by_another_host_s_server(
    s3_server: S3Server, bucket: str, tmp_path: Path, errlog: IO[str]
) -> None:
    store = {"TOOLSWAP_STORE": f"s3://{bucket}/mcp", **s3_server.env()}
    host_b = child_env(**store, TOOLSWAP_HOME=str(tmp_path / "b"))
    host_c = child_env(**store, TOOLSWAP_HOME=str(tmp_path / "c"))
    with anyio.fail_after(HANG_GUARD):
        async with connect(proxy_argv(), errlog, env=host_b) as proxied:
            pointer = _text(await proxied.call_tool("big_text", {"lines": 20000}))
        source_id = re.search(r"artifact:[\w.-]+:tool_result_\d+\.txt:[0-9a-f]{12}", pointer)
        assert source_id is not None
        async with connect(serve_argv(), errlog, env=host_c) as served:
            page = await served.call_tool(
                "read_artifact", {"source_id": source_id.group(), "offset": 9999, "limit": 1}
            )
            found = await served.call_tool(
                "grep_artifact", {"source_id": source_id.group(), "pattern": "ERROR"}
            )

    expected = big_lines(20000).splitlines()
    assert expected[9999] in _text(page)
    assert "10000:line 010000: ERROR disk quota exceeded" in _text(found)
    keys = s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert any(k["Key"] == f"mcp/ws/{SESSION}/tool-results/tool_result_001.txt" for k in keys)
    assert (tmp_path / "c" / "projects" / "ws" / SESSION / "store.json").exists()
