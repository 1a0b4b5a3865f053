"""The output's bytes as the parsers read them: ``read(count, offset)`` over the first
``limit`` bytes, wrapped as a file for ijson and ``csv``, and the error that turns an output
the head made look structured back into text.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

__all__ = ["_BATCH", "_BLOCK", "Read", "_Bytes", "_NotStructured", "_TooFew"]


Read = Callable[[int, int], bytes]
"""``read(count, offset)``: bytes of the output."""

_BLOCK = 1 << 20
_BATCH = 512


class _NotStructured(Exception):
    """The bytes are not the format the head suggested: the output stays text."""


class _TooFew(_NotStructured):
    """The part of the output parsed holds too few whole records to outline (records of
    megabytes, cut at the scan limit): more of it may."""


class _Bytes(io.RawIOBase):
    """The output's first ``limit`` bytes as a file, for the parsers."""

    def __init__(self, read: Read, limit: int) -> None:
        self._read = read
        self._limit = limit
        self.pos = 0
        self.chunk_start = 0
        """Where the bytes last handed to the parser began."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._limit - self.pos)
        if want <= 0:
            return 0
        data = self._read(want, self.pos)
        buffer[: len(data)] = data
        self.chunk_start = self.pos
        self.pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        want = self._limit - self.pos if size < 0 else min(size, self._limit - self.pos)
        if want <= 0:
            return b""
        data = self._read(want, self.pos)
        self.chunk_start = self.pos
        self.pos += len(data)
        return data
