"""Recognise structured output from its first bytes: JSON, JSON Lines, CSV and TSV.

Only the head the capture already keeps is looked at, with the standard library: plain
text is turned away after a byte or two (its first character is not ``{`` or ``[`` and its
first line holds no comma or tab), so detection costs nothing on the capture path. A
format named here is only a candidate; the outline's parse decides, and a document that
turns out not to be valid stays text.
"""

from __future__ import annotations

import json
from typing import Literal

__all__ = ["Format", "sniff"]

Format = Literal["json", "jsonl", "csv", "tsv"]

_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_MIN_TABLE_ROWS = 3
_MAX_HEADER_CELL = 80
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

        rows = list(csv.reader(lines, delimiter=delimiter, strict=False))
        header = rows[0]
        if len(header) < 2 or len(set(header)) != len(header):
            continue
        if any(not cell.strip() or len(cell) > _MAX_HEADER_CELL for cell in header):
            continue
        # A quoted cell may hold a newline: such a row spans lines, so only the rows that
        # parse whole are compared (most rows of a real table do).
        whole = sum(1 for row in rows[1:] if len(row) == len(header))
        if whole >= max(_MIN_TABLE_ROWS - 1, int(0.9 * (len(rows) - 1))):
            return kind
    return None
