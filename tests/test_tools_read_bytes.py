"""``read_artifact_bytes`` pages of text artifacts begin and end on UTF-8 character boundaries."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from toolswap import ToolResultExternalizer
from toolswap.tools import ArtifactTools

_HEAD = re.compile(
    r"^\[(?P<sid>\S+): bytes (?P<first>[\d,]+)-(?P<last>[\d,]+) of (?P<size>[\d,]+);"
)
_MORE = re.compile(r"start=(?P<start>\d+), length=(?P<length>\d+)\)\]$")


def _page(tools: ArtifactTools, source_id: str, start: int, length: int) -> tuple[str, int | None]:
    """The page's body and the start its note names (None at the end)."""
    text = tools.read_artifact_bytes(source_id, start, length).text
    head, rest = text.split("\n", 1)
    body, tail = rest.rsplit("\n", 1)
    assert _HEAD.match(head), head
    more = _MORE.search(tail)
    return body, int(more["start"]) if more else None


def _save(tmp_path: Path, text: str) -> tuple[ArtifactTools, str]:
    ext = ToolResultExternalizer(tmp_path / "s1")
    return ArtifactTools(ext), ext.externalize(text, "tool").artifact.source_id


def test_a_page_boundary_inside_a_character_moves_before_it_and_the_next_page_starts_there(
    tmp_path: Path,
) -> None:
    tools, source_id = _save(tmp_path, "ab€cd" * 3)  # € is three bytes: 0..1 ab, 2..4 €
    body, next_start = _page(tools, source_id, 0, 4)
    assert (body, next_start) == ("ab", 2)
    body, next_start = _page(tools, source_id, 2, 4)
    assert (body, next_start) == ("€c", 6)


def test_a_start_inside_a_character_moves_back_to_its_first_byte(tmp_path: Path) -> None:
    tools, source_id = _save(tmp_path, "ab€cd")
    text = tools.read_artifact_bytes(source_id, 3, 1).text
    assert text.splitlines()[0].startswith(f"[{source_id}: bytes 2-4 of 7;")
    assert text.splitlines()[1] == "€"


def test_a_page_too_short_for_one_character_holds_the_whole_character(tmp_path: Path) -> None:
    tools, source_id = _save(tmp_path, "😀x")
    assert _page(tools, source_id, 0, 1) == ("😀", 4)


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(
        st.characters(categories=("L", "N", "P", "S", "Zs"), exclude_characters="\ufffd"),
        min_size=1,
        max_size=300,
    ),
    length=st.integers(1, 40),
)
def test_following_the_next_offset_reads_every_byte_once_without_replacement_characters(
    text: str, length: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tools, source_id = _save(Path(tmp), text)
        pages: list[str] = []
        start: int | None = 0
        while start is not None:
            body, start = _page(tools, source_id, start, length)
            assert "\ufffd" not in body
            pages.append(body)
        assert "".join(pages) == text
