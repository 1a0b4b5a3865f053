"""Page faults: read lines and byte ranges of an artifact (and search it, through
:mod:`toolswap.grep`), verified first.

The full SHA-256 is checked once per file identity (device, inode, size, mtime_ns,
ctime_ns) and again whenever the identity changes; nothing unverified is returned. The
verifying pass also builds a sparse line index (newline counts every 256 KiB), so a later
read seeks straight to its lines.

Files are opened relative to the session's ``tool-results`` directory descriptor, by a
name parsed from the source ID, never following a symlink.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Unpack

from . import durable
from ._fork import renew_in_child
from ._invocation import cli_command
from ._json_form import JsonRecord
from ._keywords import refuse_unknown
from ._lines import iter_lines
from ._threads import start_helper_thread
from ._window import CONTINUATION_MARKER, clip_line
from .artifact import ArtifactReference, parse_artifact_source_id
from .durable import open_dir_nofollow
from .errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactReadError,
    SourceIdError,
)
from .grep import GrepMatch, GrepOptions, GrepQuery, GrepResult, search
from .manifest import Manifest
from .session import Session

__all__ = [
    "CONTINUATION_MARKER",
    "LIST_TIP",
    "ArtifactReader",
    "ByteRange",
    "GrepMatch",
    "GrepResult",
    "LinePage",
    "VerifiedArtifact",
    "list_tip",
]

_BLOCK = 1 << 20
_CHECKPOINT = 1 << 18
_MAX_PAGE_BYTES = 256 * 1024
_GIANT_LINE = 4 * _MAX_PAGE_BYTES


@dataclass(frozen=True, slots=True)
class LinePage(JsonRecord):
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


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``start`` .. ``start + len(data)`` of an artifact."""

    source_id: str
    start: int
    data: bytes
    size: int
    """Size of the whole artifact."""
    line_no: int = 1
    """The 1-based number of the line that byte ``start`` is in (for a text artifact)."""

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
            "line_no": self.line_no,
            "next_offset": self.next_offset,
            "encoding": encoding,
            "data": body,
        }


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
renew_in_child(globals(), "_VERIFIED_GUARD")  # (see _fork)
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
            block = durable.current().pread(fd, _BLOCK, pos)
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
        """``length`` bytes from ``offset`` (fewer only at the end of the file)."""
        try:
            data = durable.current().pread(self.fd, length, offset)
            while 0 < len(data) < length:  # a read may return less than asked (POSIX)
                block = durable.current().pread(self.fd, length - len(data), offset + len(data))
                if not block:
                    break
                data += block
            return data
        except OSError as exc:
            raise ArtifactAccessError(
                f"{self.source_id}: cannot read the artifact ({exc.strerror})"
            ) from exc

    def line_of(self, offset: int) -> int:
        """The 1-based number of the line that byte ``offset`` is in (newlines before it,
        counted from the nearest line-index checkpoint)."""
        j = offset // _CHECKPOINT
        base = j * _CHECKPOINT
        return self.info.checkpoints[j] + self.pread(offset - base, base).count(b"\n") + 1

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


LIST_TIP = "list the session's artifacts with `"
"""How :func:`list_tip` starts (a face with its own list call replaces the tip)."""


def list_tip() -> str:
    """What to run to see the session's artifacts, as this environment runs toolswap."""
    return f"{LIST_TIP}{cli_command()} ls`"


class VerifiedArtifact:
    """An artifact opened after its digest was checked against its record (see
    :meth:`ArtifactReader.open_verified`); valid inside the ``with`` block only."""

    __slots__ = ("_art", "reference")

    def __init__(self, art: _OpenArtifact, reference: ArtifactReference) -> None:
        self._art = art
        self.reference = reference

    @property
    def fd(self) -> int:
        """A read-only descriptor of the file (closed when the block ends); a child
        process may inherit it to read the verified bytes."""
        return self._art.fd

    @property
    def size(self) -> int:
        """The artifact's size in bytes (as verified)."""
        return self._art.info.size

    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes from ``offset``."""
        return self._art.pread(length, offset)

    def check_unchanged(self) -> None:
        """Raise :class:`~toolswap.errors.ArtifactIntegrityError` if the file changed after
        it was verified (then what was read may not be the recorded output)."""
        self._art.check_unchanged()


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
        # An artifact held here with its record is read without a request to its store.
        record = self.manifest.held_record(parsed.filename)
        if record is None or not record.sha256.startswith(parsed.digest_prefix):
            record = self.manifest.record_for(parsed.filename)
        if record is None:
            self.manifest.sync()  # perhaps written by another host since the last pull
            record = self.manifest.record_for(parsed.filename)
        if record is None or not record.sha256.startswith(parsed.digest_prefix):
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
                + (f"its record may be lost: {lost}" if lost else list_tip())
            )
        ref = self.manifest.reference(record)
        if isinstance(source, ArtifactReference) and source.content_sha256 != ref.content_sha256:
            raise ArtifactIntegrityError(
                f"{source_id}: the reference's SHA-256 differs from the manifest's"
            )
        return ref

    def _open(self, ref: ArtifactReference, *, fresh: bool = False) -> _OpenArtifact:
        try:
            return self._open_local(ref, fresh=fresh)
        except ArtifactNotFoundError:
            # Perhaps this host reads it for the first time (a session kept in a store): the
            # fetched copy is hashed and indexed once, before it is linked, and remembered
            # as verified. A local session has no other copy: the file is missing.
            verified: list[_Verified] = []
            backend = self.session.backend

            def check(fd: int) -> None:
                digest, size, newlines, checkpoints = _hash_and_index(fd, ref.byte_size)
                if digest != ref.content_sha256 or size != ref.byte_size:
                    raise ArtifactIntegrityError(
                        f"{ref.source_id}: the copy in {backend.location} is not the recorded "
                        f"output ({size} bytes, SHA-256 {digest[:12]}); it was not used"
                    )
                verified.append(_Verified(digest, size, newlines, checkpoints))

            try:
                linked = backend.fetch(
                    self.session.tool_results_dir, ref.path.name, ref.byte_size, check
                )
            except ArtifactNotFoundError as exc:
                raise ArtifactNotFoundError(f"{ref.source_id}: {exc}") from None
        if linked is not None:
            _remember(_identity(linked), verified[0])
        return self._open_local(ref, fresh=fresh)

    def _open_local(self, ref: ArtifactReference, *, fresh: bool) -> _OpenArtifact:
        dir_fd = open_dir_nofollow(self.session.tool_results_dir)
        try:
            fd, st = durable.open_trusted(
                ref.path.name, dir_fd=dir_fd, what=ref.source_id, error=ArtifactAccessError
            )
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"{ref.source_id}: the file is missing") from None
        finally:
            durable.close_unwritten(dir_fd)
        try:
            if fresh:
                with _VERIFIED_GUARD:
                    _VERIFIED.pop(_identity(st), None)
            info = self._verified(fd, st, ref)
        except OSError as exc:
            durable.close_unwritten(fd)
            raise ArtifactAccessError(
                f"{ref.source_id}: cannot read the artifact ({exc.strerror}); nothing was returned"
            ) from exc
        except BaseException:
            durable.close_unwritten(fd)
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

    @contextmanager
    def open_verified(self, source: str | ArtifactReference) -> Iterator[VerifiedArtifact]:
        """Open ``source`` once its SHA-256 matches its record (the cached verification of
        an unchanged file stands), for reads of its bytes inside the ``with`` block; the
        descriptor is closed when the block ends.

        Call :meth:`VerifiedArtifact.check_unchanged` after the reads whose result is
        returned: it is what makes them reads of the recorded output.
        """
        ref = self.reference(source)
        art = self._open(ref)
        try:
            yield VerifiedArtifact(art, ref)
        finally:
            durable.close_unwritten(art.fd)

    def verify(self, source: str | ArtifactReference) -> ArtifactReference:
        """Verify the artifact's full digest now, ignoring the cache."""
        ref = self.reference(source)
        art = self._open(ref, fresh=True)
        durable.close_unwritten(art.fd)
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
            # The empty string after a final newline is not a line: offsets end at
            # line_count - 1 (offset 0 of an empty artifact reads nothing).
            if offset >= total or (offset > 0 and offset >= ref.line_count):
                raise ArtifactReadError(
                    f"offset {offset} is past the end: {ref.source_id} has "
                    f"{ref.line_count} lines; read offsets 0-{max(ref.line_count - 1, 0)}"
                )
            pos = art.line_start(offset)
            lines: list[str] = []
            used = 0
            index = offset
            continue_byte: int | None = None
            # A giant line stops the walk: nobody reads it whole through the line reader.
            walk = iter_lines(art.pread, pos, art.info.size, block=_BLOCK, longest=_GIANT_LINE)
            for line_start, raw, complete in walk:
                text = raw.decode("utf-8", "replace")
                pieces = clip_line(text, width)
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
            # Only an offset that reads (below line_count) is a next offset: after the last
            # line, or inside it when it is longer than a page, there is none.
            after = index + 1 if continue_byte is not None else index
            next_offset = after if after < ref.line_count else None
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
            durable.close_unwritten(art.fd)

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
            line_no = art.line_of(start)
            art.check_unchanged()
            return ByteRange(
                source_id=ref.source_id,
                start=start,
                data=data,
                size=art.info.size,
                line_no=line_no,
            )
        finally:
            durable.close_unwritten(art.fd)

    def grep(
        self,
        source: str | ArtifactReference,
        pattern: str,
        *,
        cancel: threading.Event | None = None,
        **options: Unpack[GrepOptions],
    ) -> GrepResult:
        """Lines matching ``pattern`` with 1-based line numbers (see :mod:`toolswap.grep`).

        Args:
            pattern: a regular expression in Python syntax without backreferences or
                lookaround (those cannot run in linear time and are refused), or a plain
                string with ``fixed``.
            options: see :class:`~toolswap.grep.GrepOptions`; ``timeout`` does not count
                the digest verification.
            cancel: set it from another thread to stop the search.

        Raises:
            ArtifactPatternError: the pattern is invalid or cannot run in linear time.
            ArtifactSearchTimeoutError: the search missed its deadline; it was stopped.
        """
        refuse_unknown(options, GrepOptions.__optional_keys__, "grep's options")
        query = GrepQuery(pattern, **options)
        ref = self.reference(source)
        if ref.binary:
            raise ArtifactReadError(f"{ref.source_id} is binary; grep reads text artifacts")
        art = self._open(ref)
        try:
            matches, truncated = search(art.fd, query, label=ref.source_id, cancel=cancel)
            art.check_unchanged()
        finally:
            durable.close_unwritten(art.fd)
        return GrepResult(ref.source_id, pattern, tuple(matches), truncated)
