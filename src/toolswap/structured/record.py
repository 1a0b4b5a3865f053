"""Reading one record of a structured artifact by its address (``items[3777]``, row 5120),
streaming over the verified artifact in bounded memory.

JSON is walked as ijson's event stream (its C backend): the members and elements before
the addressed one are skipped by a chain of C iterators that counts bracket depth
(:func:`_skip`), so Python code runs once per member or element on the path, never per
event; the record is then written as indented JSON straight from its events, at most
``max_bytes`` of it. JSON Lines records are the lines that are not blank, found by
splitting blocks in C; the record's line is then walked as JSON. A table's records are its
rows after the header (rows that are empty are not records), with cells typed as the query
tool types them, so ``read --record N`` and ``query '.[N]'`` show the same record.
"""

from __future__ import annotations

import csv
import io
import json
import operator
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from itertools import accumulate, chain, count, islice
from operator import itemgetter
from typing import Any

from ..artifact import ArtifactReference
from ..errors import ArtifactQueryError, ArtifactReadError
from ..reader import ArtifactReader, VerifiedArtifact
from ._source import _BLOCK, _Bytes
from ._tables import TYPING_ROWS, table_rows, text_columns, typed_row
from ._values import _key_path
from ._wide_ints import exact_read_is_safe, overflowed
from .address import RecordAddress, parse_address
from .detect import Format
from .query import DEFAULT_QUERY_BYTES, structured_format, structured_reference

__all__ = ["RecordResult", "read_record"]


@dataclass(frozen=True, slots=True)
class RecordResult:
    """One record (or a value inside one) of a structured artifact."""

    source_id: str
    address: str
    """The address as jq writes it (``.items[3777]``, ``.[5120]``)."""
    format: Format
    text: str
    """The value as indented JSON (``json.dumps(value, indent=2)``)."""
    truncated: bool
    """The value is longer than ``max_bytes``: ``text`` is its start only."""
    line: int | None = None
    """JSON Lines: the 1-based number of the record's line."""


class _Missing(Exception):
    """The address names nothing in this artifact (the message says why)."""


def read_record(
    reader: ArtifactReader,
    source: str | ArtifactReference,
    address: str | RecordAddress,
    *,
    max_bytes: int = DEFAULT_QUERY_BYTES,
) -> RecordResult:
    """The value at ``address`` in the verified structured artifact ``source``.

    JSON Lines and tables are arrays of records: their addresses start with the 0-based
    record number (``5120``, ``[5120]``, ``.[5120].name``).

    Raises:
        ArtifactQueryError: the address is malformed (before the artifact is opened), or
            the artifact is not JSON, JSON Lines, CSV or TSV.
        ArtifactReadError: the artifact has no such record (the message says what it has).
    """
    parsed = address if isinstance(address, RecordAddress) else parse_address(address)
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ArtifactReadError(f"max_bytes must be a positive integer, not {max_bytes!r}")
    ref = structured_reference(reader, source)
    with reader.open_verified(ref) as art:
        fmt = structured_format(art, "read it by lines, or search it with grep")
        steps = parsed.steps
        if fmt != "json" and not isinstance(steps[0], int):
            raise ArtifactQueryError(
                f"{ref.source_id} is {'JSON Lines' if fmt == 'jsonl' else 'a table'}: an array "
                f"of records, so an address starts with a record number (0-based), such as "
                f"5120 or .[5120].{steps[0]}"
            )
        line: int | None = None
        try:
            if fmt == "json":
                bom = _bom(art)
                text, truncated = _from_events(
                    lambda n, at: art.pread(n, bom + at), art.size - bom, steps, max_bytes
                )
            elif fmt == "jsonl":
                assert isinstance(steps[0], int)
                line, start, end = _jsonl_line(art, steps[0])
                text, truncated = _from_events(
                    lambda n, at: art.pread(n, start + at),
                    end - start,
                    steps[1:],
                    max_bytes,
                    f".[{steps[0]}]",
                )
            else:
                assert isinstance(steps[0], int)
                text, truncated = _table_row(art, fmt, steps, max_bytes)
        except _Missing as exc:
            raise ArtifactReadError(f"{ref.source_id} has no {parsed.path}: {exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:  # ijson's errors are ValueErrors
            where = f" (line {line})" if line is not None else ""
            raise ArtifactReadError(
                f"{ref.source_id}{where} is not valid {fmt.upper()} where {parsed.path} "
                f"is ({str(exc)[:200]}); read it by lines or bytes instead"
            ) from None
        art.check_unchanged()
    return RecordResult(
        source_id=ref.source_id,
        address=parsed.path,
        format=fmt,
        text=text,
        truncated=truncated,
        line=line,
    )


# -- JSON: ijson's events ------------------------------------------------------------------

_DEPTH = {
    "start_map": 1,
    "start_array": 1,
    "end_map": -1,
    "end_array": -1,
    "map_key": 0,
    "null": 0,
    "boolean": 0,
    "integer": 0,
    "double": 0,
    "number": 0,
    "string": 0,
}
_KINDS = {
    "start_map": "an object",
    "start_array": "an array",
    "null": "null",
    "boolean": "a boolean",
    "integer": "a number",
    "double": "a number",
    "number": "a number",
    "string": "a string",
}
_Event = tuple[str, Any]


def _deltas(events: Iterator[_Event]) -> Iterator[int]:
    """How each event changes the bracket depth (computed in C)."""
    return map(_DEPTH.__getitem__, map(itemgetter(0), events))


def _skip(events: Iterator[_Event]) -> None:
    """Consume the rest of the container whose start event was just read."""
    next(filter(operator.not_, accumulate(_deltas(events), initial=1)), None)


def _from_events(
    read: Callable[[int, int], bytes],
    size: int,
    steps: tuple[str | int, ...],
    max_bytes: int,
    path: str = "",
) -> tuple[str, bool]:
    """The value at ``steps`` in the ``size``-byte JSON document ``read(count, offset)``
    reads (itself at ``path``), as indented JSON. Numbers are read as floats; a document
    with an integer past 64 bits, where ijson's C backend stops so, is read again with
    every number as written (unless that is not safe: see ``_wide_ints``)."""
    import ijson  # a C extension: only when a record is read

    for exact in (False, True):
        try:
            events = iter(ijson.basic_parse(_Bytes(read, size), use_float=not exact))
            return _walk(events, steps, max_bytes, path)
        except ijson.JSONError as exc:
            if exact or not overflowed(exc):
                raise ValueError(str(exc)) from None
            if not exact_read_is_safe(read, size):
                raise ValueError(
                    f"a number of more digits than Python reads ({sys.get_int_max_str_digits():,})"
                ) from None
        except StopIteration:
            raise ValueError("the document ends early") from None
    raise AssertionError("not reached")


def _walk(
    events: Iterator[_Event], steps: tuple[str | int, ...], max_bytes: int, path: str
) -> tuple[str, bool]:
    first = next(events)
    for step in steps:
        if isinstance(step, str):
            if first[0] != "start_map":
                raise _Missing(f"{path or '.'} is {_KINDS[first[0]]}, not an object")
            while True:
                event, key = next(events)
                if event == "end_map":
                    raise _Missing(f"{path or '.'} has no key {json.dumps(step)}")
                first = next(events)
                if key == step:
                    break
                if first[0] in ("start_map", "start_array"):
                    _skip(events)
            path = _key_path(path, step)
        else:
            if first[0] != "start_array":
                raise _Missing(f"{path or '.'} is {_KINDS[first[0]]}, not an array")
            seen = 0
            if step:
                # Each element ends where the depth is back to 0; the array's end makes it -1.
                for depth in filter(partial(operator.ge, 0), accumulate(_deltas(events))):
                    if depth < 0:
                        break
                    seen += 1
                    if seen == step:
                        break
            first = next(events) if seen == step else ("end_array", None)
            if first[0] == "end_array":
                raise _Missing(
                    f"{path or '.'} has {seen:,} elements; index {step} is past the end"
                    + (f" (0-{seen - 1})" if seen else "")
                )
            path = f"{path or '.'}[{step}]"
    return _pretty(first, events, max_bytes)


def _pretty(first: _Event, events: Iterator[_Event], max_bytes: int) -> tuple[str, bool]:
    """The value that starts with ``first`` as ``json.dumps(value, indent=2)`` writes it,
    from its events, stopping after ``max_bytes`` characters (then ``True``)."""
    out: list[str] = []
    size = 0
    # Per open container: [is an object, has members yet].
    stack: list[list[bool]] = []
    event, value = first
    while True:
        if event in ("end_map", "end_array"):
            _, had = stack.pop()
            piece = ("\n" + "  " * len(stack) if had else "") + ("}" if event == "end_map" else "]")
        elif event == "map_key":
            piece = ("," if stack[-1][1] else "") + "\n" + "  " * len(stack)
            piece += json.dumps(value, ensure_ascii=False) + ": "
            stack[-1][1] = True
        else:
            piece = ""
            if stack and not stack[-1][0]:  # an array's element
                piece = ("," if stack[-1][1] else "") + "\n" + "  " * len(stack)
                stack[-1][1] = True
            if event == "start_map":
                piece += "{"
                stack.append([True, False])
            elif event == "start_array":
                piece += "["
                stack.append([False, False])
            elif type(value) is Decimal:  # (a number, read exactly: as written)
                piece += str(value)
            else:
                piece += json.dumps(value, ensure_ascii=False)
        out.append(piece)
        size += len(piece)
        if size > max_bytes:
            return "".join(out)[:max_bytes], True
        if not stack:
            return "".join(out), False
        event, value = next(events)


def _bom(art: VerifiedArtifact) -> int:
    """The length of a UTF-8 BOM at the artifact's start (yajl refuses one; detection, the
    outline and queries read past it, so the pointer's own record address failed)."""
    return 3 if art.pread(3, 0) == b"\xef\xbb\xbf" else 0


# -- JSON Lines: the lines that are not blank ---------------------------------------------


def _blank(line: bytes) -> bool:
    return not line or line.isspace()


def _jsonl_line(art: VerifiedArtifact, number: int) -> tuple[int, int, int]:
    """(1-based line number, first byte, end byte) of record ``number`` (0-based)."""
    records = 0  # records in the complete lines before ``start``
    line_no = 1  # the number of the line that starts at ``start``
    start = pos = _bom(art)  # (a BOM is no part of the first line, which may be blank then)
    blank = True  # the line from ``start`` is blank so far
    while pos < art.size:
        block = art.pread(_BLOCK, pos)
        if not block:
            break
        parts = block.split(b"\n")
        if len(parts) > 1:
            first_blank = blank and _blank(parts[0])
            middle = parts[1:-1]
            found = (0 if first_blank else 1) + len(middle) - middle.count(b"")
            found -= sum(map(bytes.isspace, middle))
            if records + found > number:
                # The record is one of this block's complete lines: walk them.
                at = start
                for index, part in enumerate(parts[:-1]):
                    end = pos + len(parts[0]) if index == 0 else at + len(part)
                    if not (first_blank if index == 0 else _blank(part)):
                        if records == number:
                            return line_no + index, at, end
                        records += 1
                    at = end + 1
            records += found
            line_no += len(parts) - 1
            start = pos + len(block) - len(parts[-1])
            blank = _blank(parts[-1])
        else:
            blank = blank and _blank(parts[0])
        pos += len(block)
    if start < art.size and not blank:  # the last line has no newline
        if records == number:
            return line_no, start, art.size
        records += 1
    raise _Missing(
        f"it has {records:,} records; record {number} is past the end"
        + (f" (0-{records - 1})" if records else "")
    )


# -- tables: rows after the header ---------------------------------------------------------


def _table_row(
    art: VerifiedArtifact, fmt: Format, steps: tuple[str | int, ...], max_bytes: int
) -> tuple[str, bool]:
    text = io.TextIOWrapper(
        io.BufferedReader(_Bytes(art.pread, art.size)),
        encoding="utf-8-sig",
        errors="replace",
        newline="",
    )
    try:
        rows = table_rows(text, fmt)
        header = next(rows, [])
        number = steps[0]
        assert isinstance(number, int)
        filled = filter(None, rows)
        # The first rows decide which columns hold text, as for the outline and queries.
        first = list(islice(filled, TYPING_ROWS))
        # (index, row) of the last row read, at most the addressed one (all in C).
        last = deque(islice(zip(count(), chain(first, filled)), number + 1), maxlen=1)
    except csv.Error as exc:
        raise ValueError(str(exc)) from None
    if not last or last[0][0] != number:
        had = last[0][0] + 1 if last else 0
        raise _Missing(
            f"it has {had:,} rows after the header; row {number} is past the end"
            + (f" (0-{had - 1})" if had else "")
        )
    value: Any = typed_row(header, last[0][1], text_columns(header, first))
    path = f".[{number}]"
    for step in steps[1:]:
        if isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            kind = "an object" if isinstance(value, dict) else "a value"
            raise _Missing(f"{path} is {kind} without {json.dumps(step)}")
        path = _key_path(path, step) if isinstance(step, str) else path
    shown = json.dumps(value, ensure_ascii=False, indent=2)
    return (shown[:max_bytes], True) if len(shown) > max_bytes else (shown, False)
