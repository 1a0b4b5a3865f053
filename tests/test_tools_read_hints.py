"""Every call a ``read_artifact`` footer (or a ``toolswap read`` footer) names succeeds: a
hint never points past the end, also when the last line is longer than one page."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from toolswap import ToolResultExternalizer
from toolswap.reader import ArtifactReader
from toolswap.tools import ArtifactTools

_PAGE_BYTES = 2048
"""The tools' answer bound in these tests: a page holds about 1 KiB of lines."""
_CALL = re.compile(r"(read_artifact|read_artifact_bytes)\(source_id=\"[^\"]+\", ([^)]*)\)")
_SKIP = re.compile(r"skip to the next line with offset=(\d+)")


def _save(root: Path, text: str) -> tuple[ArtifactTools, str]:
    ext = ToolResultExternalizer(root / "s1", read_hint="mcp")
    tools = ArtifactTools(ext, max_output_bytes=_PAGE_BYTES)
    return tools, ext.externalize(text, "tool").artifact.source_id


def _named_calls(footer: str) -> list[tuple[str, dict[str, int]]]:
    """The calls a footer names, with their integer arguments."""
    calls = []
    for name, args in _CALL.findall(footer):
        calls.append((name, {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", args)}))
    calls += [("read_artifact", {"offset": int(o)}) for o in _SKIP.findall(footer)]
    return calls


def _follow_every_hint(tools: ArtifactTools, source_id: str, limit: int) -> int:
    """Read from offset 0 following each line hint; call every named read. Pages read."""
    pages = 0
    offset: int | None = 0
    while offset is not None:
        footer = tools.read_artifact(source_id, offset, limit).rsplit("\n", 1)[1]
        pages += 1
        offset = None
        for name, args in _named_calls(footer):
            if name == "read_artifact_bytes":
                tools.read_artifact_bytes(source_id, args["start"], args["length"])
            else:
                tools.read_artifact(source_id, args["offset"], args.get("limit", limit))
                offset = args["offset"]
        assert pages < 10_000
    return pages


def test_a_last_line_longer_than_a_page_names_no_next_line(tmp_path: Path) -> None:
    tools, source_id = _save(tmp_path, "x" * 200_000 + "\n")

    footer = tools.read_artifact(source_id).rsplit("\n", 1)[1]

    assert "read_artifact_bytes(" in footer
    assert "skip to the next line" not in footer
    for name, args in _named_calls(footer):
        assert name == "read_artifact_bytes"
        tools.read_artifact_bytes(source_id, args["start"], args["length"])


def test_a_long_line_before_the_last_still_names_the_next_line(tmp_path: Path) -> None:
    tools, source_id = _save(tmp_path, "x" * 200_000 + "\nafter\n")

    footer = tools.read_artifact(source_id).rsplit("\n", 1)[1]

    assert "skip to the next line with offset=1" in footer
    assert tools.read_artifact(source_id, 1).splitlines()[1].endswith("after")


def test_a_page_that_ends_on_the_last_line_names_no_next_page(tmp_path: Path) -> None:
    tools, source_id = _save(tmp_path, "line\n" * 100)

    page = tools.read_artifact(source_id, 90, 10)

    assert page.endswith("[end of artifact]")


def test_the_reader_gives_no_next_offset_past_the_last_line(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    reader = ArtifactReader(ext.session)
    for text in ("x" * 300_000 + "\n", "x" * 300_000, "a\n" * 70_000):
        ref = ext.externalize(text, "tool").artifact
        last = max(ref.line_count - 1, 0)
        page = reader.read_lines(ref.source_id, last, 1, max_bytes=1024)
        assert page.next_offset is None, text[:10]


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    final_newline=st.booleans(),
    limit=st.integers(1, 5),
)
def test_following_every_hint_of_every_page_never_fails(
    lengths: list[int], final_newline: bool, limit: int
) -> None:
    text = "\n".join(chr(ord("a") + i % 26) * n for i, n in enumerate(lengths))
    text += "\n" if final_newline else ""
    with tempfile.TemporaryDirectory() as tmp:
        tools, source_id = _save(Path(tmp), text)
        assert _follow_every_hint(tools, source_id, limit) >= 1
