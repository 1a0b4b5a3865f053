"""A hash-chained, fsync'd, append-only JSONL log (the manifest and the lease journal).

Each line is one record: the canonical JSON of its fields (sorted keys, no spaces) with
``"hash"`` appended as the last member::

    {"prev":"<hash of previous record>","seq":1,"session":"s1","v":1,...,"hash":"<sha256>"}

``hash`` is the SHA-256 of the line's bytes without the hash member (the canonical body),
so any changed byte breaks the record or the chain. Readers ignore only a final record
without its newline (a torn append); the next append cuts it off and keeps the cut bytes
beside the log. Every other defect raises the log's error class: a corrupt log is never
read as an empty one.

The reader keeps its position (offset, sequence, last hash, file identity) so a later
refresh verifies only the appended suffix.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

from . import durable
from ._fork import track
from ._lines import iter_lines
from .crashpoints import crash_point
from .durable import fsync_dir, not_ours, write_all
from .errors import ChainLogError

__all__ = ["GENESIS_HASH", "SCHEMA_VERSION", "ChainLog", "StatKey", "canonical_json", "stat_key"]

SCHEMA_VERSION = 1
GENESIS_HASH = "0" * 64
_HASH_PREFIX = b',"hash":"'
_SUFFIX_LEN = len(_HASH_PREFIX) + 64 + 3  # ,"hash":"<64 hex>"}\n
_READ_BLOCK = 4 << 20
_RESERVED = frozenset({"v", "seq", "session", "prev", "hash"})

StatKey = tuple[int, int, int, int, int]
"""(device, inode, size, mtime_ns, ctime_ns) of a file: any write, truncation, rename over
it or change of its times gives another (the kernel sets ctime; no caller can)."""


def stat_key(st: os.stat_result) -> StatKey:
    """The :data:`StatKey` of ``st``."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha256(data: bytes) -> str:
    # hashlib is imported on first use: a command whose readiness check reads no record
    # (see toolswap.manifest) does not pay for loading OpenSSL.
    import hashlib

    return hashlib.sha256(data).hexdigest()


def canonical_json(value: object) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class ChainLog:
    """One hash-chained JSONL file. Appends must be made under the session lock."""

    def _forked(self) -> None:
        """In a forked child: a new lock (a thread that held this one is not here), and the
        position forgotten (it may have been half-way through an update): the next refresh
        verifies the whole log, and says so (``reset``): its reader folds every record
        again."""
        self.lock = threading.RLock()
        self.reset()
        self._refold = True

    def __init__(
        self,
        path: Path,
        session: str,
        *,
        error: type[ChainLogError] = ChainLogError,
    ) -> None:
        self.path = path
        self.session = session
        self._error = error
        self._offset = 0
        self._seq = 0
        self._hash = GENESIS_HASH
        self._identity: tuple[int, int] | None = None
        self._torn: tuple[int, int] | None = None
        # The highest record this object ever verified; never forgotten by reset(), so a
        # log cut or replaced behind it is refused however often it is re-read.
        self._floor: tuple[int, str] = (0, GENESIS_HASH)
        self._floor_seen: str | None = None
        self._watch_seq = 0
        self._whole: StatKey | None = None
        self._dir_synced = False
        self.lock = threading.RLock()
        """Serializes this object's refreshes and appends between threads; callers that
        fold records hold it across refresh and fold."""
        self._refold = False
        """The next refresh says ``reset`` (this is a forked child: see ``_forked``)."""
        track(self)  # (its reader may fold outside its lock: every log is read afresh)

    @property
    def head(self) -> tuple[int, str]:
        """(sequence, hash) of the last complete record seen by the last refresh."""
        return self._seq, self._hash

    @property
    def offset(self) -> int:
        """Byte offset just past the last complete record seen (where the next one goes)."""
        return self._offset

    @property
    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the file the last refresh read (None before any)."""
        return self._identity

    def resume(self, offset: int, seq: int, digest: str, identity: tuple[int, int]) -> bool:
        """Continue from a prefix verified by other means (a checkpoint of the fold).

        The next refresh verifies only the records after ``offset``; a file whose identity
        is not ``identity`` (dev, inode) is re-read from its first byte.

        Returns:
            False (and nothing changes) when this object already verified a record beyond
            ``seq``: only a read from the first byte can prove that record is still there.
        """
        with self.lock:
            if self._identity is not None or self._offset:
                raise ValueError("resume() needs a log that has not been read yet")
            if self._floor[0] > seq or (self._floor[0] == seq and self._floor[1] != digest):
                return False
            self._offset, self._seq, self._hash, self._identity = offset, seq, digest, identity
            self._refold = False  # (its caller starts its fold afresh, from the checkpoint)
            self._floor = (seq, digest)
            return True

    @property
    def read_whole(self) -> StatKey | None:
        """The file's :data:`StatKey` as the last refresh found it, when every byte of it up
        to that size has been verified by this object in one read from the first byte and
        the file has not changed since (by its key); None otherwise (only a suffix was
        read since the file changed, a torn final record, an append of ours, a refusal)."""
        return self._whole

    @property
    def torn_tail(self) -> tuple[int, int] | None:
        """(offset, length) of an incomplete final record, if the last refresh saw one."""
        return self._torn

    def _fail(self, message: str) -> ChainLogError:
        return self._error(f"{self.path.name}: {message}")

    def _open_read(self) -> int | None:
        def refuse(message: str) -> ChainLogError:
            return self._fail(
                f"{message}; a symlinked, unreadable or foreign log is never trusted: move it "
                "aside and restore the session's log from a backup"
            )

        try:
            fd, _ = durable.open_trusted(self.path, what="the log", error=refuse)
        except FileNotFoundError:
            return None
        return fd

    def reset(self) -> None:
        """Forget the cached position: the next refresh verifies the whole log (and still
        requires the highest record verified so far)."""
        self._offset, self._seq, self._hash = 0, 0, GENESIS_HASH
        self._identity = None
        self._torn = None
        self._whole = None

    def refresh(self) -> tuple[bool, list[dict[str, Any]]]:
        """Verify and return the records appended since the last refresh.

        Returns:
            ``(reset, records)``: when ``reset`` is true the log was replaced and ``records``
            are all of its records, so a caller folding them must start from scratch.

        Raises:
            ChainLogError (or the class given at construction): the log is corrupt, was cut
            behind a record already read, or cannot be opened safely.
        """
        with self.lock:
            saved = (self._offset, self._seq, self._hash, self._identity, self._torn)
            try:
                reset, records = self._refresh()
            except ChainLogError:
                # Back to the last verified position: the next refresh meets the same
                # defect again (a shrunk, replaced or vanished log stays refused).
                self._offset, self._seq, self._hash, self._identity, self._torn = saved
                self._whole = None
                raise
            reset, self._refold = reset or self._refold, False
            return reset, records

    def _refresh(self) -> tuple[bool, list[dict[str, Any]]]:
        fd = self._open_read()
        if fd is None:
            if self._identity is not None or self._floor[0] > 0:
                raise self._fail("disappeared after records were read from it")
            return False, []
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            reset = False
            if self._identity is not None and identity != self._identity:
                self.reset()
                reset = True
            if st.st_size < self._offset:
                raise self._fail(
                    f"shrank to {st.st_size} bytes below {self._offset} bytes of verified "
                    "records; refusing to trust it"
                )
            from_start = self._offset == 0
            whole_before = self._whole
            self._identity = identity
            floor_seq, floor_hash = self._floor
            self._watch_seq, self._floor_seen = floor_seq, None
            key = stat_key(st)
            self._whole = None
            records = self._read_from(fd, st.st_size)
            if from_start and floor_seq > 0 and self._floor_seen != floor_hash:
                raise self._fail(
                    f"no longer holds record {floor_seq} that this process verified before "
                    "(cut, replaced or rewritten); refusing to trust it"
                )
            # A read of a suffix alone says nothing of the bytes before it: only a read from
            # the first byte (or a file unchanged since one) vouches for the whole file.
            if self._offset == st.st_size and (from_start or key == whole_before):
                self._whole = key
            return reset, records
        finally:
            durable.close_unwritten(fd)

    def _read_from(self, fd: int, size: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        offset = self._offset
        self._torn = None

        def pread(length: int, at: int) -> bytes:
            try:
                return durable.current().pread(fd, length, at)
            except OSError as exc:
                raise self._fail(f"cannot be read ({exc.strerror}); nothing was trusted") from exc

        for start, line, complete in iter_lines(pread, offset, size, block=_READ_BLOCK):
            if not complete:
                if line:
                    self._torn = (start, len(line))
                break
            records.append(self._verify(line + b"\n", start))
            offset = start + len(line) + 1
        self._offset = offset
        return records

    def _verify(self, line: bytes, offset: int) -> dict[str, Any]:
        where = (
            f"record at byte {offset} (sequence {self._seq + 1})"
            if offset >= 0
            else f"record {self._seq + 1}"  # a row or an object: no byte offset
        )
        if len(line) <= _SUFFIX_LEN or line[-_SUFFIX_LEN:][: len(_HASH_PREFIX)] != _HASH_PREFIX:
            raise self._fail(f"{where} is not a hash-chained record")
        if line[-3:] != b'"}\n':
            raise self._fail(f"{where} is malformed")
        body = line[:-_SUFFIX_LEN] + b"}"
        claimed = line[-_SUFFIX_LEN + len(_HASH_PREFIX) : -3].decode("ascii", "replace")
        if _sha256(body) != claimed:
            raise self._fail(f"{where} does not match its hash (changed or corrupt)")
        try:
            record = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._fail(f"{where} is not valid JSON: {exc}") from exc
        if not isinstance(record, dict) or "hash" in record:
            raise self._fail(f"{where} is not a record object")
        if record.get("v") != SCHEMA_VERSION:
            raise self._fail(f"{where} has unknown schema version {record.get('v')!r}")
        if record.get("seq") != self._seq + 1:
            raise self._fail(
                f"{where} has sequence {record.get('seq')!r}; the sequence must be contiguous"
            )
        if record.get("session") != self.session:
            raise self._fail(f"{where} belongs to another session ({record.get('session')!r})")
        if record.get("prev") != self._hash:
            raise self._fail(f"{where} breaks the hash chain")
        record["hash"] = claimed
        self._seq += 1
        self._hash = claimed
        if self._seq == self._watch_seq:
            self._floor_seen = claimed
        if self._seq > self._floor[0]:
            self._floor = (self._seq, claimed)
        return record

    def append(
        self, body: dict[str, Any], *, crash_prefix: str
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Append one record durably (one O_APPEND write, fsync file, fsync directory).

        The caller must hold the session lock. Records appended by others since the last
        refresh are verified first and returned, so the caller can fold them before its own.

        Args:
            body: the record's own fields (the log adds v, seq, session, prev, hash).
            crash_prefix: names the crash points ``<prefix>.appended`` / ``.fsynced``.

        Returns:
            ``(new_records_before, record)``.
        """
        with self.lock:
            return self._append(body, crash_prefix)

    def _next_record(self, body: dict[str, Any]) -> tuple[dict[str, Any], str, bytes]:
        """The record after the current head: (record without hash, hash, line bytes)."""
        if _RESERVED & body.keys():
            raise ValueError(f"record body may not set {sorted(_RESERVED & body.keys())}")
        record: dict[str, Any] = dict(body)
        record.update(v=SCHEMA_VERSION, seq=self._seq + 1, session=self.session)
        record["prev"] = self._hash
        encoded = canonical_json(record)
        digest = _sha256(encoded)
        return record, digest, encoded[:-1] + _HASH_PREFIX + digest.encode() + b'"}\n'

    def next_line(self, body: dict[str, Any]) -> tuple[int, str, bytes]:
        """The record ``body`` would become if appended now: (sequence, hash, line bytes).

        A replica of a shared log offers this line to the shared store first (see
        :meth:`extend`); the caller holds the lock that keeps the head where it is.
        """
        record, digest, line = self._next_record(body)
        return int(record["seq"]), digest, line

    def extend(
        self, lines: list[bytes], *, crash_prefix: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Append records made elsewhere, byte for byte (a local replica of a shared log).

        Each line must be a complete record that continues the chain from this log's head;
        all are verified before any is written, then written in one append and fsynced.
        The caller must hold the session lock.

        Returns:
            ``(new_records_before, records)``, as :meth:`append`.
        """
        with self.lock:
            reset, before = self.refresh()
            if reset:
                raise self._fail("was replaced while in use; reopen it")
            saved = (self._seq, self._hash, self._floor)
            try:
                offset = self._offset
                records = []
                for line in lines:
                    if line.find(b"\n") != len(line) - 1:
                        raise self._fail(f"a record to add at byte {offset} is not one line")
                    records.append(self._verify(line, offset))
                    offset += len(line)
                data = b"".join(lines)
                if data:
                    self._write_durably(data, crash_prefix)
            except BaseException:
                self._seq, self._hash, self._floor = saved
                raise
            self._offset += len(data)
            self._floor = (self._seq, self._hash)
            return before, records

    def _append(
        self, body: dict[str, Any], crash_prefix: str
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if _RESERVED & body.keys():
            raise ValueError(f"record body may not set {sorted(_RESERVED & body.keys())}")
        reset, before = self.refresh()
        if reset:
            raise self._fail("was replaced while in use; reopen it")
        record, digest, line = self._next_record(body)
        self._write_durably(line, crash_prefix)
        self._offset += len(line)
        self._seq += 1
        self._hash = digest
        self._floor = (self._seq, digest)
        record["hash"] = digest
        return before, record

    def _write_durably(self, data: bytes, crash_prefix: str) -> None:
        """Write whole records at the end (one O_APPEND write, fsync file, fsync directory);
        a failed write leaves none of them."""
        # The directory entry is made durable once per log object (the first append may
        # create the file, or follow a creator that crashed before its directory fsync);
        # later appends only need the file's own fsync.
        creating = not self._dir_synced
        self._whole = None
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        io = durable.current()
        try:
            fd = io.open(self.path, flags | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            raise self._fail(f"cannot open for append: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            if not_ours(st, directory=False) is not None:
                raise self._fail(
                    "is not a regular file owned by this user; move it aside and restore "
                    "the session's log from a backup"
                )
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o600)  # a log created by an older tool or a umask
            if self._torn is not None:
                try:
                    self._cut_torn_tail(fd)
                except OSError as exc:
                    raise self._fail(
                        f"cannot cut off the torn final record ({exc.strerror}); nothing was "
                        "appended. Free disk space and retry"
                    ) from exc
            try:
                write_all(fd, data)
                crash_point(f"{crash_prefix}.appended")
                io.fsync(fd)
                if creating:
                    fsync_dir(self.path.parent)
                    self._dir_synced = True
            except OSError as exc:
                self._take_back(fd, exc)
            crash_point(f"{crash_prefix}.fsynced")
        finally:
            # The records are fsynced (or the append failed and says so): a deferred write
            # error that close reports (NFS) concerns no byte of them.
            with contextlib.suppress(OSError):
                durable.current().close(fd)
        self._identity = (st.st_dev, st.st_ino)

    def _take_back(self, fd: int, exc: OSError) -> None:
        """A failed append (a full disk, an I/O error) leaves no part of its record."""
        io = durable.current()
        try:
            io.ftruncate(fd, self._offset)
            io.fsync(fd)
        except OSError as again:
            raise self._fail(
                f"append failed ({exc.strerror}) and its partial record could not be removed "
                f"({again.strerror}); the next append cuts it off"
            ) from exc
        raise self._fail(
            f"append failed ({exc.strerror}); nothing was recorded. Free disk space and retry"
        ) from exc

    def _cut_torn_tail(self, fd: int) -> None:
        assert self._torn is not None
        offset, length = self._torn
        io = durable.current()
        rfd, _ = durable.open_trusted(self.path, what="the log", error=self._fail)
        try:
            cut = io.pread(rfd, length, offset)
        finally:
            durable.close_unwritten(rfd)
        # Never overwrite bytes kept from an earlier torn tail at the same offset.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        attempt = 0
        while True:
            suffix = f".torn-{offset}" + (f".{attempt}" if attempt else "")
            try:
                kfd = io.open(self.path.with_name(self.path.name + suffix), flags, 0o600)
                break
            except FileExistsError:
                attempt += 1
        kept = self.path.with_name(self.path.name + suffix)
        try:
            write_all(kfd, cut)
            io.fsync(kfd)
            fsync_dir(self.path.parent)  # the kept bytes are durable before the cut
        except OSError as exc:
            # No empty or partial copy is left behind, and nothing is cut.
            with contextlib.suppress(OSError):
                io.unlink(kept)
            raise self._fail(
                f"cannot keep the torn final record before cutting it ({exc.strerror}); "
                "nothing was changed. Free disk space and retry"
            ) from exc
        finally:
            io.close(kfd)
        io.ftruncate(fd, offset)
        io.fsync(fd)
        self._torn = None
