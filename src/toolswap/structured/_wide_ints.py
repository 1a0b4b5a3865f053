"""Integers past 64 bits in ijson's C backend: read with ``use_float=True`` (floats as
``float``, the fast way), it stops at such an integer with "integer overflow"
(ICRAR/ijson#153), and at a number past a double's range (``1e400``), so a valid document
with one 20-digit id had no outline and no record reads. Read again without it, the
backend takes every number and gives floats as ``Decimal``; these helpers tell the error
and turn those back into floats.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

__all__ = ["as_floats", "float_events", "overflowed"]


_OVERFLOWS = ("parse error: integer overflow", "parse error: numeric (floating point) overflow")


def overflowed(exc: BaseException) -> bool:
    """Whether ``exc`` is ijson's stop at an integer past 64 bits or a number past a
    double's range (``1e400``): read again exactly, the document reads. (Only the first
    line is its own: the lines after it quote the document.)"""
    return str(exc).partition("\n")[0].strip() in _OVERFLOWS


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
