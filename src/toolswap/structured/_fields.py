"""Field statistics from the records walked whole: each field path's count, its types and
(while they are few) its values with the first record that has each, every collection's
record count, kinds, shapes, first and differently shaped records and failure signs.
The first ``SAMPLE_RECORDS`` records of a collection are walked here; the fast path past
the sample (``_fast_path``) extends this walker.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

from ._signs import _MAX_FAILURES, _SIGN_KEYS, _failure_signs, _signs_first
from ._values import _TYPE_NAMES, _compact, _key_path, _type_name

__all__ = [
    "SAMPLE_RECORDS",
    "_MAX_FIELDS",
    "_MAX_VALUES",
    "_Collection",
    "_Field",
    "_Plan",
    "_Walker",
    "_nest_target",
    "_shape_key",
    "too_long",
]


_MAX_FIELDS = 1_000
_MAX_VALUES = 24
_VALUE_CHARS = 48
_MAX_DIFFERENT = 2
_VALUE_DEPTH = 2
_FAILURE_DEPTH = 3
SAMPLE_RECORDS = 200
"""Records of a collection walked whole for field statistics; the rest are counted and
checked for failure signs and rare values in their top-level fields, at C speed."""


class _Field:
    __slots__ = ("count", "parent", "tallied", "types", "values")

    def __init__(self, parent: str | None) -> None:
        self.parent = parent
        self.count = 0
        self.tallied = 0
        """Records past the sample whose value of this field was tallied (fast path)."""
        self.types: dict[str, int] = {}
        self.values: dict[str | bool, list[Any]] | None = {}
        """value -> [count, first record path, that record's text]; None: too many."""


class _Collection:
    """An array whose elements are the records (one per output for JSON Lines and tables)."""

    __slots__ = (
        "count",
        "different",
        "first",
        "kinds",
        "oversized",
        "plans",
        "shapes",
        "signatures",
        "signs",
        "walked",
    )

    def __init__(self) -> None:
        self.count = 0
        self.walked = 0
        """Records walked whole (the sample, and later records whose shape is new)."""
        self.plans: dict[object, _Plan] = {}
        """Per record shape past the sample: which keys to check and to tally."""
        self.kinds: dict[str, int] = {}
        self.first: tuple[str, str] | None = None
        self.different: list[tuple[str, str]] = []
        self.signatures: set[frozenset[str]] = set()
        self.shapes: set[object] = set()
        """Shapes (see ``_shape_key``) of the records walked whole."""
        self.signs: dict[tuple[str, ...], list[Any]] = {}
        """Failure signs seen together (``("status=failed",)``) -> [records that have
        them, [(record number, path, text)] of the first ``_MAX_FAILURES``]. A sign most
        records carry is the collection's norm, not a failure (see ``_anomalies``)."""
        self.oversized = 0

    def note_signs(
        self, why: list[str], path: str, text: Callable[[], str], number: int | None = None
    ) -> None:
        key = tuple(dict.fromkeys(why))  # (a record whose items repeat a sign counts once)
        entry = self.signs.get(key)
        if entry is None:
            if len(self.signs) >= 256:
                key = ("other failure signs",)
                entry = self.signs.get(key)
            if entry is None:
                entry = self.signs[key] = [0, []]
        entry[0] += 1
        if len(entry[1]) < _MAX_FAILURES:
            entry[1].append((self.count if number is None else number, path, text()))


class _Plan:
    """How a record of one shape past the sample is checked: the keys that can carry a
    failure sign, and the few-valued fields whose values are tallied."""

    __slots__ = ("signs", "tallies")

    def __init__(self, signs: tuple[str, ...], tallies: list[tuple[str, _Field]]) -> None:
        self.signs = signs
        self.tallies = tallies


_NAMES_AT = 8
_FIELD_KEY = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*\Z"
    r"|\$(?:schema|id|ref|defs|comment|anchor|dynamicRef|dynamicAnchor|vocabulary)\Z"
    r"|@(?:context|id|type|graph|value|language|list|set|reverse|index|base|vocab|nest"
    r"|version|direction|included|json|none|prefix|propagate|protected|import)\Z"
    r"|@[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\Z"
)
"""A key that names a field: an identifier, or a format's own keyword (JSON Schema's
``$schema``, JSON-LD's ``@context``) or annotation (OData's ``@odata.nextLink``), which sits
beside the other fields of an object, not among names (``@alice``, ``$HOME`` are names)."""


def _names(value: dict[Any, Any]) -> bool:
    """Whether an object's keys are names rather than fields (``npm ls --json``'s
    ``dependencies: {"left-pad": {...}, ...}``). Its values are all of one type, and either
    a key is not field-like (``@scope/pkg``, ``/path``, ``left-pad``; ``_FIELD_KEY``), or its values
    are objects, at least ``_NAMES_AT`` of them, all sharing a key."""
    kinds = set(map(type, value.values()))
    if len(kinds) != 1:
        return False
    if not all(map(_FIELD_KEY.match, value)):
        return True
    if kinds != {dict} or len(value) < _NAMES_AT:
        return False
    shared: set[Any] | None = None
    for item in value.values():
        if item:
            shared = set(item) if shared is None else shared & item.keys()
            if not shared:
                return False
    return shared is not None


_LAST_KEY = re.compile(r'(?:\.[A-Za-z_][A-Za-z0-9_]*|\["(?:[^"\\]|\\.)*"\])\Z')
_NESTS: dict[str, str | None] = {}


def _nest_target(pattern: str) -> str | None:
    """``W.k[]`` when ``pattern`` is ``W.k[].k``: the array or map of an entry that holds
    more entries like itself under the same key (npm's ``dependencies`` within
    ``dependencies``, a tree's ``children``). Its entries are walked as ``W.k[]``, so a
    tree's fields are one set of paths however deep it goes; else None."""
    if pattern in _NESTS:
        return _NESTS[pattern]
    found = _LAST_KEY.search(pattern)
    target = None
    if found is not None:
        key = found.group()
        if pattern.endswith(key + "[]" + key):
            target = pattern[: -len(key)]
    if len(_NESTS) < 4096:
        _NESTS[pattern] = target
    return target


class _Nest:
    """Entries nested under the key of a collection's records (or of a field's items)
    that are walked as those records are (see ``_nest_target``)."""

    __slots__ = ("deepest", "entries", "target")

    def __init__(self, target: str) -> None:
        self.target = target
        self.entries = 0
        self.deepest = 0


def _shape_key(value: dict[Any, Any]) -> object:
    """What makes a record's shape new: its keys (in order) and the types of their values
    (built in C: cheap enough for every record)."""
    return (tuple(value), tuple(map(type, value.values())))


def _failure_text(value: object, known: str | None) -> str:
    """A record listed as a failure, the fields that say so first (``known``: its text
    as it is, if already made)."""
    shown = _signs_first(value) if type(value) is dict else value
    return known if known is not None and shown is value else _compact(shown)


_SCALAR_NAMES: dict[type, str] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    type(None): "null",
}
"""The type names of the values that have no fields (exact types: a subclass is walked)."""


def too_long(value: str | bool) -> bool:
    """Whether a value is too long to tally: a field that has one names things rather than
    sorting them into a few kinds. A tally keys strings and booleans by themselves (``true``
    and ``"true"`` are two values)."""
    return type(value) is str and len(value) > _VALUE_CHARS


def _tally(field: _Field, value: object, kind: str, depth: int, firsts: list[_Field]) -> None:
    """Note a value of a field whose values are still few (``field.values`` is not None):
    strings and booleans near the record's top are counted by value, up to ``_MAX_VALUES``
    values of at most ``_VALUE_CHARS``; any other value but null ends the tally."""
    values = field.values
    assert values is not None
    if depth <= _VALUE_DEPTH and kind in ("str", "bool"):
        shown = str(value) if kind == "str" else bool(value)
        if too_long(shown):
            field.values = None
            return
        entry = values.get(shown)
        if entry is None:
            if len(values) >= _MAX_VALUES:
                field.values = None
            else:
                values[shown] = [1, None, None]
                firsts.append(field)
        else:
            entry[0] += 1
    elif kind not in ("null", "str", "bool"):
        field.values = None


class _Walker:
    """Field statistics of the records walked whole: every field path's count, types
    and few values, the collections' shapes, first records and failure signs."""

    def __init__(self) -> None:
        self.fields: dict[str, _Field] = {}
        self.order: list[str] = []
        self.collections: dict[str, _Collection] = {}
        self.fields_dropped = False
        self.notes: list[str] = []
        self.maps: set[str] = set()
        """Field paths of objects keyed by names, not fields (see ``_names``)."""
        self.nests: dict[str, _Nest] = {}
        """Field paths (``W.k[].k``) whose entries are walked as ``W.k[]``."""
        self._level = 0
        self._where = ""
        """The path of the record, or of the entry nested in it, being walked (entries
        nested right in the record, under its own key, and in those entries)."""
        self._record = ""
        """The pattern of the record being walked."""
        self.nested_failures: list[tuple[list[str], str, dict[Any, Any]]] = []
        """Entries nested in the record being walked that carry a failure sign: (signs,
        path, entry)."""
        self.elements: dict[str, int] = {}
        """Elements of the arrays (and entries of the maps of names) walked in records, by
        pattern: where a collection's pattern is among them, jq's path matches those too
        (a wrapper's results beside another run's: see ``_render``)."""

    def collection(self, pattern: str) -> _Collection:
        found = self.collections.get(pattern)
        if found is None:
            found = self.collections[pattern] = _Collection()
        return found

    def _field(self, pattern: str, parent: str | None) -> _Field | None:
        field = self.fields.get(pattern)
        if field is None:
            if len(self.fields) >= _MAX_FIELDS:
                self.fields_dropped = True
                return None
            field = self.fields[pattern] = _Field(parent)
            self.order.append(pattern)
        return field

    @property
    def sampled(self) -> bool:
        """Some records were only counted and checked, not walked whole."""
        return any(c.walked < c.count for c in self.collections.values())

    def _record_full(
        self,
        coll: _Collection,
        pattern: str,
        path: str,
        value: object,
        *,
        oversized: bool,
        shown: object = None,
    ) -> None:
        coll.walked += 1
        coll.count += 1
        if oversized:
            # Counted by its kind (``value``: the kind's name), never walked or shown.
            kind = value if isinstance(value, str) else _type_name(value)
            coll.kinds[kind] = coll.kinds.get(kind, 0) + 1
            coll.oversized += 1
            if coll.first is None:
                coll.first = (path, f"({kind} too large to outline)")
            return
        if len(coll.shapes) < 256 and type(value) is dict:
            coll.shapes.add(_shape_key(value))
        kind = _type_name(value)
        coll.kinds[kind] = coll.kinds.get(kind, 0) + 1
        why: list[str] = []
        firsts: list[_Field] = []
        self._where, self._record = path, pattern
        self.nested_failures = []
        self._walk(value, pattern, None, 0, why, firsts)
        for marks, where, nested in self.nested_failures:
            coll.note_signs(marks, where, functools.partial(_failure_text, nested, None))
        display = value if shown is None else shown
        text: str | None = None
        if firsts or coll.first is None:
            text = _compact(display)
        if firsts:
            for field in firsts:
                if field.values is None:  # it had too many values by the end of the record
                    continue
                for entry in field.values.values():
                    if entry[1] is None:
                        entry[1], entry[2] = path, text
        if coll.first is None:
            assert text is not None
            coll.first = (path, text)
        if isinstance(value, dict):
            signature = frozenset(value)
            if signature not in coll.signatures:
                if len(coll.signatures) < 64:
                    coll.signatures.add(signature)
                if coll.count > 1 and len(coll.different) < _MAX_DIFFERENT:
                    coll.different.append((path, text or _compact(display)))
        if why:  # (shown only for the first few records of each kind of sign)
            known = text
            coll.note_signs(why, path, lambda: _failure_text(display, known))

    def _walk(
        self,
        value: object,
        pattern: str,
        parent: str | None,
        depth: int,
        why: list[str],
        firsts: list[_Field],
    ) -> None:
        field = self.fields.get(pattern) or self._field(pattern, parent)
        kind = _TYPE_NAMES.get(type(value)) or _type_name(value)
        if field is not None:
            field.count += 1
            field.types[kind] = field.types.get(kind, 0) + 1
            if field.values is not None:
                _tally(field, value, kind, depth, firsts)
        items: Iterable[object]
        labels: Iterable[object]
        named = False
        if isinstance(value, dict):
            # (A record itself is never a map: its keys are what the outline is about.)
            if not (depth and (pattern in self.maps or _names(value))):
                signs = depth < _FAILURE_DEPTH
                fields = self.fields
                for key, item in value.items():
                    name = key if type(key) is str else str(key)
                    if signs and name in _SIGN_KEYS:
                        _failure_signs(name, item, why)
                    child = _key_path(pattern, name)
                    scalar = _SCALAR_NAMES.get(type(item))
                    if scalar is None:
                        self._walk(item, child, pattern, depth + 1, why, firsts)
                        continue
                    # A scalar: counted here, as _walk would (a call per leaf is most of
                    # the walk's cost).
                    field = fields.get(child) or self._field(child, pattern)
                    if field is not None:
                        field.count += 1
                        field.types[scalar] = field.types.get(scalar, 0) + 1
                        if field.values is not None:
                            _tally(field, item, scalar, depth + 1, firsts)
                return
            # A map keyed by names (packages, paths): its values are walked as the elements
            # of an array are, under ``pattern[]`` (jq's .[] iterates them).
            if len(self.maps) < _MAX_FIELDS:
                self.maps.add(pattern)
            items, labels, named = value.values(), value.keys(), True
        elif isinstance(value, list):
            items, labels = value, range(len(value))
        else:
            return
        inner = pattern + "[]"
        target = _nest_target(pattern) if depth else None
        if target is None:
            elements = self.elements
            if inner in elements or len(elements) < _MAX_FIELDS:
                elements[inner] = elements.get(inner, 0) + len(value)
            field = None
            for item in items:
                scalar = _SCALAR_NAMES.get(type(item))
                if scalar is None:
                    self._walk(item, inner, pattern, depth + 1, why, firsts)
                    field = None  # (the walk may have made it, or dropped fields)
                    continue
                if field is None:
                    field = self.fields.get(inner) or self._field(inner, pattern)
                    if field is None:
                        continue
                field.count += 1
                field.types[scalar] = field.types.get(scalar, 0) + 1
                if field.values is not None:
                    _tally(field, item, scalar, depth + 1, firsts)
            return
        # Objects nested under the key of the entries that hold them are entries like
        # them: walked as those entries, one level up (see ``_nest_target``). (Inline, as
        # the rest of the walk: a deep tree costs two frames a level.) An entry with a
        # failure sign is listed by its own path; its values are tallied but never shown
        # as the record's.
        nest = self.nests.get(pattern)
        step = pattern[len(target) :]
        here = self._where
        self._level += 1
        try:
            for label, item in zip(labels, items, strict=True):
                if type(item) is not dict:
                    self._walk(item, inner, pattern, depth + 1, why, firsts)
                    continue
                if nest is None:
                    nest = self.nests[pattern] = _Nest(target)
                nest.entries += 1
                nest.deepest = max(nest.deepest, self._level)
                own = target == self._record  # (else no path of its own is known)
                if own:
                    self._where = (
                        _key_path(here + step, str(label)) if named else f"{here}{step}[{label}]"
                    )
                marks: list[str] = []
                self._walk(item, target, pattern, depth - 1, marks, [])
                if not marks:
                    continue
                if own:
                    self.nested_failures.append((marks, self._where, item))
                else:
                    # Nested below a field of the record: no path of its own is known here
                    # (the walk keeps patterns, not paths), so it marks the record.
                    why.extend(dict.fromkeys(f"{mark} (nested)" for mark in marks))
        finally:
            self._level -= 1
            self._where = here
