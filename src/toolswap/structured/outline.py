"""The outline of a structured output: its shape with arrays collapsed, exact record counts,
each field's types and how often it is present, sample records, and the records that look
like failures, with their paths, inside a byte budget.

The outline is a bounded pass over the bytes just written (read back from the page cache):
at most ``scan_limit`` bytes are parsed, and an outline of a longer output says where it
stopped. JSON is parsed by ijson's C backend as a stream of events, so memory holds one
record at a time (a record of more than ``_RECORD_EVENTS`` events is counted, not kept);
JSON Lines by ``json.loads`` line by line; CSV and TSV by the ``csv`` module. Every path
is written as jq writes it (``.items[3777]``, ``.items[].status``; JSON Lines and tables
are arrays of records, ``.[5119]``), so the model can query exactly what it reads.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import methodcaller
from typing import Any

from .detect import Format

__all__ = ["OUTLINE_BYTES", "OUTLINE_SCAN_BYTES", "Outline", "outline"]

OUTLINE_BYTES = 5632
"""The outline's default share of the pointer (with 512-byte glimpses of the raw head,
tail and failure lines and the frame, a structured output's pointer stays under 8 KiB)."""
OUTLINE_SCAN_BYTES = 16 << 20
"""How much of an output the outline parses by default."""

Read = Callable[[int, int], bytes]
"""``read(count, offset)``: bytes of the output."""

_BLOCK = 1 << 20
_BATCH = 512
_RECORD_EVENTS = 20_000
_MAX_FIELDS = 1_000
_MAX_VALUES = 24
_VALUE_CHARS = 48
_RECORD_CHARS = 360
_STRING_CHARS = 60
_MAX_FAILURES = 8
_MAX_DIFFERENT = 2
_VALUE_DEPTH = 2
_FAILURE_DEPTH = 3
SAMPLE_RECORDS = 200
"""Records of a collection walked whole for field statistics; the rest are counted and
checked for failure signs and rare values in their top-level fields, at C speed."""
_EXTRA_WALKS = 32
# A collection longer than this is read by ijson's items (records built in C), not from
# the event stream in Python; shorter arrays stay in the envelope's pass.
_SWITCH_AFTER = 16
_SAMPLE_KEY_DEPTH = 2

_ERROR_KEYS = frozenset(
    {"error", "errors", "exception", "exceptions", "failure", "failures", "problems", "fatal"}
)
_STATUS_KEYS = frozenset(
    {"status", "state", "result", "outcome", "conclusion", "level", "severity", "loglevel"}
)
_EXIT_KEYS = frozenset(
    {"exit_code", "exitcode", "returncode", "return_code", "exit_status", "exitstatus", "rc"}
)
_SUCCESS_KEYS = frozenset({"ok", "success", "succeeded", "passed"})
_FAILURE_WORD = re.compile(
    r"(?i)\b(?:fail(?:ed|ure|ing)?|errors?|errored|fatal|crash(?:ed)?|panic(?:ked)?|"
    r"abort(?:ed)?|time[ _-]?out|timed[ _-]?out|critical|exception|broken|denied)\b"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"-?\d+\Z")
_FLOAT = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?\Z")


@dataclass(frozen=True, slots=True)
class Outline:
    """An outline of one structured output, ready for the pointer."""

    format: Format
    text: str
    """The outline as the pointer shows it (at most the budget, in UTF-8 bytes)."""
    records: int
    """Records counted (exact when ``complete``)."""
    complete: bool
    """The whole output was parsed."""
    example_path: str
    """A jq path worth querying (a failure-looking record, else the first record)."""


class _NotStructured(Exception):
    """The bytes are not the format the head suggested: the output stays text."""


# -- accumulation ------------------------------------------------------------------------


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


_PATHS: dict[tuple[str, str], str] = {}


def _key_path(parent: str, key: str) -> str:
    found = _PATHS.get((parent, key))
    if found is None:
        found = _key_path_of(parent, key)
        if len(_PATHS) < 4096:
            _PATHS[parent, key] = found
    return found


def _key_path_of(parent: str, key: str) -> str:
    if _IDENTIFIER.match(key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]" if parent else f".[{key!r}]"


def _shorten(value: object, depth: int = 0) -> object:
    """The value with long strings, long lists and deep nesting cut, so a sample record
    shows its shape rather than the start of one long field."""
    if isinstance(value, str):
        return value if len(value) <= _STRING_CHARS else value[: _STRING_CHARS - 1] + "…"
    if isinstance(value, list):
        if depth >= 4:
            return f"[{len(value)} items]" if value else []
        head = [_shorten(v, depth + 1) for v in value[:4]]
        return [*head, f"…+{len(value) - 4}"] if len(value) > 4 else head
    if isinstance(value, dict):
        if depth >= 4:
            return "{…}" if value else {}
        return {k: _shorten(v, depth + 1) for k, v in list(value.items())[:24]}
    return value


def _compact(value: object, limit: int = _RECORD_CHARS) -> str:
    text = json.dumps(_shorten(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Field:
    __slots__ = ("count", "parent", "tallied", "types", "values")

    def __init__(self, parent: str | None) -> None:
        self.parent = parent
        self.count = 0
        self.tallied = 0
        """Records past the sample whose value of this field was tallied (fast path)."""
        self.types: dict[str, int] = {}
        self.values: dict[str, list[Any]] | None = {}
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
        key = tuple(why)
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


class _Accumulator:
    def __init__(self) -> None:
        self.fields: dict[str, _Field] = {}
        self.order: list[str] = []
        self.collections: dict[str, _Collection] = {}
        self.sign_memo: dict[tuple[str, type, object], tuple[str, ...]] = {}
        self.fields_dropped = False
        self.notes: list[str] = []

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

    def record(self, pattern: str, path: str, value: object, *, oversized: bool = False) -> None:
        """Add one record (the element ``path`` of the collection ``pattern``): the first
        ``SAMPLE_RECORDS`` are walked whole, later ones take the fast path."""
        coll = self.collection(pattern)
        if coll.walked < SAMPLE_RECORDS or oversized:
            self._record_full(coll, pattern, path, value, oversized=oversized)
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
                self._record_full(coll, pattern, path, value, oversized=False)
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
    ) -> None:
        """Add the records ``values`` (elements ``first``... of ``base``). Past the sample,
        a batch of objects is checked column-wise, in C where it can be: their shapes as a
        set, each sign key's distinct values (memoised), each few-valued field's values
        counted by ``Counter``; only records with a sign or a new value are looked at
        one by one. ``text_of`` shows a record (tables: typed cells)."""
        coll = self.collection(pattern)
        start = 0
        while start < len(values) and coll.walked < SAMPLE_RECORDS:
            self.record(pattern, f"{base}[{first + start}]", values[start])
            start += 1
        if start:
            values, first = values[start:], first + start
        if not values:
            return
        if not all(type(value) is dict for value in values):
            for offset, value in enumerate(values):
                self.record(pattern, f"{base}[{first + offset}]", value)
            return
        shapes = set(
            zip(
                map(tuple, values),
                map(tuple, map(map, repeat(type), map(dict.values, values))),
                strict=True,
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
                counted = Counter(column)
            except TypeError:
                continue
            for item, count in counted.items():
                kind = type(item)
                if field.values is None:
                    break
                if kind is not str and kind is not bool:
                    continue
                field.tallied += count
                shown = item if kind is str else json.dumps(item)
                entry = field.values.get(shown)
                if entry is not None:
                    entry[0] += count
                elif len(field.values) >= _MAX_VALUES or len(shown) > _VALUE_CHARS:
                    field.values = None
                else:
                    offset = next(
                        i for i, other in enumerate(column) if type(other) is kind and other == item
                    )
                    field.values[shown] = [count, f"{base}[{first + offset}]", text(offset)]
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
                    functools.partial(text, offset),
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
            shown = item if kind_of is str else json.dumps(item)
            entry = values.get(shown)
            if entry is not None:
                entry[0] += 1
            elif len(values) >= _MAX_VALUES or len(shown) > _VALUE_CHARS:
                field.values = None
            else:
                if text is None:
                    text = text_of() if text_of is not None else _compact(value)
                values[shown] = [1, path, text]
        if why:
            known = text
            coll.note_signs(
                list(why),
                path,
                (lambda: known)
                if known is not None
                else (text_of if text_of is not None else lambda: _compact(value)),
            )

    def _record_full(
        self, coll: _Collection, pattern: str, path: str, value: object, *, oversized: bool
    ) -> None:
        coll.walked += 1
        coll.count += 1
        if len(coll.shapes) < 256 and type(value) is dict:
            coll.shapes.add(_shape_key(value))
        kind = _type_name(value)
        coll.kinds[kind] = coll.kinds.get(kind, 0) + 1
        if oversized:
            coll.oversized += 1
        why: list[str] = []
        firsts: list[_Field] = []
        self._walk(value, pattern, None, 0, why, firsts)
        text: str | None = None
        if firsts or why or coll.first is None:
            text = _compact(value)
        if firsts:
            for field in firsts:
                assert field.values is not None
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
                    coll.different.append((path, text or _compact(value)))
        if why:
            known = text
            coll.note_signs(why, path, lambda: known or _compact(value))

    def _walk(
        self,
        value: object,
        pattern: str,
        parent: str | None,
        depth: int,
        why: list[str],
        firsts: list[_Field],
    ) -> None:
        field = self._field(pattern, parent)
        kind = _type_name(value)
        if field is not None:
            field.count += 1
            field.types[kind] = field.types.get(kind, 0) + 1
            if field.values is not None and depth <= _VALUE_DEPTH and kind in ("str", "bool"):
                shown = str(value) if kind == "str" else json.dumps(value)
                if len(shown) > _VALUE_CHARS:
                    field.values = None
                else:
                    entry = field.values.get(shown)
                    if entry is None:
                        if len(field.values) >= _MAX_VALUES:
                            field.values = None
                        else:
                            field.values[shown] = [1, None, None]
                            firsts.append(field)
                    else:
                        entry[0] += 1
            elif field.values is not None and kind not in ("null", "str", "bool"):
                field.values = None
        if isinstance(value, dict):
            for key, item in value.items():
                if depth < _FAILURE_DEPTH:
                    _failure_signs(str(key), item, why)
                self._walk(item, _key_path(pattern, str(key)), pattern, depth + 1, why, firsts)
        elif isinstance(value, list):
            inner = pattern + "[]"
            for item in value:
                self._walk(item, inner, pattern, depth + 1, why, firsts)


_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    type(None): "null",
}
_SIGN_KEYS = frozenset(
    variant
    for key in _ERROR_KEYS | _STATUS_KEYS | _EXIT_KEYS | _SUCCESS_KEYS
    for variant in (key, key.title(), key.upper())
)


def _shape_key(value: dict[Any, Any]) -> object:
    """What makes a record's shape new: its keys (in order) and the types of their values
    (built in C: cheap enough for every record)."""
    return (tuple(value), tuple(map(type, value.values())))


def _failure_signs(key: str, value: object, why: list[str]) -> None:
    name = key.lower()
    if name in _ERROR_KEYS:
        if value not in (None, False, 0, "", [], {}):
            why.append(f"{key} field")
    elif name in _STATUS_KEYS:
        if isinstance(value, str) and _FAILURE_WORD.search(value):
            why.append(f"{key}={value[:40]}")
    elif name in _EXIT_KEYS:
        if isinstance(value, int) and not isinstance(value, bool) and value != 0:
            why.append(f"{key}={value}")
    elif name in _SUCCESS_KEYS and value is False:
        why.append(f"{key}=false")


# -- readers -----------------------------------------------------------------------------


class _Bytes(io.RawIOBase):
    """The output's first ``limit`` bytes as a file, for the parsers."""

    def __init__(self, read: Read, limit: int) -> None:
        self._read = read
        self._limit = limit
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._limit - self.pos)
        if want <= 0:
            return 0
        data = self._read(want, self.pos)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        want = self._limit - self.pos if size < 0 else min(size, self._limit - self.pos)
        if want <= 0:
            return b""
        data = self._read(want, self.pos)
        self.pos += len(data)
        return data


def _lines(read: Read, limit: int) -> Iterator[bytes]:
    """Complete lines of the first ``limit`` bytes (a line cut at the limit is left out)."""
    pos = 0
    rest = b""
    while pos < limit:
        block = read(min(_BLOCK, limit - pos), pos)
        if not block:
            break
        pos += len(block)
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest and pos < limit:
        yield rest  # the last line of the output, without a newline


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
    import ijson  # a C extension: only for outputs that look like JSON

    events = ijson.basic_parse(_Bytes(read, limit), use_float=True)
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
    # ijson's prefix of each envelope frame (None: a key ijson's prefixes cannot name).
    prefix_of: list[str | None] = [""]

    def put(container: Any, key: Any, value: object) -> None:
        if isinstance(container, list):
            container.append(value)
        elif isinstance(container, dict) and len(container) < 60:
            container[key] = value

    for event, value in events:
        if building or skip_depth:
            # Inside a record: build it (up to _RECORD_EVENTS events, then only count it).
            if skip_depth:
                if event in ("start_map", "start_array"):
                    skip_depth += 1
                elif event in ("end_map", "end_array"):
                    skip_depth -= 1
                    if skip_depth == 0:
                        acc.record(
                            collection, f"{path_of[-1] or '.'}[{index}]", None, oversized=True
                        )
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
                    acc.record(collection, f"{path_of[-1] or '.'}[{index}]", done[0])
                    index += 1
                    if index >= _SWITCH_AFTER and prefix_of[-1] is not None:
                        switch = (collection, path_of[-1], prefix_of[-1], len(stack))
                        break
            elif isinstance(top[0], dict):
                top[0][top[1]] = value
            else:
                top[0].append(value)
            if building and record_events > _RECORD_EVENTS:
                skip_depth = len(building)
                building = []
            continue
        frame = stack[-1]
        container = frame[0]
        if isinstance(container, _Summary):
            # The elements of an outermost array are the records.
            if event == "end_array":
                stack.pop()
                path_of.pop()
                prefix_of.pop()
                continue
            if event in ("start_map", "start_array"):
                building = [[{} if event == "start_map" else [], None]]
                record_events = 1
            else:
                acc.record(collection, f"{path_of[-1] or '.'}[{index}]", value)
                index += 1
                if index >= _SWITCH_AFTER and prefix_of[-1] is not None:
                    switch = (collection, path_of[-1], prefix_of[-1], len(stack))
                    break
            continue
        if event == "map_key":
            frame[1] = value
        elif event == "start_map":
            child = {}
            put(container, frame[1], child)
            stack.append([child, None])
            key = frame[1]
            path_of.append(path_of[-1] if key is None else _key_path(path_of[-1], str(key)))
            prefix_of.append(_prefix(prefix_of[-1], key))
        elif event == "end_map":
            stack.pop()
            path_of.pop()
            prefix_of.pop()
        elif event == "start_array":
            key = frame[1]
            path = path_of[-1] if key is None else _key_path(path_of[-1], str(key))
            collection = (path or ".") + "[]"
            summary = _Summary(collection)
            put(container, key, summary)
            stack.append([summary, None])
            path_of.append(path)
            prefix = _prefix(prefix_of[-1], key)
            prefix_of.append(None if prefix is None else _prefix(prefix, "item"))
            index = 0
        else:
            put(container, frame[1], value)
    if switch is not None:
        pattern, base, prefix, depth = switch
        records = ijson.items(_Bytes(read, limit), prefix, use_float=True)
        pending: list[object] = []
        pending_first = index
        try:
            for number, value in enumerate(records):
                if number >= index:
                    if not pending:
                        pending_first = number
                    pending.append(value)
                    if len(pending) >= _BATCH:
                        acc.batch(pattern, base or ".", pending_first, pending)
                        pending = []
        except Exception:  # ijson's errors: a document cut at the scan limit ends here
            if limit >= size:
                raise
        finally:
            if pending:
                acc.batch(pattern, base or ".", pending_first, pending)
        # The members after the collection: only those of a collection in the root object
        # are looked for, and only in a whole document.
        if depth == 3 and isinstance(stack[1][0], dict) and limit >= size:
            tail = _tail_members(read, size)
            if tail is None:
                acc.notes.append(
                    f"(the members of the document after {base} are not shown: query the artifact)"
                )
            else:
                for key, item in tail.items():
                    put(stack[1][0], key, item)
    if not root:
        raise _NotStructured("no JSON value")
    return root[0]


_BIG_RECORD = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")


def _scan_top_array(read: Read, limit: int, acc: _Accumulator, *, size: int) -> _Summary:
    """A document that is one array (``sqlite3 -json``, ``ruff --output-format json``): its
    elements are decoded one by one by ``json``'s C decoder (``raw_decode``) from a sliding
    window of the text, about twice as fast as ijson's events, in memory bounded by the
    window and the largest record. Raises ``_NotStructured`` if it is not one JSON array."""
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
            chunk = utf8.decode(block, final=taken >= limit)
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
    if not skip() or text[pos] != "[":
        raise _NotStructured("not a JSON array")
    pos += 1
    index = 0
    pending: list[object] = []
    cut = False
    closed = False
    while True:
        if not skip():
            cut = True
            break
        if text[pos] == "]" and index == 0 and not pending:
            pos += 1
            closed = True
            break
        while True:
            try:
                value, end = decoder.raw_decode(text, pos)
            except ValueError:
                value = end = None
            # A value that ends the window may continue past it (a number cut short).
            if end is not None and (end < len(text) or taken >= limit):
                break
            if not more():
                break
        if end is None:
            if complete or index + len(pending) == 0:
                raise _NotStructured("not valid JSON")
            cut = True  # the scan limit cut a record: what was parsed stands
            break
        if end - pos > _BIG_RECORD:
            # Counted, not walked: one huge record would cost the sample its time.
            if pending:
                acc.batch(".[]", ".", index, pending)
                index += len(pending)
                pending = []
            acc.record(".[]", f".[{index}]", None, oversized=True)
            index += 1
        else:
            pending.append(value)
        pos = end
        if len(pending) >= _BATCH:
            acc.batch(".[]", ".", index, pending)
            index += len(pending)
            pending = []
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
    if pending:
        acc.batch(".[]", ".", index, pending)
        index += len(pending)
    if closed and skip():
        raise _NotStructured("data after the array")  # then it is not one JSON document
    if cut and complete:
        raise _NotStructured("the array does not end")
    return _Summary(".[]")


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


_TAIL_WINDOW = 8192


def _tail_members(read: Read, size: int) -> dict[str, object] | None:
    """The root object's members after the collection read last, from the last bytes: of
    the last 64 ``]`` in the window, the first after which the rest reads as the end of an
    object (a ``]`` inside a record is followed by more closing brackets and fails)."""
    window = min(size, _TAIL_WINDOW)
    data = read(window, size - window)
    found: dict[str, object] | None = None
    pos = len(data)
    for _ in range(64):
        pos = data.rfind(b"]", 0, pos)
        if pos < 0:
            break
        try:
            value = json.loads(b'{"":0' + data[pos + 1 :])
        except ValueError:
            continue
        if isinstance(value, dict):
            value.pop("", None)
            found = value
    return found


class _Summary:
    """An outermost array in the envelope: its records are counted in a collection."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern


def _scan_jsonl(read: Read, limit: int, acc: _Accumulator) -> list[int]:
    """Feed each line's value to ``acc``; return the numbers of lines that are not JSON."""
    bad: list[int] = []
    index = 0
    line_no = 0
    batch: list[bytes] = []

    def flush() -> None:
        # A batch of lines parsed by one json.loads of them joined as an array (C speed);
        # if that fails, or a line held more than one value, line by line.
        nonlocal index
        first = line_no - len(batch) + 1
        lines = [(n, line) for n, line in enumerate(batch, first) if line.strip()]
        try:
            joined = json.loads(b"[" + b",".join(line for _, line in lines) + b"]")
        except ValueError:
            joined = None
        if isinstance(joined, list) and len(joined) == len(lines):
            good: list[object] = joined
        else:
            good = []
            for number, line in lines:
                try:
                    good.append(json.loads(line))
                except ValueError:
                    bad.append(number)
                    if len(bad) > max(3, number // 100):
                        raise _NotStructured("too many lines are not JSON") from None
        acc.batch(".[]", ".", index, good)
        index += len(good)
        batch.clear()

    for line in _lines(read, limit):
        line_no += 1
        batch.append(line)
        if len(batch) >= 512:
            flush()
    flush()
    return bad


def _cell(text: str) -> object:
    if text == "":
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text in ("true", "false", "True", "False"):
        return text.lower() == "true"
    return text


def _scan_table(read: Read, limit: int, acc: _Accumulator, delimiter: str) -> list[str]:
    """Feed each row (a dict of typed cells) to ``acc``; return the header."""
    text = io.TextIOWrapper(
        io.BufferedReader(_Bytes(read, limit)), encoding="utf-8", errors="replace", newline=""
    )
    rows = csv.reader(text, delimiter=delimiter, strict=False)
    try:
        header = next(rows)
    except StopIteration:
        raise _NotStructured("no header") from None
    width = len(header)
    ragged = 0
    pending: list[dict[str, str]] = []
    pending_first = 0
    for index, row in enumerate(rows):
        if not row:
            if pending:  # a batch's rows are consecutive
                acc.batch(".[]", ".", pending_first, pending, _typed)
                pending = []
            continue
        if len(row) != width:
            ragged += 1
            if ragged > max(3, index // 100):
                raise _NotStructured("rows do not match the header")
        if index < SAMPLE_RECORDS:
            record = {name: _cell(cell) for name, cell in zip(header, row, strict=False)}
            acc.record(".[]", f".[{index}]", record)
            continue
        # Past the sample a row stays text: only the cells of the columns that can carry a
        # failure sign (read typed) or have few values are looked at, and a row shown is
        # typed then (``_typed``).
        if not pending:
            pending_first = index
        pending.append(dict(zip(header, row, strict=False)))
        if len(pending) >= _BATCH:
            acc.batch(".[]", ".", pending_first, pending, _typed)
            pending = []
    if pending:
        acc.batch(".[]", ".", pending_first, pending, _typed)
    return header


def _typed(cells: dict[str, str]) -> str:
    return _compact({name: _cell(cell) for name, cell in cells.items()})


# -- rendering ---------------------------------------------------------------------------


def _envelope(value: object, acc: _Accumulator, limit: int = 900) -> str:
    def render(node: object) -> str:
        if isinstance(node, _Summary):
            coll = acc.collections.get(node.pattern)
            return f"[{_count_kinds(coll)}]" if coll else "[]"
        if isinstance(node, dict):
            inner = ", ".join(
                f"{json.dumps(k, ensure_ascii=False)}: {render(v)}" for k, v in node.items()
            )
            return "{" + inner + "}"
        if isinstance(node, list):
            return "[" + ", ".join(render(v) for v in node) + "]"
        return _compact(node, 60)

    text = render(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _count_kinds(coll: _Collection | None) -> str:
    if coll is None or coll.count == 0:
        return "empty"
    names = {"object": "objects", "array": "arrays", "str": "strings", "int": "ints"}
    kinds = sorted(coll.kinds.items(), key=lambda kv: -kv[1])
    if len(kinds) == 1:
        return f"{coll.count:,} {names.get(kinds[0][0], kinds[0][0] + ' values')}"
    parts = ", ".join(f"{n:,} {names.get(k, k)}" for k, n in kinds)
    return f"{coll.count:,} records: {parts}"


def _types(field: _Field) -> str:
    kinds = sorted(field.types.items(), key=lambda kv: -kv[1])
    return "|".join(kind for kind, _ in kinds)


def _share(part: int, whole: int) -> str:
    if whole <= 0 or part >= whole:
        return "100%"
    pct = 100 * part / whole
    if pct >= 10:
        return f"{pct:.0f}%"
    if pct >= 1:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%"


def _shape(acc: _Accumulator, pattern: str) -> str:
    """``{id: int, name: str, tags: [str], error?: str}``: a record's top-level fields."""
    parent_count = acc.fields[pattern].count if pattern in acc.fields else 0
    parts: list[str] = []
    prefix_len = len(pattern)
    for path in acc.order:
        field = acc.fields[path]
        if field.parent != pattern:
            continue
        name = path[prefix_len:].lstrip(".")
        kind = _types(field)
        if kind == "array" and path + "[]" in acc.fields:
            kind = f"[{_types(acc.fields[path + '[]'])}]"
        optional = "?" if field.count < parent_count else ""
        parts.append(f"{name}{optional}: {kind}")
    text = "{" + ", ".join(parts) + "}"
    return text if len(text) <= 700 else text[:699] + "…"


def _anomalies(coll: _Collection) -> tuple[int, list[tuple[str, str, str]], list[str]]:
    """(records with a failure sign that is rare, the first of them as (path, text, why),
    rows naming the signs that are the norm).

    A sign carried by more than half of the records (and by more than 3) is what these
    records are, not what sets one apart (ruff's ``severity: "error"`` on every
    diagnostic): those records are not listed as failures for it, and the outline says so.
    """
    counts: dict[str, int] = {}
    for tokens, entry in coll.signs.items():
        for token in tokens:
            counts[token] = counts.get(token, 0) + entry[0]
    norm = max(3, coll.count // 2)
    common = {token for token, n in counts.items() if n > norm}
    total = 0
    found: list[tuple[int, str, str, str]] = []
    for tokens, (n, examples) in coll.signs.items():
        rare = [token for token in tokens if token not in common]
        if not rare:
            continue
        total += n
        why = "; ".join(dict.fromkeys(rare[:3]))
        found.extend((number, path, text, why) for number, path, text in examples)
    found.sort()
    notes = [
        f"  ({counts[token]:,} of {coll.count:,} records have {token}: the norm here, "
        "not listed as failures)"
        for token in sorted(common)
    ]
    return total, [(p, t, w) for _, p, t, w in found[:_MAX_FAILURES]], notes


def _rare_values(field: _Field, records: int) -> list[tuple[str, int, str, str]]:
    """Values of a few-valued field that a tiny share of records have: (value, count,
    record path, record text)."""
    # Only a field with a few values (a kind, a severity) has rare ones: in a field that
    # names things (a license, a version) every value is rare.
    if field.values is None or not 2 <= len(field.values) <= max(3, records // 50):
        return []
    if records < 50:
        return []
    cap = max(1, records // 100)
    return [
        (value, entry[0], entry[1], entry[2])
        for value, entry in field.values.items()
        if entry[0] <= min(cap, 3) and entry[1] is not None
    ]


def _render(
    acc: _Accumulator,
    *,
    head_line: str,
    envelope: str | None,
    extra: list[tuple[int, str]],
    budget: int,
) -> str:
    rows: list[tuple[int, str]] = [(0, head_line)]
    if envelope is not None:
        rows.append((0, envelope))
    rows.extend(extra)
    failures: list[tuple[int, str]] = []
    rare_rows: list[tuple[int, str]] = []
    seen_failure_paths: set[str] = set()
    samples: list[tuple[int, str]] = []
    failure_total = 0
    for pattern, coll in acc.collections.items():
        if coll.count == 0:
            continue
        shape = _shape(acc, pattern) if "object" in coll.kinds else ""
        rows.append((0, f"{pattern}: {_count_kinds(coll)} {shape}".rstrip()))
        if coll.oversized:
            rows.append((1, f"  ({coll.oversized:,} records too large to outline)"))
        if coll.walked < coll.count:
            rows.append(
                (
                    1,
                    f"  (fields below: from {coll.walked:,} records walked whole, the first "
                    f"{min(coll.walked, SAMPLE_RECORDS):,} and those of a new shape; all "
                    f"{coll.count:,} counted and checked for failure signs and rare values)",
                )
            )
        total, listed, norms = _anomalies(coll)
        failure_total += total
        rows.extend((1, note) for note in norms)
        for path, text, why in listed:
            seen_failure_paths.add(path)
            rank = 1 if len(failures) < 3 else 3
            failures.append((rank, f"{path}: {text}  <- {why}"))
        if coll.first is not None:
            samples.append((1, f"{coll.first[0]}: {coll.first[1]}"))
        samples.extend((4, f"{path}: {text}  (other fields)") for path, text in coll.different)
    field_rows: list[tuple[int, str]] = []
    for path in acc.order:
        field = acc.fields[path]
        if field.parent is None:
            continue  # a collection's records themselves: counted above
        parent = acc.fields.get(field.parent)
        whole = parent.count if parent is not None else field.count
        share = field.count / whole if whole else 1.0
        depth = path.count(".") + path.count("[")
        rank = 2 if depth <= 5 else 3
        if share < 0.01:
            rank = 4
        amount = f"{field.count:,} items" if path.endswith("[]") else _share(field.count, whole)
        if path.endswith("[]") and acc.sampled:
            amount += " in those"
        line = f"  {path}  {_types(field)}  {amount}"
        if field.values is not None and 1 < len(field.values) <= 12:
            top = sorted(field.values.items(), key=lambda kv: -kv[1][0])
            line += "  values: " + ", ".join(f"{_compact(v, 40)} ×{e[0]:,}" for v, e in top)
        elif field.values is not None and len(field.values) == 1:
            (only,) = field.values
            line += f"  always {_compact(only, 40)}"
        field_rows.append((rank, line))
        for value, count, rpath, rtext in _rare_values(field, field.count + field.tallied):
            if rpath in seen_failure_paths:
                continue
            seen_failure_paths.add(rpath)
            rare_rows.append(
                (1, f"{rpath}: {rtext}  <- rare {path.rsplit('.', 1)[-1]}={value!r} (×{count})")
            )
    if field_rows:
        rows.append((2, "fields (path, types, share of records that have it):"))
        rows.extend(field_rows)
    for note in acc.notes:
        rows.append((1, note))
    if acc.fields_dropped:
        rows.append((2, f"  (more than {_MAX_FIELDS} field paths; the rest are not listed)"))
    anomalies = failures + rare_rows
    if anomalies:
        total = failure_total + len(rare_rows)
        rows.append((0, f"records that look like failures or are rare ({total:,}):"))
        rows.extend(anomalies)
    if samples:
        rows.append((1, "sample records:"))
        rows.extend(samples)
    return _fit(rows, budget)


def _fit(rows: list[tuple[int, str]], budget: int) -> str:
    """Drop the least important rows (the last of the highest rank first) until it fits."""
    keep = [True] * len(rows)
    cost = sum(len(text.encode()) + 1 for _, text in rows)
    note = "(+{} outline lines not shown for room: query the artifact)"
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][0], -i))
    dropped = 0
    for i in order:
        if cost + (len(note) + 8 if dropped else 0) <= budget:
            break
        if rows[i][0] == 0 and cost - len(rows[i][1].encode()) - 1 < 0:
            break
        keep[i] = False
        cost -= len(rows[i][1].encode()) + 1
        dropped += 1
    lines = [text for (_, text), k in zip(rows, keep, strict=True) if k]
    if dropped:
        lines.append(note.format(dropped))
    text = "\n".join(lines) + "\n"
    raw = text.encode()
    if len(raw) > budget:
        cut = raw[: max(budget - 2, 0)].decode("utf-8", "ignore")
        text = cut[: cut.rfind("\n") + 1] if "\n" in cut else ""
    return text


def _example(acc: _Accumulator) -> str:
    for coll in acc.collections.values():
        listed = _anomalies(coll)[1]
        if listed:
            return listed[0][0]
    for coll in acc.collections.values():
        if coll.first is not None:
            return coll.first[0]
    return "."


def outline(
    fmt: Format,
    read: Read,
    size: int,
    *,
    line_count: int | None = None,
    budget: int = OUTLINE_BYTES,
    scan_limit: int = OUTLINE_SCAN_BYTES,
) -> Outline | None:
    """Outline the output ``read`` gives (``size`` bytes), or None if it is not ``fmt``.

    Args:
        fmt: the format :func:`~toolswap.structured.detect.sniff` saw in the head.
        read: ``read(count, offset)`` returns the output's bytes.
        line_count: the output's line count (a JSON Lines or table outline cut by
            ``scan_limit`` still reports it).
        budget: the outline's size limit in UTF-8 bytes.
        scan_limit: how many bytes are parsed at most.
    """
    limit = min(size, scan_limit)
    complete = limit >= size
    acc = _Accumulator()
    extra: list[tuple[int, str]] = []
    envelope: str | None = None
    parsed = (
        f"parsed whole ({size:,} bytes)"
        if complete
        else (f"outline of the first {limit:,} of {size:,} bytes")
    )
    try:
        if fmt == "json":
            try:
                root = _scan_json(read, limit, acc, size=size)
            except _NotStructured:
                raise
            except Exception as exc:  # ijson's errors: IncompleteJSONError, JSONError
                if complete or not acc.collections:
                    raise _NotStructured(str(exc)) from None
                root = None  # cut at the scan limit: what was parsed stands
            kind = "array" if isinstance(root, _Summary) else "object"
            head_line = f"--- structure: JSON {kind}, {parsed} ---"
            if root is not None and not isinstance(root, _Summary):
                envelope = _envelope(root, acc)
            records = sum(c.count for c in acc.collections.values())
            if not acc.collections:
                return None  # one small object: the raw text says it all
        elif fmt == "jsonl":
            bad = _scan_jsonl(read, limit, acc)
            records = acc.collections[".[]"].count if ".[]" in acc.collections else 0
            if records < 2:
                return None
            head_line = f"--- structure: JSON Lines, {records:,} records, {parsed} ---"
            if not complete and line_count is not None:
                extra.append((0, f"(the output has {line_count:,} lines in all)"))
            if bad:
                shown = ", ".join(str(n) for n in bad[:5])
                extra.append((0, f"lines that are not JSON: {shown}"))
        else:
            header = _scan_table(read, limit, acc, "\t" if fmt == "tsv" else ",")
            records = acc.collections[".[]"].count if ".[]" in acc.collections else 0
            if records < 2:
                return None
            name = "TSV" if fmt == "tsv" else "CSV"
            head_line = f"--- structure: {name} table, {records:,} rows, {parsed} ---"
            extra.append((0, "header: " + _compact(header, 900)))
            if not complete and line_count is not None:
                extra.append((0, f"(the output has {line_count:,} lines in all)"))
    except _NotStructured:
        return None
    text = _render(acc, head_line=head_line, envelope=envelope, extra=extra, budget=budget)
    return Outline(
        format=fmt, text=text, records=records, complete=complete, example_path=_example(acc)
    )
