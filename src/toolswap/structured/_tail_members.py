"""The root object's members after its long collection, read from the document's end:
the event pass switches to ijson's ``items`` for a long collection, and what follows the
collection in the root object is then found from the last bytes rather than read by
events (``_read_json``).
"""

from __future__ import annotations

import json
import re

from ._source import Read

__all__ = ["tail_members"]


_TAIL_WINDOW = 8192
_TAIL_REGION = 256 << 10
"""The most bytes read after where the collection's ``]`` is known to be at or after."""
_TAIL_TRIES = 16
_TOKENS = re.compile(rb'[][{}"]')


def tail_members(
    read: Read, size: int, after: int | None, key: str, records: int
) -> tuple[dict[str, object] | None, bool]:
    """The root object's members after the collection read last (the member ``key``, of
    ``records`` elements), and whether they are surely all of them.

    ``after``: the collection's ``]`` is at or after this offset (where the bytes ijson
    was reading when it gave the last record began). Its ``]`` is one of the root's own
    (``_root_closes``), tried from ``after`` on: the first after which the rest reads as
    the end of an object, and holds no ``key``, is the collection's, and its members are
    all of them. An array member before the collection (in those bytes too) has the
    collection after it: that ``]`` is passed over. Where which is which cannot be told
    (``key`` again after the collection; a key ijson read as ``?``, a lone surrogate, that
    ``json`` reads otherwise; a member nested deeper than ``json`` reads), or past
    ``_TAIL_REGION`` or ``_TAIL_TRIES``, or without ``after``, the last 64 ``]`` of the
    document's last bytes are tried from the end: the first after which the rest reads so
    is taken, surely right only when those bytes hold the whole document and every ``]``
    in them was tried (a member after the collection that is an array ends with a ``]``
    that reads so too, and which array a ``]`` closes cannot be told from the value before
    it: ``[0, 0]`` ends many)."""
    if after is not None and size - after <= _TAIL_REGION and "?" not in key:
        data = read(size - after, after)
        for pos in _root_closes(data)[:_TAIL_TRIES]:
            try:
                value = _members(data[pos + 1 :])
            except RecursionError:
                break
            if value is None:
                continue
            if key not in value:
                return value, True
            held = value[key]
            if not (isinstance(held, list) and len(held) == records):
                break  # ``key`` again after the collection: which is its ']' is not known
            # The collection itself is in the rest: an array member's ']' before it.
    window = min(size, _TAIL_WINDOW)
    data = read(window, size - window)
    found: dict[str, object] | None = None
    tried_all = False
    pos = len(data)
    for _ in range(64):
        pos = data.rfind(b"]", 0, pos)
        if pos < 0:
            tried_all = True
            break
        try:
            value = _members(data[pos + 1 :])
        except RecursionError:
            return None, False
        if value is not None:
            found = value
    return found, found is not None and tried_all and window >= size


def _root_closes(data: bytes) -> list[int]:
    """Where in ``data``, the last bytes of a JSON object document, a ``]`` closes an array
    right in the root object (one bracket, the root's ``}``, stays open after it): read back
    from the end, which is outside any string, toggling at each quote not escaped (an odd
    run of backslashes before it), to the root's ``{`` or the start of ``data``. (A quote
    whose backslashes begin before ``data`` may be misread: the ``]`` before it are then
    only tried, and refused, by the caller's parse.)"""
    found: list[int] = []
    depth = 0
    quoted = False
    for token in reversed([match.start() for match in _TOKENS.finditer(data)]):
        char = data[token]
        if char == 0x22:  # '"'
            run = token
            while run and data[run - 1] == 0x5C:  # '\\'
                run -= 1
            if not (token - run) % 2:
                quoted = not quoted
        elif quoted:
            continue
        elif char in b"]}":
            if depth == 1 and char == 0x5D:
                found.append(token)
            depth += 1
        else:
            depth -= 1
            if depth < 1:
                break  # the root's '{'
    found.reverse()
    return found


def _members(rest: bytes) -> dict[str, object] | None:
    """The members ``rest`` ends an object with (``, "k": v}``), or None if it does not.

    Raises:
        RecursionError: a member nests deeper than ``json`` reads.
    """
    outermost: list[list[tuple[str, object]]] = []

    def pairs_of(pairs: list[tuple[str, object]]) -> dict[str, object]:
        outermost[:] = [pairs]  # (the outermost object is decoded last)
        return dict(pairs)

    try:
        json.loads(b'{"":0' + rest, object_pairs_hook=pairs_of)
    except ValueError:
        return None
    return dict(outermost[0][1:])  # (a member named "" of its own is kept)
