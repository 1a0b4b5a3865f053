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
from collections import deque

from ._threads import start_helper_thread

__all__ = ["GrepStream"]

_READ = 1 << 20
_PIPE_SIZE = 1 << 20
# Of each matching line, the pointer shows at most 240 characters: keep enough bytes.
_LINE_CAP = 1024
# The last matches kept: enough to find those before the tail preview.
_LAST_KEEP = 256


class GrepStream:
    """A ``grep`` process fed an output as it is written. Keeps little: the start of the
    first ``first`` matching lines and of the last 256, whatever their length.

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
        self._first: list[tuple[int, bytes]] = []
        self._last: deque[tuple[int, bytes]] = deque(maxlen=_LAST_KEEP)
        self.failed = False
        self._reader = start_helper_thread(self._read, "toolswap-grep")

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
        """Split grep's output into lines as it streams, keeping each line's first
        ``_LINE_CAP`` bytes: the first ``first`` lines and the last ``_LAST_KEEP``."""
        assert self._proc.stdout is not None
        out = self._proc.stdout.fileno()
        carry = bytearray()
        try:
            while block := os.read(out, _READ):
                lines = block.split(b"\n")
                if len(carry) < _LINE_CAP:
                    carry += lines[0][: _LINE_CAP - len(carry)]
                if len(lines) == 1:
                    continue  # the line goes on (its excess is dropped)
                self._take(bytes(carry))
                middle = lines[1:-1]
                if len(self._first) >= self._first_n and len(middle) > _LAST_KEEP:
                    middle = middle[-_LAST_KEEP:]
                for line in middle:
                    self._take(line[:_LINE_CAP])
                carry = bytearray(lines[-1][:_LINE_CAP])
            if carry:
                self._take(bytes(carry))
        except (OSError, ValueError):
            self.failed = True

    def _take(self, line: bytes) -> None:
        number, sep, text = line.partition(b":")
        if not (sep and number.isdigit()):
            return
        hit = (int(number), text)
        if len(self._first) < self._first_n:
            self._first.append(hit)
        self._last.append(hit)

    def finish(self) -> list[tuple[int, bytes]] | None:
        """End the input and wait for grep.

        Returns:
            ``(line number counted from the first byte written, 1-based; line start)`` for
            the first and the last matches, or None when the search did not complete.
        """
        try:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            self._reader.join()
        finally:
            code = self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        if self.failed or code not in (0, 1):  # 1: no line matched
            return None
        return sorted(dict([*self._first, *self._last]).items())

    def kill(self) -> None:
        """Stop grep (the capture failed)."""
        self.failed = True
        with contextlib.suppress(OSError):
            self._proc.kill()
        self.finish()
