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
from collections import Counter

from .._fork import track
from .._lines import count_newlines
from .._threads import start_helper_thread
from .candidates import Candidates, Entry
from .vocabulary import (
    BROAD_GREP_PATTERN,
    DENSE_GREP_PATTERN,
    GREP_PATTERN,
    GREP_WORDS,
    template,
)

__all__ = ["GrepStream"]

_READ = 1 << 20
_PIPE_SIZE = 1 << 20
# Of each matching line, the pointer shows at most 240 characters: keep enough bytes.
_LINE_CAP = 1024
_END = b"\x01toolswap-end-of-input\x01"
"""The line written after a grep's input: its line number is the input's newline count
plus two (the line is written after a newline of its own), so the capture need not count
the newlines of the bytes grep searches. A line of the output that reads the same cannot
stand where it does (one byte past the input's end)."""
_END_PATTERN = "^" + _END.decode("ascii") + "$"


# The broad vocabulary for this many bytes, then only the strongest words (GNU grep runs
# at about 600 MB/s with the first, over 2 GB/s with the second).
BROAD_BYTES = 16 << 20
DENSE_MATCHES = 2_000
"""Matching lines past which a search that matches most lines is dense (see ``dense``)."""
SAMPLE_BYTES = 256 << 10
"""The first bytes fed, judged from their bytes before grep has said anything (see
``_dense_sample``)."""
SAMPLE_LINES = 200
"""Lines of those bytes that must hold one of the strongest words for them to be dense."""


class GrepStream:
    """The middle of an output searched by grep as it is written: the first
    ``BROAD_BYTES`` for the whole vocabulary (``salience.BROAD_GREP_PATTERN``), the rest
    for the strongest words (``salience.GREP_PATTERN``), each by its own process, switched
    at a line boundary; where most lines match, or one line (its numbers aside) is most
    of the matches, the rest for failure forms (``salience.DENSE_GREP_PATTERN``), judged
    from grep's matches as they are read and, for the first ``SAMPLE_BYTES`` of structured
    output, from their own bytes (grep's output is read megabytes behind what it was fed).
    Same interface as one ``_Grep``; line numbers and byte offsets count from the first
    byte fed.

    Raises:
        OSError: no ``grep`` on PATH, or it could not be started.
    """

    def __init__(self, *, broad_bytes: int = BROAD_BYTES, structured: bool = False) -> None:
        self._broad_bytes = broad_bytes
        self._structured = structured
        """The output reads as JSON, JSON Lines or a table: its first ``SAMPLE_BYTES`` are
        judged from their own bytes (see ``_dense_sample``). A text log's are not: a
        repeated failure line there is counted until grep's own count says it is dense
        (``DENSE_MATCHES``), and lines past it keep the whole vocabulary that long."""
        self._sample_dense = False
        """The sample was judged dense: the switch waits for a line end (see copy_from)."""
        self._stages: list[tuple[_Grep, int]] = [(_Grep(BROAD_GREP_PATTERN), 0)]
        self._origin: int | None = None
        self._fd = -1
        self._fed = 0
        """Bytes fed, from the first."""
        self._judged = False
        """Whether the first ``SAMPLE_BYTES`` were judged (see ``_dense_sample``)."""
        self._forms = False
        """The current stage looks for failure forms (a dense output)."""
        self.failed = False
        self.stopped_at: int | None = None
        """Bytes fed before ``stop`` (None: the search goes on to the end)."""

    def copy_from(self, fd: int, offset: int, count: int) -> None:
        """Feed ``count`` bytes of file ``fd`` from ``offset`` (contiguous calls); nothing
        once the search failed or stopped."""
        if self.failed or self.stopped_at is not None:
            return
        if self._origin is None:
            self._origin = offset
        self._fd = fd
        grep = self._stages[-1][0]
        end = offset + count
        forms = not self._forms and (self._sample_dense or _dense(grep) or _repetitive(grep))
        switch: int | None = None
        """Where the next stage starts (a line boundary in this block)."""
        if self._structured and not self._judged and end - self._origin >= SAMPLE_BYTES:
            # grep's own count comes megabytes late (its output is read in Python, behind
            # what it was fed): the first bytes are judged from themselves.
            self._judged = True
            if not (forms or self._forms):  # (a stage for failure forms is there, or due)
                sample = os.pread(fd, SAMPLE_BYTES, self._origin)
                if _dense_sample(sample):
                    self._sample_dense = forms = True
                    switch = self._origin + sample.rfind(b"\n") + 1
        if forms or (len(self._stages) == 1 and end - self._origin > self._broad_bytes):
            if switch is None or switch <= offset:
                # One search ends at a line boundary, the next starts there: the first in
                # this block for a sample's switch past due, else the last.
                block = os.pread(fd, count, offset)
                newline = block.find(b"\n") if self._sample_dense else block.rfind(b"\n")
                switch = None if newline < 0 else offset + newline + 1
            if switch is not None:  # (else: at a later block's line boundary)
                grep.copy_from(fd, offset, switch - offset)
                grep.close_input()
                try:
                    grep = _Grep(DENSE_GREP_PATTERN if forms else GREP_PATTERN)
                except OSError:
                    self.failed = True
                    return
                self._forms = self._forms or forms
                self._stages.append((grep, switch - self._origin))
                offset = switch
        grep.copy_from(fd, offset, end - offset)
        self._fed = end - self._origin
        if grep.failed:
            self.failed = True

    @property
    def dense(self) -> bool:
        """Whether most lines match even the failure forms (see ``_dense``): searching on
        is no use here (see ``stop``)."""
        return self._forms and _dense(self._stages[-1][0])

    def stop(self) -> None:
        """Search no further: grep finishes what it was fed, and ``finish`` keeps what
        every stage found (``stopped_at`` says where the search ended)."""
        if self.stopped_at is None and not self.failed:
            self.stopped_at = self._fed
            self._stages[-1][0].close_input()

    def finish(self) -> Candidates | None:
        """End the input, wait for every grep and merge what they found.

        A count of similar lines that some lines could not add to says which lines it
        covers (``Entry.counted_to``): where the strongest words were looked for, a line
        with none of them; where failure forms were, any line without one; and past where
        the search stopped, every line.

        Returns:
            The matching lines (line numbers 1-based from the first byte fed, byte offsets
            from it), or None when a search did not complete.
        """
        found = [grep.finish() for grep, _ in self._stages]
        if self.failed or any(f is None for f in found):
            return None
        merged = Candidates()
        lines = 0
        for (grep, start), candidates in zip(self._stages, found, strict=True):
            assert candidates is not None
            forms = grep.pattern is DENSE_GREP_PATTERN
            stopped = [e for e in merged.entries.values() if forms or not _has_word(e.raw)]
            if start and (candidates.entries or stopped):
                # Counted only where a line number needs it: a clean log costs no second
                # pass over its first stage's bytes.
                lines = self._newlines(self._origin or 0, start)
                for entry in stopped:
                    _counted_to(entry, lines)
                if forms:
                    # The lines found here are listed on their own, never folded into a
                    # count that stopped (a template of theirs may hold many lines that
                    # say nothing).
                    candidates.entries = {b"\0" + k: e for k, e in candidates.entries.items()}
                    for entry in candidates.entries.values():
                        entry.counted_from = 1  # (this stage's first line, once merged)
            merged.merge(candidates, lines=lines, offset=start)
        if self.stopped_at is not None and merged.entries:
            # The counts end with the last whole line fed (a line cut by the stop is not
            # one of the lines they are like).
            last = self._newlines(self._origin or 0, self.stopped_at)
            for entry in merged.entries.values():
                _counted_to(entry, last)
        return merged

    def _newlines(self, origin: int, start: int) -> int:
        """Newlines in the ``start`` bytes fed before a later stage began."""
        count = 0
        for grep, stage_start in self._stages:
            if stage_start >= start:
                return count
            if grep.newlines is None:
                break  # (each stage's count comes once it finished)
            count += grep.newlines
        else:
            return count
        return count_newlines(
            lambda length, offset: os.pread(self._fd, length, offset),
            origin,
            origin + start,
            block=_READ,
        )

    def counted(self) -> tuple[int, int, int] | None:
        """``(start, end, newlines)``: the newlines grep counted in the bytes ``start`` ..
        ``end`` of the file it was fed from (every byte fed before ``stop``); None when a
        search did not complete (call after ``finish``)."""
        if self.failed or self._origin is None:
            return None
        counts = [grep.newlines for grep, _ in self._stages]
        if any(n is None for n in counts):
            return None
        end = self._fed if self.stopped_at is None else self.stopped_at
        return self._origin, self._origin + end, sum(n for n in counts if n is not None)

    def kill(self) -> None:
        """Stop every grep (the capture failed)."""
        self.failed = True
        for grep, _ in self._stages:
            grep.kill()


def _has_word(raw: bytes) -> bool:
    """Whether a line holds one of the strongest words (``GREP_PATTERN`` matches it)."""
    lower = raw.lower()
    return any(word in lower for word in GREP_WORDS)


def _counted_to(entry: Entry, line: int) -> None:
    entry.counted_to = line if entry.counted_to is None else min(entry.counted_to, line)


def _dense(grep: _Grep) -> bool:
    """Whether most lines match (at least ``DENSE_MATCHES`` of them): a failure word is
    what every line of this output holds (a ``"severity": "error"`` field in each record),
    and sorting them all costs several times the capture while none stands out for it."""
    matched = grep.matched
    return matched >= DENSE_MATCHES and 2 * matched > grep.last_line


def _dense_sample(sample: bytes) -> bool:
    """Whether the whole lines of ``sample`` are dense as ``_dense`` or ``_repetitive``
    judge a search, at least ``SAMPLE_LINES`` of them holding one of the strongest words
    (``GREP_WORDS``, which the broad search matches too): most lines hold one, or one line,
    its numbers aside, is most of those that do.

    Costs a count per word, and a look at each line that holds one only where there are
    enough of them (a clean log is settled by the counts)."""
    whole = sample[: sample.rfind(b"\n") + 1]
    lower = whole.lower()
    if sum(lower.count(word) for word in GREP_WORDS) < SAMPLE_LINES:
        return False  # (a line that matches holds at least one)
    lines = whole.count(b"\n")
    matched: dict[int, int] = {}
    """The lines that hold a word: where each starts -> where it ends."""
    for word in GREP_WORDS:
        at = lower.find(word)
        while at >= 0:
            start = lower.rfind(b"\n", 0, at) + 1
            end = lower.find(b"\n", at)
            matched[start] = end
            if len(matched) >= SAMPLE_LINES and 2 * len(matched) > lines:
                return True  # most lines hold one
            at = lower.find(word, end)  # (the rest of this line adds nothing)
    if len(matched) < SAMPLE_LINES:
        return False
    shapes = Counter(template(whole[start:end]) for start, end in matched.items())
    return 2 * shapes.most_common(1)[0][1] > len(matched)


def _repetitive(grep: _Grep) -> bool:
    """Whether one line, its numbers aside, is most of the matches (at least
    ``DENSE_MATCHES`` of them): a field that holds a failure word in every record of a
    pretty-printed document (``"severity": "error",``) repeats on one line in twenty, and
    sorting each costs as much as when every line holds it."""
    most = grep.candidates.most
    return most >= DENSE_MATCHES and 2 * most > grep.matched


class _Grep:
    """One ``grep -E PATTERN`` process fed bytes as they are written. Its matching lines
    (their first 1 KiB, whatever their length) go to a ``Candidates`` store, with line
    numbers and byte offsets counted from the first byte fed.

    Raises:
        OSError: no ``grep`` on PATH, or it (or the thread that reads its output) could not
            be started.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        grep = shutil.which("grep")
        if grep is None:
            raise OSError("no grep on PATH")
        self._proc = subprocess.Popen(
            [grep, "-a", "-n", "-b", "-i", "-E", "-e", pattern, "-e", _END_PATTERN],
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
        self.candidates = Candidates()
        self.failed = False
        self._input_closed = False
        self.matched = 0
        """Matching lines read so far."""
        self.last_line = 0
        """The line number of the last of them."""
        self.newlines: int | None = None
        """Newlines in the bytes fed, once grep has read them all (see ``_END``)."""
        self._fed = 0
        track(self)
        try:
            self._reader = start_helper_thread(self._read, "toolswap-grep")
        except RuntimeError as exc:  # no thread can be started: no grep either
            self._proc.kill()
            self._proc.stdin.close()
            assert self._proc.stdout is not None
            self._proc.stdout.close()
            self._proc.wait()
            raise OSError(f"no thread to read grep's output: {exc}") from None

    def _forked(self) -> None:
        """In a forked child: its copy of grep's input is pointed at /dev/null. Held open
        there, it would keep grep from seeing the end of its input, and the capture feeding
        it waiting, for as long as the child lives (a pool's worker: hours)."""
        try:
            fd = self._proc.stdin.fileno() if self._proc.stdin is not None else -1
        except ValueError:
            return  # closed before the fork: its number may be another file's now
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)

    def write(self, data: bytes | memoryview) -> None:
        """Feed bytes (blocks while grep catches up; never raises)."""
        if not (self.failed or self._input_closed):
            self._fed += self._send(data)

    def _send(self, data: bytes | memoryview) -> int:
        """Write ``data`` to grep's input; how many bytes went (``failed`` if not all)."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._in, view) :]
        except OSError:
            self.failed = True
        return len(data) - len(view)

    def copy_from(self, fd: int, offset: int, count: int) -> None:
        """Feed ``count`` bytes of file ``fd`` from ``offset``, in the kernel where it can
        (splice: page references, no copy through user space)."""
        end = offset + count
        splice = getattr(os, "splice", None)  # Linux only
        try:
            # (Once its input is closed, its descriptor number may be another file's.)
            while offset < end and not self.failed and not self._input_closed:
                try:
                    if splice is None:
                        raise OSError("no splice here")
                    moved = splice(fd, self._in, end - offset, offset_src=offset)
                    self._fed += moved
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

    def close_input(self) -> None:
        """No more bytes: grep finishes on its own (collected by ``finish``), its last
        line the count of newlines fed (``_END``)."""
        if self._input_closed:
            return
        self._input_closed = True
        if not self.failed:
            self._send(b"\n" + _END + b"\n")  # (not counted as fed)
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()

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
        if text == _END and int(offset) == self._fed + 1:
            self.newlines = int(number) - 2
            return
        self.matched += 1
        self.last_line = int(number)
        self.candidates.add(self.last_line, int(offset), text, long_line=len(line) >= _LINE_CAP)

    def finish(self) -> Candidates | None:
        """End the input and wait for grep.

        Returns:
            The matching lines (line numbers 1-based from the first byte written, byte
            offsets from it), or None when the search did not complete.
        """
        try:
            self.close_input()
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
