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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["table_rows"]


def table_rows(lines: Iterable[str], fmt: str) -> Iterator[list[str]]:
    """The rows of a ``csv`` or ``tsv`` table whose text ``lines`` gives (a file opened
    with ``newline=""``, or lines without their ends)."""
    import csv  # not on the start-up path: only for output that looks like a table

    if fmt == "tsv":
        return csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE, strict=False)
    return csv.reader(lines, delimiter=",", strict=False)
