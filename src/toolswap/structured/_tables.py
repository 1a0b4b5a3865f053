"""How a table's text is split into rows of cells: one rule for detection, the outline,
record reads and queries. CSV as RFC 4180 reads it (a quoted cell may hold the delimiter,
quotes and newlines). TSV is quoted so too when that loses no rows (Python's ``csv`` and
pandas quote a cell holding a tab, a quote or a newline), and read without quoting when it
would: a cell opening with a quote it never closes swallowed the rest of a 2,000-row output
into itself (three rows counted). Which is decided from the first ``QUOTING_HEAD`` bytes,
the same bytes for every reader. A UTF-8 BOM is read past by the callers (``utf-8-sig``).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

__all__ = ["QUOTING_HEAD", "table_rows", "tsv_quoted"]

QUOTING_HEAD = 64 << 10
"""The bytes of a TSV output from which its quoting is decided."""


def table_rows(lines: Iterable[str], fmt: str, *, quoted: bool = True) -> Iterator[list[str]]:
    """The rows of a ``csv`` or ``tsv`` table whose text ``lines`` gives (a file opened
    with ``newline=""``, or lines without their ends); ``quoted``: a TSV's quoting (see
    ``tsv_quoted``; CSV is always quoted)."""
    import csv  # not on the start-up path: only for output that looks like a table

    if fmt == "tsv" and not quoted:
        return csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE, strict=False)
    return csv.reader(lines, delimiter="\t" if fmt == "tsv" else ",", strict=False)


def tsv_quoted(head: bytes) -> bool:
    """Whether a TSV output whose first ``QUOTING_HEAD`` bytes are ``head`` is read with
    quoting: unless that gives fewer rows as wide as the header than reading without it
    (the last line, which may be cut, left out)."""
    import csv

    text = head[:QUOTING_HEAD].decode("utf-8-sig", "replace")
    if "\n" in text:
        text = text[: text.rfind("\n") + 1]

    def whole(quoted: bool) -> int:
        rows = table_rows(io.StringIO(text, newline=""), "tsv", quoted=quoted)
        try:
            header = next(rows, [])
            return sum(1 for row in rows if len(row) == len(header))
        except csv.Error:
            return -1

    return whole(True) >= whole(False)
