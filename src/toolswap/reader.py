"""Page faults: read lines, byte ranges and grep matches from an artifact, verified first.

The full SHA-256 is checked once per file identity (device, inode, size, mtime_ns,
ctime_ns) and again whenever the identity changes; nothing unverified is returned. The
verifying pass also builds a sparse line index (newline counts every 256 KiB), so a later
read seeks straight to its lines.

Files are opened relative to the session's ``tool-results`` directory descriptor, by a
name parsed from the source ID, never following a symlink.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import os
import queue
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from ._fs import open_dir_nofollow
from ._threads import start_helper_thread
from .artifact import ArtifactReference, parse_artifact_source_id
from .errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactReadError,
    SourceIdError,
)
from .manifest import Manifest
from .session import Session

__all__ = [
    "CONTINUATION_MARKER",
    "ArtifactReader",
    "ByteRange",
    "GrepMatch",
    "GrepResult",
    "LinePage",
]

CONTINUATION_MARKER = " ⟨line continues⟩"
_BLOCK = 1 << 20
_CHECKPOINT = 1 << 18
_MAX_PAGE_BYTES = 256 * 1024
_MAX_CONTEXT = 50


@dataclass(frozen=True, slots=True)
class LinePage:
    """Lines ``offset`` .. ``offset + len(lines) - 1`` (0-based, as ``str.split('\\n')``)."""

    source_id: str
    offset: int
    lines: tuple[str, ...]
    """The lines; a line longer than the width is split, each piece but the last ending in
    :data:`CONTINUATION_MARKER`, so one line may occupy several entries."""
    next_offset: int | None
    """Offset of the next unread line, or None at the end of the artifact."""
    total_lines: int
    """Number of lines as ``str.split('\\n')`` counts them."""
    continue_byte: int | None = None
    """When the page ended inside a very long line: the byte where it continues."""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "source_id": self.source_id,
            "offset": self.offset,
            "lines": list(self.lines),
            "next_offset": self.next_offset,
            "total_lines": self.total_lines,
            "continue_byte": self.continue_byte,
        }


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``start`` .. ``start + len(data)`` of an artifact."""

    source_id: str
    start: int
    data: bytes
    size: int
    """Size of the whole artifact."""

    @property
    def next_offset(self) -> int | None:
        end = self.start + len(self.data)
        return end if end < self.size else None

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def to_dict(self, *, encoding: str = "utf-8") -> dict[str, object]:
        import base64

        body = base64.b64encode(self.data).decode() if encoding == "base64" else self.text()
        return {
            "source_id": self.source_id,
            "start": self.start,
            "length": len(self.data),
            "size": self.size,
            "next_offset": self.next_offset,
            "encoding": encoding,
            "data": body,
        }


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line (1-based number) with its context lines."""

    line_no: int
    text: str
    before: tuple[tuple[int, str], ...] = ()
    after: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "line_no": self.line_no,
            "text": self.text,
            "before": [list(x) for x in self.before],
            "after": [list(x) for x in self.after],
        }


@dataclass(frozen=True, slots=True)
class GrepResult:
    source_id: str
    pattern: str
    matches: tuple[GrepMatch, ...]
    truncated: bool
    """True when ``max_matches`` stopped the search before the end."""

    def to_dict(self) -> dict[str, object]:
        return {
            "source_id": self.source_id,
            "pattern": self.pattern,
            "matches": [m.to_dict() for m in self.matches],
            "truncated": self.truncated,
        }

    def render(self) -> str:
        out: list[str] = []
        for match in self.matches:
            if match.before or match.after:
                out.extend(f"{no}-{text}" for no, text in match.before)
                out.append(f"{match.line_no}:{match.text}")
                out.extend(f"{no}-{text}" for no, text in match.after)
                out.append("--")
            else:
                out.append(f"{match.line_no}:{match.text}")
        if out and out[-1] == "--":
            out.pop()
        if self.truncated:
            out.append(f"(stopped after {len(self.matches)} matches; raise max_matches for more)")
        return "\n".join(out)


@dataclass(slots=True)
class _Verified:
    sha256: str
    size: int
    newlines: int
    checkpoints: list[int]
    """checkpoints[j] = newlines in bytes [0, j * _CHECKPOINT)."""


_Identity = tuple[int, int, int, int, int]
_VERIFIED: dict[_Identity, _Verified] = {}
_VERIFIED_GUARD = threading.Lock()
_VERIFIED_MAX = 4096


def _identity(st: os.stat_result) -> _Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember(key: _Identity, info: _Verified) -> None:
    with _VERIFIED_GUARD:
        if len(_VERIFIED) >= _VERIFIED_MAX:
            _VERIFIED.clear()
        _VERIFIED[key] = info


def _hash_and_index(fd: int, size: int) -> tuple[str, int, int, list[int]]:
    """One pass over the file: (sha256, bytes read, newlines, line-index checkpoints).

    Large files are hashed on a second thread (sha256 releases the GIL) while this one
    counts newlines, so the pass costs about what hashing alone costs.
    """
    sha = hashlib.sha256()
    blocks: queue.Queue[bytes | None] | None = None
    worker: threading.Thread | None = None
    if size > 4 * _BLOCK:
        blocks = queue.Queue(4)

        def drain() -> None:
            assert blocks is not None
            while (block := blocks.get()) is not None:
                sha.update(block)

        worker = start_helper_thread(drain, "toolswap-verify")
    checkpoints = [0]
    newlines = 0
    pos = 0
    try:
        while True:
            block = os.pread(fd, _BLOCK, pos)
            if not block:
                break
            if blocks is not None:
                blocks.put(block)
            else:
                sha.update(block)
            count = block.count
            for start in range(0, len(block), _CHECKPOINT):
                newlines += count(b"\n", start, start + _CHECKPOINT)
                if start + _CHECKPOINT <= len(block):
                    checkpoints.append(newlines)
            pos += len(block)
    finally:
        if blocks is not None and worker is not None:
            blocks.put(None)
            worker.join()
    return sha.hexdigest(), pos, newlines, checkpoints


def _clip_line(text: str, width: int) -> list[str]:
    if len(text) <= width:
        return [text]
    pieces = [text[i : i + width] for i in range(0, len(text), width)]
    return [p + CONTINUATION_MARKER for p in pieces[:-1]] + [pieces[-1]]


_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")


class _Found:
    __slots__ = ("_pos",)

    def __init__(self, pos: int) -> None:
        self._pos = pos

    def start(self) -> int:
        return self._pos


class _Literal:
    """A plain byte string, found with ``bytes.find`` (several times faster than ``re``)."""

    def __init__(self, needle: bytes) -> None:
        self.needle = needle

    def search(self, data: bytes, pos: int = 0) -> _Found | None:
        at = data.find(self.needle, pos)
        return _Found(at) if at >= 0 else None

    def finditer(self, data: bytes, pos: int = 0) -> Iterator[_Found]:
        needle = self.needle
        at = data.find(needle, pos)
        while at >= 0:
            yield _Found(at)
            # grep reports a line once: go on from the next line.
            newline = data.find(b"\n", at)
            if newline < 0:
                return
            at = data.find(needle, newline + 1)


class _OpenArtifact:
    """A verified, open artifact file."""

    def __init__(self, fd: int, source_id: str, info: _Verified, identity: _Identity) -> None:
        self.fd = fd
        self.source_id = source_id
        self.info = info
        self.identity = identity

    def check_unchanged(self) -> None:
        """Raise if the file changed after it was verified (bytes read may not be the output).

        A change of the ctime alone (a hard link made or removed, a chmod) leaves the bytes
        alone: the digest is checked again and, when it still matches, the read stands.
        """
        st = os.fstat(self.fd)
        now = _identity(st)
        if now == self.identity:
            return
        if now[:4] == self.identity[:4]:
            digest, size, _, _ = _hash_and_index(self.fd, st.st_size)
            if (digest, size) == (self.info.sha256, self.info.size) and _identity(
                os.fstat(self.fd)
            ) == now:
                self.identity = now
                _remember(now, self.info)
                return
        raise ArtifactIntegrityError(
            f"{self.source_id}: the file changed while it was being read; nothing was returned"
        )

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def line_start(self, index: int) -> int:
        """Byte offset where line ``index`` (0-based) starts."""
        if index == 0:
            return 0
        cps = self.info.checkpoints
        j = bisect.bisect_left(cps, index) - 1
        pos = j * _CHECKPOINT
        remaining = index - cps[j]
        while True:
            block = self.pread(_BLOCK, pos)
            if not block:
                raise ArtifactReadError(
                    f"line {index} is past the end of the artifact; read a smaller offset"
                )
            count = block.count(b"\n")
            if count >= remaining:
                at = -1
                for _ in range(remaining):
                    at = block.find(b"\n", at + 1)
                return pos + at + 1
            remaining -= count
            pos += len(block)


class ArtifactReader:
    """Reads a session's artifacts by source ID (or reference), verifying digests first."""

    def __init__(self, session: Session, manifest: Manifest | None = None) -> None:
        self.session = session
        self.manifest = manifest or Manifest.of(session)

    # -- resolving -------------------------------------------------------------------

    def reference(self, source: str | ArtifactReference) -> ArtifactReference:
        """The manifest's reference for a source ID (a reference passed in is re-checked)."""
        source_id = source.source_id if isinstance(source, ArtifactReference) else source
        try:
            parsed = parse_artifact_source_id(source_id)
        except SourceIdError as exc:
            raise ArtifactAccessError(str(exc)) from exc
        if parsed.session != self.session.session_id:
            raise ArtifactAccessError(
                f"{source_id} belongs to session {parsed.session!r}, not to this session "
                f"({self.session.session_id!r}); open that session to read it"
            )
        record = self.manifest.record_for(parsed.filename)
        if record is None or not record["sha256"].startswith(parsed.digest_prefix):
            collected = self.manifest.collected(parsed.filename)
            if collected is not None and collected.source_id in (None, source_id):
                raise ArtifactCollectedError(
                    f"{source_id} was collected by cleanup at {collected.collected_at} "
                    f"({collected.reason}); its output is gone: run the tool again if you "
                    "still need it"
                )
            lost = self.manifest.behind_head()
            raise ArtifactNotFoundError(
                f"no artifact {source_id} in session {self.session.session_id!r}; "
                + (
                    f"its record may be lost: {lost}"
                    if lost
                    else "list the session's artifacts with `toolswap ls`"
                )
            )
        ref = self.manifest.reference(record)
        if isinstance(source, ArtifactReference) and source.content_sha256 != ref.content_sha256:
            raise ArtifactIntegrityError(
                f"{source_id}: the reference's SHA-256 differs from the manifest's"
            )
        return ref

    def _open(self, ref: ArtifactReference, *, fresh: bool = False) -> _OpenArtifact:
        dir_fd = open_dir_nofollow(self.session.tool_results_dir)
        try:
            fd = os.open(
                ref.path.name,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                dir_fd=dir_fd,
            )
        except FileNotFoundError:
            raise ArtifactNotFoundError(
                f"{ref.source_id}: the file is missing from tool-results/ although the "
                "manifest records it; run `toolswap verify`"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ArtifactAccessError(f"{ref.source_id}: the artifact is a symlink") from None
            raise ArtifactAccessError(f"{ref.source_id}: cannot open ({exc.strerror})") from None
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ArtifactAccessError(f"{ref.source_id}: the artifact is not a regular file")
            if st.st_uid != os.geteuid():
                raise ArtifactAccessError(f"{ref.source_id}: the artifact is owned by another user")
            if fresh:
                with _VERIFIED_GUARD:
                    _VERIFIED.pop(_identity(st), None)
            info = self._verified(fd, st, ref)
        except BaseException:
            os.close(fd)
            raise
        return _OpenArtifact(fd, ref.source_id, info, _identity(st))

    def _verified(self, fd: int, st: os.stat_result, ref: ArtifactReference) -> _Verified:
        key = _identity(st)
        with _VERIFIED_GUARD:
            cached = _VERIFIED.get(key)
        if cached is not None:
            if cached.sha256 != ref.content_sha256:
                raise ArtifactIntegrityError(
                    f"{ref.source_id}: SHA-256 mismatch: the file is not the recorded output"
                )
            return cached
        digest, pos, newlines, checkpoints = _hash_and_index(fd, st.st_size)
        after = _identity(os.fstat(fd))
        if after != key and after[:4] == key[:4]:
            # Only the ctime moved (a link or mode change): hash once more under the new
            # identity rather than trust bytes hashed before it.
            key = after
            digest, pos, newlines, checkpoints = _hash_and_index(fd, st.st_size)
            after = _identity(os.fstat(fd))
        if after != key:
            raise ArtifactIntegrityError(f"{ref.source_id}: the file changed while being verified")
        if digest != ref.content_sha256 or pos != ref.byte_size:
            raise ArtifactIntegrityError(
                f"{ref.source_id}: SHA-256 mismatch: the file on disk is not the recorded "
                "output (changed or corrupt); nothing was returned"
            )
        info = _Verified(sha256=digest, size=pos, newlines=newlines, checkpoints=checkpoints)
        _remember(key, info)
        return info

    def verify(self, source: str | ArtifactReference) -> ArtifactReference:
        """Verify the artifact's full digest now, ignoring the cache."""
        ref = self.reference(source)
        art = self._open(ref, fresh=True)
        os.close(art.fd)
        return ref

    # -- reads -----------------------------------------------------------------------

    def read_lines(
        self,
        source: str | ArtifactReference,
        offset: int = 0,
        limit: int = 2000,
        *,
        width: int = 2000,
        max_bytes: int = _MAX_PAGE_BYTES,
    ) -> LinePage:
        """Lines ``offset`` .. ``offset + limit - 1`` (0-based) of a text artifact."""
        for name, value, low in (("offset", offset, 0), ("limit", limit, 1), ("width", width, 16)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ArtifactReadError(f"{name} must be an integer >= {low}, not {value!r}")
        ref = self.reference(source)
        if ref.binary:
            raise ArtifactReadError(
                f"{ref.source_id} is binary ({ref.media_type}); read it with read_bytes"
            )
        art = self._open(ref)
        try:
            total = art.info.newlines + 1
            if offset >= total:
                raise ArtifactReadError(
                    f"offset {offset} is past the end: {ref.source_id} has "
                    f"{ref.line_count} lines; read offsets 0-{max(ref.line_count - 1, 0)}"
                )
            pos = art.line_start(offset)
            lines: list[str] = []
            used = 0
            index = offset
            continue_byte: int | None = None
            for line_start, raw, complete in self._iter_lines(art, pos):
                text = raw.decode("utf-8", "replace")
                pieces = _clip_line(text, width)
                cost = sum(len(p.encode()) + 1 for p in pieces)
                if used + cost > max_bytes:
                    if lines:
                        break
                    # A single line larger than the page: give what fits, say where it goes on.
                    keep: list[str] = []
                    taken = 0
                    for piece in pieces:
                        if taken + len(piece.encode()) + 1 > max_bytes:
                            break
                        keep.append(piece)
                        taken += len(piece.encode()) + 1
                    if keep and not keep[-1].endswith(CONTINUATION_MARKER):
                        keep[-1] += CONTINUATION_MARKER
                    lines.extend(keep)
                    chars = sum(len(p.removesuffix(CONTINUATION_MARKER)) for p in keep)
                    continue_byte = line_start + len(text[:chars].encode())
                    break
                lines.extend(pieces)
                used += cost
                index += 1
                if index - offset >= limit or not complete:
                    break
            next_offset = index if index < total and continue_byte is None else None
            if continue_byte is not None:
                next_offset = index + 1 if index + 1 < total else None
            art.check_unchanged()
            return LinePage(
                source_id=ref.source_id,
                offset=offset,
                lines=tuple(lines),
                next_offset=next_offset,
                total_lines=total,
                continue_byte=continue_byte,
            )
        finally:
            os.close(art.fd)

    def _iter_lines(self, art: _OpenArtifact, pos: int) -> Iterator[tuple[int, bytes, bool]]:
        """Yield (start, line without newline, ended with newline) from ``pos`` on."""
        pending = b""
        pending_start = pos
        size = art.info.size
        while pos < size:
            block = art.pread(_BLOCK, pos)
            if not block:
                break
            pos += len(block)
            data = pending + block if pending else block
            start = 0
            while True:
                end = data.find(b"\n", start)
                if end < 0:
                    break
                yield pending_start + start, data[start:end], True
                start = end + 1
            pending_start += start
            pending = data[start:]
            if len(pending) > 4 * _MAX_PAGE_BYTES:
                # A giant line: nobody reads it whole through the line reader.
                yield pending_start, pending, True
                return
        yield pending_start, pending, False

    def read_artifact(
        self, source: str | ArtifactReference, offset: int = 0, limit: int = 2000
    ) -> str:
        """The spec's page fault: lines ``offset`` .. ``offset + limit`` joined by newlines."""
        return self.read_lines(source, offset, limit).text

    def read_bytes(
        self, source: str | ArtifactReference, start: int = 0, length: int = 65536
    ) -> ByteRange:
        """Bytes ``start`` .. ``start + length`` (clipped to the end of the artifact)."""
        for name, value, low in (("start", start, 0), ("length", length, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ArtifactReadError(f"{name} must be an integer >= {low}, not {value!r}")
        if length > 16 << 20:
            raise ArtifactReadError("length may be at most 16 MiB per read")
        ref = self.reference(source)
        art = self._open(ref)
        try:
            if start > art.info.size or (start == art.info.size and art.info.size > 0):
                raise ArtifactReadError(
                    f"start {start} is past the end: {ref.source_id} has {art.info.size} bytes"
                )
            data = art.pread(length, start)
            art.check_unchanged()
            return ByteRange(source_id=ref.source_id, start=start, data=data, size=art.info.size)
        finally:
            os.close(art.fd)

    def grep(
        self,
        source: str | ArtifactReference,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        ignore_case: bool = False,
        fixed: bool = False,
        width: int = 2000,
    ) -> GrepResult:
        """Lines matching a regular expression (Python syntax), with 1-based line numbers."""
        if not isinstance(pattern, str) or not pattern:
            raise ArtifactReadError("pattern must be a non-empty string")
        if not isinstance(context, int) or not 0 <= context <= _MAX_CONTEXT:
            raise ArtifactReadError(f"context must be an integer from 0 to {_MAX_CONTEXT}")
        if not isinstance(max_matches, int) or isinstance(max_matches, bool) or max_matches < 1:
            raise ArtifactReadError("max_matches must be a positive integer")
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        try:
            regex = re.compile(re.escape(pattern.encode()) if fixed else pattern.encode(), flags)
        except re.error as exc:
            raise ArtifactReadError(f"invalid pattern {pattern!r}: {exc}") from None
        searcher: re.Pattern[bytes] | _Literal = regex
        if not ignore_case and (fixed or _REGEX_SPECIAL.isdisjoint(pattern)):
            searcher = _Literal(pattern.encode())
        ref = self.reference(source)
        if ref.binary:
            raise ArtifactReadError(f"{ref.source_id} is binary; grep reads text artifacts")
        art = self._open(ref)
        try:
            matches, truncated = self._grep(art, searcher, context, max_matches, width)
            art.check_unchanged()
        finally:
            os.close(art.fd)
        return GrepResult(ref.source_id, pattern, tuple(matches), truncated)

    @staticmethod
    def _blocks(art: _OpenArtifact) -> Iterator[tuple[int, bytes]]:
        """(offset, block): line-aligned blocks of about 1 MiB; a line longer than 8 MiB
        is cut (its pieces keep their line number, as no newline lies between them)."""
        size = art.info.size
        pos = 0
        while pos < size:
            block = art.pread(_BLOCK, pos)
            if not block:
                break
            cut = block.rfind(b"\n") + 1
            if cut == 0 and pos + len(block) < size:
                block = art.pread(8 * _BLOCK, pos)  # a long line: read on to its end
                cut = block.rfind(b"\n") + 1 or len(block)
            if pos + len(block) >= size:
                yield pos, block
                return
            yield pos, block if cut == len(block) else block[:cut]
            pos += cut

    def _grep(
        self,
        art: _OpenArtifact,
        regex: re.Pattern[bytes] | _Literal,
        context: int,
        max_matches: int,
        width: int,
    ) -> tuple[list[GrepMatch], bool]:
        def show(raw: bytes) -> str:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            return text if len(text) <= width else text[:width] + CONTINUATION_MARKER

        def numbered(data: bytes, first_no: int, start: int, count: int) -> list[tuple[int, str]]:
            out: list[tuple[int, str]] = []
            while len(out) < count and start < len(data):
                end = data.find(b"\n", start)
                end = len(data) if end < 0 else end
                out.append((first_no + len(out), show(data[start:end])))
                start = end + 1
            return out

        def last_lines(data: bytes, last_no: int, count: int) -> list[tuple[int, str]]:
            """The last ``count`` lines of a block whose last line is number ``last_no``."""
            out: list[tuple[int, str]] = []
            end = len(data) - 1 if data.endswith(b"\n") else len(data)
            while len(out) < count and end >= 0 and data:
                start = data.rfind(b"\n", 0, end) + 1
                out.append((last_no - len(out), show(data[start:end])))
                end = start - 1
            out.reverse()
            return out

        checkpoints = art.info.checkpoints

        def lines_before(offset: int, data: bytes, pos: int) -> int:
            """Newlines before byte ``offset`` (in ``data``, the block at ``pos``), counted
            from the nearest line-index checkpoint rather than from the start."""
            cp = offset // _CHECKPOINT * _CHECKPOINT
            count = checkpoints[offset // _CHECKPOINT]
            if cp < pos:
                count += art.pread(pos - cp, cp).count(b"\n")
                cp = pos
            return count + data.count(b"\n", cp - pos, offset - pos)

        found: list[tuple[int, str, list[tuple[int, str]], list[tuple[int, str]]]] = []
        prev: bytes = b""
        last_shown = 0
        blocks = self._blocks(art)

        def first_match(data: bytes, pos: int) -> int:
            """Where the first match at or after ``pos`` starts, or -1."""
            found = regex.search(data, pos)
            # An empty match after a block's last newline is not on any line.
            if found is None or (found.start() == len(data) and data.endswith(b"\n")):
                return -1
            return found.start()

        def has_match(data: bytes, pos: int) -> bool:
            return first_match(data, pos) >= 0

        def continue_after(data: bytes, first_no: int) -> int:
            """Extend after-context that ran past the previous block; the last line shown."""
            shown = 0
            for entry in reversed(found):
                tail_after = entry[3]
                if len(tail_after) >= context:
                    break
                tail_after.extend(numbered(data, first_no, 0, context - len(tail_after)))
                if tail_after:
                    shown = max(shown, tail_after[-1][0])
            return shown

        for pos, data in blocks:
            pending_after = bool(context and found and len(found[-1][3]) < context)
            first = first_match(data, 0)
            if first < 0 and not pending_after:
                prev = data  # nothing here: its lines are never counted
                continue
            # Number of this block's first line, found only when context needs it.
            line_base = lines_before(pos, data, pos) + 1 if context else 0
            if pending_after:
                last_shown = max(last_shown, continue_after(data, line_base))
            counted_to = 0
            line_no = 0
            ends_at_newline = data.endswith(b"\n")
            # Matches are searched again from the first one (never from before it).
            for match in regex.finditer(data, max(first, 0)) if first >= 0 else ():
                if ends_at_newline and match.start() == len(data):
                    break  # an empty match after the last newline: no line is there
                start = data.rfind(b"\n", 0, match.start()) + 1
                if start < counted_to:
                    continue  # a second match on a line already reported
                if counted_to and start - counted_to < _CHECKPOINT:
                    line_no += data.count(b"\n", counted_to, start)
                else:
                    line_no = lines_before(pos + start, data, pos) + 1
                counted_to = start
                end = data.find(b"\n", start)
                end = len(data) if end < 0 else end
                before: list[tuple[int, str]] = []
                after: list[tuple[int, str]] = []
                if context:
                    b_end, b_no = start, line_no
                    while len(before) < context and b_end > 0:
                        b_start = data.rfind(b"\n", 0, b_end - 1) + 1
                        b_no -= 1
                        before.insert(0, (b_no, show(data[b_start : b_end - 1])))
                        b_end = b_start
                    if len(before) < context and line_base > 1:
                        # A block cut inside a huge line ends with a piece of this block's
                        # first line.
                        last_no = line_base - 1 if prev.endswith(b"\n") else line_base
                        before = last_lines(prev, last_no, context - len(before)) + before
                    before = [item for item in before if item[0] > last_shown]
                    after = numbered(data, line_no + 1, end + 1, context)
                found.append((line_no, show(data[start:end]), before, after))
                last_shown = after[-1][0] if after else line_no
                counted_to = min(end + 1, len(data))
                line_no += 1
                if len(found) >= max_matches:
                    truncated = has_match(data, counted_to)
                    for rest_pos, rest in blocks:
                        # Finish the last match's after-context, and look for one more match.
                        if context and len(found[-1][3]) < context:
                            continue_after(rest, lines_before(rest_pos, rest, rest_pos) + 1)
                        truncated = truncated or has_match(rest, 0)
                        if truncated and not (context and len(found[-1][3]) < context):
                            break
                    return self._build(found), truncated
            prev = data
        return self._build(found), False

    @staticmethod
    def _build(
        found: list[tuple[int, str, list[tuple[int, str]], list[tuple[int, str]]]],
    ) -> list[GrepMatch]:
        return [
            GrepMatch(no, text, tuple(before), tuple(after)) for no, text, before, after in found
        ]
