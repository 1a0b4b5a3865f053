"""How a table's text is split into rows of cells: one rule for detection, the outline,
record reads and queries. CSV as RFC 4180 reads it (a quoted cell may hold the delimiter,
quotes and newlines); TSV as IANA's text/tab-separated-values, without quoting: a quote is
a character of its cell (read with CSV's quoting, one cell opening with an unmatched quote
swallowed the rest of a 2,000-row output into it: three rows were counted). A UTF-8 BOM
before the header is not part of its first name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["header_of", "table_rows"]

_BOM = "\ufeff"


def table_rows(lines: Iterable[str], fmt: str) -> Iterator[list[str]]:
    """The rows of a ``csv`` or ``tsv`` table whose text ``lines`` gives (a file opened
    with ``newline=""``, or lines without their ends)."""
    import csv  # not on the start-up path: only for output that looks like a table

    if fmt == "tsv":
        return csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE, strict=False)
    return csv.reader(lines, delimiter=",", strict=False)


def header_of(row: list[str]) -> list[str]:
    """The header row's names, without a BOM before the first."""
    if row and row[0].startswith(_BOM):
        return [row[0][1:], *row[1:]]
    return row
