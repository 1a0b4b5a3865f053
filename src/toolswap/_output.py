"""Tool output, normalised: text, bytes, a binary file or chunks, as a stream of bytes.

Text becomes UTF-8 as :mod:`toolswap._utf8` encodes it; a pipe gets a wider buffer; many
small chunks are joined into larger ones and a large buffer is cut into 1 MiB pieces, so
the capture's per-chunk work stays small.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat
from collections.abc import Iterable
from typing import BinaryIO

from ._utf8 import encode_output
from .errors import InvalidArgumentError

__all__ = ["Output", "chunks", "prepend"]

Output = str | bytes | bytearray | memoryview | BinaryIO | Iterable[bytes]
"""What a tool may return: text, bytes, a binary file object or an iterable of byte chunks."""

_READ_CHUNK = 1 << 20
_COALESCE = 256 << 10


def chunks(output: Output) -> Iterable[bytes]:
    if isinstance(output, str):
        data = encode_output(output)
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
                raise InvalidArgumentError(
                    "file objects passed as output must be opened in binary mode"
                )
            yield bytes(chunk)
    pending: list[bytes] = []
    size = 0
    for chunk in output:
        if isinstance(chunk, str):
            raise InvalidArgumentError("an iterable output must yield bytes, not str")
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


def prepend(first: list[bytes], rest: Iterable[bytes]) -> Iterable[bytes]:
    """``first``, then the rest of the stream."""
    yield from first
    yield from rest
