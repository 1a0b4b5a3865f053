"""Failure lines past the Python scan's reach, found by the system's ``grep`` as the
output streams in.

The Python scan (``salience.ForwardScan``) covers only the first megabytes of an output.
``grep -i -E`` searches the same vocabulary (``salience.GREP_PATTERN``) at over 1 GB/s in
another process, on the other core, fed by the capture's writer thread while the output is
still arriving; each matching line goes to a ``salience.Candidates`` store, which ranks and
de-duplicates them in bounded memory. Where no ``grep`` can be run, or it fails, nothing is
lost: the capture falls back to scanning the last megabytes in Python, and the pointer says
which part was not scanned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess

from ._threads import start_helper_thread
from .salience import GREP_PATTERN, Candidates

__all__ = ["GrepStream"]

_READ = 1 << 20
_PIPE_SIZE = 1 << 20
# Of each matching line, the pointer shows at most 240 characters: keep enough bytes.
_LINE_CAP = 1024


class GrepStream:
    """A ``grep`` process fed an output as it is written. Its matching lines (their first
    1 KiB, whatever their length) go to ``candidates``, with line numbers and byte offsets
    counted from the first byte written.

    Raises:
        OSError: no ``grep`` on PATH, or it could not be started.
    """

    def __init__(self, candidates: Candidates) -> None:
        grep = shutil.which("grep")
        if grep is None:
            raise OSError("no grep on PATH")
        self._proc = subprocess.Popen(
            [grep, "-a", "-n", "-b", "-i", "-E", "-e", GREP_PATTERN],
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
        self.candidates = candidates
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
        ``_LINE_CAP`` bytes."""
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
                for line in lines[1:-1]:
                    self._take(line[:_LINE_CAP])
                carry = bytearray(lines[-1][:_LINE_CAP])
            if carry:
                self._take(bytes(carry))
        except (OSError, ValueError):
            self.failed = True

    def _take(self, line: bytes) -> None:
        number, sep, rest = line.partition(b":")
        offset, sep2, text = rest.partition(b":")
        if not (sep and sep2 and number.isdigit() and offset.isdigit()):
            return
        self.candidates.add(int(number), int(offset), text, long_line=len(line) >= _LINE_CAP)

    def finish(self) -> Candidates | None:
        """End the input and wait for grep.

        Returns:
            The matching lines (line numbers 1-based from the first byte written, byte
            offsets from it), or None when the search did not complete.
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
        return self.candidates

    def kill(self) -> None:
        """Stop grep (the capture failed)."""
        self.failed = True
        with contextlib.suppress(OSError):
            self._proc.kill()
        self.finish()
