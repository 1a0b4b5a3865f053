"""The outline of a structured output: its shape with arrays (and objects keyed by names,
``dependencies{}``) collapsed, exact record counts,
each field's types and how often it is present, sample records, and the records that look
like failures, with their paths, inside a byte budget.

The outline is a bounded pass over the bytes just written (read back from the page cache):
all of an output up to 6 MiB is parsed, a share of a larger one (``scan_bytes``), and an
outline of a longer output says where it stopped. A whole JSON document is split by
msgspec into raw members and records, decoded in C (``_read_tree``); one cut at the limit
is parsed by ijson's C backend as a stream of events, so memory holds one record at a time
(either way, a record of more than ``RECORD_EVENTS`` events is counted, not kept). JSON
Lines are decoded in batches of lines, CSV and TSV by the ``csv`` module. Every path is
written as jq writes it (``.items[3777]``, ``.items[].status``; JSON Lines and tables are
arrays of records, ``.[5119]``), so the model can query exactly what it reads.

This module composes the parts: ``_read_json`` (with ``_read_tree`` and ``_envelope``) and
``_read_rows`` read the output (over ``_source``) into an accumulator that walks the sample
for field statistics (``_fields``) and takes the fast path past it (``_fast_path``), noting
failure signs (``_signs``) and writing values as ``_values`` does; ``_render`` fits the
result into the byte budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._envelope import _Summary
from ._fast_path import _Accumulator
from ._read_json import _scan_json
from ._read_rows import _scan_jsonl, _scan_table
from ._render import _envelope, _example, _render
from ._source import Read, _NotStructured, _TooFew
from ._values import _compact
from .detect import Format

__all__ = ["OUTLINE_BYTES", "OUTLINE_SCAN_BYTES", "Outline", "outline", "scan_bytes"]


@dataclass(frozen=True, slots=True)
class Outline:
    """An outline of one structured output, ready for the pointer."""

    format: Format
    text: str
    """The outline as the pointer shows it (at most the budget, in UTF-8 bytes)."""
    records: int
    """Records counted (exact when ``complete``)."""
    complete: bool
    """The whole output was parsed."""
    example_path: str
    """A jq path worth querying (a failure-looking record, else the first record)."""


OUTLINE_BYTES = 5376
"""The outline's default share of the pointer (with the record and query lines, 512-byte
glimpses of the raw head, tail and failure lines and the frame, a structured output's
pointer stays under 8 KiB)."""
OUTLINE_SCAN_BYTES = 16 << 20
"""The most of an output the outline parses by default (see ``scan_bytes``)."""
_SCAN_PART = 2 << 20
_SCAN_WHOLE = 6 << 20
_SCAN_SHARE = 32


def scan_bytes(size: int) -> int:
    """How much of an output of ``size`` bytes the outline parses by default: all of it up
    to 6 MiB; of a larger one, a 32nd (at least 2 MiB, at most ``OUTLINE_SCAN_BYTES``).
    Parsing a byte for the outline costs five to nine times what capturing it does (a
    SHA-256 pass and a write), and the outline runs after the capture: a share keeps a
    large output's capture near its floor, where 16 MiB of a 64 MiB output made it 1.5x.
    (A part of an array is split in C too, after its last whole record (``_read_json``),
    so it costs in proportion: 4 MiB of 64 MiB of JSON made the capture 1.2-1.6x the text
    capture of the same bytes on two cores, 2 MiB 0.9-1.4x.)"""
    if size <= _SCAN_WHOLE:
        return size
    return max(_SCAN_PART, min(size // _SCAN_SHARE, OUTLINE_SCAN_BYTES))


def outline(
    fmt: Format,
    read: Read,
    size: int,
    *,
    line_count: int | None = None,
    budget: int = OUTLINE_BYTES,
    scan_limit: int | None = None,
) -> Outline | None:
    """Outline the output ``read`` gives (``size`` bytes), or None if it is not ``fmt``.

    Args:
        fmt: the format :func:`~toolswap.structured.detect.sniff` saw in the head.
        read: ``read(count, offset)`` returns the output's bytes.
        line_count: the output's line count (a JSON Lines or table outline cut by
            ``scan_limit`` still reports it).
        budget: the outline's size limit in UTF-8 bytes.
        scan_limit: how many bytes are parsed at most (default: ``scan_bytes(size)``; when
            that part holds too few records to outline, up to ``OUTLINE_SCAN_BYTES``).
    """
    limits = [scan_bytes(size) if scan_limit is None else scan_limit]
    if scan_limit is None and limits[0] < min(size, OUTLINE_SCAN_BYTES):
        # Records of megabytes each: a part that holds too few of them is read further.
        limits.append(OUTLINE_SCAN_BYTES)
    for limit in limits:
        try:
            return _outline(fmt, read, size, line_count, budget, limit)
        except _TooFew:
            continue
    return None


def _outline(
    fmt: Format, read: Read, size: int, line_count: int | None, budget: int, scan_limit: int
) -> Outline | None:
    limit = min(size, scan_limit)
    complete = limit >= size
    acc = _Accumulator()
    extra: list[tuple[int, str]] = []
    envelope: str | None = None
    parsed = (
        f"parsed whole ({size:,} bytes)"
        if complete
        else (f"outline of the first {limit:,} of {size:,} bytes")
    )
    try:
        if fmt == "json":
            try:
                root = _scan_json(read, limit, acc, size=size)
            except _NotStructured:
                raise
            except Exception as exc:  # ijson's errors: IncompleteJSONError, JSONError
                if complete:
                    raise _NotStructured(str(exc)) from None
                if not acc.collections:
                    raise _TooFew from None  # (a record longer than the part parsed)
                root = None  # cut at the scan limit: what was parsed stands
            kind = "array" if isinstance(root, _Summary) and not root.names else "object"
            counts = "" if complete else " (the counts below are of that part)"
            head_line = f"--- structure: JSON {kind}, {parsed}{counts} ---"
            if root is not None and not isinstance(root, _Summary):
                envelope = _envelope(root, acc)
            records = sum(c.count for c in acc.collections.values())
            if not acc.collections:
                raise _TooFew  # one small object: the raw text says it all
        elif fmt == "jsonl":
            bad = _scan_jsonl(read, limit, acc, complete=complete)
            records = acc.collections[".[]"].count if ".[]" in acc.collections else 0
            if records < 2:
                raise _TooFew
            counted = f"{records:,} records" + ("" if complete else " in them")
            head_line = f"--- structure: JSON Lines, {_ordered(parsed, counted, complete)} ---"
            if not complete and line_count is not None:
                extra.append((0, f"(the output has {line_count:,} lines in all)"))
            if bad:
                shown = ", ".join(str(n) for n in bad[:5])
                extra.append((0, f"lines that are not JSON: {shown}"))
        else:
            header = _scan_table(read, limit, acc, fmt)
            records = acc.collections[".[]"].count if ".[]" in acc.collections else 0
            if records < 2:
                raise _TooFew
            name = "TSV" if fmt == "tsv" else "CSV"
            counted = f"{records:,} rows" + ("" if complete else " in them")
            head_line = f"--- structure: {name} table, {_ordered(parsed, counted, complete)} ---"
            extra.append((0, "header: " + _compact(header, 900)))
            if not complete and line_count is not None:
                extra.append((0, f"(the output has {line_count:,} lines in all)"))
        text = _render(acc, head_line=head_line, envelope=envelope, extra=extra, budget=budget)
    except _TooFew:
        raise  # (more of the output may hold enough: see ``outline``)
    except (_NotStructured, RecursionError):  # (a record nested too deep to walk or render)
        return None
    return Outline(
        format=fmt, text=text, records=records, complete=complete, example_path=_example(acc)
    )


def _ordered(parsed: str, counted: str, complete: bool) -> str:
    """The head line's count and extent: an outline that stopped early says so before its
    count (which is of the part it read, not of the output)."""
    return f"{counted}, {parsed}" if complete else f"{parsed}: {counted}"
