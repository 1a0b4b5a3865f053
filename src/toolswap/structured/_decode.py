"""JSON text to values, by msgspec where it takes the text (its C decoder is about twice as
fast as ``json``'s), by ``json`` where it does not: ``NaN``, a number past a double's range,
a lone surrogate; the values are the same either way."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["loads", "loads_each"]

_msgspec_decode: list[Callable[[Any], object] | None] = []


def _decoder() -> Callable[[Any], object] | None:
    if not _msgspec_decode:
        try:
            import msgspec  # a C extension: only for structured output
        except ImportError:
            _msgspec_decode.append(None)
        else:
            _msgspec_decode.append(msgspec.json.Decoder().decode)
    return _msgspec_decode[0]


def loads_each(texts: list[bytes]) -> list[object]:
    """The value of each JSON text, each read on its own (by msgspec, in C).

    Raises:
        ValueError: one is not JSON as msgspec reads it (``loads`` decides each then).
    """
    decode = _decoder()
    if decode is None:
        raise ValueError("no msgspec")
    try:
        return list(map(decode, texts))
    except Exception as exc:  # msgspec.DecodeError or ValidationError
        raise ValueError(str(exc)) from None


def loads(data: bytes | memoryview) -> object:
    """The value of the JSON text ``data`` (bytes, or a buffer such as ``msgspec.Raw``),
    read as strict UTF-8 (``json.loads`` of bytes would let encoded surrogates in).

    Raises:
        ValueError: it is not JSON, or not UTF-8.
    """
    decode = _decoder()
    if decode is not None:
        try:
            return decode(data)
        except Exception:  # msgspec.DecodeError or ValidationError: json decides
            pass
    return json.loads(bytes(data).decode())
