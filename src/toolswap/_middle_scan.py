"""Failure lines past the Python scan's reach, found by the system's ``grep`` as the
output streams in.

The Python keyword scan runs at about 250 MB/s, so it covers only the first megabytes of
an output. ``grep -i -E`` does the same search at over 1 GB/s in another process, on the
other core, fed by the capture's writer thread while the output is still arriving. Where
no ``grep`` can be run, or it fails, nothing is lost: the capture falls back to scanning
the last megabytes in Python, and the pointer says which part was not scanned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import threading

__all__ = ["GrepStream"]

_TAIL_KEEP = 64 << 10
_READ = 1 << 20
_FIRST_BYTES_MAX = 1 << 20
_PIPE_SIZE = 1 << 20


class GrepStream:
    """A ``grep`` process fed an output as it is written. Keeps little: the first
    ``first`` matching lines, and the last 64 KiB of grep's output (the last matches).

    Raises:
        OSError: no ``grep`` on PATH, or it could not be started.
    """

    def __init__(self, keywords: tuple[bytes, ...], *, first: int) -> None:
        grep = shutil.which("grep")
        if grep is None:
            raise OSError("no grep on PATH")
        self._proc = subprocess.Popen(
            [grep, "-a", "-n", "-i", "-E", "-e", b"|".join(keywords).decode("ascii")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "")},
            close_fds=True,
        )
        assert self._proc.stdin is not None
        self._in = self._proc.stdin.fileno()
        set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
        if set_size is not None:
            with contextlib.suppress(OSError):
                fcntl.fcntl(self._in, set_size, _PIPE_SIZE)
        self._first_n = first
        self._first: list[bytes] = []
        self._tail = bytearray()
        self._trimmed = False
        self.failed = False
        self._reader = threading.Thread(target=self._read, name="toolswap-grep", daemon=True)
        self._reader.start()

    def write(self, data: bytes | memoryview) -> None:
        """Feed bytes (blocks while grep catches up; never raises)."""
        if self.failed:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._in, view) :]
        except OSError:
            self.failed = True

    def copy_from(self, fd: int, offset: int, count: int) -> None:
        """Feed ``count`` bytes of file ``fd`` from ``offset``, in the kernel where it can
        (splice: page references, no copy through user space)."""
        end = offset + count
        splice = getattr(os, "splice", None)  # Linux only
        try:
            while offset < end and not self.failed:
                try:
                    if splice is None:
                        raise OSError("no splice here")
                    moved = splice(fd, self._in, end - offset, offset_src=offset)
                except OSError as exc:
                    if isinstance(exc, BrokenPipeError):
                        raise
                    data = os.pread(fd, min(end - offset, _READ), offset)
                    self.write(data)
                    moved = len(data)
                if moved <= 0:
                    break
                offset += moved
        except OSError:
            self.failed = True

    def _read(self) -> None:
        assert self._proc.stdout is not None
        out = self._proc.stdout.fileno()
        head = bytearray()
        try:
            while block := os.read(out, _READ):
                if len(self._first) < self._first_n and len(head) < _FIRST_BYTES_MAX:
                    head += block
                    *complete, rest = head.split(b"\n")
                    head = bytearray(rest)
                    room = self._first_n - len(self._first)
                    self._first.extend(bytes(line) for line in complete[:room])
                self._tail += block
                if len(self._tail) > 2 * _TAIL_KEEP:
                    del self._tail[: len(self._tail) - _TAIL_KEEP]
                    self._trimmed = True
        except (OSError, ValueError):
            self.failed = True

    def finish(self) -> list[tuple[int, bytes]] | None:
        """End the input and wait for grep.

        Returns:
            ``(line number counted from the first byte written, 1-based; line)`` for the
            first matches and for those in the last 64 KiB of grep's output, or None when
            the search did not complete.
        """
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        self._reader.join()
        code = self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self.failed or code not in (0, 1):  # 1: no line matched
            return None
        tail = bytes(self._tail)
        cut = tail.find(b"\n") + 1 if self._trimmed else 0  # a partial first line
        found: dict[int, bytes] = {}
        for raw in [*self._first, *tail[cut:].split(b"\n")]:
            number, sep, text = raw.partition(b":")
            if sep and number.isdigit():
                found[int(number)] = text
        return sorted(found.items())

    def kill(self) -> None:
        """Stop grep (the capture failed)."""
        self.failed = True
        with contextlib.suppress(OSError):
            self._proc.kill()
        self.finish()
