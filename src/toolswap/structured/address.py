"""Record addresses: the paths an outline prints (``.items[3777]``, ``.[5119]``,
``.dependencies["left-pad"].version``), read back strictly, so a read can name one record
of a structured artifact.

The grammar is a small subset of jq's paths, with the leading dot optional::

    address := number | "."? (key | "[" ...) step*
    step    := "." key | "[" number "]" | "[" json-string "]"
    key     := [A-Za-z_][A-Za-z0-9_]*
    number  := 0 | [1-9][0-9]*            (0-based, as jq counts)

A bare ``number`` is record ``number`` of JSON Lines or a table (``[number]`` of any
array). Anything else is refused with :class:`~toolswap.errors.ArtifactQueryError` before
an artifact is opened.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import NoReturn

from ..errors import ArtifactQueryError
from ._values import _key_path

__all__ = ["RecordAddress", "parse_address"]

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"0|[1-9][0-9]{0,17}")
_MAX_CHARS = 4096
_DECODER = json.JSONDecoder()
_EXAMPLES = (
    "write it as the outline prints it: items[3777], .items[3777].name, "
    '.["a key"], or 5120 for record 5120 (0-based) of JSON Lines or a table'
)


@dataclass(frozen=True, slots=True)
class RecordAddress:
    """A parsed record address."""

    steps: tuple[str | int, ...]
    """Object keys (str) and 0-based array indices (int), outermost first."""

    @property
    def path(self) -> str:
        """The address as jq writes it (``.items[3777]``), as the outline prints paths."""
        path = ""
        for step in self.steps:
            path = f"{path or '.'}[{step}]" if isinstance(step, int) else _key_path(path, step)
        return path or "."


def parse_address(text: str) -> RecordAddress:
    """Parse a record address (see the module's grammar).

    Raises:
        ArtifactQueryError: ``text`` is not an address (the message says where and why).
    """
    if not isinstance(text, str):
        raise ArtifactQueryError(f"a record address is a string, not {type(text).__name__}")
    source = text.strip()
    if not source or source == ".":
        raise ArtifactQueryError(f"the record address is empty: {_EXAMPLES}")
    if len(source) > _MAX_CHARS:
        raise ArtifactQueryError(f"the record address is longer than {_MAX_CHARS} characters")
    whole = _NUMBER.fullmatch(source)
    if whole:
        return RecordAddress((int(source),))
    steps: list[str | int] = []
    pos = 0
    if source.startswith("."):
        pos = 1
    key = _KEY.match(source, pos)
    if key:  # a bare first key (``items[3]``) or the one after the leading dot
        steps.append(key.group())
        pos = key.end()
    elif not source.startswith("[", pos):
        _refuse(text, source, pos, "expected a key or [")
    while pos < len(source):
        if source[pos] == ".":
            key = _KEY.match(source, pos + 1)
            if not key:
                _refuse(text, source, pos + 1, 'a key after . is a name (use ["..."] for others)')
            steps.append(key.group())
            pos = key.end()
        elif source[pos] == "[":
            pos = _bracket(text, source, pos + 1, steps)
        else:
            _refuse(text, source, pos, "expected . or [")
    return RecordAddress(tuple(steps))


def _bracket(text: str, source: str, pos: int, steps: list[str | int]) -> int:
    """Parse ``N]`` or ``"key"]`` from ``pos``; return the position after the ``]``."""
    number = _NUMBER.match(source, pos)
    if number:
        steps.append(int(number.group()))
        end = number.end()
    elif source.startswith('"', pos):
        try:
            key, end = _DECODER.raw_decode(source, pos)  # a JSON string: it starts with "
        except ValueError:
            _refuse(text, source, pos, "a quoted key is a JSON string")
        steps.append(key)
    else:
        _refuse(text, source, pos, 'expected a 0-based index or a "quoted key"')
    if not source.startswith("]", end):
        _refuse(text, source, end, "expected ]")
    return end + 1


def _refuse(text: str, source: str, pos: int, why: str) -> NoReturn:
    shown = source[max(pos - 20, 0) : pos + 20]
    raise ArtifactQueryError(
        f"not a record address: {text!r} (at character {pos + 1}, near {shown!r}: {why}); "
        + _EXAMPLES
    )
