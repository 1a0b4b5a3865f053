"""How the outline writes values: their type names, each field's path as jq writes it
(``.items[].status``, ``.["a b"]``), a record as compact JSON text with long strings, long
lists and deep nesting cut, and a table cell's text read as the JSON value it spells
(``"0"`` is the number 0). Every other part of the outline speaks through these.
"""

from __future__ import annotations

import itertools
import json
import math
import re

__all__ = [
    "_IDENTIFIER",
    "_TYPE_NAMES",
    "_cell",
    "_compact",
    "_counted",
    "_key_path",
    "_scalar_cells",
    "_tolerant_path",
    "_type_name",
    "_utf8_text",
]


_RECORD_CHARS = 360
_STRING_CHARS = 60
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
"""A table cell read as a number: ASCII digits (``\\d`` took Arabic-Indic ``١٢٣`` for the
number 123), no leading zero (``00501``, a postal code, stays text, as ``0501`` is not
JSON; failure signs still read ``01`` as an exit code of 1), and finite."""


_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    type(None): "null",
}
"""The name the outline gives a parsed JSON value's type."""


def _type_name(value: object) -> str:
    name = _TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    for kind, name in _TYPE_NAMES.items():  # a subclass (an OrderedDict, an IntEnum)
        if isinstance(value, kind):
            return name
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
    return f"{parent or '.'}[{json.dumps(key, ensure_ascii=False)}]"


def _shorten(value: object, depth: int = 0, room: int = -1) -> tuple[object, int]:
    """The value with long strings, long lists and deep nesting cut, so a sample record
    shows its shape rather than the start of one long field; and a lower bound of its
    JSON text's length. With ``room`` (>= 0), members stop once that bound passes it: the
    text's first ``room`` characters are the same as without it, and it is longer than
    ``room`` (so ``_compact`` cuts both alike, without building a big record's every
    member)."""
    if isinstance(value, str):
        if len(value) > _STRING_CHARS:
            value = value[: _STRING_CHARS - 1] + "…"
        return value, len(value) + 2
    if isinstance(value, list):
        if depth >= 4:
            return (f"[{len(value)} items]", 11) if value else ([], 2)
        head: list[object] = []
        used = 1  # "[", then each item and the "," or "]" after it
        for item in value[:4]:
            if 0 <= room < used:
                return head, used
            shown, length = _shorten(item, depth + 1, room - used if room >= 0 else -1)
            head.append(shown)
            used += length + 1
        if len(value) > 4 and not 0 <= room < used:
            head.append(f"…+{len(value) - 4}")
            used += 6  # the marker and "]"
        return head, used
    if isinstance(value, dict):
        if depth >= 4:
            return ("{…}", 5) if value else ({}, 2)
        members: dict[object, object] = {}
        used = 1  # "{", then each "key":value and the "," or "}" after it
        for key, item in itertools.islice(value.items(), 24):
            if 0 <= room < used:
                break
            # (json writes a str key as it is, str subclasses included; any other key as
            # at least one character, quoted)
            named = (len(key) if isinstance(key, str) else 1) + 3
            shown, length = _shorten(item, depth + 1, room - used - named if room >= 0 else -1)
            members[key] = shown
            used += named + length + 1
        return members, used
    return value, 1


def _compact(value: object, limit: int = _RECORD_CHARS) -> str:
    shown, _ = _shorten(value, room=limit)
    text = json.dumps(shown, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _utf8_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (JSON allows ``"\\ud800"``, and
    ``json`` decodes it as one) is written as its escape."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def _cell(text: str) -> object:
    if text == "":
        return None
    if _INT.match(text):
        try:
            return int(text)
        except ValueError:  # more digits than ``int`` converts (4,300): the text it is
            return text
    if _FLOAT.match(text):
        number = float(text)
        # (``1e999`` is past a double's range: as infinity it was ``Infinity``, not JSON.)
        return number if math.isfinite(number) else text
    if text in _WORDS:
        return text.lower() == "true"
    return text


_WORDS = frozenset(("true", "false", "True", "False"))


def _scalar_cells(cells: list[str]) -> int:
    """How many of ``cells`` ``_cell`` reads as a number or a boolean, counted in C (near
    enough: a number past a double's range or ``int``'s digit limit counts too)."""
    return sum(map(bool, map(_FLOAT.match, cells))) + sum(map(_WORDS.__contains__, cells))


_SEGMENT = re.compile(r'\.?\[(?:"(?:[^"\\]|\\.)*")?\]|\.[A-Za-z_][A-Za-z0-9_]*|\.')


def _tolerant_path(pattern: str) -> str:
    """``pattern`` as jq that skips what does not have its shape (``.a?[]?`` for
    ``.a[]``): a record without the field, or a string where objects are, gives nothing
    rather than an error that ends the query."""
    return "".join(segment + "?" for segment in _SEGMENT.findall(pattern))


_KIND_NAMES = {
    "object": ("object", "objects"),
    "array": ("array", "arrays"),
    "str": ("string", "strings"),
    "int": ("int", "ints"),
    "float": ("float", "floats"),
    "bool": ("boolean", "booleans"),
    "null": ("null", "nulls"),
}


def _counted(count: int, kind: str) -> str:
    """``1 object``, ``3,885 objects``: a count and its kind's name (``_KIND_NAMES``, or
    ``record``, ``item``, ``element``, ``entry``)."""
    if kind in _KIND_NAMES:
        one, many = _KIND_NAMES[kind]
    elif kind == "entry":
        one, many = "entry", "entries"
    elif kind in ("record", "item", "element"):
        one, many = kind, kind + "s"
    else:  # a type the outline has no name for
        one, many = kind + " value", kind + " values"
    return f"{count:,} {one if count == 1 else many}"
