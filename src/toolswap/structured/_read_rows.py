"""Reading outputs made of rows: JSON Lines, a batch of lines parsed at once (line by line
when one is not JSON, and too many such lines make it text), and CSV or TSV tables by the
``csv`` module, whose rows past the sample stay text except for the cells the fast path
looks at.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from itertools import chain, islice, repeat

from ._decode import loads_each
from ._fast_path import _Accumulator
from ._fields import SAMPLE_RECORDS
from ._source import _BATCH, _BLOCK, Read, _Bytes, _NotStructured
from ._tables import table_rows, text_columns, typed_cells, typed_row, typing_sample
from ._values import _compact

__all__ = ["_scan_jsonl", "_scan_table"]


def _lines(read: Read, limit: int, *, complete: bool) -> Iterator[bytes]:
    """Complete lines of the first ``limit`` bytes (a line cut at the limit is left out;
    with ``complete``, the limit is the end of the output, and its last line is whole)."""
    pos = 0
    rest = b""
    while pos < limit:
        block = read(min(_BLOCK, limit - pos), pos)
        if not block:
            break
        pos += len(block)
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest and (complete or pos < limit):
        yield rest  # the last line of the output, without a newline


def _scan_jsonl(read: Read, limit: int, acc: _Accumulator, *, complete: bool) -> list[int]:
    """Feed each line's value to ``acc``; return the numbers of lines that are not JSON
    (``complete``: ``limit`` is the end of the output)."""
    bad: list[int] = []
    index = 0
    line_no = 0
    batch: list[bytes] = []

    def flush() -> None:
        # A batch of lines, each parsed on its own by msgspec where it can (C speed; a
        # batch joined into one array took lines that are not JSON alone, such as
        # ``{...},[{...}`` and ``{...}]``, for two records); if one fails, line by line.
        nonlocal index
        first = line_no - len(batch) + 1
        lines = [(n, line) for n, line in enumerate(batch, first) if line.strip()]
        try:
            values: list[object] | None = loads_each([line for _, line in lines])
        except ValueError:
            values = None
        if values is not None:
            acc.batch(".[]", ".", index, values)
        else:
            # A line that is not JSON keeps its place: record N is the Nth line that is not
            # blank, as a record read (``read --record N``) counts them.
            run: list[object] = []
            for position, (number, line) in enumerate(lines, index):
                try:
                    run.append(json.loads(line))
                except ValueError:
                    if run:
                        acc.batch(".[]", ".", position - len(run), run)
                        run = []
                    bad.append(number)
                    if len(bad) > max(3, number // 100):
                        raise _NotStructured("too many lines are not JSON") from None
            if run:
                acc.batch(".[]", ".", index + len(lines) - len(run), run)
        index += len(lines)
        batch.clear()

    for line in _lines(read, limit, complete=complete):
        line_no += 1
        batch.append(line)
        if len(batch) >= 512:
            flush()
    flush()
    return bad


def _scan_table(read: Read, limit: int, acc: _Accumulator, fmt: str) -> list[str]:
    """Feed each row of the ``csv`` or ``tsv`` table (a dict of typed cells) to ``acc``;
    return the header."""
    text = io.TextIOWrapper(
        io.BufferedReader(_Bytes(read, limit)), encoding="utf-8-sig", errors="replace", newline=""
    )
    rows = _checked(table_rows(text, fmt))
    try:
        header = next(rows)
    except StopIteration:
        raise _NotStructured("no header") from None
    width = len(header)
    # The first rows decide which columns hold text (read again below, from memory).
    first = typing_sample(rows)
    text_cols = text_columns(header, filter(None, first))
    rows = chain(first, rows)

    def typed(cells: dict[str, str]) -> str:
        return _compact(typed_cells(cells, text_cols))

    ragged = 0
    pending: list[dict[str, str]] = []
    pending_first = 0
    index = -1

    def row_by_row(batch: list[list[str]]) -> None:
        nonlocal ragged, pending, pending_first, index
        for row in batch:
            if not row:  # not a record (query and read --record skip it too)
                if pending:  # a batch's rows are consecutive
                    acc.batch(".[]", ".", pending_first, pending, typed)
                    pending = []
                continue
            index += 1
            if len(row) != width:
                ragged += 1
                if ragged > max(3, index // 100):
                    raise _NotStructured("rows do not match the header")
            if index < SAMPLE_RECORDS:
                acc.record(".[]", f".[{index}]", typed_row(header, row, text_cols))
                continue
            # Past the sample a row stays text: only the cells of the columns that can
            # carry a failure sign (read typed) or have few values are looked at, and a
            # row shown is typed then (``typed``).
            if not pending:
                pending_first = index
            pending.append(dict(zip(header, row, strict=False)))
            if len(pending) >= _BATCH:
                acc.batch(".[]", ".", pending_first, pending, typed)
                pending = []

    row_by_row(list(islice(rows, SAMPLE_RECORDS)))
    while True:
        batch = list(islice(rows, _BATCH))
        if not batch:
            break
        if index + 1 < SAMPLE_RECORDS or sum(map(width.__ne__, map(len, batch))):
            # Rows of the sample still to come, or blank or short rows: one by one (a
            # blank row is not a record, a short one counts against the bound).
            row_by_row(batch)
            continue
        if pending:  # the rows before these go first
            acc.batch(".[]", ".", pending_first, pending, typed)
            pending = []
        # A batch of whole rows, each a dict of its cells' text, made in C.
        records = list(map(dict, map(zip, repeat(header), batch)))
        acc.batch(".[]", ".", index + 1, records, typed, alike=True)
        index += len(batch)
    if pending:
        acc.batch(".[]", ".", pending_first, pending, typed)
    return header


def _checked(rows: Iterator[list[str]]) -> Iterator[list[str]]:
    """``rows``, where the csv module's refusal (a cell past its field size limit) makes
    the output text."""
    try:
        yield from rows
    except csv.Error as exc:
        raise _NotStructured(str(exc)) from None
