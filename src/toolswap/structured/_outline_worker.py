"""The helper process that outlines structured outputs beside the capture, on another core
(``toolswap.structured.outline_process`` starts it and speaks to it).

argv: FD, one end of a Unix ``SOCK_SEQPACKET`` socket pair, and the ``sys.hexversion`` of
the process that started it: an interpreter of another version (an embedding's
``sys.executable``), or one that cannot import the parsers, exits without a word, and that
process outlines on its threads. Once its imports are done it sends ``READY``; then it
answers each request in turn. A request is one message: its number, the output's size and
the length of its head (``HEADER``), then the head's bytes, with the output's file
descriptor attached (``SCM_RIGHTS``: the file is read with ``pread``, never opened by a
name). The answer is one message: ``ANSWER``, the request's number and the outline's UTF-8
text (none for text, or for an output it could not read; a message is never empty, which
would read as the socket's end). It exits when the socket closes (its parent closed it,
exited or was killed), or when its parent is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import sys

from . import inspect_output

__all__ = ["ANSWER", "HEADER", "MAX_REQUEST", "NUMBER", "READY", "main"]

READY = b"R"
ANSWER = b"="
HEADER = struct.Struct("<QQQ")
"""A request's first bytes: its number, the output's size, the head's length. The answer
gives the number back (``NUMBER``, after ``ANSWER``): an answer is never taken for another
request's."""
NUMBER = struct.Struct("<Q")
_PARENT_CHECK = 5.0
"""Seconds between looks at its parent while idle: a forked child of the parent may hold
the parent's end of the socket open after the parent is gone; the helper ends then too."""
MAX_REQUEST = HEADER.size + (1 << 20)
"""The longest request taken (a head is at most ``head_kept`` bytes: tens of KiB)."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Its parent's terminal's signals are not for it (it is in a session of its own too):
    # it ends when its socket does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # (Started from a helper thread, which blocks every signal: the mask is inherited.)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    sock = socket.socket(fileno=int(args[0]))
    if len(args) > 1 and int(args[1]) != sys.hexversion:
        return 1
    import ijson  # noqa: F401  (the readers import it on first use: here, before READY)

    from . import outline  # noqa: F401

    with contextlib.suppress(ImportError):  # (without it the readers use json: the same)
        import msgspec  # noqa: F401
    parent = os.getppid()
    try:
        sock.send(READY)
        sock.settimeout(_PARENT_CHECK)
        while True:
            try:
                message, fds, _flags, _address = socket.recv_fds(sock, MAX_REQUEST, 1)
            except TimeoutError:
                if os.getppid() != parent:
                    return 0  # its parent is gone, though its socket is not closed
                continue
            if not message:
                return 0
            try:
                number, text = _answer(message, fds)
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(ANSWER + NUMBER.pack(number) + text.encode("utf-8", "surrogateescape"))
    except OSError:
        return 0  # the parent went away


def _answer(message: bytes, fds: list[int]) -> tuple[int, str]:
    if len(message) < HEADER.size:
        return 0, ""
    number, size, head_length = HEADER.unpack_from(message)
    head = message[HEADER.size :]
    if len(fds) != 1 or len(head) != head_length:
        return number, ""
    fd = fds[0]

    def read(count: int, offset: int) -> bytes:
        return os.pread(fd, count, offset)

    try:
        return number, inspect_output(head, read, size)
    except Exception:  # an outline is a convenience: the capture goes on without one
        return number, ""


if __name__ == "__main__":
    sys.exit(main())
