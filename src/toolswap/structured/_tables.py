"""How a table's text is split into rows of cells: one rule for detection, the outline,
record reads and queries. CSV as RFC 4180 reads it (a quoted cell may hold the delimiter,
quotes and newlines). TSV as IANA's text/tab-separated-values defines it, without quoting:
a quote is a character of its cell, as the tools that write TSV (``git log`` formats,
``mysql --batch``, ``sqlite3 -tabs``, ``cut``, ``awk``) mean it. Read with CSV's quoting,
a cell opening with a quote it never closes swallowed the rest of the output into itself,
and one such as ``"WIP" do not merge`` lost its quotes; deciding from the first 64 KiB
which way to read was wrong past them (two reviews). A TSV written with CSV's quoting
(Python's ``csv``, pandas) keeps its quotes, and a quoted cell holding a tab or a newline
splits: such a table reads as ragged, and the outline leaves it as text. A UTF-8 BOM is
read past by the callers (``utf-8-sig``) before the header is split.

A cell is read as the JSON value it spells (``_values._cell``), except in a text column:
one whose non-empty cells among the first ``TYPING_ROWS`` rows are mostly not numbers
or booleans. Read cell by cell, a column of short commit hashes held the numbers
``1234567`` and ``3.8995e+91`` (``38995e87``) among its strings, and a query for one hash
missed it. A column of numbers with a few placeholders (``N/A``, ``-``) stays numbers,
its placeholders text, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import zip_longest

from ._values import _cell, _scalar_cells

__all__ = [
    "TYPING_ROWS",
    "table_rows",
    "text_columns",
    "typed_cells",
    "typed_row",
    "typing_sample",
]

TYPING_ROWS = 200
"""The first rows (not blank) that decide which columns hold text (``text_columns``): as
many as the outline walks whole, and at about 0.25 ms for 1,000 cells cheap enough for
every table's capture."""


def table_rows(lines: Iterable[str], fmt: str) -> Iterator[list[str]]:
    """The rows of a ``csv`` or ``tsv`` table whose text ``lines`` gives (a file opened
    with ``newline=""``, or lines without their ends)."""
    import csv  # not on the start-up path: only for output that looks like a table

    if fmt == "tsv":
        return csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE, strict=False)
    return csv.reader(lines, delimiter=",", strict=False)


_MISSING = frozenset(("NA", "N/A", "n/a", "NaN", "nan", "null", "NULL", "None", "-"))
"""Cells that stand for a missing value: they count for neither side (the cell itself
stays text)."""


def typing_sample(rows: Iterator[list[str]]) -> list[list[str]]:
    """The rows read from ``rows`` up to the ``TYPING_ROWS``-th that is not blank, blank
    ones kept in their places: the outline reads on from where this stops, and its sample
    is the rows record reads and queries decide by (``filter(None, ...)`` of it)."""
    taken: list[list[str]] = []
    filled = 0
    for row in rows:
        taken.append(row)
        filled += bool(row)
        if filled >= TYPING_ROWS:
            break
    return taken


def text_columns(header: Sequence[str], rows: Iterable[Sequence[str]]) -> frozenset[str]:
    """The names of ``header``'s columns that hold text: most of their non-empty cells in
    ``rows`` (the table's first ``TYPING_ROWS`` rows that are not blank), placeholders
    for missing values aside, are not numbers or booleans. A name the header repeats is
    its last column's, as a row's dict keeps it. (Column by column, in C: the outline pays
    for it in every table's capture.)"""
    columns = dict(zip(header, zip_longest(*rows, fillvalue=""), strict=False))
    text = []
    for name, cells in columns.items():
        # (A placeholder for a missing value says nothing of the column: 250 rows of R's
        # NA before the numbers made a column of numbers text, a review.)
        filled = [cell for cell in cells if cell and cell not in _MISSING]
        if (len(filled) - _scalar_cells(filled)) * 2 > len(filled):
            text.append(name)
    return frozenset(text)


def typed_cells(cells: Mapping[str, str], text: frozenset[str]) -> dict[str, object]:
    """A row's ``cells`` (by column name) as JSON values: an empty cell is null, a cell of
    a ``text`` column its text, any other the value it spells."""
    return {
        name: cell if name in text and cell != "" else _cell(cell) for name, cell in cells.items()
    }


def typed_row(header: Sequence[str], row: Sequence[str], text: frozenset[str]) -> dict[str, object]:
    """``typed_cells`` of a row as the table's reader gives it (its cells in order)."""
    return typed_cells(dict(zip(header, row, strict=False)), text)
