"""The JSON form of a record: one rule for how a dataclass becomes a plain ``dict``.

Every ``to_dict`` of the public records (an artifact reference, a cleanup plan, a grep
result, a lease...) is its fields, in order, each made plain: a datetime becomes ISO 8601,
an enum its value, a path a string, a tuple a list, a record with a ``to_dict`` of its own
that form. What a record says beyond its fields (a ``kind``, a renamed key, a count) it
adds itself.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from pathlib import PurePath

__all__ = ["JsonRecord", "fields_form", "json_form"]


def json_form(value: object) -> object:
    """``value`` as JSON can hold it (see the module docstring)."""
    if value is None or (isinstance(value, (str, int, float)) and not isinstance(value, Enum)):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [json_form(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_form(item) for key, item in value.items()}
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return fields_form(value)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def fields_form(record: object, *, skip: tuple[str, ...] = ()) -> dict[str, object]:
    """The fields of the dataclass ``record`` by name, in order, each in its JSON form
    (but those named in ``skip``)."""
    names = _NAMES.get(type(record))
    if names is None:
        names = _NAMES[type(record)] = tuple(f.name for f in fields(record))  # type: ignore[arg-type]
    return {name: json_form(getattr(record, name)) for name in names if name not in skip}


_NAMES: dict[type, tuple[str, ...]] = {}


class JsonRecord:
    """A dataclass whose JSON form is its fields and nothing more (:func:`fields_form`).

    A record that says more (a ``kind``, a renamed key) writes its own ``to_dict``.
    """

    __slots__ = ()

    def to_dict(self) -> dict[str, object]:
        return fields_form(self)
