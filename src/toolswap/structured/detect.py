"""Recognise structured output from its first bytes: JSON, JSON Lines, CSV and TSV.

Only the head the capture already keeps is looked at, with the standard library: plain
text is turned away after a byte or two (its first character is not ``{`` or ``[`` and its
first line holds no comma or tab), so detection costs nothing on the capture path. A
format named here is only a candidate; the outline's parse decides, and a document that
turns out not to be valid stays text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Literal

from ._tables import table_rows

__all__ = ["Format", "sniff", "sniff_on"]

Format = Literal["json", "jsonl", "csv", "tsv"]

_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_MIN_TABLE_ROWS = 3
_MAX_HEADER_CELL = 80
_DATA_CELL = re.compile(
    r"\s*(?:[{\[]|[-+]?[0-9]{9,}(?:\.[0-9]+)?\s*\Z)|.*[0-9]:[0-5][0-9]:[0-5][0-9]"
)
"""A first line's cell that is a log's, not a column's name: a clock time (``00:01:40``,
in ISO, syslog or any other stamp), an epoch-like number of nine digits or more, JSON. A
line of a log (``2026-01-01T00:00:00Z<TAB>INFO<TAB>...``) is no table's header: read as
one, a tab-separated log became a table named by its first line, and its failure lines
gave way to an outline that found none (a review). Years, dates and versions name columns
(``region,2023,2024``, ``metric,2024-01-01``; a first rule refusing every number and
date left such tables as text, a second review)."""
_TABLES: tuple[tuple[str, Format], ...] = (("\t", "tsv"), (",", "csv"))


def sniff(head: bytes, *, complete: bool = False) -> Format | None:
    """The structured format ``head`` starts like, or None for text.

    Args:
        head: the first bytes of the output.
        complete: ``head`` is the whole output (its last line is not cut).
    """
    data = head.removeprefix(_BOM)
    start = len(data) - len(data.lstrip(_WS))
    if start >= len(data):
        return None
    first = data[start]
    if first in b"{[":
        return _json_kind(data[start:], complete=complete)
    newline = data.find(b"\n")
    line = data if newline < 0 else data[:newline]
    if b"\t" not in line and b"," not in line:
        return None
    return _table_kind(data, complete=complete)


def _json_kind(data: bytes, *, complete: bool) -> Format | None:
    lines = data.split(b"\n")
    if not complete and len(lines) > 1:
        lines.pop()  # cut in the middle
    values = [line for line in lines if line.strip()]
    if len(values) >= 2:
        # JSON Lines: every complete line is a JSON value of its own (a pretty-printed
        # document's first line, "{" or "[", is not).
        for line in values[:50]:
            if line.lstrip()[:1] not in (b"{", b"["):
                return "json" if _may_be_json_start(values[0]) else None
            try:
                json.loads(line)
            except ValueError:
                return "json" if _may_be_json_start(values[0]) else None
        return "jsonl"
    return "json"


def _may_be_json_start(line: bytes) -> bool:
    """A pretty-printed document's first line: an opening bracket, maybe with a first key."""
    text = line.strip()
    return text in (b"{", b"[") or text.startswith((b'{"', b"[{", b"[[", b'["', b"[\n"))


def _table_kind(data: bytes, *, complete: bool) -> Format | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "ignore")  # only the cut at the end can be partial
    lines = text.split("\n")
    if not complete and len(lines) > 1:
        lines.pop()
    lines = [line.rstrip("\r") for line in lines[:400] if line.strip()]
    if len(lines) < _MIN_TABLE_ROWS:
        return None
    for delimiter, kind in _TABLES:
        if delimiter not in lines[0]:
            continue
        import csv  # not on the start-up path: only for output that looks like a table

        try:
            rows = list(table_rows(lines, kind))
        except csv.Error:  # a stray carriage return inside a line: not a table we read
            continue
        header = rows[0]
        if len(header) < 2 or len(set(header)) != len(header):
            continue
        if any(
            not cell.strip() or len(cell) > _MAX_HEADER_CELL or _DATA_CELL.match(cell)
            for cell in header
        ):
            continue
        # A quoted cell may hold a newline: such a row spans lines, so only the rows that
        # parse whole are compared (most rows of a real table do).
        whole = sum(1 for row in rows[1:] if len(row) == len(header))
        if whole >= max(_MIN_TABLE_ROWS - 1, int(0.9 * (len(rows) - 1))):
            return kind
    return None


_LINE_BLOCK = 1 << 20


def sniff_on(
    head: bytes, read: Callable[[int, int], bytes], size: int, *, limit: int
) -> Format | None:
    """``sniff`` of ``head``, read on where the head cannot tell: a JSON value whose first
    line is not followed by a second whole one in the head is one document, or the first
    of JSON Lines whose records are longer than the head (it was taken for one document,
    which then failed to parse): JSON Lines when that line ends the value it opens and the
    next line opens another. Up to ``limit`` bytes are searched for the first line's end
    (callers pass the part an outline parses first: ``outline.scan_bytes``).

    Args:
        head: the first bytes of the output (``read`` gives the same bytes).
        read: ``read(count, offset)`` returns bytes of the whole output.
        size: the output's size in bytes.
    """
    complete = len(head) >= size
    fmt = sniff(head, complete=complete)
    text = head.removeprefix(_BOM).lstrip(_WS)
    whole = text[: text.rfind(b"\n") + 1].split(b"\n")
    if fmt != "json" or complete or sum(1 for line in whole if line.strip(_WS)) > 1:
        return fmt  # (two whole lines in the head: ``sniff`` read them)
    first = text[:1]
    pos = len(head) - len(text)
    end = min(size, max(limit, len(head)))
    while pos < end:
        block = read(min(_LINE_BLOCK, end - pos), pos)
        if not block:
            return fmt
        newline = block.find(b"\n")
        if newline >= 0:
            line_end = pos + newline
            last = read(1, line_end - 1)
            if last == b"\r":
                last = read(1, line_end - 2)
            closer = b"}" if first == b"{" else b"]"
            if last != closer:
                return fmt
            return "jsonl" if _next_start(read, line_end + 1, size) in (b"{", b"[") else fmt
        pos += len(block)
    return fmt


def _next_start(read: Callable[[int, int], bytes], pos: int, size: int) -> bytes:
    """The first byte from ``pos`` that is not whitespace (blank lines skipped, up to 1 MiB
    of them), or ``b""``."""
    end = min(size, pos + _LINE_BLOCK)
    while pos < end:
        block = read(min(64 << 10, end - pos), pos)
        if not block:
            break
        rest = block.lstrip(_WS)
        if rest:
            return rest[:1]
        pos += len(block)
    return b""
