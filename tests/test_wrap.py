"""externalize_tool: large return values of function tools become pointers."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer, externalize_tool
from toolswap.errors import ArtifactNotFoundError
from toolswap.tools import artifact_tools

BIG = "".join(f"row {i}: value {i * 31}\n" for i in range(5000))  # ~100 KB
SMALL = "just a line\n"


def _source_id(pointer: str) -> str:
    first = pointer.splitlines()[0]
    assert first.startswith("[Artifact: artifact:"), pointer[:200]
    return first.removeprefix("[Artifact: ").removesuffix("]")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ext(session_dir: Path) -> ToolResultExternalizer:
    return ToolResultExternalizer(session_dir, read_hint="mcp")


def test_small_result_is_returned_as_the_same_object(ext: ToolResultExternalizer) -> None:
    @externalize_tool(externalizer=ext)
    def lookup() -> str:
        return SMALL

    assert lookup() is SMALL
    assert ext.list_artifacts() == []


def test_large_result_becomes_a_pointer_with_the_tool_name_as_provenance(
    ext: ToolResultExternalizer,
) -> None:
    @externalize_tool(externalizer=ext)
    def search_logs(pattern: str) -> str:
        return BIG

    pointer = search_logs("ERROR")
    ref = ext.get_artifact(_source_id(pointer))
    assert ref.source_tool == "search_logs"
    assert ref.path.read_text(encoding="utf-8") == BIG
    assert len(pointer) < len(BIG)
    assert 'read_artifact(source_id="' in pointer


def test_name_option_overrides_the_function_name(ext: ToolResultExternalizer) -> None:
    @externalize_tool(name="logs.search", externalizer=ext)
    def search_logs() -> str:
        return BIG

    assert ext.get_artifact(_source_id(search_logs())).source_tool == "logs.search"


def test_wrapper_keeps_name_docstring_signature_and_type_hints(
    ext: ToolResultExternalizer,
) -> None:
    def fetch(url: str, *, timeout: float = 10.0) -> str:
        """Fetch a URL."""
        return url

    wrapped = externalize_tool(externalizer=ext)(fetch)
    assert wrapped.__name__ == "fetch"
    assert wrapped.__doc__ == "Fetch a URL."
    assert inspect.signature(wrapped) == inspect.signature(fetch)
    assert typing.get_type_hints(wrapped) == typing.get_type_hints(fetch)
    assert wrapped.__wrapped__ is fetch  # type: ignore[attr-defined]
    assert externalize_tool(wrapped) is wrapped  # wrapping twice changes nothing


@pytest.mark.anyio
async def test_async_function_stays_async_and_is_externalized(
    ext: ToolResultExternalizer,
) -> None:
    @externalize_tool(externalizer=ext)
    async def crawl(site: str) -> str:
        return BIG if site == "big" else SMALL

    assert inspect.iscoroutinefunction(crawl)
    assert await crawl("small") is SMALL
    pointer = await crawl("big")
    assert ext.get_artifact(_source_id(pointer)).source_tool == "crawl"


@pytest.mark.anyio
async def test_callable_objects_sync_and_async(ext: ToolResultExternalizer) -> None:
    class SyncTool:
        name = "inventory"

        def __call__(self, n: int) -> str:
            return BIG[:n]

    class AsyncTool:
        name = "async_inventory"

        async def __call__(self, n: int) -> str:
            return BIG[:n]

    sync_tool = externalize_tool(SyncTool(), externalizer=ext)
    async_tool = externalize_tool(AsyncTool(), externalizer=ext)
    assert sync_tool(10) == BIG[:10]
    assert ext.get_artifact(_source_id(sync_tool(len(BIG)))).source_tool == "inventory"
    assert inspect.iscoroutinefunction(async_tool)
    pointer = await async_tool(len(BIG))
    assert ext.get_artifact(_source_id(pointer)).source_tool == "async_inventory"


@pytest.mark.anyio
async def test_sync_callable_returning_an_awaitable_is_shrunk_when_awaited(
    ext: ToolResultExternalizer,
) -> None:
    async def produce() -> str:
        return BIG

    def tool() -> typing.Awaitable[str]:
        return produce()

    pointer = await externalize_tool(tool, externalizer=ext)()
    assert ext.get_artifact(_source_id(pointer)).source_tool == "tool"


def test_structured_results_are_measured_and_saved_as_json(
    ext: ToolResultExternalizer,
) -> None:
    @dataclasses.dataclass
    class Row:
        id: int
        name: str

    @externalize_tool(externalizer=ext)
    def rows(n: int) -> list[dict[str, object]] | list[Row]:
        return [Row(i, f"name-{i}") for i in range(n)] if n < 0 else [{"id": i} for i in range(n)]

    small = rows(3)
    assert small == [{"id": 0}, {"id": 1}, {"id": 2}]
    pointer = rows(10000)
    assert isinstance(pointer, str)
    ref = ext.get_artifact(_source_id(pointer))
    assert ref.media_type == "application/json"
    assert '"id": 9999' in ref.path.read_text(encoding="utf-8")


def test_bytes_results_are_saved_as_binary(ext: ToolResultExternalizer) -> None:
    blob = bytes(range(256)) * 400

    @externalize_tool(externalizer=ext)
    def download() -> bytes:
        return blob

    pointer = download()
    ref = ext.get_artifact(_source_id(pointer))
    assert ref.binary
    assert ref.path.read_bytes() == blob
    assert "read_artifact_bytes(" in pointer


def test_exceptions_propagate_and_nothing_is_written(ext: ToolResultExternalizer) -> None:
    @externalize_tool(externalizer=ext)
    def broken() -> str:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        broken()
    assert ext.list_artifacts() == []


def test_default_session_comes_from_the_environment(
    toolswap_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_SESSION", "agent-run-7")

    @externalize_tool
    def dump() -> str:
        return BIG

    source_id = _source_id(dump())
    assert source_id.startswith("artifact:agent-run-7:")
    assert (toolswap_home / "projects" / "ws" / "agent-run-7" / "tool-results").is_dir()


def test_per_tool_rules_from_the_environment_apply(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_TOOL_THRESHOLDS", "keep_inline=never,tiny=10")

    @externalize_tool(externalizer=session_dir)
    def keep_inline() -> str:
        return BIG

    @externalize_tool(externalizer=session_dir)
    def tiny() -> str:
        return "more than ten bytes"

    assert keep_inline() is BIG
    assert tiny().startswith("[Artifact: artifact:")


def test_invalid_summary_is_refused_at_decoration_time() -> None:
    with pytest.raises(ValueError, match="single line"):
        externalize_tool(summary="two\nlines")


def test_artifact_tools_page_what_the_wrapper_saved(ext: ToolResultExternalizer) -> None:
    @externalize_tool(externalizer=ext)
    def search_logs() -> str:
        return BIG

    source_id = _source_id(search_logs())
    read_artifact, read_artifact_bytes, grep_artifact, _query, list_artifacts = artifact_tools(ext)
    assert [f.__name__ for f in artifact_tools(ext)] == [
        "read_artifact",
        "read_artifact_bytes",
        "grep_artifact",
        "query_artifact",
        "list_artifacts",
    ]
    assert "Args:\n    source_id:" in (read_artifact.__doc__ or "")
    page = read_artifact(source_id, offset=4000, limit=1)
    assert page.splitlines()[1] == "  4001\trow 4000: value 124000"
    assert "4001:row 4000: value 124000" in grep_artifact(source_id, r"^row 4000:")
    assert read_artifact_bytes(source_id, 0, 5).splitlines()[1] == "row 0"
    assert source_id in list_artifacts()
    with pytest.raises(ArtifactNotFoundError, match=r"list_artifacts\(\)"):
        read_artifact(source_id.replace("tool_result_001", "tool_result_002"))
