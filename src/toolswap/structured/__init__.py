"""Structured output (JSON, JSON Lines, CSV, TSV): recognised from its first bytes,
outlined for the pointer, and queried with jq or JMESPath.

Importing this package loads only the standard library: the parser (ijson) and the query
engines (jq, jmespath) are imported when an output needs them, never for plain text.
"""

from __future__ import annotations

from collections.abc import Callable

from .detect import Format, sniff

__all__ = ["Format", "inspect_output", "sniff"]


def inspect_output(
    head: bytes,
    read: Callable[[int, int], bytes],
    size: int,
    *,
    line_count: int | None = None,
    budget: int | None = None,
) -> str:
    """The outline of an output that is structured, or ``""`` (text, or not valid).

    Args:
        head: the output's first bytes (as the capture keeps them).
        read: ``read(count, offset)`` returns bytes of the whole output.
        size: the output's size in bytes.
        line_count: its line count, reported when the outline stops early.
        budget: the outline's size limit in UTF-8 bytes (default 8 KiB).
    """
    from .detect import sniff_on
    from .outline import scan_bytes

    fmt = sniff_on(head, read, size, limit=scan_bytes(size))
    if fmt is None:
        return ""
    from .outline import OUTLINE_BYTES, outline

    found = outline(
        fmt,
        read,
        size,
        line_count=line_count,
        budget=OUTLINE_BYTES if budget is None else budget,
    )
    return found.text if found is not None else ""
