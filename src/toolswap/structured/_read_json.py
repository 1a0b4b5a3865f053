"""Reading a JSON document for the outline: the envelope (the document with each outermost
array replaced by a ``_Summary``) from ijson's event stream, the records of a long
collection from ijson's ``items`` (built in C), a document that is one array split by
msgspec (cut after an element when only its first bytes are read) or, where it cannot be,
by ``json``'s C decoder from a sliding window, and the root object's members after a long
collection from the document's last bytes. ijson is imported only here, and only for a JSON object.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from ._decode import loads
from ._envelope import (
    _ENVELOPE_MEMBERS,
    _MAX_GUESSES,
    RAW_KINDS,
    RECORD_EVENTS,
    WRAPPER_ELEMENTS,
    _collapse,
    _NotWrapper,
    _Records,
    _Summary,
    _Wrapper,
    found_wrapper,
    wrapper_records,
)
from ._fast_path import _Accumulator
from ._fields import SAMPLE_RECORDS, _names
from ._read_tree import _PATH_HELD, _Fallback, _scan_tree
from ._source import _BATCH, _BLOCK, Read, _Bytes, _NotStructured, _TooFew
from ._tail_members import tail_members
from ._values import _TYPE_NAMES, _key_path, _type_name
from ._wide_ints import as_floats, exact_read_is_safe, float_events, overflowed

__all__ = ["_scan_json"]


# A collection longer than this is read by ijson's items (records built in C), not from
# the event stream in Python; shorter arrays stay in the envelope's pass. (More than
# ``WRAPPER_ELEMENTS``: a wrapper is known before the switch.)
_SWITCH_AFTER = 16
_ENVELOPE_DEPTH = 512
"""Objects nested deeper than this around the records give no outline: the walk could not
take records that deep, and each level holds its path (a document of ``{"a":`` repeated
20,000 times, 120 KB, took 790 MiB and 3.7 s)."""


def _scan_json(read: Read, limit: int, acc: _Accumulator, *, size: int) -> object:
    """Feed a JSON document's records to ``acc``; return its envelope (the document with
    every outermost array replaced by a ``_Summary``).

    The envelope and each collection's first ``_SWITCH_AFTER`` records are read from
    ijson's event stream, in Python. The rest of a longer collection is read by ijson's
    ``items``, which builds each record in C (the accumulator walks the sample's records
    and takes its fast path for the others); the envelope's members after that collection
    are then parsed from the document's last bytes (``_tail_members``)."""
    head = read(min(limit, 4096), 0).lstrip(b" \t\r\n\xef\xbb\xbf")
    if head.startswith(b"["):
        return _scan_top_array(read, limit, acc, size=size)
    if size <= min(limit, _WHOLE_DOCUMENT):
        whole = _read_whole(read, acc, size=size)
        if whole is not None:
            return whole
    wrappers: set[str] = set()
    guessed: set[str] = set()
    refused: set[str] = set()
    exact = False
    while True:
        try:
            return _scan_object(
                read,
                limit,
                acc,
                size=size,
                exact=exact,
                wrappers=wrappers,
                guessed=guessed,
                refused=refused,
            )
        except _Wrapper as found:
            # An array found to be a wrapper (``WRAPPER_ELEMENTS``): read again, that array's
            # elements as envelope.
            wrappers.add(found.path)
            if found.guess:
                guessed.add(found.path)
        except _NotWrapper as wrong:
            # A guess that was wrong: the array is judged at its end from now on.
            wrappers.discard(wrong.path)
            guessed.discard(wrong.path)
            refused.add(wrong.path)
        except Exception as exc:  # ijson's errors
            if exact or not overflowed(exc) or not exact_read_is_safe(read, min(limit, size)):
                raise
            # An integer past 64 bits: read again, every number as it is
            # (``exact_read_is_safe`` has ruled out a run of digits past Python's limit,
            # where that read crashed).
            exact = True
        acc.restart()


def _scan_object(
    read: Read,
    limit: int,
    acc: _Accumulator,
    *,
    size: int,
    exact: bool,
    wrappers: set[str],
    guessed: set[str],
    refused: set[str],
) -> object:
    """``_scan_json`` of a document read by ijson's events (``exact``: numbers read without
    ``use_float``, which stops at an integer past 64 bits; ``wrappers``: the paths of the
    arrays known to be wrappers, whose elements are read as envelope; ``guessed``: those of
    them guessed by an element, before their end; ``refused``: arrays whose guess was
    wrong, judged at their end only).

    Raises:
        _Wrapper: an array not in ``wrappers`` turned out to be one, or is guessed to be:
            one of its first ``WRAPPER_ELEMENTS`` elements is an object of more than
            ``RECORD_EVENTS`` events (an array's end, or the part's, decides as well,
            later; a guess spares reading the rest of that element).
        _NotWrapper: an array in ``guessed`` has more elements than a wrapper.
    """
    import ijson  # a C extension: only for outputs that look like JSON

    events: Iterator[tuple[str, Any]] = ijson.basic_parse(_Bytes(read, limit), use_float=not exact)
    if exact:
        events = float_events(events)
    switch: tuple[str, str, str, int] | None = None
    root: list[object] = []
    # Envelope frames: [container, pending key]; a container is a dict or a _Summary.
    stack: list[list[Any]] = [[root, None]]
    collection = ""
    index = 0
    building: list[list[Any]] = []
    record_events = 0
    skip_depth = 0
    path_of: list[str] = [""]
    field_of: list[str] = [""]
    """The field path of each envelope frame: its path with ``[]`` for a wrapper's index."""
    path_chars = 0
    """The characters of the paths in ``path_of`` (bounded: ``_PATH_HELD``)."""
    # ijson's prefix of each envelope frame (None: a key ijson's prefixes cannot name).
    prefix_of: list[str | None] = [""]

    def where() -> str:
        """The path of the record being read (an element, or a named member)."""
        summary = stack[-1][0]
        if summary.names:
            return _key_path(path_of[-1], str(stack[-1][1]))
        return f"{path_of[-1] or '.'}[{index}]"

    members: dict[int, int] = {}  # id(an envelope object) -> its members, also those not kept

    def child_of(container: Any, key: Any) -> tuple[str, str, str | None]:
        """The path, field path and ijson prefix of a container's next value: a member
        (``key``), the root, or a wrapper's element."""
        if isinstance(container, dict):
            return (
                _key_path(path_of[-1], str(key)),
                _key_path(field_of[-1], str(key)),
                _prefix(prefix_of[-1], key),
            )
        if container is root:
            return "", "", ""
        return f"{path_of[-1]}[{len(container)}]", field_of[-1] + "[]", None

    def emit(value: object, *, oversized: bool = False) -> None:
        """Feed the record just read (a map of names keeps its first ones, for the record
        an enclosing map of names may make of it)."""
        summary = stack[-1][0]
        acc.record(collection, where(), value, oversized=oversized)
        if summary.source is not None and len(summary.source) < _ENVELOPE_MEMBERS:
            summary.source[stack[-1][1]] = None if oversized else value

    def put(container: Any, key: Any, value: object) -> None:
        if isinstance(container, list):
            if len(container) >= WRAPPER_ELEMENTS and path_of[-1] in guessed:
                raise _NotWrapper(path_of[-1])
            container.append(value)
        elif isinstance(container, dict):
            members[id(container)] = members.get(id(container), 0) + 1
            if len(container) < _ENVELOPE_MEMBERS:
                container[key] = value

    skipped = "object"
    """The kind of the record being skipped (too large to walk)."""
    big_object = False
    """The collection being read holds an object of more than ``RECORD_EVENTS`` events."""

    def wrapper_check(*, ended: bool) -> None:
        """At the end of the collection on top (``ended``), or of the part read inside
        it: a wrapper (``WRAPPER_ELEMENTS``) has the document read again."""
        summary = stack[-1][0]
        began = index + (0 if ended or not (building or skip_depth) else 1)
        if big_object and not summary.names and began <= WRAPPER_ELEMENTS:
            found_wrapper(path_of[-1], wrappers)

    def in_wrapper(container: object) -> bool:
        """Whether ``container`` is a wrapper's list of elements (see ``WRAPPER_ELEMENTS``),
        whose objects are never maps of names."""
        return isinstance(container, list) and container is not root

    def checked(events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        try:
            yield from events
        except Exception as exc:  # ijson's errors: where the part read ends, if it is one
            if limit < size and not overflowed(exc):
                if isinstance(stack[-1][0], _Summary):
                    wrapper_check(ended=False)
                for frame, path, field in zip(stack, path_of, field_of, strict=True):
                    if in_wrapper(frame[0]):  # (its elements begun are records too)
                        wrapper_records(acc, field, path, frame[0])
            raise

    for event, value in checked(events):
        if building or skip_depth:
            # Inside a record: build it (up to RECORD_EVENTS events, then only count it).
            if skip_depth:
                if event in ("start_map", "start_array"):
                    skip_depth += 1
                elif event in ("end_map", "end_array"):
                    skip_depth -= 1
                    if skip_depth == 0:
                        emit(skipped, oversized=True)
                        index += 1
                        if index >= _SWITCH_AFTER and prefix_of[-1] is not None:
                            switch = (collection, path_of[-1], prefix_of[-1], len(stack))
                            break
                continue
            record_events += 1
            top = building[-1]
            if event == "map_key":
                top[1] = value
                continue
            if event in ("start_map", "start_array"):
                child: Any = {} if event == "start_map" else []
                if isinstance(top[0], dict):
                    top[0][top[1]] = child
                else:
                    top[0].append(child)
                building.append([child, None])
            elif event in ("end_map", "end_array"):
                done = building.pop()
                if not building:
                    emit(done[0])
                    index += 1
                    if index >= _SWITCH_AFTER and prefix_of[-1] is not None:
                        switch = (collection, path_of[-1], prefix_of[-1], len(stack))
                        break
            elif isinstance(top[0], dict):
                top[0][top[1]] = value
            else:
                top[0].append(value)
            if building and record_events > RECORD_EVENTS:
                skipped = _type_name(building[0][0])
                big_object = big_object or skipped == "object"
                if (
                    skipped == "object"
                    and index < WRAPPER_ELEMENTS
                    and not stack[-1][0].names
                    and len(refused) < _MAX_GUESSES
                    and path_of[-1] not in refused
                ):
                    found_wrapper(path_of[-1], wrappers, guess=True)
                skip_depth = len(building)
                building = []
            continue
        frame = stack[-1]
        container = frame[0]
        if isinstance(container, _Summary):
            # The elements of an outermost array (the members of a map of names) are the
            # records.
            if event in ("end_array", "end_map"):
                wrapper_check(ended=True)
                if not container.names:
                    container.count = index
                stack.pop()
                path_chars -= len(path_of.pop())
                field_of.pop()
                prefix_of.pop()
                continue
            if event == "map_key":
                frame[1] = value
            elif event in ("start_map", "start_array"):
                building = [[{} if event == "start_map" else [], None]]
                record_events = 1
            else:
                # A scalar record: read on here (a switch to ijson's items would lose the
                # members after the collection, and these records cost one event each).
                emit(value)
                index += 1
            continue
        if event == "map_key":
            if (
                isinstance(container, dict)
                and len(container) >= 2
                and members.get(id(container), 0) == len(container)
                and not in_wrapper(stack[-2][0])
                and _names(container)
            ):
                # The members so far are named entries (``_fields._names``): they become
                # records of a collection, and the members still to come are read as
                # records, one by one.
                node, path = container, path_of[-1]
                members.pop(id(node), None)  # (its id may be a later object's once it is freed)
                summary = _collapse(node, path, acc, len(node), pattern=field_of[-1])
                parent = stack[-2]
                if isinstance(parent[0], list):
                    parent[0][-1] = summary
                elif parent[0].get(parent[1]) is node:  # (not when it had no room for it)
                    parent[0][parent[1]] = summary
                stack[-1] = [summary, value]
                prefix_of[-1] = None  # read in this pass (no switch to ijson's items)
                collection = summary.pattern
                index = len(node)
                continue
            frame[1] = value
        elif event == "start_map":
            key = frame[1]
            path, field, prefix = child_of(container, key)
            path_chars = _opened(len(stack), path_chars, path)
            child = {}
            put(container, key, child)
            stack.append([child, None])
            path_of.append(path)
            field_of.append(field)
            prefix_of.append(prefix)
        elif event == "end_map":
            node, path, field = container, path_of[-1], field_of[-1]
            stack.pop()
            path_chars -= len(path_of.pop())
            field_of.pop()
            prefix_of.pop()
            parent = stack[-1]
            held = parent[0][-1] if isinstance(parent[0], list) else parent[0].get(parent[1])
            total = members.pop(id(node), len(node))  # (as above: ids are reused)
            if (
                held is node
                and isinstance(node, dict)
                and not in_wrapper(parent[0])
                and _names(node)
            ):
                summary = _collapse(node, path, acc, total, pattern=field)
                if isinstance(parent[0], list):
                    parent[0][-1] = summary
                else:
                    parent[0][parent[1]] = summary
        elif event == "start_array":
            key = frame[1]
            path, field, prefix = child_of(container, key)
            path_chars = _opened(len(stack), path_chars, path)
            if path in wrappers:
                elements: list[object] = []
                put(container, key, elements)
                stack.append([elements, None])
                prefix = None  # (ijson's prefixes do not tell one element from another)
            else:
                collection = (field or ".") + "[]"
                summary = _Summary(collection)
                put(container, key, summary)
                stack.append([summary, None])
                if prefix is not None:
                    prefix = _prefix(prefix, "item")
                index = 0
                big_object = False
            path_of.append(path)
            field_of.append(field)
            prefix_of.append(prefix)
        elif event == "end_array":  # a wrapper's end (see ``WRAPPER_ELEMENTS``)
            wrapper_records(acc, field_of[-1], path_of[-1], container)
            stack.pop()
            path_chars -= len(path_of.pop())
            field_of.pop()
            prefix_of.pop()
        else:
            put(container, frame[1], value)
    if switch is not None:
        pattern, base, prefix, depth = switch
        source = _Bytes(read, limit)
        records: Iterator[Any] = ijson.items(source, prefix, use_float=not exact)
        if exact:
            records = map(as_floats, records)
        pending: list[object] = []
        pending_first = index
        last_chunk: int | None = None
        yielded = 0
        """Where the bytes ijson had been handed when it gave the last record began (the
        collection's ``]`` is at or after it)."""
        try:
            for number, value in enumerate(records):
                last_chunk, yielded = source.chunk_start, number + 1
                if number >= index:
                    if not pending:
                        pending_first = number
                    pending.append(value)
                    if len(pending) >= _BATCH:
                        acc.batch(pattern, base or ".", pending_first, pending)
                        pending = []
        except Exception as exc:  # ijson's errors: a document cut at the scan limit ends here
            if limit >= size or overflowed(exc):
                raise
        finally:
            if pending:
                acc.batch(pattern, base or ".", pending_first, pending)
        # The members after the collection: only those of a collection in the root object
        # are looked for, and only in a whole document; deeper ones are said to be missing.
        if depth != 3 and limit >= size:
            acc.notes.append(f"(any members after {base} are not shown: query the artifact)")
        if depth == 3 and isinstance(stack[1][0], dict) and limit >= size:
            after = last_chunk if ijson.backend_name == "yajl2_c" else None
            tail, sure = tail_members(read, size, after, str(stack[1][1]), yielded)
            if tail is None:
                acc.notes.append(
                    f"(the members of the document after {base} are not shown: query the artifact)"
                )
            else:
                for key, item in tail.items():
                    if not isinstance(stack[1][0].get(key), _Summary):  # (never a collection)
                        put(stack[1][0], key, item)
                if not sure:
                    acc.notes.append(
                        f"(the members after {base} are read from the document's end: some"
                        " before those shown may be missing; query the artifact)"
                    )
    if not root:
        raise _NotStructured("no JSON value")
    return root[0]


def _opened(depth: int, held: int, path: str) -> int:
    """The characters the envelope's open paths hold once a level at ``path`` opens below
    ``depth`` others that hold ``held``.

    Raises:
        _NotStructured: past ``_ENVELOPE_DEPTH`` levels, or ``_PATH_HELD`` characters.
    """
    if depth > _ENVELOPE_DEPTH:
        raise _NotStructured(f"nested more than {_ENVELOPE_DEPTH} deep")
    held += len(path)
    if held > _PATH_HELD:
        raise _NotStructured("paths too long to hold")
    return held


_BIG_RECORD = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_SCALAR_RUN = re.compile(r"[-+0-9.eEtruefalsn \t\n\r,]+")
"""What a run of elements that are numbers, booleans or nulls is made of: past the sample
such a run is decoded a piece at a time and counted by type (a record at a time, 3,000,000
numbers took seconds). It holds no string, so each of its commas ends an element."""
_RUN_PIECE = 1 << 16
_RUN_MIN = 4
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]*")
_RUN_STARTS = frozenset("-0123456789tfn")

_WHOLE_DOCUMENT = 16 << 20
"""A document of at most this many bytes, read whole, is split and decoded by msgspec (an
array here, an object by ``_read_tree``),"""
_WHOLE_ELEMENTS = 1 << 18
"""... if it has fewer commas than this (so fewer elements): their raw bytes' handles take
about 50 bytes each, so this bounds them to about 13 MiB."""


def _scan_top_array(read: Read, limit: int, acc: _Accumulator, *, size: int) -> _Summary:
    """A document that is one array (``sqlite3 -json``, ``ruff --output-format json``).

    When all of it is to be read (at most ``_WHOLE_DOCUMENT`` bytes), msgspec splits it into
    its elements' raw bytes and decodes them in C, about twice as fast as ``json`` (the
    document's bytes, then one batch of records, are in memory); when only its first
    ``limit`` bytes are, msgspec splits them cut after an element (``_split_cut_array``).
    Otherwise, and for what follows that cut, or where msgspec refuses what ``json`` takes
    (``NaN``, integers past 64 bits, a lone surrogate), its elements are decoded one by one
    by ``json``'s C decoder (``raw_decode``) from a sliding window of the text, in memory
    bounded by the window and the largest record. Raises ``_NotStructured`` if it is not
    one JSON array."""
    if size <= min(limit, _WHOLE_DOCUMENT) and _split_whole_array(read, acc, size=size):
        return _Summary(".[]")
    import codecs

    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")("strict")
    text = ""
    pos = 0
    taken = 0

    def more() -> bool:
        nonlocal text, pos, taken
        if taken >= limit:
            return False
        block = read(min(_BLOCK, limit - taken), taken)
        if not block:
            return False
        taken += len(block)
        try:
            chunk = utf8.decode(block, final=taken >= size)  # (a cut may split a character)
        except UnicodeDecodeError:
            raise _NotStructured("not UTF-8") from None
        text = text[pos:] + chunk
        pos = 0
        return True

    def skip() -> bool:
        """Move past whitespace; False at the end of what can be read."""
        nonlocal pos
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if pos < len(text) or not more():
                return pos < len(text)

    complete = limit >= size
    records = _Records(acc)
    resume = None if complete else _split_cut_array(read, records, limit)
    if resume is not None:
        taken = resume  # the elements msgspec split are fed: on from the first it did not
    elif not skip() or text[pos] != "[":
        raise _NotStructured("not a JSON array")
    else:
        pos += 1
    cut = False
    closed = False
    runs, sampled, short = True, False, 0
    while True:
        if not skip():
            cut = True
            break
        if text[pos] == "]" and records.count == 0:
            pos += 1
            closed = True
            break
        if runs and not short and text[pos] in _RUN_STARTS and records.count >= SAMPLE_RECORDS:
            sampled = sampled or records.sampled()  # (a flush, until it is)
            if sampled:
                counted, runs, short = _count_run(text, pos, records)
                if counted > pos:
                    pos = counted
                    continue
        elif short:
            short -= 1
        while True:
            try:
                value, end = decoder.raw_decode(text, pos)
            except ValueError:
                value = end = None
            # A number followed only by what could continue it, up to the window's end,
            # may go on past it: ``1.`` of ``1.5`` (read as 1, then "not JSON"), or at the
            # scan limit a number cut short (counted as whole).
            cut_short = (
                end is not None
                and type(value) in (int, float)
                and _NUMBER_TAIL.fullmatch(text, end) is not None
            )
            if end is not None and not cut_short:
                break
            if taken >= limit:
                if cut_short and limit < size:
                    end = None  # cut by the scan limit
                break
            if not more():
                break
        if end is None:
            if complete:
                raise _NotStructured("not valid JSON")
            if records.count == 0:
                raise _TooFew("the scan limit cut the first record")
            cut = True  # the scan limit cut a record: what was parsed stands
            break
        if end - pos > _BIG_RECORD:
            records.add_oversized(_type_name(value))
        else:
            records.add(value)
        pos = end
        if not skip():
            cut = True
            break
        if text[pos] == ",":
            pos += 1
        elif text[pos] == "]":
            pos += 1
            closed = True
            break
        else:
            raise _NotStructured("not valid JSON")
    records.flush()
    if closed and skip():
        raise _NotStructured("data after the array")  # then it is not one JSON document
    if cut and complete:
        raise _NotStructured("the array does not end")
    return _Summary(".[]")


def _count_run(text: str, pos: int, records: _Records) -> tuple[int, bool, int]:
    """Count the elements from ``pos`` that are numbers, booleans or nulls, each followed
    by its comma, a piece of about ``_RUN_PIECE`` characters at a time decoded whole (so
    checked as JSON, in C). Returns where counting stopped; False when a piece was not
    JSON (left to the element-by-element read, which says why; runs are not tried again:
    each try would decode the same piece); and how many elements a run of fewer than
    ``_RUN_MIN`` holds (left to that read too, and not looked at again meanwhile: an array
    mixing numbers and strings would decode them a few at a time)."""
    found = _SCALAR_RUN.match(text, pos)
    if found is None:
        return pos, True, 0
    end = text.rfind(",", pos, found.end()) + 1  # (the last element may be cut or last)
    elements = text.count(",", pos, end)
    if elements < _RUN_MIN:
        return pos, True, elements
    while pos < end:
        stop = text.rfind(",", pos, min(pos + _RUN_PIECE, end)) + 1 or end
        if stop <= pos:
            stop = end
        # Each comma of a run separates two elements (it holds no string): as many values
        # as commas and one, or an element is missing (``1,,2``, a piece that is ``,``).
        elements = text.count(",", pos, stop - 1) + 1
        try:
            values = loads(("[" + text[pos : stop - 1] + "]").encode())
        except ValueError:
            return pos, False, 0
        if not isinstance(values, list) or len(values) != elements:
            return pos, False, 0
        kinds: dict[str, int] = {}
        for kind, count in Counter(map(type, values)).items():
            name = _TYPE_NAMES.get(kind)
            if name is None:
                return pos, False, 0
            kinds[name] = count
        records.add_counted(kinds)
        pos = stop
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    return pos, True, 0


def _split_whole_array(read: Read, acc: _Accumulator, *, size: int) -> bool:
    """Feed the records of the array that is the whole of a ``size``-byte document to
    ``acc`` (see :func:`_scan_top_array`); False, having fed nothing, when msgspec is not
    installed or the document is not one JSON array to it (the caller then reads it with
    ``json``, which also takes ``NaN``)."""
    try:
        import msgspec  # a C extension: only for a document that is one array
    except ImportError:
        return False
    data = _whole(read, size)
    if data.count(b",") >= _WHOLE_ELEMENTS:
        return False  # many small elements: the sliding window holds less
    try:
        # The whole document's syntax is checked here, before anything is fed.
        raws = msgspec.json.decode(data, type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    records = _Records(acc)
    _add_raws(records, raws)
    records.flush()
    return True


def _add_raws(records: _Records, raws: list[Any]) -> None:
    """Decode each element msgspec split (``msgspec.Raw``) and add it to ``records``, as
    the sliding window would (a record of more than ``_BIG_RECORD`` characters counted).

    Raises:
        _NotStructured: an element is not UTF-8 or not JSON to ``json``.
    """
    for raw in raws:
        if len(raw) > _BIG_RECORD:
            try:
                chars = len(bytes(raw).decode())  # as the window counts: strict UTF-8
            except UnicodeDecodeError:
                raise _NotStructured("not UTF-8") from None
            if chars > _BIG_RECORD:
                records.add_oversized(RAW_KINDS.get(memoryview(raw)[0], "number"))
                continue
        try:
            records.add(loads(raw))  # json takes what msgspec does not (1e400: infinity)
        except ValueError:  # UnicodeDecodeError included
            raise _NotStructured("not valid JSON") from None


_WS_BYTES = re.compile(rb"[ \t\n\r]*")
_HEAD_PROBE = 32
"""Bytes of the first element that a later element is looked for by, at most: its opening
up to its first key's colon (records of one kind open alike, ``{"id":``), or these many."""
_CUT_TRIES = 4


def _split_cut_array(read: Read, records: _Records, limit: int) -> int | None:
    """Feed ``records`` the elements of the first ``limit`` bytes of an array that goes on
    past them, split by msgspec in one call: the part is closed after the last element
    that opens as the first one does and is preceded by a comma (tried from the end, a few
    times), and its syntax is checked whole before anything is fed. Returns where the
    element after the last one fed starts (the caller reads on from there, one element at
    a time), or None, with nothing fed, when no such cut reads as JSON to msgspec (or it is
    not installed)."""
    try:
        import msgspec  # a C extension: only for a document that is one array
    except ImportError:
        return None
    part = bytearray()
    while len(part) < limit and (block := read(min(_BLOCK, limit - len(part)), len(part))):
        part += block  # (one copy: a bytes join would hold the part twice)
    if part.count(b",") >= _WHOLE_ELEMENTS:
        return None  # many small elements: the sliding window holds less
    opening = _WS_BYTES.match(part).end()  # type: ignore[union-attr]
    if part[opening : opening + 1] != b"[":
        return None
    first = _WS_BYTES.match(part, opening + 1).end()  # type: ignore[union-attr]
    colon = part.find(b":", first, first + _HEAD_PROBE)
    head = bytes(part[first : colon + 1 if colon >= 0 else first + _HEAD_PROBE])
    at = len(part)
    for _ in range(_CUT_TRIES):
        at = part.rfind(head, first + 1, at) if len(head) > 1 else -1
        if at < 0:
            return None
        comma = at - 1
        while part[comma] in b" \t\n\r":
            comma -= 1
        if part[comma] != ord(","):
            continue
        part[comma] = ord("]")
        try:
            raws = msgspec.json.decode(
                memoryview(part)[opening : comma + 1], type=list[msgspec.Raw]
            )
        except (msgspec.DecodeError, msgspec.ValidationError):
            part[comma] = ord(",")
            continue
        _add_raws(records, raws)
        return comma + 1
    return None


def _read_whole(read: Read, acc: _Accumulator, *, size: int) -> object | None:
    """The envelope of a whole document that is one object, read from msgspec's raw members
    (``_read_tree``); None, with nothing fed, when it is for the event pass (the document's
    bytes are let go first)."""
    data = _whole(read, size)
    if data.count(b",") >= _WHOLE_ELEMENTS:
        return None  # many small members: the event pass holds less
    try:
        return _scan_tree(data, acc)
    except _Fallback:
        acc.restart()
        return None


def _whole(read: Read, size: int) -> bytes:
    """The first ``size`` bytes, read in one piece (a join of blocks would hold the
    document twice)."""
    data = read(size, 0)
    while 0 < len(data) < size:
        more = read(size - len(data), len(data))
        if not more:
            break
        data += more
    return data


def _prefix(parent: str | None, key: object) -> str | None:
    """ijson's prefix for ``key`` under ``parent`` (None when a key holds a dot)."""
    if parent is None:
        return None
    if key is None:
        return parent
    name = str(key)
    if not name or "." in name:
        return None
    return f"{parent}.{name}" if parent else name
