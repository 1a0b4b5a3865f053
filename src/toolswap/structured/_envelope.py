"""The envelope of a JSON document, as both of its readers (``_read_json``'s event pass and
``_read_tree``'s pass over raw members) build it: the document with each outermost array,
and each object keyed by names, replaced by a ``_Summary`` whose records went to the
accumulator; how an object read as envelope becomes such a collection (``_collapse``); and
the records of one array fed in batches (``_Records``).
"""

from __future__ import annotations

from typing import Any

from ._fast_path import _Accumulator
from ._fields import SAMPLE_RECORDS
from ._source import _BATCH
from ._values import _counted, _key_path

__all__ = [
    "RAW_KINDS",
    "RECORD_EVENTS",
    "WRAPPER_ELEMENTS",
    "_ENVELOPE_MEMBERS",
    "_Records",
    "_Summary",
    "_Wrapper",
    "_collapse",
    "found_wrapper",
    "wrapper_records",
]


RAW_KINDS = {ord("{"): "object", ord("["): "array", ord('"'): "str"}
"""The kind of a record too large to walk, by the first byte of its JSON text."""
_ENVELOPE_MEMBERS = 60
"""Members of an envelope object kept for the outline (the rest are counted)."""
RECORD_EVENTS = 20_000
"""A record of more parser events than this (keys, values, starts and ends of containers)
is counted, not kept or walked."""
WRAPPER_ELEMENTS = 8
"""An array in a JSON object document of at most this many elements, one of them an object
of more than ``RECORD_EVENTS`` events, is a wrapper, not a collection: its elements are read
as envelope, and the arrays in them are the collections (SARIF's ``runs``, each run one
object holding its ``results``; trivy's ``Results``, one per target). Their patterns take
``[]`` for the wrapper's index (``.runs[].results[]``), their records' paths the index
itself (``.runs[0].results[7]``). The elements are records too, of ``.runs[]``, each
collection in them an empty array there (``wrapper_records``), so a failing one is listed.
In a document read
in part, an array the part ends in counts the elements it began. Each array is judged on
its own (by its path); past ``_MAX_WRAPPERS`` found, arrays are collections again."""
_MAX_WRAPPERS = 8
"""Wrapper arrays one document may have: each one found reads the document again."""


_MAX_GUESSES = 8
"""Arrays guessed to be wrappers (``_Wrapper.guess``) that turned out longer: past these, a
document's arrays are judged at their end only (each wrong guess reads it once more)."""


class _Wrapper(Exception):
    """The array at ``path`` is a wrapper (see ``WRAPPER_ELEMENTS``): the document is read
    again, from its start, with ``path`` among the known ones. ``guess``: it was raised
    at the element too large to be a record, before the array's end (the pass over the
    rest of a part was wasted, 8 MiB of a SARIF log's one run in Python's events); the
    next pass raises ``_NotWrapper`` if the array turns out longer."""

    def __init__(self, path: str, *, guess: bool = False) -> None:
        super().__init__(path)
        self.path = path
        self.guess = guess


class _NotWrapper(Exception):
    """The array at ``path``, guessed to be a wrapper, has more than ``WRAPPER_ELEMENTS``
    elements: the document is read again with ``path`` judged at its end, as any array."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def found_wrapper(path: str, known: set[str], *, guess: bool = False) -> None:
    """The array at ``path`` was found to be a wrapper (``guess``: by an element, before
    its end): raise ``_Wrapper``, unless ``known`` holds ``_MAX_WRAPPERS`` already (the
    array then stays a collection).

    Raises:
        _Wrapper: ``path`` is to be read again as a wrapper.
    """
    if len(known) < _MAX_WRAPPERS:
        raise _Wrapper(path, guess=guess)


def wrapper_records(acc: _Accumulator, field: str, path: str, elements: list[object]) -> None:
    """Feed a wrapper's elements to ``acc`` as the records of ``field[]``. A collection read
    from one (each is its own) is walked as an empty array (or object, for a map of names):
    the field is there, of its type; the record is shown with the collection named in its
    place (``"results": "[20 elements: .runs[].results[]]"``). So is a wrapper in it, whose
    elements are records of their own."""
    pattern = field + "[]"
    for number, element in enumerate(elements):
        acc.record(pattern, f"{path}[{number}]", _walked(element), shown=_shown(element))


def _walked(node: object) -> object:
    if isinstance(node, _Summary):
        return {} if node.names else []
    if isinstance(node, dict):
        return {key: _walked(value) for key, value in node.items()}
    if isinstance(node, list):
        return []  # a wrapper in the element: its elements are records of their own
    return node


def _shown(node: object) -> object:
    if isinstance(node, _Summary):
        if node.names:
            return f"{{entries: {node.pattern}}}"
        if node.count is None:
            return f"[elements: {node.pattern}]"
        return f"[{_counted(node.count, 'element')}: {node.pattern}]"
    if isinstance(node, dict):
        return {key: _shown(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_shown(value) for value in node]
    return node


class _Summary:
    """An outermost array in the envelope, or an object keyed by names (``names``): its
    records are counted in a collection."""

    __slots__ = ("count", "names", "pattern", "source")

    def __init__(
        self, pattern: str, *, names: bool = False, source: dict[Any, Any] | None = None
    ) -> None:
        self.pattern = pattern
        self.names = names
        self.source = source
        """A map of names collapsed after it was read: the envelope object it was."""
        self.count: int | None = None
        """The elements of this array, once read to its end: the collection may hold
        those of others too (the same array in each of a wrapper's elements)."""


def _collapse(
    node: dict[Any, Any],
    path: str,
    acc: _Accumulator,
    total: int,
    *,
    reread: bool = False,
    pattern: str | None = None,
) -> _Summary:
    """An envelope object whose keys turned out to be names (its first were read as
    fields): its members become the records of a collection ``path[]``, and what was read
    as envelope below it (collections, fields) is dropped. Members past the envelope's
    ``_ENVELOPE_MEMBERS`` are counted. Arrays inside the members were read as collections of
    their own: ``reread``, the caller reads the members again, whole, as records (the pass
    over raw members can); else they are empty in the records walked, and a note says how
    many of their elements the outline does not show. ``pattern``: the object's field path
    (``path`` with ``[]`` for the index of a wrapper it is in; by default ``path``)."""
    field = path if pattern is None else pattern
    collection = (field or ".") + "[]"
    below = (field + ".", field + "[") if field else (".",)

    def read_below(name: str) -> bool:
        """Read as envelope below the object; not the records of the collection itself,
        which an earlier element of a wrapper made (``WRAPPER_ELEMENTS``)."""
        return name.startswith(below) and not name.startswith(collection)

    unshown = 0
    for name in [p for p in acc.collections if read_below(p)]:
        if name[:-2] not in acc.maps:  # (a map's entries stay in its records: ``_plain``)
            unshown += acc.collections[name].count
        del acc.collections[name]
    if unshown and not reread and len(acc.notes) < 8:
        acc.notes.append(
            f"(the arrays in the first entries of {path or '.'} hold {unshown:,} elements"
            " the outline does not show: query the artifact)"
        )
    dropped = [p for p in acc.fields if read_below(p)]
    for name in dropped:
        del acc.fields[name]
    if dropped:  # the paths named by the keys are gone: room for the entries' fields
        acc.order = [p for p in acc.order if p in acc.fields]
        acc.fields_dropped = False
    acc.maps = {m for m in acc.maps if not read_below(m)}
    acc.maps.add(field or ".")
    for key, value in node.items():
        acc.record(collection, _key_path(path, str(key)), _plain(value))
    acc.collection(collection).count += max(total - len(node), 0)
    return _Summary(collection, names=True, source=node)


def _plain(node: object) -> object:
    """An envelope node as the value it stands for (a collection's records are gone)."""
    if isinstance(node, _Summary):
        if node.source is not None:
            return _plain(node.source)
        return {} if node.names else []
    if isinstance(node, dict):
        return {key: _plain(value) for key, value in node.items()}
    if isinstance(node, list):  # a wrapper's elements (see ``WRAPPER_ELEMENTS``)
        return [_plain(value) for value in node]
    return node


class _Records:
    """The elements of one array (the collection ``pattern``, at the path ``base``), fed to
    the accumulator in batches of ``_BATCH``; a record too large to walk is counted, not
    walked."""

    def __init__(self, acc: _Accumulator, pattern: str = ".[]", base: str = ".") -> None:
        self._acc = acc
        self._pattern = pattern
        self._base = base
        self.count = 0
        """Records fed so far, the pending batch included."""
        self._pending: list[object] = []

    def add(self, value: object) -> None:
        self._pending.append(value)
        self.count += 1
        if len(self._pending) >= _BATCH:
            self.flush()

    def sampled(self) -> bool:
        """Whether the collection's sample is walked: later records are only counted."""
        self.flush()
        return self._acc.collection(self._pattern).walked >= SAMPLE_RECORDS

    def add_counted(self, kinds: dict[str, int]) -> None:
        """Count records past the sample that are not objects, by type name (as the fast
        path counts them)."""
        self.flush()
        coll = self._acc.collection(self._pattern)
        for kind, count in kinds.items():
            if count:
                coll.kinds[kind] = coll.kinds.get(kind, 0) + count
                coll.count += count
                self.count += count

    def add_oversized(self, kind: str) -> None:
        """Count a record too large to walk (one would cost the sample its time), by the
        name of its kind (``object``)."""
        self.flush()
        self._acc.record(self._pattern, f"{self._base}[{self.count}]", kind, oversized=True)
        self.count += 1

    def flush(self) -> None:
        if self._pending:
            first = self.count - len(self._pending)
            self._acc.batch(self._pattern, self._base, first, self._pending)
            self._pending = []
