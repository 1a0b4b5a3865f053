"""Counting an output as it streams: bytes, lines and characters, and whether it is text
(UTF-8 without a NUL in its first 8 KiB) or binary.

Newlines can be left uncounted past a point (``lines_to``): counting them costs the
calling thread about 1 ms a megabyte, and the capture learns their number more cheaply
from the grep that searches those bytes anyway (or reads them back once, at the end).
Text output is then counted up to ``lines_to`` only; what is left is one range of bytes,
``uncounted``, that ends where the output turned out to be binary (from there on every
byte is counted: no grep searches binary output).
"""

from __future__ import annotations

import codecs

__all__ = ["OutputCounter"]


class OutputCounter:
    """Counts bytes, lines and characters and validates UTF-8, chunk by chunk."""

    def __init__(self, *, lines_to: int | None = None) -> None:
        self.size = 0
        self.newlines = 0
        """Newlines in the bytes counted (all but ``uncounted``)."""
        self.chars = 0
        self.binary = False
        self._lines_to = lines_to
        self._uncounted_from: int | None = None
        self._uncounted_to: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def feed(self, chunk: bytes, *, count_lines: bool = False) -> int:
        """Count ``chunk``; return how many of its leading bytes had their newlines counted
        (all of them, unless they are past ``lines_to``: then ``uncounted`` grows, unless
        ``count_lines`` says to count them all the same)."""
        if not self.binary:
            if chunk.isascii() and not self._decoder.getstate()[0]:
                self.chars += len(chunk)
                if self.size < 8192 and b"\x00" in chunk[: 8192 - self.size]:
                    self.binary = True
            else:
                try:
                    text = self._decoder.decode(chunk)
                except UnicodeDecodeError:
                    self.binary = True
                else:
                    self.chars += len(text)
                    if self.size < 8192 and "\x00" in text:
                        self.binary = True
        start, limit = self.size, self._lines_to
        self.size += len(chunk)
        if limit is None or self.size <= limit or self.binary or count_lines:
            counted = len(chunk)
            self.newlines += chunk.count(b"\n")
        else:
            counted = max(limit - start, 0)
            if counted:
                self.newlines += chunk.count(b"\n", 0, counted)
        if counted < len(chunk):
            if self._uncounted_from is None:
                self._uncounted_from = start + counted
            self._uncounted_to = self.size
        return counted

    @property
    def uncounted(self) -> tuple[int, int] | None:
        """The bytes ``[start, end)`` whose newlines were not counted (None: none were
        left). Only the leading part of a chunk is ever counted when others are not, so
        this is one range: past ``lines_to`` and before the output turned binary."""
        if self._uncounted_from is None or self._uncounted_to is None:
            return None
        return self._uncounted_from, self._uncounted_to

    def settle(self, newlines: int) -> None:
        """Add the newlines of the ``uncounted`` bytes, counted elsewhere."""
        self.newlines += newlines
        self._uncounted_from = self._uncounted_to = None

    def finish(self) -> None:
        if not self.binary:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self.binary = True
        if self.binary:
            self.chars = self.size
