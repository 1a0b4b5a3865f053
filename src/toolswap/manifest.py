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

A session bound to a shared store (:mod:`toolswap.remote`) keeps its manifest there, one
object per record; ``manifest.jsonl`` is then the local replica of those records, byte for
byte. Reads pull new records at most every :data:`PULL_INTERVAL` seconds (:meth:`Manifest.sync`
pulls now); an append writes the next record to the store only if its sequence number is
free, re-reads and tries the next one when another host won, then adds it to the replica.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .artifact import ArtifactReference, ArtifactSource, parse_artifact_filename
from .chainlog import GENESIS_HASH, ChainLog
from .crashpoints import crash_point
from .errors import ArtifactStoreError, ChainLogError
from .remote import StoreBinding
from .session import LOCK_NAME, MANIFEST_HEAD_NAME, Session, session_lock

__all__ = [
    "PULL_INTERVAL",
    "CollectedRecord",
    "Expectation",
    "JournalAnchor",
    "Manifest",
    "ManifestConflict",
    "ManifestHead",
]

_HEAD_SIZE = 512
PULL_INTERVAL = 1.0
"""Seconds a replica's manifest may lag the store on reads (appends and cleanup never lag)."""
SNAPSHOT_EVERY = 1000
"""A replica that appends a multiple of this many records keeps the chain as one object."""
_APPEND_STALLS = 12
"""Refused appends in a row, with nothing new to pull, before an append gives up (~5 s)."""


@dataclass(frozen=True, slots=True)
class JournalAnchor:
    """The lease journal's head as the manifest last recorded it."""

    seq: int
    hash: str
    owner_seq: int
    """The highest journal record the memory owner had acknowledged when this anchor was
    written (0: no owner): the owner may never later know less."""


@dataclass(frozen=True, slots=True)
class ManifestHead:
    """What ``manifest.head`` says: the furthest manifest head seen, the highest name."""

    seq: int
    hash: str
    high_water: int


@dataclass(frozen=True, slots=True)
class CollectedRecord:
    """Why and when cleanup removed an artifact."""

    filename: str
    source_id: str | None
    collected_at: str
    reason: str


class ManifestConflict(ChainLogError):
    """A record's expectation about the chain it would extend does not hold (another
    process or host changed the artifact's state first); nothing was written."""


Expectation = tuple[str, Callable[[dict[str, Any] | None, "CollectedRecord | None"], str | None]]
"""``(filename, check)`` for :meth:`Manifest.append`."""


class Manifest:
    """Folded view of the manifest log; refreshed incrementally on every access."""

    def __init__(
        self,
        path: Path,
        session: str,
        tool_results_dir: Path,
        *,
        binding: StoreBinding | None = None,
    ) -> None:
        self._log = ChainLog(path, session)
        self._binding = binding
        self._pulled_at = -PULL_INTERVAL
        self._dir = tool_results_dir
        self._head_path = path.with_name(MANIFEST_HEAD_NAME)
        self._artifacts: dict[str, dict[str, Any]] = {}
        self._collected: dict[str, CollectedRecord] = {}
        self._high_water = 0
        self._hashes: list[str] = []
        """The hash of every record, by sequence - 1 (checks the head file in O(1))."""
        self._anchors: dict[str, JournalAnchor] = {}
        """The latest anchor of each lease journal store, by the store's name."""

    @classmethod
    def of(cls, session: Session) -> Manifest:
        """The manifest of ``session``."""
        return cls(
            session.manifest_path,
            session.session_id,
            session.tool_results_dir,
            binding=session.binding,
        )

    @property
    def log(self) -> ChainLog:
        return self._log

    def _fold(self, records: list[dict[str, Any]]) -> None:
        try:
            self._fold_records(records)
        except ChainLogError:
            # The log already moved past these records: read it all again next time, so the
            # bad record is met again instead of skipped by the next refresh.
            self._log.reset()
            self._clear()
            raise

    def _fold_records(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._hashes.append(record["hash"])
            event = record.get("event")
            if event == "journal":
                store, anchor = _anchor(record)
                self._anchors[store] = anchor
                continue
            filename = record.get("filename")
            number = parse_artifact_filename(filename) if isinstance(filename, str) else None
            if number is None:
                raise ChainLogError(f"manifest record {record.get('seq')} names no artifact file")
            self._high_water = max(self._high_water, number)
            assert isinstance(filename, str)
            if event == "artifact":
                self._artifacts[filename] = record
                self._collected.pop(filename, None)
            elif event == "collected":
                self._artifacts.pop(filename, None)
                self._collected[filename] = CollectedRecord(
                    filename=filename,
                    source_id=record.get("source_id"),
                    collected_at=str(record.get("collected_at")),
                    reason=str(record.get("reason")),
                )
            else:
                raise ChainLogError(f"manifest record {record.get('seq')} has unknown event")

    def refresh(self) -> None:
        """Fold new records (a replica first pulls the store's, unless it did so lately).

        A replica whose store cannot be reached goes on with the records it holds (reads
        may lag the store by :data:`PULL_INTERVAL` anyway); :meth:`sync` and appends never
        do.

        Raises:
            ChainLogError: the manifest (or a record the store sent) cannot be trusted.
        """
        self._refresh_local()
        if self._binding is not None and time.monotonic() - self._pulled_at >= PULL_INTERVAL:
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
        if self._binding is not None:
            self._pull()

    def _store_error(self, exc: ArtifactStoreError) -> ChainLogError:
        assert self._binding is not None
        return ChainLogError(
            f"the manifest of session {self._log.session!r} lives in {self._binding.url}, "
            f"which cannot be read now ({exc}); nothing was changed"
        )

    def _lock(self) -> AbstractContextManager[None]:
        """The session lock. Lock order: the session lock, then the log's in-process lock
        (a capture holds the session lock when it appends)."""
        return session_lock(self._head_path.with_name(LOCK_NAME))

    def _pull(self) -> None:
        """Add the store's records after the replica's head to the replica."""
        binding = self._binding
        assert binding is not None
        self._pulled_at = time.monotonic()
        store = binding.store
        try:
            seen = self._log.head[0]
            lines = store.manifest_lines(binding.workspace, binding.session, seen)
            if not lines:
                return
            with self._lock(), self._log.lock:
                self._refresh_local()
                if self._log.head[0] != seen:  # another process here added some meanwhile
                    lines = store.manifest_lines(
                        binding.workspace, binding.session, self._log.head[0]
                    )
                if not lines:
                    return
                try:
                    before, records = self._log.extend(lines, crash_prefix="store.replica")
                except ChainLogError:
                    # A damaged or foreign snapshot never stops a replica while the records
                    # themselves are whole: read them one by one (they are checked again).
                    lines = store.manifest_lines(
                        binding.workspace, binding.session, self._log.head[0], snapshot=False
                    )
                    before, records = self._log.extend(lines, crash_prefix="store.replica")
                self._fold([*before, *records])
                self._advance_head()
        except ArtifactStoreError as exc:
            raise self._store_error(exc) from exc

    def _snapshot(self, seq: int) -> None:
        """Every :data:`SNAPSHOT_EVERY` records, keep the chain so far as one object in the
        store (best effort: the records themselves are the truth)."""
        binding = self._binding
        assert binding is not None
        try:
            fd = os.open(self._log.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                data = os.pread(fd, self._log.offset, 0)
            finally:
                os.close(fd)
            if data.count(b"\n") == seq:
                binding.store.put_manifest_snapshot(binding.workspace, binding.session, seq, data)
        except (OSError, ArtifactStoreError):
            pass

    def _refresh_local(self) -> None:
        with self._log.lock:
            # A replaced manifest must still hold every record this process read (the log
            # refuses it otherwise), so no name is handed out twice.
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
        return max(self._high_water, head.high_water if head else 0)

    def append(self, body: dict[str, Any], *, expect: Expectation | None = None) -> dict[str, Any]:
        """Append a record durably, under the session lock (re-entrant: a capture holds it).

        A replica writes the record to the store first (the next free sequence number),
        then to ``manifest.jsonl``.

        Args:
            expect: ``(filename, check)``: ``check`` gets the name's current artifact
                record and collection (None when there is none) on the chain the record
                would extend, and returns why the record must not be written (or None).
                On a shared store it runs again whenever another host appended first, so
                the record is written only onto a chain where it holds.

        Raises:
            ManifestConflict: ``expect`` refused the record; nothing was written.
        """
        with self._lock(), self._log.lock:
            if self._binding is None:
                self._refresh_local()
                self._check(expect)
                before, record = self._log.append(body, crash_prefix="manifest")
                self._fold([*before, record])
            else:
                record = self._append_shared(body, expect)
            self._advance_head()
            return record

    def _check(self, expect: Expectation | None) -> None:
        if expect is not None:
            filename, check = expect
            why = check(self._artifacts.get(filename), self._collected.get(filename))
            if why is not None:
                raise ManifestConflict(why)

    def _append_shared(self, body: dict[str, Any], expect: Expectation | None) -> dict[str, Any]:
        binding = self._binding
        assert binding is not None
        stalled = 0
        while True:
            self._refresh_local()
            self._pull()
            self._check(expect)
            seq, digest, line = self._log.next_line(body)
            try:
                won = binding.store.put_manifest_line(binding.workspace, binding.session, seq, line)
            except ArtifactStoreError as exc:
                raise self._store_error(exc) from exc
            if won:
                break
            # Record ``seq`` is taken: by this very put whose reply was lost (a retry met
            # its own record), by another host (follow it), or two writes raced and the
            # store refused both (409: back off a little and try again).
            self._pull()
            if len(self._hashes) >= seq and self._hashes[seq - 1] == digest:
                crash_point("store.record_put")
                return dict(json.loads(line))
            stalled = stalled + 1 if self._log.head[0] < seq else 0
            if stalled >= _APPEND_STALLS:
                raise ChainLogError(
                    f"{binding.url} refused manifest record {seq} {stalled} times without "
                    "showing another record there; nothing was recorded"
                )
            time.sleep(min(0.5, 0.01 * 2**stalled) if stalled else 0)
        crash_point("store.record_put")
        before, records = self._log.extend([line], crash_prefix="store.replica")
        self._fold([*before, *records])
        if seq % SNAPSHOT_EVERY == 0:
            self._snapshot(seq)
        return records[-1]

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
            with session_lock(self._head_path.with_name(LOCK_NAME)):
                return self._parse_head(self._read_head_bytes())

    def _read_head_bytes(self) -> bytes | None:
        try:
            fd = os.open(self._head_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._head_error(f"cannot be opened ({exc.strerror})") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise self._head_error("is not a regular file owned by this user")
            return os.read(fd, _HEAD_SIZE + 1)
        finally:
            os.close(fd)

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
        """Why the manifest is behind its head file (deleted, cut or rolled back), or None."""
        self.refresh()
        return self._behind(self.read_head())

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
        try:
            fd = os.open(self._head_path, flags, 0o600)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.pwrite(fd, data, 0)  # one sector: whole or not at all
                os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
        crash_point("manifest.head_written")

    def record_for(self, filename: str) -> dict[str, Any] | None:
        self.refresh()
        return self._artifacts.get(filename)

    def collected(self, filename: str) -> CollectedRecord | None:
        self.refresh()
        return self._collected.get(filename)

    def records(self) -> list[dict[str, Any]]:
        """Current artifact records, in file-number order."""
        self.refresh()
        return sorted(
            self._artifacts.values(), key=lambda r: parse_artifact_filename(r["filename"]) or 0
        )

    def collected_records(self) -> list[CollectedRecord]:
        self.refresh()
        return list(self._collected.values())

    def reference(self, record: dict[str, Any]) -> ArtifactReference:
        """Rebuild the reference of an ``artifact`` record (the path from the trusted root)."""
        argv = record.get("argv")
        return ArtifactReference(
            source=ArtifactSource(
                source_id=record["source_id"],
                source_type="tool_result",
                title=f"{record['tool']} output ({record['filename']})",
                captured_at=datetime.fromisoformat(record["captured_at"]),
            ),
            path=self._dir / record["filename"],
            summary=record["summary"],
            source_tool=record["tool"],
            content_sha256=record["sha256"],
            byte_size=record["byte_size"],
            line_count=record["line_count"],
            char_count=record["char_count"],
            binary=record["binary"],
            media_type=record["media_type"],
            argv=tuple(argv) if isinstance(argv, list) else None,
            exit_code=record.get("exit_code"),
            interrupted=record.get("interrupted"),
        )


def _anchor(record: dict[str, Any]) -> tuple[str, JournalAnchor]:
    store = record.get("journal")
    seq, digest = record.get("journal_seq"), record.get("journal_hash")
    owner_seq = record.get("owner_seq", 0)
    if (
        not isinstance(store, str)
        or not isinstance(seq, int)
        or seq < 1
        or not isinstance(digest, str)
        or not isinstance(owner_seq, int)
        or owner_seq < 0
    ):
        raise ChainLogError(f"manifest record {record.get('seq')} is a malformed journal anchor")
    return store, JournalAnchor(seq=seq, hash=digest, owner_seq=owner_seq)
