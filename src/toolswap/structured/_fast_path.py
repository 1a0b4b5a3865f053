"""The fast path past the sample: once a collection's first ``SAMPLE_RECORDS`` records
are walked whole, each later record is only counted, checked for failure signs in the keys
that can carry one and tallied in its few-valued fields (rare values are anomalies too),
per record shape (a ``_Plan``); a batch of records is checked column-wise, in C where it
can be. A record of a shape not seen yet is still walked whole, up to ``_EXTRA_WALKS``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from itertools import repeat
from operator import methodcaller
from typing import Any

from ._fields import (
    _MAX_VALUES,
    SAMPLE_RECORDS,
    _Collection,
    _Plan,
    _shape_key,
    _Walker,
    too_long,
)
from ._signs import _MAX_FAILURES, _SIGN_KEYS, _failure_signs, _signs_first
from ._values import _IDENTIFIER, _TYPE_NAMES, _cell, _compact, _type_name

__all__ = ["_Accumulator"]


_EXTRA_WALKS = 32


class _Accumulator(_Walker):
    """The walker with the fast path: records past the sample are counted, checked for
    failure signs and tallied in their few-valued fields, per record shape."""

    def __init__(self) -> None:
        super().__init__()
        self.sign_memo: dict[tuple[str, type, object], tuple[str, ...]] = {}

    def restart(self) -> None:
        """Forget every record fed so far (a reader that gave up hands over to another)."""
        vars(self).update(vars(_Accumulator()))

    def record(
        self,
        pattern: str,
        path: str,
        value: object,
        *,
        oversized: bool = False,
        shown: object = None,
    ) -> None:
        """Add one record (the element ``path`` of the collection ``pattern``): the first
        ``SAMPLE_RECORDS`` are walked whole, later ones take the fast path; one too large
        to walk (``oversized``) is counted by its kind, the name ``value`` gives
        (``object``). ``shown``: the record as the outline shows it, if not ``value``."""
        coll = self.collection(pattern)
        if coll.walked < SAMPLE_RECORDS or oversized:
            self._record_full(coll, pattern, path, value, oversized=oversized, shown=shown)
            return
        if type(value) is not dict:
            coll.count += 1
            kind = _TYPE_NAMES.get(type(value)) or _type_name(value)
            coll.kinds[kind] = coll.kinds.get(kind, 0) + 1
            return
        shape = _shape_key(value)
        plan = coll.plans.get(shape)
        if plan is None:
            if coll.walked < SAMPLE_RECORDS + _EXTRA_WALKS and shape not in coll.shapes:
                # A record of a shape not seen yet: walked whole, so its fields are named.
                self._record_full(coll, pattern, path, value, oversized=False, shown=shown)
                return
            plan = self._plan(pattern, value)
            if len(coll.plans) < 256:
                coll.plans[shape] = plan
        self.record_fast(coll, path, value, plan)

    def batch(
        self,
        pattern: str,
        base: str,
        first: int,
        values: list[Any],
        text_of: Callable[[Any], str] | None = None,
        *,
        alike: bool = False,
    ) -> None:
        """Add the records ``values`` (elements ``first``... of ``base``). Past the sample,
        a batch of objects is checked column-wise, in C where it can be: their shapes as a
        set, each sign key's distinct values (memoised), each few-valued field's values
        counted by ``Counter``; only records with a sign or a new value are looked at
        one by one. ``text_of`` shows a record (tables: typed cells); ``alike``: every
        record has the first's shape (a table's whole rows of text)."""
        coll = self.collection(pattern)
        start = 0
        while start < len(values) and coll.walked < SAMPLE_RECORDS:
            self.record(pattern, f"{base}[{first + start}]", values[start])
            start += 1
        if start:
            values, first = values[start:], first + start
        if not values:
            return
        types = Counter(map(type, values))
        if dict not in types and all(kind in _TYPE_NAMES for kind in types):
            # Scalars and arrays past the sample are only counted, by type (in C: a record
            # at a time, 3,000,000 numbers took seconds).
            coll.count += len(values)
            for kind, count in types.items():
                name = _TYPE_NAMES[kind]
                coll.kinds[name] = coll.kinds.get(name, 0) + count
            return
        if len(types) != 1 or dict not in types:
            for offset, value in enumerate(values):
                self.record(pattern, f"{base}[{first + offset}]", value)
            return
        shapes = (
            {_shape_key(values[0])}
            if alike
            else set(
                zip(
                    map(tuple, values),
                    map(tuple, map(map, repeat(type), map(dict.values, values))),
                    strict=True,
                )
            )
        )
        plans: list[_Plan] = []
        for shape in shapes:
            plan = coll.plans.get(shape)
            if plan is None:
                if (
                    text_of is None  # a table's rows all have the header's shape
                    and coll.walked < SAMPLE_RECORDS + _EXTRA_WALKS
                    and shape not in coll.shapes
                ):
                    # A new shape to walk whole: this batch goes record by record.
                    for offset, value in enumerate(values):
                        self.record(pattern, f"{base}[{first + offset}]", value)
                    return
                plan = self._plan(pattern, values[[*map(_shape_key, values)].index(shape)])
                if len(coll.plans) < 256:
                    coll.plans[shape] = plan
            plans.append(plan)
        show = text_of if text_of is not None else _compact
        texts: dict[int, str] = {}

        def text(offset: int) -> str:
            found = texts.get(offset)
            if found is None:
                found = texts[offset] = show(values[offset])
            return found

        def failed(offset: int) -> str:  # a failure: the fields that say so first
            if text_of is not None:
                return text(offset)
            return _compact(_signs_first(values[offset]))

        # (signs, offsets of the records whose value carries them), per sign-bearing value.
        marked: list[tuple[tuple[str, ...], list[int]]] = []
        cell = text_of is not None
        for key in dict.fromkeys(k for plan in plans for k in plan.signs):
            column = list(map(methodcaller("get", key), values))
            try:
                distinct = set(column)
            except TypeError:  # objects or arrays: each value checked
                for offset, item in enumerate(column):
                    if item is not None:
                        signs = self.signs_of(key, item, cell=cell)
                        if signs:
                            marked.append((signs, [offset]))
                continue
            for item in distinct:
                if item is None:
                    continue
                signs = self.signs_of(key, item, cell=cell)
                if signs:
                    kind = type(item)
                    marked.append(
                        (
                            signs,
                            [
                                offset
                                for offset, other in enumerate(column)
                                if other == item and type(other) is kind
                            ],
                        )
                    )
        tallies = {key: field for plan in plans for key, field in plan.tallies}
        for key, field in tallies.items():
            if field.values is None:
                continue
            column = list(map(methodcaller("get", key), values))
            try:
                # By type too: true equals 1 (and 1.0), and hashes alike.
                counted = Counter(zip(map(type, column), column, strict=True))
            except TypeError:
                continue
            for (kind, item), count in counted.items():
                if field.values is None:
                    break
                if kind is not str and kind is not bool:
                    continue
                field.tallied += count
                entry = field.values.get(item)
                if entry is not None:
                    entry[0] += count
                elif len(field.values) >= _MAX_VALUES or too_long(item):
                    field.values = None
                else:
                    offset = next(
                        i for i, other in enumerate(column) if type(other) is kind and other == item
                    )
                    field.values[item] = [count, f"{base}[{first + offset}]", text(offset)]
        before = coll.count
        coll.count += len(values)
        coll.kinds["object"] = coll.kinds.get("object", 0) + len(values)
        groups: dict[tuple[str, ...], list[int]] = {}
        if len(marked) == 1:  # the usual case: one sign-bearing value, no merging
            groups[tuple(dict.fromkeys(marked[0][0]))] = marked[0][1]
        else:
            per_offset: dict[int, list[str]] = {}
            for signs, offsets in marked:
                for offset in offsets:
                    per_offset.setdefault(offset, []).extend(signs)
            for offset in sorted(per_offset):
                groups.setdefault(tuple(dict.fromkeys(per_offset[offset])), []).append(offset)
        for tokens, offsets in groups.items():
            offsets.sort()
            # The first few of each group are kept as examples; the rest are counted.
            for offset in offsets[:_MAX_FAILURES]:
                coll.note_signs(
                    list(tokens),
                    f"{base}[{first + offset}]",
                    functools.partial(failed, offset),
                    before + offset + 1,
                )
            if len(offsets) > _MAX_FAILURES:
                coll.signs[tokens if tokens in coll.signs else ("other failure signs",)][0] += (
                    len(offsets) - _MAX_FAILURES
                )

    def _plan(self, pattern: str, value: dict[Any, Any]) -> _Plan:
        signs = tuple(key for key in value if key in _SIGN_KEYS)
        start = len(pattern) + 1
        tallies = [
            (name[start:], field)
            for name, field in self.fields.items()
            if field.parent == pattern
            and field.values is not None
            and name[start:] in value
            and _IDENTIFIER.match(name[start:])
        ]
        return _Plan(signs, tallies)

    def signs_of(self, key: str, item: object, *, cell: bool = False) -> tuple[str, ...]:
        """The failure signs of one field's value (memoised for scalar values); ``cell``:
        the value is a table cell's text, read typed (an exit code of ``0`` is a number)."""
        kind = type(item)
        if kind is dict or kind is list:
            why: list[str] = []
            _failure_signs(key, item, why)
            return tuple(why)
        memo_key = (key, kind, item)
        found = self.sign_memo.get(memo_key)
        if found is None:
            why = []
            _failure_signs(key, _cell(item) if cell and kind is str else item, why)  # type: ignore[arg-type]
            found = tuple(why)
            if len(self.sign_memo) < 4096:
                self.sign_memo[memo_key] = found
        return found

    def record_fast(
        self,
        coll: _Collection,
        path: str,
        value: dict[Any, Any],
        plan: _Plan,
        text_of: Callable[[], str] | None = None,
    ) -> None:
        """Count a record past the sample; check the keys that can carry a failure sign
        and tally the values of the few-valued fields (rare values are anomalies too)."""
        coll.count += 1
        coll.kinds["object"] = coll.kinds.get("object", 0) + 1
        why: tuple[str, ...] = ()
        for key in plan.signs:
            sign_value = value[key]
            found = self.signs_of(key, _cell(sign_value) if text_of is not None else sign_value)
            if found:
                why += found
        text: str | None = None
        for key, field in plan.tallies:
            values = field.values
            if values is None:
                continue
            item: Any = value.get(key)
            kind_of = type(item)
            if kind_of is not str and kind_of is not bool:
                continue
            field.tallied += 1
            entry = values.get(item)
            if entry is not None:
                entry[0] += 1
            elif len(values) >= _MAX_VALUES or too_long(item):
                field.values = None
            else:
                if text is None:
                    text = text_of() if text_of is not None else _compact(value)
                values[item] = [1, path, text]
        if why:
            known = text if text_of is not None else None
            coll.note_signs(
                list(why),
                path,
                (lambda: known)
                if known is not None
                else (text_of if text_of is not None else lambda: _compact(_signs_first(value))),
            )
