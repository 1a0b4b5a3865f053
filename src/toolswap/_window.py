"""How a line longer than the display width is shown: split into marked pieces (reads), or
as a window around a byte of interest that says where it starts (grep matches)."""

from __future__ import annotations

import os

__all__ = ["CONTINUATION_MARKER", "clip_line", "from_byte_marker", "window"]

CONTINUATION_MARKER = " ⟨line continues⟩"
"""Ends a piece of a line that goes on past what is shown."""
_LEAD = 4
"""A window starts this many characters' worth of width before the byte of interest."""


def from_byte_marker(start: int) -> str:
    """Starts a window that begins inside a line: the artifact byte where the text begins
    (what ``read --byte-start`` and ``read_artifact_bytes(start=...)`` take)."""
    return f"⟨from byte {start}⟩ "


def clip_line(text: str, width: int) -> list[str]:
    """``text`` in pieces of ``width`` characters, each but the last marked as continuing."""
    if len(text) <= width:
        return [text]
    pieces = [text[i : i + width] for i in range(0, len(text), width)]
    return [p + CONTINUATION_MARKER for p in pieces[:-1]] + [pieces[-1]]


def window(fd: int, line_start: int, line_end: int, at: int, width: int) -> tuple[str, int]:
    """About ``width`` characters of the line ``[line_start, line_end)`` of file ``fd``
    around byte ``at``, and the byte where they start.

    The window starts a little before ``at`` (on a UTF-8 character boundary) and is marked
    with :func:`from_byte_marker` when it does not start at the line's start, and with
    :data:`CONTINUATION_MARKER` when the line goes on after it.
    """
    start = max(line_start, at - width // _LEAD)
    if start > line_start:
        head = os.pread(fd, 4, start)
        skip = 0
        while skip < len(head) and head[skip] & 0xC0 == 0x80:
            skip += 1  # a UTF-8 continuation byte: begin at the next character
        start += skip
    data = os.pread(fd, min(4 * width, line_end - start), start)
    text = data.decode("utf-8", "replace")
    if len(text) > width:
        text = text[:width] + CONTINUATION_MARKER
    elif start + len(data) < line_end:
        text += CONTINUATION_MARKER
    else:
        text = text.removesuffix("\r")
    prefix = from_byte_marker(start) if start > line_start else ""
    return prefix + text, start
