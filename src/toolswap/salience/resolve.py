"""Reading the chosen lines back from the finished artifact: each with one line of context
before and after, the start and the end of a traceback block, and, for a match inside a
very long line, a window around the match with its byte offset (what ``read --byte-start``
takes). Lines that share a template are listed once, with how many others are like it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .candidates import Entry
from .display import SALIENT_LINE_CHARS, WINDOW_BEFORE, display_line
from .vocabulary import ASCII_LOWER, FIND_WORDS, OVERLAP

__all__ = ["Pread", "SalientLine", "resolve"]

_CONTEXT_READ = 4096
_LONG_LINE_READ = 1 << 20
_LONG_LINE_MAX = 8 << 20
_TRACEBACK_READ = 64 << 10


@dataclass(frozen=True, slots=True)
class SalientLine:
    """A line the pointer may list, with its 1-based line number."""

    line_no: int
    text: str
    rank: int = 0
    """0 is the most telling; context lines share their failure line's rank."""
    context: bool = False
    """A line shown for meaning (the one before or after a failure line, a traceback's
    first or last line), not a match itself."""
    byte_offset: int | None = None
    """When ``text`` is a window inside a long line: the artifact byte it starts at."""
    similar: int = 0
    """How many other lines share this line's template (they are not listed)."""


Pread = Callable[[int, int], bytes]
"""``pread(count, offset)`` on the finished artifact."""


def _line_at(pread: Pread, offset: int, size: int) -> tuple[bytes, int, bool]:
    """(the line starting at ``offset``: at most _CONTEXT_READ bytes, its end, whether it
    goes on)."""
    block = pread(_CONTEXT_READ, offset)
    newline = block.find(b"\n")
    if newline >= 0:
        return block[:newline], offset + newline + 1, False
    return block, min(offset + len(block), size), offset + len(block) < size


def _previous_line(pread: Pread, line_offset: int) -> bytes | None:
    if line_offset <= 0:
        return None
    start = max(line_offset - _CONTEXT_READ, 0)
    block = pread(line_offset - start, start)
    if not block.endswith(b"\n"):
        return None
    body = block[:-1]
    newline = body.rfind(b"\n")
    if newline < 0 and start > 0:
        return b"\xe2\x80\xa6" + body[-SALIENT_LINE_CHARS:]  # its start lies further back
    return body[newline + 1 :]


def _locate(pread: Pread, line_offset: int, size: int) -> int | None:
    """The byte offset of the first vocabulary word in the line at ``line_offset``."""
    pos = line_offset
    end = min(size, line_offset + _LONG_LINE_MAX)
    carry = b""
    while pos < end:
        block = pread(min(_LONG_LINE_READ, end - pos), pos)
        if not block:
            return None
        newline = block.find(b"\n")
        if newline >= 0:
            block = block[:newline]
        data = (carry + block).translate(ASCII_LOWER)
        hits = [i for i in (data.find(word) for word in FIND_WORDS) if i >= 0]
        if hits:
            return pos - len(carry) + min(hits)
        if newline >= 0:
            return None
        carry = data[-OVERLAP:]
        pos += len(block)
    return None


def _is_traceback_start(text: bytes) -> bool:
    return b"Traceback (most recent call last)" in text


def _traceback_end(pread: Pread, after: int, line_no: int) -> tuple[int, bytes] | None:
    """The last line of the traceback whose first line ends at ``after``."""
    block = pread(_TRACEBACK_READ, after)
    number = line_no
    for line in block.split(b"\n")[:-1]:
        number += 1
        if line and not line[:1].isspace():
            return number, line
    return None


def _traceback_start(pread: Pread, line_offset: int, line_no: int) -> tuple[int, bytes] | None:
    """The first line of the traceback that the line at ``line_offset`` ends."""
    start = max(line_offset - _TRACEBACK_READ, 0)
    lines = pread(line_offset - start, start).split(b"\n")[:-1]
    number = line_no
    for line in reversed(lines if start == 0 else lines[1:]):
        number -= 1
        if _is_traceback_start(line):
            return number, line
        if line and not line[:1].isspace():
            return None
    return None


def resolve(
    entries: Iterable[Entry], pread: Pread, size: int, *, limit: int = 64
) -> tuple[SalientLine, ...]:
    """Read the best ``limit`` candidates back with their context lines.

    Returns every line once, in line order; ``rank`` says how telling each one is.
    """
    rows: dict[int, SalientLine] = {}

    def put(line: SalientLine) -> None:
        old = rows.get(line.line_no)
        if old is None or (old.context and not line.context) or old.rank > line.rank:
            rows[line.line_no] = line

    for rank, entry in enumerate(entries):
        if rank >= limit:
            break
        line, line_end, goes_on = _line_at(pread, entry.line_offset, size)
        match_offset = entry.match_offset
        if match_offset is None and (goes_on or len(line) > SALIENT_LINE_CHARS * 2):
            found = _locate(pread, entry.line_offset, size)
            if found is not None and found - entry.line_offset > SALIENT_LINE_CHARS // 2:
                match_offset = max(found - WINDOW_BEFORE, entry.line_offset)
        if match_offset is not None:
            window = pread(SALIENT_LINE_CHARS * 4, match_offset)
            text = window.split(b"\n", 1)[0].decode("utf-8", "ignore")
            put(
                SalientLine(
                    entry.line_no,
                    "…" + display_line(text.encode())[: SALIENT_LINE_CHARS - 2] + "…",
                    rank=rank,
                    byte_offset=match_offset,
                    similar=entry.count - 1,
                )
            )
            if goes_on:
                line_end = _skip_line(pread, entry.line_offset, size)
        else:
            put(SalientLine(entry.line_no, display_line(line), rank=rank, similar=entry.count - 1))
        before = _previous_line(pread, entry.line_offset)
        if before is not None and before.strip():
            put(SalientLine(entry.line_no - 1, display_line(before), rank=rank, context=True))
        if line_end < size:
            after, _, _ = _line_at(pread, line_end, size)
            if after.strip():
                put(SalientLine(entry.line_no + 1, display_line(after), rank=rank, context=True))
        if _is_traceback_start(line) and line_end < size:
            end = _traceback_end(pread, line_end, entry.line_no)
            if end is not None:
                put(SalientLine(end[0], display_line(end[1]), rank=rank, context=True))
        elif before is not None and before[:1].isspace():
            start = _traceback_start(pread, entry.line_offset, entry.line_no)
            if start is not None:
                put(SalientLine(start[0], display_line(start[1]), rank=rank, context=True))
    return tuple(rows[number] for number in sorted(rows))


def _skip_line(pread: Pread, line_offset: int, size: int) -> int:
    """Where the line at ``line_offset`` ends (past its newline), looking 8 MiB ahead."""
    pos = line_offset
    end = min(size, line_offset + _LONG_LINE_MAX)
    while pos < end:
        block = pread(min(_LONG_LINE_READ, end - pos), pos)
        if not block:
            break
        newline = block.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(block)
    return size
