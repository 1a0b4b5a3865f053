"""Reading a whole JSON object document for the outline from its raw members: msgspec splits
each envelope object into its members' raw bytes (``dict[str, msgspec.Raw]``) and each
collection into its elements', in C, and decodes each record in C. The envelope is built as
``_read_json``'s event pass builds it, decision for decision (an object whose first
members are names becomes a collection as soon as they say so, or at its end), without a
Python step per event; the members after a long collection are read exactly, not from the
document's last bytes.

A number yajl refuses when it reads floats (an integer past 64 bits, ``1e400``) is read
here as ``json`` reads it; the event pass, and ijson's count of a record of more than
1 MiB, read the document again with numbers exact (see ``_wide_ints``).

Only a complete document read in one piece takes this pass (the caller bounds its size and
its element count); a document msgspec refuses (``NaN``, a BOM, more than one value, nesting
past its depth) is left to the event pass, with nothing fed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._decode import loads
from ._envelope import (
    _ENVELOPE_MEMBERS,
    RAW_KINDS,
    RECORD_EVENTS,
    WRAPPER_ELEMENTS,
    _collapse,
    _Records,
    _Summary,
    _Wrapper,
    found_wrapper,
    wrapper_records,
)
from ._fast_path import _Accumulator
from ._fields import _names
from ._source import _NotStructured
from ._values import _key_path
from ._wide_ints import exact_read_is_safe, overflowed

__all__ = ["_Fallback", "_scan_tree"]


_BIG_RAW = 1 << 20
"""A record's raw bytes past this are counted by ijson's events before anything is built."""
_DEPTH = 200
"""Envelope objects nested deeper than this are left to the event pass (a Python frame
each)."""

REREAD_ENTRIES = True
"""Whether the members of an object keyed by names that were read as envelope are read
again as records (see ``collapse`` in ``_scan_tree``); tests turn it off to hold this pass
to the event pass's outline, which cannot read them again."""

_PATH_HELD = 1 << 20
"""Envelope levels whose paths hold more characters than this in all are left to the
event pass, which gives no outline for them (long keys nested deep: each level holds its
path, and 500 levels of 4,000-character keys took 968 MiB)."""

_OBJECT, _ARRAY = b"{["
_OPENERS = (_OBJECT, _ARRAY)


class _Fallback(Exception):
    """The document is for the event pass after all (the accumulator may have been fed)."""


def _events(value: object, budget: int) -> int:
    """The parser events of ``value`` (one per scalar and key, two per container), counted
    up to just past ``budget``."""
    stack = [value]
    count = 0
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            count += 2 + len(item)  # type: ignore[arg-type]
            stack.extend(item.values())  # type: ignore[attr-defined]
        elif kind is list:
            count += 2
            stack.extend(item)  # type: ignore[arg-type]
        else:
            count += 1
        if count > budget:
            break
    return count


def _raw_events(raw: bytes, budget: int) -> int:
    """The parser events of a large record's raw bytes, counted by ijson without building
    it, up to just past ``budget``."""
    import ijson  # a C extension: only for a record of more than _BIG_RAW bytes

    for exact in (False, True):
        count = 0
        try:
            for _ in ijson.basic_parse(raw, use_float=not exact):
                count += 1
                if count > budget:
                    break
        except Exception as exc:  # ijson's errors
            if exact or not overflowed(exc) or not exact_read_is_safe(_slice(raw), len(raw)):
                return budget + 1  # it cannot be counted, so not walked
            continue  # an integer past 64 bits: counted again, reading numbers exactly
        return count
    return budget + 1


def _slice(data: bytes) -> Callable[[int, int], bytes]:
    return lambda count, offset: data[offset : offset + count]


_UTF8_PIECE = 1 << 20


def _check_utf8(data: bytes) -> None:
    """Raise ``_NotStructured`` unless ``data`` is strict UTF-8 (checked a piece at a time:
    the whole as one str could take four times its size)."""
    import codecs

    decode = codecs.getincrementaldecoder("utf-8")("strict").decode
    view = memoryview(data)
    try:
        for start in range(0, len(view), _UTF8_PIECE):
            piece = view[start : start + _UTF8_PIECE]
            decode(piece, final=start + _UTF8_PIECE >= len(view))
    except UnicodeDecodeError:
        raise _NotStructured("not UTF-8") from None


def _scan_tree(data: bytes, acc: _Accumulator) -> object:
    """Feed the records of the JSON object document ``data`` to ``acc``; return its envelope
    (see ``_read_json._scan_json``). An array found to be a wrapper (``WRAPPER_ELEMENTS``) has
    the document read again, as the event pass does, with the array at that path read as
    one.

    Raises:
        _Fallback: msgspec is not installed or refuses the document, or its envelope nests
            too deep (``acc`` may have been fed: start it afresh).
        _NotStructured: a record is not valid JSON, the document is not UTF-8, or it has
            more than ``_MAX_WRAPPERS`` wrapper arrays.
    """
    try:
        import msgspec  # a C extension: only for a document that is one object
    except ImportError:
        raise _Fallback from None
    members_of = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    elements_of = msgspec.json.Decoder(list[msgspec.Raw]).decode
    try:
        # The whole document's syntax is checked here, before anything is fed.
        root = members_of(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise _Fallback from None
    if not data.isascii():
        _check_utf8(data)  # a string in a record never walked must be UTF-8 too
    wrappers: set[str] = set()
    while True:
        try:
            return _read_tree(root, acc, wrappers, members_of, elements_of)
        except _Wrapper as found:
            wrappers.add(found.path)
            acc.restart()


def _read_tree(
    root: dict[str, Any],
    acc: _Accumulator,
    wrappers: set[str],
    members_of: Callable[[Any], dict[str, Any]],
    elements_of: Callable[[Any], list[Any]],
) -> object:
    """One reading of ``_scan_tree``'s document (``root``: its members' raw bytes).

    Raises:
        _Wrapper: an array not in ``wrappers`` turned out to be one.
    """

    def record(raw: Any) -> tuple[object, bool]:
        """A record's value, or (the name of its kind, True) when it has too many events to
        keep."""
        size = len(raw)
        if size > RECORD_EVENTS + 1:  # an event takes at least one byte of its own
            kind = RAW_KINDS.get(memoryview(raw)[0], "number")
            if size > _BIG_RAW and _raw_events(bytes(raw), RECORD_EVENTS + 1) > RECORD_EVENTS + 1:
                return kind, True
            value = value_of(raw)
            if _events(value, RECORD_EVENTS + 1) > RECORD_EVENTS + 1:
                return kind, True
            return value, False
        return value_of(raw), False

    def value_of(raw: Any) -> object:
        try:
            return loads(raw)  # json takes what msgspec does not (1e400: infinity)
        except ValueError:  # UnicodeDecodeError included
            raise _NotStructured("not valid JSON") from None

    def array(raw: Any, path: str, field: str, depth: int, held: int) -> object:
        """An outermost array: its elements are the records of ``field[]`` (at ``path``),
        unless it is a wrapper (see ``WRAPPER_ELEMENTS``): then the list of its elements,
        read as envelope."""
        items = elements_of(raw)
        if path in wrappers:
            elements = [
                member(item, f"{path}[{number}]", field + "[]", depth, held=held, element=True)
                for number, item in enumerate(items)
            ]
            wrapper_records(acc, field, path, elements)
            return elements
        probed: list[tuple[object, bool]] = []
        if len(items) <= WRAPPER_ELEMENTS:
            for item in items:
                first = memoryview(item)[0]
                probed.append(record(item) if first in _OPENERS else (value_of(item), False))
                if probed[-1][1] and first == _OBJECT:
                    found_wrapper(path, wrappers)
        pattern = (field or ".") + "[]"
        records = _Records(acc, pattern, path or ".")
        for number, item in enumerate(items):
            if number < len(probed):
                value, oversized = probed[number]
            elif memoryview(item)[0] in _OPENERS:
                value, oversized = record(item)
            else:
                value, oversized = value_of(item), False
            if oversized:
                assert isinstance(value, str)  # (its kind)
                records.add_oversized(value)
            else:
                records.add(value)
        records.flush()
        summary = _Summary(pattern)
        summary.count = records.count
        return summary

    def names(summary: _Summary, path: str, rest: list[tuple[str, Any]]) -> None:
        """The members of an object keyed by names: records."""
        source = summary.source
        assert source is not None
        for key, raw in rest:
            where = _key_path(path, key)
            if memoryview(raw)[0] in _OPENERS:
                value, oversized = record(raw)
            else:
                value, oversized = value_of(raw), False
            acc.record(summary.pattern, where, value, oversized=oversized)
            if len(source) < _ENVELOPE_MEMBERS:
                source[key] = None if oversized else value

    def collapse(
        path: str,
        field: str,
        items: list[tuple[str, Any]],
        node: dict[str, object],
        *,
        ended: bool,
    ) -> _Summary:
        """An object whose keys turned out to be names: what was read below it as envelope
        is dropped, and every member is read again from its raw bytes as a record (an array
        in one, read as a collection of its own, would be empty in it). Without
        ``REREAD_ENTRIES``, as the event pass does: the members read become records as they
        were read, and at the object's ``ended`` those past the envelope's room are counted.
        """
        if not REREAD_ENTRIES:
            if ended:
                return _collapse(node, path, acc, len(items), pattern=field)
            summary = _collapse(node, path, acc, len(node), pattern=field)
            names(summary, path, items[len(node) :])
            return summary
        summary = _collapse({}, path, acc, 0, reread=True, pattern=field)
        names(summary, path, items)
        return summary

    def member(
        raw: Any,
        path: str,
        field: str,
        depth: int,
        *,
        kept: bool = False,
        held: int,
        element: bool = False,
    ) -> object:
        """An envelope member's value at ``path`` (``field``: its field path, with ``[]``
        for a wrapper's index; ``kept``: its object keeps it, so an object keyed by names
        may become a collection at its end; ``held``: the characters of the paths of the
        objects it is in; ``element``: a wrapper's element, never a map of names)."""
        first = memoryview(raw)[0]
        if first == _OBJECT:
            return obj(
                members_of(raw), path, field, depth + 1, kept=kept, held=held, element=element
            )
        if first == _ARRAY:
            return array(raw, path, field, depth + 1, held)
        return value_of(raw)

    def obj(
        members: dict[str, Any],
        path: str,
        field: str,
        depth: int,
        *,
        kept: bool,
        held: int = 0,
        element: bool = False,
    ) -> object:
        held += len(path)
        if depth > _DEPTH or held > _PATH_HELD:
            raise _Fallback
        node: dict[str, object] = {}
        items = list(members.items())
        for number, (key, raw) in enumerate(items):
            if not element and number >= 2 and number == len(node) and _names(node):
                # The members so far are named entries: they become records of a
                # collection, and the members still to come are read as records.
                return collapse(path, field, items, node, ended=False)
            keep = len(node) < _ENVELOPE_MEMBERS
            value = member(
                raw, _key_path(path, key), _key_path(field, key), depth, kept=keep, held=held
            )
            if keep:
                node[key] = value
        if kept and _names(node):
            return collapse(path, field, items, node, ended=True)
        return node

    return obj(root, "", "", 0, kept=True)
