"""Walking a file's lines by offset gives back every byte, at its offset, whatever the block."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from toolswap._lines import iter_lines


def _pread(data: bytes) -> Callable[[int, int], bytes]:
    def pread(length: int, offset: int) -> bytes:
        return data[offset : offset + length]

    return pread


@given(st.binary(max_size=300), st.integers(1, 40), st.data())
def test_the_lines_and_their_offsets_give_back_the_bytes(
    data: bytes, block: int, draw: st.DataObject
) -> None:
    pos = draw.draw(st.integers(0, len(data)))
    walked = list(iter_lines(_pread(data), pos, len(data), block=block))
    *lines, (tail_at, tail, tail_complete) = walked
    assert not tail_complete
    rebuilt = b"".join(line + b"\n" for _, line, _ in lines) + tail
    assert rebuilt == data[pos:]
    for offset, line, complete in lines:
        assert complete
        assert data[offset : offset + len(line) + 1] == line + b"\n"
    assert data[tail_at:] == tail


def test_a_line_longer_than_the_longest_ends_the_walk_as_it_stands() -> None:
    data = b"a\n" + b"x" * 50 + b"\nb\n"
    walked = list(iter_lines(_pread(data), 0, len(data), block=8, longest=20))
    assert walked[0] == (0, b"a", True)
    offset, line, complete = walked[-1]
    assert (offset, complete) == (2, True)
    assert line.startswith(b"x" * 20) and b"b" not in line


def test_bytes_past_the_end_are_not_read() -> None:
    data = b"one\ntwo\nthree\n"
    walked = list(iter_lines(_pread(data), 0, 8, block=3))
    assert walked == [(0, b"one", True), (4, b"two", True), (8, b"", False)]
