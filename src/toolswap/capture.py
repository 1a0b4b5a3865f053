"""Streaming spill: write output to a temporary file while hashing and counting it,
keeping the head and the tail; then find failure-looking lines and publish the file under
a final name.

Memory stays bounded whatever the output size: the head, a tail buffer, a few dozen
salient lines and a small queue of chunks in flight. Hashing and writing run on a worker
thread (both release the GIL) while the calling thread reads and counts the next chunk.
The failure-line scan, which holds the GIL and is slower than hashing, runs at the end over
the first and the last bytes of the file (read back from the page cache) while the worker
fsyncs, so it overlaps the one step that no capture can skip.

Publishing never overwrites: the temporary file is fsynced, hard-linked to the final name
(``link`` fails if the name exists), and the directory is fsynced. A crash at any point
leaves either no final name or a complete one.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import os
import queue
import secrets
import threading
from collections import deque
from dataclasses import dataclass

from ._fs import write_all
from ._middle_scan import GrepStream
from ._threads import start_helper_thread
from .artifact import TMP_PREFIX, temporary_filename
from .crashpoints import crash_point

__all__ = ["TMP_PREFIX", "CaptureStats", "SalientLine", "StreamCapture", "detect_media_type"]

SALIENT_KEYWORDS: tuple[bytes, ...] = (
    b"error",
    b"exception",
    b"traceback",
    b"fail",
    b"fatal",
    b"panic",
    b"assert",
    b"segmentation fault",
    b"abort",
)
SALIENT_LINE_CHARS = 240
_SALIENT_FIRST = 24
_SALIENT_LAST = 24
_CARRY_MAX = 4096
_QUEUE_DEPTH = 4
_SCAN_PIECE = 256 << 10
_READ_BACK = 1 << 20
_BOUNDARY_PROBE = 64 << 10
# Where grep takes over from the Python scan (GNU grep searches about 5x faster).
_GREP_HANDOFF = 1 << 20
# A line longer than this stops grep (which would hold all of it in memory).
_GREP_MAX_LINE = 8 << 20
# ASCII lowercase as a translate table (bytes.translate is about twice as fast as lower()).
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")

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
class SalientLine:
    """A line that looks like a failure, with its 1-based line number."""

    line_no: int
    text: str


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

    @property
    def line_count(self) -> int:
        if self.byte_size == 0:
            return 0
        ends_with_newline = self.tail.endswith(b"\n")
        return self.newline_count + (0 if ends_with_newline else 1)

    @property
    def tail_offset(self) -> int:
        return self.byte_size - len(self.tail)


class _Counter:
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


def _display(raw: bytes) -> str:
    """A failure line as the pointer shows it: decoded, at most SALIENT_LINE_CHARS long."""
    text = raw[: SALIENT_LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r")
    if len(text) > SALIENT_LINE_CHARS:
        text = text[: SALIENT_LINE_CHARS - 1] + "…"
    return text


class _Scanner:
    """Finds failure-looking lines: forward from the start, then in the last bytes."""

    def __init__(self, scan_limit: int, *, head_skip: int = 0, tail_keep: int = 0) -> None:
        # Lines that end within the first ``head_skip`` bytes are shown whole by the head
        # preview, so they never take a salient slot.
        self._head_skip = head_skip
        self._tail_keep = tail_keep
        self.size = 0
        # Newlines before ``scanned`` (counted here only while the forward scan runs).
        self.newlines = 0
        self._scan_limit = scan_limit
        self.scanned = 0
        self._carry = b""
        # Offset just past the last newline the forward scan reached.
        self.lines_end = 0
        self.first: list[SalientLine] = []
        self.last: deque[SalientLine] = deque(maxlen=_SALIENT_LAST)
        # Hits that may still end up inside the tail preview, with their byte offsets.
        self._recent: deque[tuple[int, SalientLine]] = deque()
        # Hits past the forward scan, found by grep.
        self.middle: list[SalientLine] = []

    def feed(self, chunk: bytes) -> None:
        if self.scanned == self.size and self.size < self._scan_limit:
            self._scan(chunk)
            self.newlines += chunk.count(b"\n")
        self.size += len(chunk)
        horizon = self.size - self._tail_keep
        recent = self._recent
        while recent and (recent[0][0] < horizon or len(recent) > 4 * _SALIENT_LAST):
            self.last.append(recent.popleft()[1])

    def finish(self, counter: _Counter, window: bytes = b"", tail_scan: int = 0) -> int | None:
        """Scan what is left, once the forward scan has been fed and ``counter`` has seen
        every byte.

        ``window`` holds the output's last bytes (at least ``tail_scan`` of them, or all
        that follow the forward scan), scanned when the forward scan stopped before the end.

        Returns:
            Where the scan of ``window`` began, or None when there was no such scan.
        """
        tail_start: int | None = None
        total = counter.size
        if counter.binary:
            self.first.clear()
            self.last.clear()
            self._recent.clear()
        elif self.scanned >= total:
            if self._carry:
                self._scan_lines(self._carry + b"\n", self.newlines, total - len(self._carry))
        elif window:
            tail_start = self._scan_window(window, tail_scan, counter.newlines, total)
        # Hits still in ``_recent`` lie in the last ``tail_keep`` bytes. They are kept: the
        # pointer may show less tail than that (its 32 KiB budget shrinks the tail when
        # there are salient lines) and filters by line number what the tail does show.
        return tail_start

    def _scan_window(self, window: bytes, tail_scan: int, newlines: int, total: int) -> int:
        """Scan the lines in the last ``tail_scan`` bytes that the forward scan did not reach.

        ``window`` holds at least those bytes: it ends where the output ends.
        """
        start = total - len(window)
        begin = max(self.lines_end, total - tail_scan, start)
        rel = begin - start
        if begin > self.lines_end and not (rel > 0 and window[rel - 1] == 0x0A):
            # Start at the first whole line (the window's first byte may be mid-line).
            newline = window.find(b"\n", rel)
            if newline < 0:
                return total  # one partial line fills the window: nothing to scan
            rel = newline + 1
        if rel >= len(window):
            return total
        # The last line may lack its newline; _scan_lines takes it as it is.
        self._scan_lines(window, newlines - window.count(b"\n"), start, skip=rel)
        return start + rel

    def add_middle(
        self, found: list[tuple[int, bytes]], newlines_before: int, tail_first: int
    ) -> None:
        """Take grep's hits past the forward scan (numbers counted from its first line).

        Kept: the first hits, the last ones before the tail preview (``tail_first`` is
        its first line) and the last ones overall (the pointer may shrink its tail).
        """
        lines = [
            SalientLine(line_no=newlines_before + number, text=_display(raw))
            for number, raw in found
        ]
        before_tail = [line for line in lines if line.line_no < tail_first]
        keep = {
            line.line_no: line
            for line in [
                *lines[:_SALIENT_FIRST],
                *before_tail[-_SALIENT_LAST:],
                *lines[-_SALIENT_LAST:],
            ]
        }
        self.middle = sorted(keep.values(), key=lambda line: line.line_no)

    def salient_lines(self) -> list[SalientLine]:
        """First, last, grep's and recent hits, in line order, each line once."""
        seen: set[int] = set()
        out: list[SalientLine] = []
        for line in [
            *self.first,
            *self.middle,
            *self.last,
            *(line for _, line in self._recent),
        ]:
            if line.line_no not in seen:
                seen.add(line.line_no)
                out.append(line)
        return sorted(out, key=lambda line: line.line_no)

    def _scan(self, chunk: bytes) -> None:
        data_offset = self.size - len(self._carry)
        data = self._carry + chunk if self._carry else chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            # Scan in pieces of about _SCAN_PIECE bytes cut at newlines, so the lowercased
            # copy each piece needs stays small.
            newlines = self.newlines
            start = 0
            while start < cut:
                end = data.find(b"\n", min(start + _SCAN_PIECE, cut) - 1) + 1 or cut
                piece = data[start:end]
                self._scan_lines(piece, newlines, data_offset + start)
                newlines += piece.count(b"\n")
                start = end
            # The newline ending the scanned lines lies in ``chunk``, at ``self.size`` on.
            self.lines_end = self.size + cut - (len(data) - len(chunk))
        rest = data[cut:]
        if len(rest) > _CARRY_MAX:
            # A giant line: keep its start for display, drop the middle of it.
            rest = rest[:_CARRY_MAX]
        self._carry = rest
        self.scanned = self.size + len(chunk)

    def _scan_lines(
        self, data: bytes, newlines_before: int, data_offset: int, *, skip: int = 0
    ) -> None:
        """Collect failure lines from ``data`` (whole lines, from ``data[skip]`` on), which
        starts at byte ``data_offset`` of the output after ``newlines_before`` newlines."""
        lower = data.translate(_LOWER)
        need_first = len(self.first) < _SALIENT_FIRST
        begin = skip
        if data_offset + skip < self._head_skip:
            # Start at the first line that does not end inside the head preview.
            begin = max(skip, data.rfind(b"\n", 0, self._head_skip - data_offset) + 1)
            if begin >= len(lower):
                return
        # Where the tail preview would start if the output ended with this data.
        tail_edge = max(begin, len(lower) - self._tail_keep)
        hits: set[int] = set()
        for keyword in SALIENT_KEYWORDS:
            pos = lower.find(keyword, begin)
            if pos < 0:
                continue  # absent from this data: one pass, and done
            if need_first:
                count = 0
                while pos >= 0 and count < _SALIENT_FIRST:
                    hits.add(lower.rfind(b"\n", 0, pos) + 1)
                    pos = lower.find(b"\n", pos)
                    if pos < 0:
                        break
                    pos = lower.find(keyword, pos)
                    count += 1
            end = len(lower)
            for _ in range(_SALIENT_LAST):
                pos = lower.rfind(keyword, begin, end)
                if pos < 0:
                    break
                end = lower.rfind(b"\n", 0, pos) + 1
                hits.add(end)
            else:
                # All of the last hits may sit where the tail preview will show them; also
                # keep the last ones before it.
                end = min(end, tail_edge)
                for _ in range(_SALIENT_LAST):
                    pos = lower.rfind(keyword, begin, end)
                    if pos < 0:
                        break
                    end = lower.rfind(b"\n", 0, pos) + 1
                    hits.add(end)
        if not hits:
            return
        counted_to = 0
        line_no = newlines_before + 1
        for start in sorted(hits):
            line_no += data.count(b"\n", counted_to, start)
            counted_to = start
            stop = data.find(b"\n", start)
            raw = data[start : stop if stop >= 0 else len(data)]
            line = SalientLine(line_no=line_no, text=_display(raw))
            if len(self.first) < _SALIENT_FIRST:
                self.first.append(line)
            else:
                self._recent.append((data_offset + start, line))


class StreamCapture:
    """Writes one output to a temporary file in an open ``tool-results`` directory.

    Args:
        dir_fd: the open ``tool-results`` directory.
        head_keep: bytes of the head to keep for the preview.
        head_shown: bytes the pointer's head preview shows; failure lines that end inside
            them are not collected again (default: collect from the first byte).
        tail_keep: bytes of the tail to keep for the preview.
        scan_limit: how far into the output the failure-line scan reads.
        tail_scan: when the output is longer than ``scan_limit``, how many of its last
            bytes are also scanned for failure lines.
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
    ) -> None:
        self._dir_fd = dir_fd
        self.tmp_name = temporary_filename(os.getpid(), secrets.token_hex(8))
        self._error: BaseException | None = None
        """The first write error (a full disk, an I/O error): from then on the output is
        only counted and its head and tail kept, so the caller still gets a preview."""
        # Read-write: the failure-line scan reads the finished file back.
        try:
            self._fd = os.open(
                self.tmp_name,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            self._fd = -1
            self._error = exc
        crash_point("capture.tmp_created")
        self._head_keep = head_keep
        self._tail_keep = tail_keep
        self._head = bytearray()
        self._tail = bytearray()
        self._scanner = _Scanner(
            scan_limit,
            head_skip=0 if head_shown is None else min(head_shown, head_keep),
            tail_keep=tail_keep,
        )
        self._scan_limit = scan_limit
        # Past this, grep takes over from the Python scan (when it runs).
        self._grep_limit = min(scan_limit, _GREP_HANDOFF)
        self._tail_scan = tail_scan
        self._counter = _Counter()
        self._sha = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(_QUEUE_DEPTH)
        self._worker: threading.Thread | None = None
        self._written = threading.Event()
        self._closed = self._fd < 0
        self._tmp_unlinked = self._fd < 0
        self._middle_scanned = False
        self._bytes_written = 0
        self._grep: GrepStream | None = None
        self._grep_from = 0
        self._grep_off = False
        self._line_run = 0

    def _drain(self) -> None:
        ended = False
        try:
            while True:
                chunk = self._queue.get()
                if chunk is None:
                    ended = True
                    # fsync here, without the GIL, while the caller scans for failure lines.
                    self._written.set()
                    os.fsync(self._fd)
                    return
                self._sha.update(chunk)
                write_all(self._fd, chunk)
                self._feed_grep(chunk)
        except BaseException as exc:  # handed to the caller thread in finish()
            self._error = exc
            self._written.set()
            while not ended and self._queue.get() is not None:
                pass

    def write(self, chunk: bytes) -> None:
        """Add ``chunk`` to the output."""
        if not chunk:
            return
        chunk = bytes(chunk)  # the worker keeps it: it must not change
        if len(self._head) < self._head_keep:
            self._head += chunk[: self._head_keep - len(self._head)]
        if len(chunk) >= self._tail_keep:
            self._tail = bytearray(chunk[-self._tail_keep :] if self._tail_keep else b"")
        else:
            self._tail += chunk
            if len(self._tail) > 2 * self._tail_keep:
                del self._tail[: len(self._tail) - self._tail_keep]
        self._counter.feed(chunk)
        if self._error is not None:
            return  # nothing more reaches the disk; head, tail and counts still do
        if len(chunk) < 65536 and self._worker is None:
            # Small outputs are hashed and written inline: a thread is not worth it.
            self._sha.update(chunk)
            try:
                write_all(self._fd, chunk)
            except OSError as exc:
                self._error = exc
                return
            self._feed_grep(chunk)
            return
        if self._worker is None:
            self._worker = start_helper_thread(self._drain, "toolswap-capture")
        self._queue.put(chunk)

    def _feed_grep(self, chunk: bytes) -> None:
        """Hand what was just written past the Python scan's limit to grep (writer side).

        Starts grep when the output first passes the scan limit, at the line boundary the
        forward scan will stop at, so the two searches meet without a gap; grep then runs
        on the other core while the output keeps arriving.
        """
        start = self._bytes_written
        self._bytes_written += len(chunk)
        if self._grep_off:
            return
        if self._grep is None:
            limit = self._grep_limit
            if self._bytes_written <= limit or not self._tail_scan:
                return
            if self._counter.binary:
                self._grep_off = True  # binary output has no failure lines to list
                return
            probe = min(_BOUNDARY_PROBE, limit)
            before = os.pread(self._fd, probe, limit - probe)
            newline = before.rfind(b"\n")
            if newline < 0 or len(before) < probe:
                self._grep_off = True  # a giant line at the limit: the scan note covers it
                return
            try:
                self._grep = GrepStream(SALIENT_KEYWORDS, first=_SALIENT_FIRST)
            except OSError:
                self._grep_off = True
                return
            self._grep_from = limit - probe + newline + 1
            self._grep.copy_from(self._fd, self._grep_from, self._bytes_written - self._grep_from)
            return
        # grep holds a whole line in memory: stop it on a giant line (the Python scans
        # take over, and the pointer says what they did not reach).
        newline = chunk.rfind(b"\n")
        self._line_run = self._line_run + len(chunk) if newline < 0 else len(chunk) - newline - 1
        if self._line_run > _GREP_MAX_LINE:
            self._grep.kill()
            self._grep, self._grep_off = None, True
            return
        self._grep.copy_from(self._fd, start, len(chunk))

    def _forward_scan(self, pos: int, limit: int) -> int:
        """Feed the forward scanner the file's bytes from ``pos`` up to ``limit``."""
        total = self._counter.size
        while pos < total and pos < limit:
            block = os.pread(self._fd, min(_READ_BACK, limit - pos), pos)
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
            return scanner.finish(counter)
        pos = self._forward_scan(0, self._grep_limit if grep is not None else self._scan_limit)
        if grep is not None:
            found = grep.finish()
            if found is not None and self._grep_from == scanner.lines_end:
                shown_tail = self._tail[-self._tail_keep :] if self._tail_keep else b""
                tail_first = counter.newlines - shown_tail.count(b"\n") + 1
                scanner.add_middle(found, scanner.newlines, tail_first)
                self._middle_scanned = True
                return scanner.finish(counter)
            # grep failed: the Python scans do what they can without it.
            pos = self._forward_scan(pos, self._scan_limit)
        window = b""
        if pos < total and self._tail_scan:
            start = max(total - self._tail_scan, scanner.lines_end)
            window = os.pread(self._fd, total - start, start)
        return scanner.finish(counter, window, self._tail_scan)

    def finish(self) -> CaptureStats:
        """Flush and fsync the temporary file; return what was learned."""
        if self._worker is not None:
            self._queue.put(None)  # the worker writes what is queued, then fsyncs
            self._written.wait()
        self._counter.finish()
        # The scan reads back what was just written (from the page cache) and holds the
        # GIL; the worker's fsync, running meanwhile, does not need it.
        tail_scan_start = self._scan() if self._error is None else None
        if self._worker is not None:
            self._worker.join()
            self._worker = None
            if self._error is not None:
                raise self._error
        elif self._error is None:
            os.fsync(self._fd)
        if self._error is not None:
            raise self._error
        os.close(self._fd)
        self._closed = True
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
            salient=tuple(scanner.salient_lines()),
            scanned_bytes=(
                counter.size
                if scanner.scanned >= counter.size or self._middle_scanned
                else scanner.lines_end
            ),
            tail_scan_start=None if self._middle_scanned else tail_scan_start,
        )

    def partial_stats(self) -> CaptureStats:
        """What is known of an output whose file could not be written: sizes, head, tail
        (no digest, no failure lines)."""
        counter = self._counter
        counter.finish()
        tail = bytes(self._tail[-self._tail_keep :]) if self._tail_keep else b""
        return CaptureStats(
            byte_size=counter.size,
            newline_count=counter.newlines,
            char_count=counter.chars,
            sha256="",
            binary=counter.binary,
            head=bytes(self._head),
            tail=tail,
            salient=(),
            scanned_bytes=0,
        )

    def link_as(self, final_name: str) -> bool:
        """Hard-link the finished file to ``final_name``; False if that name is taken.

        The temporary name is unlinked before the directory fsync, so both changes are
        durable together and the inode's link count (and so its ctime) never changes once
        the caller records the artifact: a reader that verified the file sees it unchanged.
        """
        try:
            os.link(
                self.tmp_name,
                final_name,
                src_dir_fd=self._dir_fd,
                dst_dir_fd=self._dir_fd,
                follow_symlinks=False,
            )
        except FileExistsError:
            return False
        crash_point("capture.linked")
        self._unlink_tmp()
        os.fsync(self._dir_fd)
        crash_point("capture.dir_fsynced")
        return True

    def discard(self) -> None:
        """Remove the temporary name (the final name, if linked, stays)."""
        if not self._closed:
            if self._worker is not None:
                self._queue.put(None)
                self._worker.join()
                self._worker = None
            if self._grep is not None:
                self._grep.kill()
                self._grep = None
            os.close(self._fd)
            self._closed = True
        self._unlink_tmp()

    def _unlink_tmp(self) -> None:
        if self._tmp_unlinked:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp_name, dir_fd=self._dir_fd)
        self._tmp_unlinked = True
        crash_point("capture.tmp_unlinked")
