"""The session manifest: one durable record per artifact and per collection.

``<session>/manifest.jsonl`` is a :class:`~toolswap.chainlog.ChainLog`. An ``artifact``
record carries everything needed to rebuild an :class:`ArtifactReference` from its source
ID after a restart; a ``collected`` record says when and why cleanup removed a file; a
``journal`` record anchors the lease journal's head (see
:class:`~toolswap.ArtifactRetentionJournal`), so a journal deleted or rolled back is
noticed even without a memory owner.

``<session>/manifest.head`` is evidence about the manifest itself: the highest name ever
handed out and the manifest head it has seen (sequence and hash), rewritten after every
append. It only moves forward along the same chain, so a manifest deleted, cut or
replaced by an older copy no longer reaches it: names are still never reused (the high
water mark is the higher of the two), and cleanup refuses to trust the manifest.

``<session>/manifest.checked`` spares the readiness check (run before every
``toolswap run``) a full verification of an unchanged manifest
(:mod:`toolswap.readiness_memory`).

Every append goes to the session backend's authority first (:mod:`toolswap.backends`):
locally that is the log itself; a session kept in a shared store writes record ``seq``
there only if that sequence number is free, re-reads and tries the next one when another
host won, then adds it to ``manifest.jsonl``, which is the store's records byte for byte.
Reads pull new records at most every ``pull_interval`` seconds of the backend
(:meth:`Manifest.sync` pulls now), and a read of an artifact this directory holds with its
record pulls nothing (:meth:`Manifest.held_record`). The records themselves are typed
(:mod:`toolswap.records`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import durable, readiness_memory
from ._artifact_names import parse_artifact_filename
from ._gc import collector_paused
from .chainlog import GENESIS_HASH, ChainLog
from .crashpoints import crash_point
from .errors import ArtifactStoreError, ChainLogError
from .layout import JOURNAL_NAME, MANIFEST_HEAD_NAME
from .session import Session, session_lock

if TYPE_CHECKING:
    from .artifact import ArtifactReference

    # The typed records are imported when a record is first read or written: a capture in
    # a session with none yet (and one whose output stays inline) never loads them.
    from .records import ArtifactRecord, CollectedRecord, JournalAnchor, ManifestRecord

__all__ = [
    "SNAPSHOT_EVERY",
    "ArtifactRecord",
    "CollectedRecord",
    "Expectation",
    "JournalAnchor",
    "Manifest",
    "ManifestConflict",
    "ManifestHead",
]

_HEAD_SIZE = 512
_NAME_IN_RECORD = rb"tool_result_(\d{3,18})\.txt"
"""Compiled on first use (re's cache), not at every start-up."""
SNAPSHOT_EVERY = 1000
"""A replica that appends a multiple of this many records keeps the chain as one object."""
_APPEND_STALLS = 12
"""Refused appends in a row, with nothing new to pull, before an append gives up (~5 s)."""


@dataclass(frozen=True, slots=True)
class ManifestHead:
    """What ``manifest.head`` says: the furthest manifest head seen, the highest name."""

    seq: int
    hash: str
    high_water: int


class ManifestConflict(ChainLogError):
    """A record's expectation about the chain it would extend does not hold (another
    process or host changed the artifact's state first); nothing was written."""


Expectation = tuple[str, Callable[["ArtifactRecord | None", "CollectedRecord | None"], str | None]]
"""``(filename, check)`` for :meth:`Manifest.append`."""


class Manifest:
    """Folded view of the manifest log; refreshed incrementally on every access.

    The session's backend is the authority the records go to first: locally the log
    itself (the session lock makes this process the only appender), for a replica the
    shared store (record ``seq`` is written there only if that number is free).
    """

    def __init__(self, session: Session) -> None:
        self._log = ChainLog(session.manifest_path, session.session_id)
        self._backend = session.backend
        self._pulled_at = -float("inf")
        self._dir = session.tool_results_dir
        self._head_path = session.manifest_head_path
        self._checked_path = session.manifest_checked_path
        self._journal_path = session.journal_path
        self._lock_path = session.lock_path
        self._artifacts: dict[str, ArtifactRecord] = {}
        self._collected: dict[str, CollectedRecord] = {}
        self._high_water = 0
        self._hashes: list[str] = []
        """The hash of every record, by sequence - 1 (checks the head file in O(1))."""
        self._anchors: dict[str, JournalAnchor] = {}
        """The latest anchor of each lease journal store, by the store's name."""

    @classmethod
    def of(cls, session: Session) -> Manifest:
        """The manifest of ``session``."""
        return cls(session)

    @property
    def log(self) -> ChainLog:
        return self._log

    def _fold(self, records: list[dict[str, object]]) -> None:
        try:
            self._fold_records(records)
        except ChainLogError:
            # The log already moved past these records: read it all again next time, so the
            # bad record is met again instead of skipped by the next refresh.
            self._log.reset()
            self._clear()
            raise

    def _fold_records(self, bodies: list[dict[str, object]]) -> None:
        if not bodies:
            return
        from .records import ArtifactRecord, JournalAnchor, decode

        for body in bodies:
            self._hashes.append(str(body["hash"]))
            record = decode(body, self._log.session)
            if isinstance(record, JournalAnchor):
                self._anchors[record.journal] = record
                continue
            number = parse_artifact_filename(record.filename)
            assert number is not None  # the decoder refuses other names
            self._high_water = max(self._high_water, number)
            if isinstance(record, ArtifactRecord):
                self._artifacts[record.filename] = record
                self._collected.pop(record.filename, None)
            else:
                self._artifacts.pop(record.filename, None)
                self._collected[record.filename] = record

    def refresh(self) -> None:
        """Fold new records (a replica first pulls the store's, unless it did so lately).

        A replica whose store cannot be reached goes on with the records it holds (reads
        may lag the store by the backend's ``pull_interval`` anyway); :meth:`sync` and
        appends never do.

        Raises:
            ChainLogError: the manifest (or a record the store sent) cannot be trusted.
        """
        self._refresh_local()
        if time.monotonic() - self._pulled_at >= self._backend.pull_interval:
            try:
                self._pull()
            except ChainLogError as exc:
                if not isinstance(exc.__cause__, ArtifactStoreError):
                    raise

    def sync(self) -> None:
        """Fold every record there is now: a replica pulls the store's head first.

        Raises:
            ChainLogError: the manifest cannot be trusted, or its store cannot be read.
        """
        self._refresh_local()
        self._pull()

    def _store_error(self, exc: ArtifactStoreError) -> ChainLogError:
        return ChainLogError(
            f"the manifest of session {self._log.session!r} lives in "
            f"{self._backend.location}, which cannot be read now ({exc}); nothing was changed"
        )

    def _lock(self) -> AbstractContextManager[None]:
        """The session lock. Lock order: the session lock, then the log's in-process lock
        (a capture holds the session lock when it appends)."""
        return session_lock(self._lock_path)

    def _pull(self) -> None:
        """Add the authority's records after this log's head to it (none locally)."""
        backend = self._backend
        self._pulled_at = time.monotonic()
        try:
            seen = self._log.head[0]
            lines = backend.pull(seen)
            if not lines:
                return
            with self._lock(), self._log.lock:
                self._refresh_local()
                if self._log.head[0] != seen:  # another process here added some meanwhile
                    lines = backend.pull(self._log.head[0])
                if not lines:
                    return
                prefix = backend.record_crash_prefix
                try:
                    before, records = self._log.extend(lines, crash_prefix=prefix)
                except ChainLogError:
                    # A damaged or foreign snapshot never stops a replica while the records
                    # themselves are whole: read them one by one (they are checked again).
                    lines = backend.pull(self._log.head[0], snapshot=False)
                    before, records = self._log.extend(lines, crash_prefix=prefix)
                self._fold([*before, *records])
                self._advance_head()
        except ArtifactStoreError as exc:
            raise self._store_error(exc) from exc

    def _snapshot_bytes(self) -> bytes:
        try:
            return durable.read_trusted(self._log.path, self._log.offset) or b""
        except Exception:  # best effort: the records themselves are the truth
            return b""

    def _refresh_local(self) -> None:
        # A replaced manifest must still hold every record this process read (the log
        # refuses it otherwise), so no name is handed out twice. A first read folds every
        # record, which makes no cycles: the collector waits.
        with self._log.lock, collector_paused():
            reset, records = self._log.refresh()
            if reset:
                self._clear()
            self._fold(records)

    def _clear(self) -> None:
        self._artifacts.clear()
        self._collected.clear()
        self._high_water = 0
        self._hashes.clear()
        self._anchors.clear()

    def high_water(self) -> int:
        """The highest artifact number ever handed out, by every piece of evidence kept:
        the manifest's records and the head file (which outlives a lost manifest).

        Raises:
            ChainLogError: the manifest or its head file cannot be trusted.
        """
        self.refresh()
        head = self.read_head()
        if head is None:
            # No head file: the journal's claims are evidence of names too.
            return max(self._high_water, self._journal_high_water())
        return max(self._high_water, head.high_water)

    def append(self, record: ManifestRecord, *, expect: Expectation | None = None) -> None:
        """Append a record durably, under the session lock (re-entrant: a capture holds it).

        The record goes to the backend's authority first (for a replica: the store, under
        the next free sequence number), then to ``manifest.jsonl``.

        Args:
            expect: ``(filename, check)``: ``check`` gets the name's current artifact
                record and collection (None when there is none) on the chain the record
                would extend, and returns why the record must not be written (or None).
                On a shared store it runs again whenever another host appended first, so
                the record is written only onto a chain where it holds.

        Raises:
            ManifestConflict: ``expect`` refused the record; nothing was written.
            ChainLogError: the record could not be written (nothing was recorded).
        """
        from .records import decode, encode

        body = encode(record)
        # A record this manifest would refuse to read (a source ID naming another file)
        # is never written: once on the chain, it stopped every later read of the session.
        try:
            decode(body, self._log.session)
        except ChainLogError as exc:
            raise ChainLogError(
                f"refusing to write a record the manifest cannot read: {exc}"
            ) from None
        backend = self._backend
        with self._lock(), self._log.lock:
            stalled = 0
            while True:
                self._refresh_local()
                self._pull()
                self._check(expect)
                seq, digest, line = self._log.next_line(body)
                try:
                    won = backend.offer(seq, line)
                except ArtifactStoreError as exc:
                    raise self._store_error(exc) from exc
                if won:
                    break
                # Record ``seq`` is taken: by this very offer whose reply was lost (a retry
                # met its own record), by another host (follow it), or two writes raced and
                # the store refused both (409: back off a little and try again).
                self._pull()
                if len(self._hashes) >= seq and self._hashes[seq - 1] == digest:
                    crash_point("store.record_put")
                    self._advance_head()
                    return
                stalled = stalled + 1 if self._log.head[0] < seq else 0
                if stalled >= _APPEND_STALLS:
                    raise ChainLogError(
                        f"{backend.location} refused manifest record {seq} {stalled} times "
                        "without showing another record there; nothing was recorded"
                    )
                time.sleep(min(0.5, 0.01 * 2**stalled) if stalled else 0)
            before, records = self._log.extend([line], crash_prefix=backend.record_crash_prefix)
            self._fold([*before, *records])
            if seq % SNAPSHOT_EVERY == 0:
                backend.keep_snapshot(seq, self._snapshot_bytes)
            self._advance_head()

    def _check(self, expect: Expectation | None) -> None:
        if expect is not None:
            filename, check = expect
            why = check(self._artifacts.get(filename), self._collected.get(filename))
            if why is not None:
                raise ManifestConflict(why)

    def journal_stores(self) -> list[str]:
        """The names of every lease journal store anchored here."""
        self.refresh()
        return sorted(self._anchors)

    def journal_anchor(self, store: str) -> JournalAnchor | None:
        """The head of the lease journal kept in ``store`` (its name: the journal's file name,
        or the database's journal key) as last recorded here (None: never recorded)."""
        self.refresh()
        return self._anchors.get(store)

    # -- the head file ---------------------------------------------------------------

    def read_head(self) -> ManifestHead | None:
        """The head file's contents (None when there is none yet).

        The file is rewritten in place under the session lock; a reader without the lock
        that meets a half-written copy reads it again under the lock. An empty file (its
        creation cut short by a power loss) counts as absent: the manifest then rebuilds it.

        Raises:
            ChainLogError: the file is not a regular file of this user, or is corrupt.
        """
        try:
            return self._parse_head(self._read_head_bytes())
        except ChainLogError:
            with session_lock(self._lock_path):
                return self._parse_head(self._read_head_bytes())

    def _read_head_bytes(self) -> bytes | None:
        return durable.read_trusted(
            self._head_path,
            _HEAD_SIZE + 1,
            what=MANIFEST_HEAD_NAME,
            error=lambda message: self._head_error(
                message.removeprefix(MANIFEST_HEAD_NAME).lstrip(": ")
            ),
        )

    def _parse_head(self, raw: bytes | None) -> ManifestHead | None:
        if not raw:
            return None
        try:
            data = json.loads(raw)
            head = ManifestHead(
                seq=int(data["seq"]), hash=str(data["hash"]), high_water=int(data["high_water"])
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise self._head_error("is corrupt") from exc
        if data.get("session") != self._log.session or head.seq < 0 or head.high_water < 0:
            raise self._head_error("belongs to another session or is corrupt")
        return head

    def _head_error(self, what: str) -> ChainLogError:
        return ChainLogError(
            f"{MANIFEST_HEAD_NAME} {what}; it is the evidence that no artifact name is reused: "
            "restore it, or move it aside only if the manifest is known to be complete"
        )

    def behind_head(self) -> str | None:
        """Why the manifest is behind its head file (deleted, cut or rolled back), or behind
        the names the lease journal holds when the head file is gone too; None if neither.

        An appender may move the head between the refresh and the head file's read: what
        looks behind is looked at again under the session lock, where nothing moves."""
        why = self._behind_now()
        if why is not None:
            with session_lock(self._lock_path):
                why = self._behind_now()
        return why

    def _behind_now(self) -> str | None:
        self.refresh()
        head = self.read_head()
        if head is None:
            return self._behind_journal()
        return self._behind(head)

    def _behind_journal(self) -> str | None:
        """Without a head file, the lease journal's claims are the evidence left of the
        names handed out: a claim on a name the manifest never recorded means records (and
        the head file) were lost."""
        named = self._journal_high_water()
        if named <= self._high_water:
            return None
        return (
            f"{self._log.path.name} and {MANIFEST_HEAD_NAME} know names up to "
            f"{self._high_water} but the lease journal ({JOURNAL_NAME}) claims "
            f"tool_result_{named:03d}.txt: they were deleted or restored from an older copy"
        )

    def _journal_high_water(self) -> int:
        """The highest artifact number the local lease journal's records name (0: none)."""
        try:
            fd, _ = durable.open_trusted(self._journal_path, what=JOURNAL_NAME)
        except FileNotFoundError:
            return 0
        except Exception as exc:  # an unreadable journal is the journal's own error to raise
            raise ChainLogError(f"{JOURNAL_NAME} cannot be read to check names: {exc}") from exc
        highest = 0
        tail = b""
        try:
            offset = 0
            while block := durable.current().pread(fd, 1 << 20, offset):
                offset += len(block)
                data = tail + block
                for match in re.finditer(_NAME_IN_RECORD, data):
                    highest = max(highest, int(match.group(1)))
                tail = data[-64:]
        except OSError as exc:
            raise ChainLogError(f"{JOURNAL_NAME} cannot be read ({exc.strerror})") from exc
        finally:
            durable.close_unwritten(fd)
        return highest

    def _behind(self, head: ManifestHead | None) -> str | None:
        """Why the folded manifest does not reach ``head``, or None."""
        if head is None or head.seq == 0:
            return None
        if len(self._hashes) < head.seq:
            return (
                f"{self._log.path.name} holds {len(self._hashes)} records but "
                f"{MANIFEST_HEAD_NAME} saw {head.seq}: it was deleted, cut or restored from an "
                "older copy"
            )
        if self._hashes[head.seq - 1] != head.hash:
            return (
                f"{self._log.path.name} record {head.seq} is not the one {MANIFEST_HEAD_NAME} "
                "saw: the manifest was replaced"
            )
        return None

    # -- the readiness check's memory (see :mod:`toolswap.readiness_memory`) ---------

    def unchanged_since_checked(self) -> bool:
        """Whether the manifest and its head file are exactly as a full readiness check that
        passed found them (:meth:`remember_checked`). False when the directory is not the
        session's authority (a store session's check asks the store) and whenever anything
        is in doubt: the full check then runs."""
        if not self._backend.authority_here:
            return False
        try:
            head = self._read_head_bytes()
        except Exception:  # an unusable head file is no evidence: check in full
            return False
        return readiness_memory.matches(self._checked_path, self._log.path, self._log.session, head)

    def remember_checked(self, clock: Callable[[], object]) -> None:
        """Remember that the full readiness check passed on the manifest and head file as
        they are now (best effort: nothing is remembered when in doubt).

        Only what this process verified is remembered: every byte of the manifest read in
        one pass (:attr:`ChainLog.read_whole`) and still unchanged, its last record the one
        the head file names (see :func:`toolswap.readiness_memory.remember` for the rest).
        """
        whole = self._log.read_whole
        if not self._backend.authority_here or whole is None or not self._hashes:
            return
        try:
            head_bytes = self._read_head_bytes()
            head = self._parse_head(head_bytes)
        except (OSError, ChainLogError):
            return
        verified = (len(self._hashes), self._hashes[-1])
        if head_bytes is None or head is None or (head.seq, head.hash) != verified:
            return
        if self._log.head != verified:
            return
        readiness_memory.remember(
            self._checked_path, self._log.path, self._log.session, whole, head_bytes, clock
        )

    def check_head(self) -> None:
        """Raise unless the manifest reaches the head its head file saw.

        Raises:
            ChainLogError: the manifest lost records (or its head file is unusable).
        """
        why = self.behind_head()
        if why is not None:
            raise ChainLogError(
                f"{why}; restore it from a backup. Until then cleanup refuses to run (records "
                "it needs, such as the lease journal's anchor, may be gone)"
            )

    def _advance_head(self) -> None:
        """Move the head file forward after an append (the lock is held).

        The head moves only along the same chain, so a rolled-back manifest never resets
        it; the high water mark only grows. A failed write leaves an older head, which is
        still a valid bound.
        """
        try:
            old = self.read_head()
        except ChainLogError:
            return  # keep the unusable file as it is: it is evidence, and says so
        seq, digest = len(self._hashes), self._hashes[-1] if self._hashes else GENESIS_HASH
        if old is not None and self._behind(old) is not None:
            seq, digest = old.seq, old.hash
        high_water = max(self._high_water, old.high_water if old else 0)
        body = json.dumps(
            {
                "session": self._log.session,
                "seq": seq,
                "hash": digest,
                "high_water": high_water,
            },
            sort_keys=True,
        ).encode()
        data = body.ljust(_HEAD_SIZE - 1) + b"\n"
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        io = durable.current()
        try:
            fd = io.open(self._head_path, flags, 0o600)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                # One sector: whole or not at all at a power loss. A write may still write
                # less than asked (POSIX): the rest goes after it, or a head torn between
                # its new hash and its old sequence number would refuse the session forever.
                done = 0
                while done < len(data):
                    done += io.pwrite(fd, data[done:], done)
                io.fsync(fd)
        except OSError:
            pass
        finally:
            with suppress(OSError):  # best effort, as the write itself
                io.close(fd)
        crash_point("manifest.head_written")

    def record_for(self, filename: str) -> ArtifactRecord | None:
        self.refresh()
        return self._artifacts.get(filename)

    def held_record(self, filename: str) -> ArtifactRecord | None:
        """The record of ``filename`` when this directory holds it and the artifact's file,
        read without asking the backend's authority (a read the replica can serve opens
        no store); None otherwise (the caller then refreshes or syncs).

        A record never changes once written and a read checks the bytes against it; what
        another host may add later (a collection) shows at the next pull.
        """
        self._refresh_local()
        record = self._artifacts.get(filename)
        if record is None or not os.path.lexists(self._dir / filename):
            return None
        return record

    def collected(self, filename: str) -> CollectedRecord | None:
        self.refresh()
        return self._collected.get(filename)

    def records(self) -> list[ArtifactRecord]:
        """Current artifact records, in file-number order."""
        self.refresh()
        return sorted(
            self._artifacts.values(), key=lambda r: parse_artifact_filename(r.filename) or 0
        )

    def collected_records(self) -> list[CollectedRecord]:
        self.refresh()
        return list(self._collected.values())

    def reference(self, record: ArtifactRecord) -> ArtifactReference:
        """The reference of an artifact record (the path from the trusted root)."""
        return record.reference(self._dir)


def __getattr__(name: str) -> Any:
    # The record types this module re-exports, imported on first use (see the imports).
    if name in ("ArtifactRecord", "CollectedRecord", "JournalAnchor"):
        from . import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
