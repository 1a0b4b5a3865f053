"""Integers past 64 bits in ijson's C backend: read with ``use_float=True`` (floats as
``float``, the fast way), it stops at such an integer with "integer overflow"
(ICRAR/ijson#153), and at a number past a double's range (``1e400``), so a valid document
with one 20-digit id had no outline and no record reads. Read again without it, the
backend takes every number and gives floats as ``Decimal``; these helpers tell the error,
tell whether the exact read is safe, and turn those back into floats.

Not safe past Python's limit on an integer's digits (4,300 by default): there the backend
leaves ``int``'s error pending and calls on into Python, which raised ``SystemError`` or
crashed the process (a review). A document with a run of that many digits is not read
exactly: it stays as the first read left it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

__all__ = ["as_floats", "exact_read_is_safe", "float_events", "overflowed"]

_PIECE = 1 << 20


_OVERFLOWS = ("parse error: integer overflow", "parse error: numeric (floating point) overflow")


def overflowed(exc: BaseException) -> bool:
    """Whether ``exc`` is ijson's stop at an integer past 64 bits or a number past a
    double's range (``1e400``): read again exactly, the document reads. (Only the first
    line is its own: the lines after it quote the document.)"""
    return str(exc).partition("\n")[0].strip() in _OVERFLOWS


def exact_read_is_safe(read: Callable[[int, int], bytes], size: int) -> bool:
    """Whether the first ``size`` bytes (``read(count, offset)``) can be read with numbers
    exact: no run of digits is longer than Python's limit on an integer's (in a string or
    not: a run in a string only costs the exact read)."""
    digits = sys.get_int_max_str_digits()
    if not digits:
        return True  # (no limit set)
    run = re.compile(rb"[0-9]{%d}" % (digits + 1))
    pos = 0
    while pos < size:
        # Each piece starts ``digits`` bytes before the last one ended: a run across the
        # edge is whole in one of them.
        start = max(pos - digits, 0)
        want = min(_PIECE, size - start)
        piece = read(want, start)
        if len(piece) < want or run.search(piece):  # (a short read: not known to be safe)
            return False
        pos = start + len(piece)
    return True


def float_events(events: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """ijson's events read without ``use_float``, with each ``Decimal`` as a float."""
    for event in events:
        if type(event[1]) is Decimal:
            yield event[0], float(event[1])
        else:
            yield event


def as_floats(value: Any) -> Any:
    """A value ijson built without ``use_float``, with each ``Decimal`` in it as a float."""
    kind = type(value)
    if kind is Decimal:
        return float(value)
    if kind is dict:
        return {key: as_floats(item) for key, item in value.items()}
    if kind is list:
        return [as_floats(item) for item in value]
    return value
