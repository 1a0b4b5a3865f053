"""Counting an output as it streams: bytes, lines and characters, and whether it is text
(UTF-8 without a NUL in its first 8 KiB) or binary."""

from __future__ import annotations

import codecs

__all__ = ["OutputCounter"]


class OutputCounter:
    """Counts bytes, lines and characters and validates UTF-8, chunk by chunk."""

    def __init__(self) -> None:
        self.size = 0
        self.newlines = 0
        self.chars = 0
        self.binary = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def feed(self, chunk: bytes) -> None:
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
        self.newlines += chunk.count(b"\n")
        self.size += len(chunk)

    def finish(self) -> None:
        if not self.binary:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self.binary = True
        if self.binary:
            self.chars = self.size
