"""Streaming spill: write output to a temporary file while hashing and counting it,
keeping the head and the tail; then publish the file under a final name. Which lines
matter is the ``salience`` module's call: the capture feeds it the bytes (and grep, on the
writer thread) and lets it read the finished file back.

Memory stays bounded whatever the output size: the head, a tail buffer, the salience
module's candidate lines and a small queue of chunks in flight. Hashing and writing run on a worker
thread (both release the GIL) while the calling thread reads and counts the next chunk; a third
thread hands what was written to grep, which reads it back from the file: the writer waits
for grep only when grep is far behind (``_GREP_LAG``), so output already in memory is written
at its own pace.
The failure-line scan, which holds the GIL and is slower than hashing, runs at the end over
the first and the last bytes of the file (read back from the page cache) while the worker
fsyncs, so it overlaps the one step that no capture can skip.

Publishing never overwrites: the temporary file is fsynced, hard-linked to the final name
(``link`` fails if the name exists), and the directory is fsynced. A crash at any point
leaves either no final name or a complete one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from . import durable
from ._counter import OutputCounter
from ._fork import track
from ._lines import count_newlines
from ._threads import start_helper_thread
from .artifact import TMP_PREFIX, temporary_filename
from .crashpoints import crash_point
from .durable import write_all
from .salience import SalientLine, Scanner
from .salience.middle_scan import GrepStream

__all__ = [
    "TMP_PREFIX",
    "CaptureStats",
    "Outliner",
    "SalientLine",
    "StreamCapture",
    "detect_media_type",
]

_QUEUE_DEPTH = 4
_READ_BACK = 1 << 20
_BOUNDARY_PROBE = 64 << 10
_LONG_LINE_READ = 1 << 20
"""A line at the Python scan's limit longer than ``_BOUNDARY_PROBE`` is scanned on in
Python up to this far past the limit, and grep starts after it; a longer one turns grep off."""
# Where grep takes over from the Python scan (which holds the GIL at about 40 MB/s with the
# whole vocabulary; grep searches it at 600 MB/s on the other core while the output streams).
_GREP_HANDOFF = 256 << 10
_STRUCTURED_HANDOFF = 4 << 10
"""Where grep takes over in an output whose first bytes read as JSON, JSON Lines or a table:
its outline, computed in Python too, looks for failures record by record, and the text scan
is left to grep, on the other core."""
# A line longer than this stops grep (which would hold all of it in memory).
_GREP_MAX_LINE = 8 << 20
_DENSE_TAIL = 256 << 10
"""The last bytes read in Python after a search stopped because nearly every line matched
(such lines take Python about 40 ms a megabyte)."""
_GREP_LAG = 32 << 20
"""How far grep may fall behind the writer before the writer waits for it. Ordinary output
never gets that far (grep runs at 400 MB/s or more); output where most lines match slows
grep, whose matches are read in Python, and then holds back the writer (and a producing
pipe) instead of leaving all that work for ``finish``."""
_WRITEBACK_STEP = 8 << 20
"""The writer asks the kernel to start writing back every this many bytes."""

Inspect = Callable[[bytes, Callable[[int, int], bytes], int], str]
"""``inspect(head, read, size)``: the outline of a structured output, or ``""``."""


class Outliner(Protocol):
    """Outlines computed in another process (``structured.outline_process``)."""

    def warm(self) -> None:
        """Get ready for the outlines to come (an output looks structured)."""

    def submit(self, head: bytes, fd: int, size: int) -> Callable[[], str] | None:
        """Start the outline of the output in ``fd``: what waits for its text, or None
        (the capture outlines it on its thread)."""


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"\x1f\x8b", "application/gzip"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x7fELF", "application/x-elf"),
    (b"RIFF", "application/x-riff"),
)


def detect_media_type(head: bytes, *, binary: bool) -> str:
    """A MIME type from the first bytes: known magic numbers, else text or octet-stream."""
    for magic, media_type in _MAGIC:
        if head.startswith(magic):
            return media_type
    return "application/octet-stream" if binary else "text/plain"


@dataclass(frozen=True, slots=True)
class CaptureStats:
    """What the capture learned while writing; the body itself is on disk."""

    byte_size: int
    newline_count: int
    char_count: int
    sha256: str
    binary: bool
    head: bytes
    """The first ``head_keep`` bytes."""
    tail: bytes
    """The last ``tail_keep`` bytes (overlaps ``head`` for small outputs)."""
    salient: tuple[SalientLine, ...]
    scanned_bytes: int
    """How many leading bytes the failure-line scan covered."""
    tail_scan_start: int | None = None
    """Where the scan of the output's last bytes began (None: no such scan). Failure lines
    between ``scanned_bytes`` and here were not looked for."""
    outline_source: Callable[[], str] | None = None
    """Gives the outline of a structured output, waiting for the thread that computes it
    (see ``outline``)."""

    @property
    def outline(self) -> str:
        """The outline of a structured output (JSON, JSON Lines, a table); empty for text."""
        return self.outline_source() if self.outline_source is not None else ""

    unlisted: int = 0
    """Failure-like lines found besides ``salient`` (not read back: they rank lower)."""
    lines_known: bool = True
    """False when ``newline_count`` misses the lines of bytes that were written but could
    not be read back to count them (only an output that could not be saved)."""
    ends_with_newline: bool | None = None
    """Whether the last byte is a newline (None: as ``tail`` says, which is empty when no
    tail is kept)."""

    @property
    def line_count(self) -> int:
        if self.byte_size == 0:
            return 0
        ends = self.ends_with_newline
        if ends is None:
            ends = self.tail.endswith(b"\n")
        return self.newline_count + (0 if ends else 1)

    @property
    def tail_offset(self) -> int:
        return self.byte_size - len(self.tail)


class StreamCapture:
    """Writes one output to a temporary file in an open ``tool-results`` directory.

    Args:
        dir_fd: the open ``tool-results`` directory.
        head_keep: bytes of the head to keep for the preview.
        head_shown: bytes the pointer's head preview always shows; failure lines that end
            inside them are not collected again (default: collect from the first byte).
        tail_keep: bytes of the tail to keep for the preview.
        preview_zones: the most bytes the pointer's head and tail may show (its budget
            decides how much they do): failure lines inside them are read back too, but
            never crowd out those of the middle.
        scan_limit: how far into the output the failure-line scan reads.
        tail_scan: when the output is longer than ``scan_limit``, how many of its last
            bytes are also scanned for failure lines.
        inspect: ``inspect(head, read, size)`` outlines a structured output (or returns
            ``""``) from the finished file, on a thread of its own that reads a duplicate
            of the descriptor: it runs while the file is fsynced and the artifact is
            recorded, and the stats' ``outline`` waits for it.
        outliner: where a structured output's outline is computed instead, when it can
            take it (``submit``): in another process, handed the descriptor as soon as the
            output is written, so the outline runs beside the failure-line scan too, on
            another core; an outline computed on the thread gets it ready (``warm``) for
            the outputs to come.
    """

    def __init__(
        self,
        dir_fd: int,
        *,
        head_keep: int,
        head_shown: int | None = None,
        tail_keep: int,
        scan_limit: int,
        tail_scan: int = 0,
        inspect: Inspect | None = None,
        outliner: Outliner | None = None,
        preview_zones: tuple[int, int] = (0, 0),
    ) -> None:
        self._dir_fd = dir_fd
        self._inspect = inspect
        self._outliner = outliner if inspect is not None else None
        self._zones = preview_zones
        self.tmp_name = temporary_filename(os.getpid(), os.urandom(8).hex())
        self._error: BaseException | None = None
        """The first write error (a full disk, an I/O error): from then on the output is
        only counted and its head and tail kept, so the caller still gets a preview."""
        # Nothing is open yet (a child forked from here on closes what is: ``_forked``).
        self._fd = -1
        self._closed = True
        self._tmp_unlinked = True
        self._outline_fd = -1
        """The descriptor an outline thread reads (see ``_start_outline``), while it does."""
        track(self)
        # Read-write: the failure-line scan reads the finished file back.
        try:
            self._fd = durable.current().open(
                self.tmp_name,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            self._error = exc
        else:
            self._closed = self._tmp_unlinked = False
        crash_point("capture.tmp_created")
        self._head_keep = head_keep
        self._tail_keep = tail_keep
        self._ends_with_newline = False
        self._head = bytearray()
        self._tail = bytearray()
        self._scanner = Scanner(
            scan_limit, head_skip=0 if head_shown is None else min(head_shown, head_keep)
        )
        self._scan_limit = scan_limit
        # Past this, grep takes over from the Python scan (when it runs).
        self._grep_limit = min(scan_limit, _GREP_HANDOFF)
        self._sniffed = inspect is None
        """Whether the head was looked at for structure (see ``_STRUCTURED_HANDOFF``)."""
        self._structured = False
        """The head reads as JSON, JSON Lines or a table (see ``_sniff_head``)."""
        self._tail_scan = tail_scan
        # Past the Python scan, newlines are left for grep to count (see _count_uncounted).
        self._counter = OutputCounter(lines_to=self._grep_limit if tail_scan else None)
        self._lost_newlines = 0
        """Newlines the counter left uncounted in chunks that never reached the file."""
        self._sha = hashlib.sha256()
        self._queue: queue.Queue[tuple[bytes, int] | None] = queue.Queue(_QUEUE_DEPTH)
        """Chunks for the writer, each with how many of its leading bytes the counter
        counted the newlines of."""
        self._worker: threading.Thread | None = None
        self._written = threading.Event()
        """The writer is done: every chunk is on the file, or it failed."""
        self._middle_scanned = False
        self._bytes_written = 0
        self._grep: GrepStream | None = None
        self._grep_from = 0
        self._grep_off = False
        self._searched_to: int | None = None
        """Where a search stopped for lines that nearly all match (see ``_DENSE_TAIL``)."""
        self._line_run = 0
        self._line_searched = 0
        """Bytes past the scan limit looked at for the end of a long line across it (see
        ``_grep_start``; 0: none yet)."""
        self._feed: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        """Written chunks for grep, as (length, index of the last newline or -1): grep
        reads the bytes back from the file, so the queue holds none of the output."""
        self._lag = 0
        """Bytes in ``_feed`` (at most about ``_GREP_LAG``)."""
        self._lag_changed = threading.Condition()
        self._abandoned = False
        """``discard`` began: grep's results are not wanted, so nothing waits for it."""
        self._scanned = 0
        """Leading bytes already fed to the forward scan (by ``write``)."""
        self._drained = 0
        """The file's size as far as it was written (the bytes before are on it)."""
        self._writeback_from = 0
        self._feeder: threading.Thread | None = None

    def _drain(self) -> None:
        ended = False
        item: tuple[bytes, int] | None = None
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    ended = True
                    self._end_feed()
                    # fsync here, without the GIL, while the caller scans for failure lines.
                    self._written.set()
                    durable.current().fsync(self._fd)
                    return
                chunk = item[0]
                self._sha.update(chunk)
                write_all(self._fd, chunk)
                item = None  # on the file
                self._drained += len(chunk)
                self._to_grep(chunk)
                if self._drained - self._writeback_from >= _WRITEBACK_STEP:
                    # The device writes what is done while the rest is produced: the
                    # fsync at the end then waits for the last few megabytes only.
                    durable.current().start_writeback(
                        self._fd, self._writeback_from, self._drained - self._writeback_from
                    )
                    self._writeback_from = self._drained
        except BaseException as exc:  # handed to the caller thread in finish()
            self._error = exc
            self._end_feed()
            self._written.set()
            if item is not None:
                self._lose(*item)  # the chunk that failed
            while not ended and (item := self._queue.get()) is not None:
                self._lose(*item)  # and those still queued

    def _lose(self, chunk: bytes, counted: int) -> None:
        """Count the newlines the counter left in a chunk that never reached the file."""
        self._lost_newlines += chunk.count(b"\n", counted)

    def write(self, chunk: bytes) -> None:
        """Add ``chunk`` to the output."""
        if not chunk:
            return
        chunk = bytes(chunk)  # the worker keeps it: it must not change
        self._ends_with_newline = chunk.endswith(b"\n")
        if len(self._head) < self._head_keep:
            self._head += chunk[: self._head_keep - len(self._head)]
        if len(chunk) >= self._tail_keep:
            self._tail = bytearray(chunk[-self._tail_keep :] if self._tail_keep else b"")
        else:
            self._tail += chunk
            if len(self._tail) > 2 * self._tail_keep:
                del self._tail[: len(self._tail) - self._tail_keep]
        if not self._sniffed and len(self._head) >= _STRUCTURED_HANDOFF:
            self._sniff_head()
        if self._scanned < self._grep_limit and self._scanned == self._counter.size:
            # The forward scan of the first bytes runs here, from memory, while the writer
            # thread hashes and writes: the caller would otherwise only wait for it. (A
            # limit moved on past a long line once the chunks went by is read from the
            # file, in ``_scan_with``.)
            part = chunk[: self._grep_limit - self._scanned]
            self._scanner.feed(part)
            self._scanned += len(part)
        # Read once: a chunk is either counted here in full (nothing more reaches the
        # disk) or handed on, and then whoever fails to write it counts the rest (_lose).
        error = self._error
        counted = self._counter.feed(chunk, count_lines=error is not None)
        if error is not None:
            return  # nothing more reaches the disk; head, tail and counts still do
        if len(chunk) < 65536 and self._worker is None:
            # Small outputs are hashed and written inline: a thread is not worth it.
            self._sha.update(chunk)
            try:
                write_all(self._fd, chunk)
            except OSError as exc:
                self._error = exc
                self._lose(chunk, counted)
                return
            self._drained += len(chunk)
            try:
                self._feed_grep(len(chunk), chunk.rfind(b"\n"))
            except OSError as exc:
                # Reading the file back failed: the capture fails as a write does (finish
                # raises it; the feeder thread hands it on alike), the rest still counted.
                self._error = exc
            return
        if self._worker is None:
            # The writer goes on from where the small chunks written here ended (they are
            # in its first writeback range, which starts at 0).
            self._worker = start_helper_thread(self._drain, "toolswap-capture")
        self._queue.put((chunk, counted))

    def _sniff_head(self) -> None:
        """Hand the text scan to grep early when the head reads as structured output."""
        self._sniffed = True
        from .structured.detect import sniff  # (the outline imports it at the end anyway)

        try:
            kind = sniff(bytes(self._head[:_STRUCTURED_HANDOFF]), complete=False)
        except Exception:  # a surprise here costs nothing but the early hand-off
            return
        if kind is not None:
            self._structured = True
            self._grep_limit = min(self._grep_limit, max(self._scanned, _STRUCTURED_HANDOFF))

    def _to_grep(self, chunk: bytes) -> None:
        """Hand a written chunk to grep on a thread of its own (writer side): grep catches
        up while the rest is written and fsynced, and the writer waits for it only when it
        is ``_GREP_LAG`` bytes behind."""
        if self._feeder is None:
            self._feeder = start_helper_thread(self._feed_all, "toolswap-grep-feed")
        with self._lag_changed:
            while self._lag > _GREP_LAG and not self._abandoned:
                self._lag_changed.wait()
            self._lag += len(chunk)
        self._feed.put((len(chunk), chunk.rfind(b"\n")))

    def _feed_all(self) -> None:
        failed = False
        while (written := self._feed.get()) is not None:
            try:
                # A write error (or discard) means grep's results will not be used.
                if not (failed or self._abandoned or self._error is not None):
                    self._feed_grep(*written)
            except BaseException as exc:  # handed to the caller thread like a write error
                if self._error is None:
                    self._error = exc
                failed = True  # the rest is not fed: it ends at the writer's None all the same
            finally:
                with self._lag_changed:
                    self._lag -= written[0]
                    self._lag_changed.notify()

    def _end_feed(self) -> None:
        """No more chunks for grep (writer side): the feeder ends once it has them all."""
        if self._feeder is not None:
            self._feed.put(None)

    def _join_feeder(self) -> None:
        """Wait until grep has been handed every chunk (caller side, the writer done)."""
        if self._feeder is not None:
            self._feeder.join()
            self._feeder = None

    def _feed_grep(self, length: int, newline: int) -> None:
        """Hand what was just written past the Python scan's limit to grep (feeder thread):
        ``length`` bytes, the last newline among them at ``newline`` (-1: none).

        Starts grep when the output first passes the scan limit, at the line boundary the
        forward scan will stop at, so the two searches meet without a gap; grep then runs
        on the other core while the output keeps arriving.
        """
        start = self._bytes_written
        self._bytes_written += length
        if self._grep_off:
            return
        if self._grep is None:
            limit = self._grep_limit
            if self._bytes_written <= limit or not self._tail_scan:
                return
            if self._counter.binary:
                self._grep_off = True  # binary output has no failure lines to list
                return
            begin = self._grep_start(limit)
            if begin is None:
                return
            try:
                self._grep = GrepStream(structured=self._structured)
            except OSError:  # no grep, or no process or thread for it: the Python scans
                self._grep_off = True
                return
            self._grep_from = begin
            self._grep.copy_from(self._fd, self._grep_from, self._bytes_written - self._grep_from)
            return
        # grep holds a whole line in memory: stop it on a giant line (the Python scans
        # take over, and the pointer says what they did not reach).
        self._line_run = self._line_run + length if newline < 0 else length - newline - 1
        if self._line_run > _GREP_MAX_LINE:
            self._grep.kill()
            self._grep, self._grep_off = None, True
            return
        self._grep.copy_from(self._fd, start, length)
        if self._grep.dense:
            # Most lines hold even a failure form: they are what this output is, not
            # failures among its lines. The search stops here (what it found stands), a
            # Python scan reads the last bytes, and the pointer says what neither reached.
            self._grep.stop()
            self._grep_off = True
        elif self._grep.failed:
            self._grep_off = True  # the Python scans take over (see _scan_with)

    def _grep_start(self, limit: int) -> int | None:
        """Where grep starts (feeder thread): the start of the line the Python scan's
        ``limit`` falls in, or, for a line that began more than ``_BOUNDARY_PROBE`` bytes
        before it, the end of that line, to which the Python scan then reads on (None: not
        yet known, or ``_grep_off`` is set). Each byte is read once, however small the
        chunks that bring the line's end."""
        if self._line_searched == 0:
            probe = min(_BOUNDARY_PROBE, limit)
            before = durable.current().pread(self._fd, probe, limit - probe)
            if len(before) < probe:
                self._grep_off = True
                return None
            newline = before.rfind(b"\n")
            if newline >= 0:
                return limit - probe + newline + 1
        # A long line at the limit (a JSON string of a package's whole README): the forward
        # scan reads on to its end, and grep starts after it.
        searched = self._line_searched
        after = durable.current().pread(
            self._fd, min(self._bytes_written - limit, _LONG_LINE_READ) - searched, limit + searched
        )
        newline = after.find(b"\n")
        if newline < 0:
            # A giant line: the scan note covers it (or its end is still to come).
            self._line_searched = searched + len(after)
            self._grep_off = self._line_searched >= _LONG_LINE_READ
            return None
        start = limit + searched + newline + 1
        if start > self._scan_limit:
            self._grep_off = True  # past where the Python scan may read
            return None
        self._grep_limit = start  # (the writer's scan in memory stops at the old one)
        return start

    def _forward_scan(self, pos: int, limit: int) -> int:
        """Feed the forward scanner the file's bytes from ``pos`` up to ``limit``."""
        total = self._counter.size
        while pos < total and pos < limit:
            block = durable.current().pread(self._fd, min(_READ_BACK, limit - pos), pos)
            if not block:
                break
            self._scanner.feed(block)
            pos += len(block)
        return pos

    def _scan(self) -> int | None:
        """Find failure lines: a Python scan forward up to the scan limit, then grep's
        results for the rest, or (without them) a Python scan of the last ``tail_scan``
        bytes. Returns where that last scan began (None: no such scan)."""
        grep, self._grep = self._grep, None
        try:
            return self._scan_with(grep)
        except BaseException:
            if grep is not None:
                grep.kill()  # never leave a grep process or its reader thread behind
            raise

    def _scan_with(self, grep: GrepStream | None) -> int | None:
        scanner, counter = self._scanner, self._counter
        total = counter.size
        if counter.binary:
            if grep is not None:
                grep.kill()
            self._count_uncounted(None)
            return scanner.finish(binary=True, total=total, newlines=counter.newlines)
        pos = self._forward_scan(
            self._scanned, self._grep_limit if grep is not None else self._scan_limit
        )
        tail_scan = self._tail_scan
        if grep is None:
            self._count_uncounted(None)
        else:
            found = grep.finish()
            self._count_uncounted(grep)
            if found is not None and self._grep_from == scanner.lines_end:
                scanner.add_middle(found, newlines_before=scanner.newlines, offset=self._grep_from)
                if grep.stopped_at is None:
                    self._middle_scanned = True
                    return scanner.finish(binary=False, total=total, newlines=counter.newlines)
                # The search stopped where nearly every line matched: the last bytes are
                # read in Python, as far as such lines can be read quickly.
                self._searched_to = pos = self._grep_from + grep.stopped_at
                tail_scan = min(tail_scan, _DENSE_TAIL)
            else:
                # grep failed: the Python scans do what they can without it.
                pos = self._forward_scan(pos, self._scan_limit)
        window = b""
        if pos < total and tail_scan:
            start = max(total - tail_scan, scanner.lines_end)
            if self._searched_to is not None:
                # From where the search stopped, and the byte before it: a line that starts
                # right there is whole (the scan skips a line it cannot see begin).
                tail_scan = min(tail_scan, total - self._searched_to)
                start = max(total - tail_scan - 1, 0)
            window = durable.current().pread(self._fd, total - start, start)
        return scanner.finish(
            binary=False,
            total=total,
            newlines=counter.newlines,
            window=window,
            tail_scan=tail_scan,
        )

    def _count_uncounted(self, grep: GrepStream | None) -> None:
        """Add the newlines of the bytes the counter left (``OutputCounter.uncounted``):
        those grep counted as it searched them, the rest read back from the file (or
        counted as they failed to reach it, ``_lose``).

        Raises:
            OSError: the file could not be read back.
        """
        counter = self._counter
        gap = counter.uncounted
        if gap is None:
            return
        start, end = gap[0], min(gap[1], self._drained)
        newlines = self._lost_newlines
        if start < end:
            counted = grep.counted() if grep is not None else None
            fd = self._fd

            def between(pos: int, stop: int) -> int:
                if self._closed:
                    raise OSError(errno.EBADF, "the temporary file is closed")
                return count_newlines(
                    lambda length, offset: durable.current().pread(fd, length, offset),
                    pos,
                    stop,
                    block=_READ_BACK,
                )

            if counted is not None and start <= counted[1] <= end:
                # grep began at a line boundary before the counter stopped counting, or
                # after it (past a long line at the Python scan's limit).
                lo, hi, newlines_grep = counted
                newlines += newlines_grep + between(hi, end)
                newlines += between(start, lo) if start <= lo else -between(lo, start)
            else:
                newlines += between(start, end)
        counter.settle(newlines)

    def finish(self) -> CaptureStats:
        """Flush and fsync the temporary file; return what was learned."""
        if self._worker is not None:
            self._queue.put(None)  # the worker writes what is queued, then fsyncs
        self._counter.finish()
        if self._worker is not None:
            self._written.wait()
        # Every byte is in the file: another process can outline it now, beside the rest.
        head = self._outline_head()
        outline = self._submit_outline(head) if self._structured else None
        if self._worker is not None:
            self._join_feeder()  # grep has every byte before the scan ends its input
        # The scan reads back what was just written (from the page cache) and holds the
        # GIL; the worker's fsync, running meanwhile, does not need it.
        tail_scan_start = self._scan() if self._error is None else None
        salient: tuple[SalientLine, ...] = ()
        if self._error is None and not self._counter.binary:
            fd = self._fd
            salient = self._scanner.salient_lines(
                lambda count, offset: durable.current().pread(fd, count, offset),
                self._counter.size,
                head_zone=self._zones[0],
                tail_zone=self._zones[1],
            )
        if outline is None:
            outline = self._start_outline(head)
        if self._worker is not None:
            self._worker.join()
            self._worker = None
            if self._error is not None:
                raise self._error
        elif self._error is None:
            try:
                durable.current().fsync(self._fd)
            except OSError as exc:
                self._error = exc  # (an outline reading the file stops)
                raise
        if self._error is not None:
            raise self._error
        # Closed once, even when close reports an error (the descriptor is gone anyway, and
        # a second close could close another file that reused its number).
        self._closed = True
        durable.current().close(self._fd)
        crash_point("capture.tmp_fsynced")
        scanner, counter = self._scanner, self._counter
        tail = bytes(self._tail[-self._tail_keep :]) if self._tail_keep else b""
        return CaptureStats(
            byte_size=counter.size,
            newline_count=counter.newlines,
            char_count=counter.chars,
            sha256=self._sha.hexdigest(),
            binary=counter.binary,
            head=bytes(self._head),
            tail=tail,
            ends_with_newline=self._ends_with_newline,
            salient=salient,
            scanned_bytes=self._scanned_bytes(),
            tail_scan_start=None if self._middle_scanned else tail_scan_start,
            outline_source=outline,
            unlisted=scanner.unlisted,
        )

    def _scanned_bytes(self) -> int:
        """How many leading bytes the failure-line searches covered without a gap."""
        scanner, counter = self._scanner, self._counter
        if counter.binary:
            return 0  # binary output is not scanned for failure lines
        if scanner.scanned >= counter.size or self._middle_scanned:
            return counter.size
        if self._searched_to is not None:
            return self._searched_to
        return scanner.lines_end

    def _outline_head(self) -> bytes | None:
        """The head to outline the written file from, or None: no outline (it is off, the
        output failed, is binary, or its head reads as text)."""
        if self._inspect is None or self._error is not None or self._counter.binary:
            return None
        from .structured import sniff  # the head alone turns text away, with no thread

        head = bytes(self._head)
        try:
            kind = sniff(head, complete=len(head) >= self._counter.size)
        except Exception:  # an outline is a convenience: a surprise never costs the output
            return None
        return None if kind is None else head

    def _submit_outline(self, head: bytes | None) -> Callable[[], str] | None:
        """Hand the outline (of ``head``, ``_outline_head``'s) to the outliner, if there is
        one and it can take it now; return what waits for it."""
        if self._outliner is None or head is None:
            return None
        try:
            waiter = self._outliner.submit(head, self._fd, self._counter.size)
        except Exception:  # (as on the thread: the capture goes on, outlined there)
            return None
        # Its text is asked for more than once (``CaptureStats.outline``): it is had once.
        return None if waiter is None else functools.cache(waiter)

    def _start_outline(self, head: bytes | None) -> Callable[[], str] | None:
        """Start outlining the written file (of ``head``, ``_outline_head``'s) on a thread;
        return what waits for it. It runs beside the fsync and the artifact's record, after
        the failure-line scan: a thread started earlier held the GIL the scan needed, and
        each made the other wait."""
        if head is None or self._error is not None:
            return None
        assert self._inspect is not None
        inspect, size = self._inspect, self._counter.size
        # Its own descriptor: the capture closes its one (and renames the file) meanwhile.
        try:
            fd = os.dup(self._fd)
        except OSError:  # no descriptor left (EMFILE): no outline, the capture goes on
            return None
        found: list[str] = [""]

        def read(count: int, offset: int) -> bytes:
            if self._error is not None:
                # The capture failed (its fsync) and its outline is not wanted: stop
                # reading now (the descriptor keeps a file that may fill the disk).
                raise OSError("the output could not be written")
            return os.pread(fd, count, offset)

        def run() -> None:
            try:
                found[0] = inspect(head, read, size)
            except Exception:
                found[0] = ""  # an outline is a convenience: a surprise never costs output
            finally:
                self._outline_fd = -1  # (before the close: a fork between them skips it)
                os.close(fd)

        self._outline_fd = fd
        try:
            thread = start_helper_thread(run, "toolswap-outline")
        except RuntimeError:  # no thread can be started: no outline, the capture goes on
            self._outline_fd = -1
            os.close(fd)
            return None

        outliner = self._outliner if self._structured else None

        def result() -> str:
            thread.join()
            if outliner is not None:
                # Started once this outline is done (it would compete with this capture
                # for the cores): the outlines to come run there.
                outliner.warm()
            return found[0]

        return result

    def _forked(self) -> None:
        """In a forked child: the capture is its parent's. Its copies of the temporary
        file's descriptors are closed: held there, they kept the file's blocks after the
        artifact was collected, for as long as the child lived (a pool's worker: hours). A
        child that goes on with it gets a failed capture (EBADF: head, tail and counts, as
        after a write error), which never writes, links or unlinks its parent's file.

        Each descriptor is marked closed before the parent closes it, and marked open only
        once it is: one marked open at the fork was open then, its number this file's.
        """
        for fd in (-1 if self._closed else self._fd, self._outline_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._outline_fd = -1
        self._closed = self._tmp_unlinked = True
        self._error = OSError(errno.EBADF, "the capture belongs to the process that forked")
        # Its threads are not in this process, and their locks may be held for good.
        self._worker = self._feeder = self._grep = None
        self._queue = queue.Queue(_QUEUE_DEPTH)
        self._written = threading.Event()
        self._written.set()
        self._lag_changed = threading.Condition()
        self._feed = queue.SimpleQueue()

    def partial_stats(self) -> CaptureStats:
        """What is known of an output whose file could not be written: sizes, head, tail
        (no digest, no failure lines)."""
        counter = self._counter
        counter.finish()
        grep, self._grep = self._grep, None
        if grep is not None:
            # It was fed what was written before the error (then nothing more): its count
            # spares reading all of that back, from a disk that may have just failed.
            try:
                grep.finish()
            except BaseException:
                grep.kill()
                raise
        lines_known = True
        try:
            self._count_uncounted(grep)
        except OSError:
            lines_known = False  # what was written cannot be read back: say so
        tail = bytes(self._tail[-self._tail_keep :]) if self._tail_keep else b""
        return CaptureStats(
            byte_size=counter.size,
            newline_count=counter.newlines,
            lines_known=lines_known,
            char_count=counter.chars,
            sha256="",
            binary=counter.binary,
            head=bytes(self._head),
            tail=tail,
            ends_with_newline=self._ends_with_newline,
            salient=(),
            scanned_bytes=0,
        )

    @property
    def dir_fd(self) -> int:
        """The descriptor of the directory the capture is written in."""
        return self._dir_fd

    def link_as(self, final_name: str) -> bool:
        """Hard-link the finished file to ``final_name``; False if that name is taken.

        The temporary name is unlinked before the directory fsync, so both changes are
        durable together and the inode's link count (and so its ctime) never changes once
        the caller records the artifact: a reader that verified the file sees it unchanged.
        """
        if not durable.link_new(self.tmp_name, final_name, dir_fd=self._dir_fd):
            return False
        crash_point("capture.linked")
        self._unlink_tmp()
        durable.current().fsync(self._dir_fd)
        crash_point("capture.dir_fsynced")
        return True

    def discard(self) -> None:
        """Remove the temporary name (the final name, if linked, stays).

        It runs while another error may propagate, so an I/O error here (a dead disk) is
        not raised: a temporary file left behind is reported by ``verify`` and removed by
        cleanup.
        """
        if not self._closed:
            with self._lag_changed:
                self._abandoned = True  # grep is killed below: feed it nothing more
                self._lag_changed.notify_all()
            if self._worker is not None:
                self._queue.put(None)
                self._worker.join()
                self._worker = None
            self._join_feeder()
            if self._grep is not None:
                self._grep.kill()
                self._grep = None
            self._closed = True
            with contextlib.suppress(OSError):
                durable.current().close(self._fd)
        with contextlib.suppress(OSError):
            self._unlink_tmp()

    def _unlink_tmp(self) -> None:
        if self._tmp_unlinked:
            return
        with contextlib.suppress(FileNotFoundError):
            durable.current().unlink(self.tmp_name, dir_fd=self._dir_fd)
        self._tmp_unlinked = True
        crash_point("capture.tmp_unlinked")
