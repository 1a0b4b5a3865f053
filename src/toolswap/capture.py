"""Streaming spill: write output to a temporary file while hashing, counting and keeping
the head, the tail and failure-looking lines; then publish it under a final name.

Memory stays bounded whatever the output size: the head, a tail buffer, a few dozen
salient lines and a small queue of chunks in flight. Hashing and writing run on a worker
thread (both release the GIL), while the calling thread reads and scans the next chunk.

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
from .crashpoints import crash_point

__all__ = ["TMP_PREFIX", "CaptureStats", "SalientLine", "StreamCapture", "detect_media_type"]

TMP_PREFIX = ".tmp-"
TMP_SUFFIX = ".partial"
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
_QUEUE_DEPTH = 8

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

    @property
    def line_count(self) -> int:
        if self.byte_size == 0:
            return 0
        ends_with_newline = self.tail.endswith(b"\n")
        return self.newline_count + (0 if ends_with_newline else 1)

    @property
    def tail_offset(self) -> int:
        return self.byte_size - len(self.tail)


class _Scanner:
    """Counts lines and characters, validates UTF-8 and finds failure-looking lines."""

    def __init__(self, scan_limit: int, *, head_skip: int = 0, tail_keep: int = 0) -> None:
        # Lines that end within the first ``head_skip`` bytes are shown whole by the head
        # preview, so they never take a salient slot.
        self._head_skip = head_skip
        self._tail_keep = tail_keep
        self.newlines = 0
        self.chars = 0
        self.size = 0
        self.binary = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._scan_limit = scan_limit
        self.scanned = 0
        self._carry = b""
        self.first: list[SalientLine] = []
        self.last: deque[SalientLine] = deque(maxlen=_SALIENT_LAST)
        # Hits that may still end up inside the tail preview, with their byte offsets.
        self._recent: deque[tuple[int, SalientLine]] = deque()

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
        if self.scanned == self.size and self.size < self._scan_limit and not self.binary:
            self._scan(chunk)
        self.newlines += chunk.count(b"\n")
        self.size += len(chunk)
        horizon = self.size - self._tail_keep
        recent = self._recent
        while recent and (recent[0][0] < horizon or len(recent) > 4 * _SALIENT_LAST):
            self.last.append(recent.popleft()[1])

    def finish(self) -> None:
        if not self.binary:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self.binary = True
        if self.binary:
            self.chars = self.size
            self.first.clear()
            self.last.clear()
            self._recent.clear()
        else:
            if self._carry and self.scanned == self.size:
                self._scan_lines(self._carry + b"\n", self.newlines, self.size - len(self._carry))
            # Hits still in ``_recent`` lie in the last ``tail_keep`` bytes. They are kept: the
            # pointer may show less tail than that (its 32 KiB budget shrinks the tail when
            # there are salient lines) and filters by line number what the tail does show.

    def salient_lines(self) -> list[SalientLine]:
        """First, last and recent hits, in line order, each line once."""
        seen: set[int] = set()
        out: list[SalientLine] = []
        for line in [*self.first, *self.last, *(line for _, line in self._recent)]:
            if line.line_no not in seen:
                seen.add(line.line_no)
                out.append(line)
        return sorted(out, key=lambda line: line.line_no)

    def _scan(self, chunk: bytes) -> None:
        data_offset = self.size - len(self._carry)
        data = self._carry + chunk if self._carry else chunk
        cut = data.rfind(b"\n") + 1
        complete = data[:cut]
        if complete:
            self._scan_lines(complete, self.newlines, data_offset)
        rest = data[cut:]
        if len(rest) > _CARRY_MAX:
            # A giant line: keep its start for display, drop the middle of it.
            rest = rest[:_CARRY_MAX]
        self._carry = rest
        self.scanned = self.size + len(chunk)

    def _scan_lines(self, data: bytes, newlines_before: int, data_offset: int) -> None:
        lower = data.lower()
        need_first = len(self.first) < _SALIENT_FIRST
        begin = 0
        if data_offset < self._head_skip:
            # Start at the first line that does not end inside the head preview.
            begin = data.rfind(b"\n", 0, self._head_skip - data_offset) + 1
            if begin >= len(lower):
                return
        # Where the tail preview would start if the output ended with this data.
        tail_edge = max(begin, len(lower) - self._tail_keep)
        hits: set[int] = set()
        for keyword in SALIENT_KEYWORDS:
            if need_first:
                pos = lower.find(keyword, begin)
                count = 0
                while pos >= 0 and count < _SALIENT_FIRST:
                    hits.add(lower.rfind(b"\n", 0, pos) + 1)
                    pos = lower.find(b"\n", pos)
                    if pos < 0:
                        break
                    pos = lower.find(keyword, pos)
                    count += 1
            for end in (len(lower), tail_edge):
                for _ in range(_SALIENT_LAST):
                    pos = lower.rfind(keyword, begin, end)
                    if pos < 0:
                        break
                    start = lower.rfind(b"\n", 0, pos) + 1
                    hits.add(start)
                    end = start
        if not hits:
            return
        counted_to = 0
        line_no = newlines_before + 1
        for start in sorted(hits):
            line_no += data.count(b"\n", counted_to, start)
            counted_to = start
            stop = data.find(b"\n", start)
            raw = data[start : stop if stop >= 0 else len(data)]
            text = raw[: SALIENT_LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r")
            if len(text) > SALIENT_LINE_CHARS:
                text = text[: SALIENT_LINE_CHARS - 1] + "…"
            line = SalientLine(line_no=line_no, text=text)
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
    """

    def __init__(
        self,
        dir_fd: int,
        *,
        head_keep: int,
        head_shown: int | None = None,
        tail_keep: int,
        scan_limit: int,
    ) -> None:
        self._dir_fd = dir_fd
        self.tmp_name = f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}{TMP_SUFFIX}"
        self._fd = os.open(
            self.tmp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
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
        self._sha = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(_QUEUE_DEPTH)
        self._error: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._closed = False

    def _drain(self) -> None:
        try:
            while True:
                chunk = self._queue.get()
                if chunk is None:
                    return
                self._sha.update(chunk)
                write_all(self._fd, chunk)
        except BaseException as exc:  # handed to the caller thread in finish()
            self._error = exc
            while self._queue.get() is not None:
                pass

    def write(self, chunk: bytes) -> None:
        """Add ``chunk`` to the output."""
        if not chunk:
            return
        if len(self._head) < self._head_keep:
            self._head += chunk[: self._head_keep - len(self._head)]
        if len(chunk) >= self._tail_keep:
            self._tail = bytearray(chunk[-self._tail_keep :])
        else:
            self._tail += chunk
            if len(self._tail) > 2 * self._tail_keep:
                del self._tail[: len(self._tail) - self._tail_keep]
        self._scanner.feed(chunk)
        if len(chunk) < 65536 and self._worker is None:
            # Small outputs are hashed and written inline: a thread is not worth it.
            self._sha.update(chunk)
            write_all(self._fd, chunk)
            return
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._drain, name="toolswap-capture", daemon=True
            )
            self._worker.start()
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def finish(self) -> CaptureStats:
        """Flush and fsync the temporary file; return what was learned."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
            if self._error is not None:
                raise self._error
        os.fsync(self._fd)
        os.close(self._fd)
        self._closed = True
        crash_point("capture.tmp_fsynced")
        scanner = self._scanner
        scanner.finish()
        salient = scanner.salient_lines()
        tail = bytes(self._tail[-self._tail_keep :]) if self._tail_keep else b""
        return CaptureStats(
            byte_size=scanner.size,
            newline_count=scanner.newlines,
            char_count=scanner.chars,
            sha256=self._sha.hexdigest(),
            binary=scanner.binary,
            head=bytes(self._head),
            tail=tail,
            salient=tuple(salient),
            scanned_bytes=min(scanner.scanned, scanner.size),
        )

    def link_as(self, final_name: str) -> bool:
        """Hard-link the finished file to ``final_name``; False if that name is taken."""
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
            os.close(self._fd)
            self._closed = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp_name, dir_fd=self._dir_fd)
        crash_point("capture.tmp_unlinked")
