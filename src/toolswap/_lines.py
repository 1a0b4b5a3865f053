"""The lines of a file, read by offset block by block (private).

The chain log verifies its records line by line and the reader pages an artifact's lines;
the capture counts the newlines of bytes it wrote but did not count as they streamed. All
read with ``pread`` from a known offset up to a known end, so bytes appended meanwhile are
not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

__all__ = ["count_newlines", "iter_lines"]


def count_newlines(pread: Callable[[int, int], bytes], pos: int, end: int, *, block: int) -> int:
    """Newlines in bytes ``pos`` .. ``end`` (fewer if the file ends before ``end``),
    ``pread(length, offset)`` reading ``block`` bytes at a time."""
    count = 0
    while pos < end:
        data = pread(min(block, end - pos), pos)
        if not data:
            break
        count += data.count(b"\n")
        pos += len(data)
    return count


def iter_lines(
    pread: Callable[[int, int], bytes],
    pos: int,
    end: int,
    *,
    block: int,
    longest: int | None = None,
) -> Iterator[tuple[int, bytes, bool]]:
    """``(offset, line, complete)`` for the lines of bytes ``pos`` .. ``end``.

    Args:
        pread: reads ``length`` bytes at ``offset``, ``pread(length, offset)`` (fewer at
            the end of the file).
        block: bytes read at a time.
        longest: a line still without its newline past this many bytes is yielded as it
            stands (``complete`` True) and ends the walk.

    Yields:
        Each line's offset, its bytes without the newline, and True; last, the bytes after
        the final newline (perhaps none) and False, unless ``longest`` ended the walk.
    """
    pending = b""
    pending_start = pos
    while pos < end:
        chunk = pread(min(block, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        data = pending + chunk if pending else chunk
        start = 0
        while True:
            stop = data.find(b"\n", start)
            if stop < 0:
                break
            yield pending_start + start, data[start:stop], True
            start = stop + 1
        pending_start += start
        pending = data[start:]
        if longest is not None and len(pending) > longest:
            yield pending_start, pending, True
            return
    yield pending_start, pending, False
