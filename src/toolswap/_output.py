"""Tool output, normalised: text, bytes, a binary file or chunks, as a stream of bytes.

Text becomes UTF-8 (bytes escaped by ``os.fsdecode`` come back as the original bytes); a
pipe gets a wider buffer; many small chunks are joined into larger ones and a large buffer
is cut into 1 MiB pieces, so the capture's per-chunk work stays small.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import stat
from collections.abc import Iterable
from typing import BinaryIO

__all__ = ["Output", "chunks", "encode", "prepend", "utf8_chars"]

Output = str | bytes | bytearray | memoryview | BinaryIO | Iterable[bytes]
"""What a tool may return: text, bytes, a binary file object or an iterable of byte chunks."""

_READ_CHUNK = 1 << 20
_COALESCE = 256 << 10


# Lone surrogates other than the U+DC80..U+DCFF that ``surrogateescape`` maps back to bytes.
_LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def encode(text: str) -> bytes:
    """UTF-8 of ``text``; escaped bytes (``os.fsdecode``) come back as the original bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Not encodable as UTF-8 at all: keep the text, mark each bad spot with U+FFFD.
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8", "surrogateescape")


def chunks(output: Output) -> Iterable[bytes]:
    if isinstance(output, str):
        data = encode(output)
        for i in range(0, len(data), _READ_CHUNK):
            yield data[i : i + _READ_CHUNK]
        return
    if isinstance(output, (bytes, bytearray, memoryview)):
        view = memoryview(output).cast("B")
        for i in range(0, len(view), _READ_CHUNK):
            yield bytes(view[i : i + _READ_CHUNK])
        return
    read = getattr(output, "read", None)
    if callable(read):
        _widen_pipe(output)
        # A full read(): a pipe hands over 64 KiB at a time, and per-chunk work (queue,
        # scan, bookkeeping) is cheaper on 1 MiB chunks. The capture waits for EOF anyway.
        while True:
            chunk = read(_READ_CHUNK)
            if not chunk:
                return
            if not isinstance(chunk, (bytes, bytearray)):
                raise TypeError("file objects passed as output must be opened in binary mode")
            yield bytes(chunk)
    pending: list[bytes] = []
    size = 0
    for chunk in output:
        if isinstance(chunk, str):
            raise TypeError("an iterable output must yield bytes, not str")
        if not chunk:
            continue
        if not pending and len(chunk) >= _COALESCE:
            yield bytes(chunk)
            continue
        # Many small chunks (lines from a generator) are joined into larger ones.
        pending.append(bytes(chunk))
        size += len(chunk)
        if size >= _COALESCE:
            yield b"".join(pending)
            pending.clear()
            size = 0
    if pending:
        yield b"".join(pending)


def _widen_pipe(output: object) -> None:
    """Give a pipe a 1 MiB buffer (Linux): a 64 KiB pipe makes reader and writer take turns
    sleeping every 64 KiB, which costs more than hashing the bytes."""
    fileno = getattr(output, "fileno", None)
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if not callable(fileno) or set_size is None:
        return
    try:
        fd = fileno()
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, set_size, _READ_CHUNK)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file, or the system refuses: the default buffer works too


def utf8_chars(data: bytes) -> int:
    """Characters in UTF-8 ``data`` (bytes that are not continuation bytes)."""
    if data.isascii():
        return len(data)
    return len(data) - sum(data.count(bytes([b])) for b in range(0x80, 0xC0))


def prepend(first: list[bytes], rest: Iterable[bytes]) -> Iterable[bytes]:
    """``first``, then the rest of the stream."""
    yield from first
    yield from rest
