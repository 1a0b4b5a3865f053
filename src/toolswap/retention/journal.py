"""The crash-recoverable lease journal: ``<session>/retention-leases.jsonl``.

Every lease goes through ``PREPARED -> COMMITTED | ABORTED`` and ``COMMITTED -> RELEASED``,
one durable record per transition, on a :class:`~toolswap.chainlog.ChainLog` (canonical
JSON, hash chain, one ``O_APPEND`` write, fsync of the file and of the directory, appends
under the session lock). A record's fields::

    v, seq, session, prev, hash          the chain (see toolswap.chainlog)
    transaction_id                       the stable ID, also the owner's publication ID
    phase                                PREPARED | COMMITTED | ABORTED | RELEASED
    recorded_at                          UTC, ISO 8601
    intent_hash                          SHA-256 of the canonical intent
    intent                               the claim (PREPARED only)

Publishing follows the spec's order exactly: verify the artifact and append PREPARED
(fsync) under the session lock, run the publisher, append COMMITTED (fsync). Only
:class:`~toolswap.errors.ArtifactPublicationRejected` appends ABORTED; any other exception
propagates unchanged and the lease stays PREPARED, protecting its artifact with no
deadline until :meth:`ArtifactRetentionJournal.reconcile_reference` settles it with the
memory owner. Removing runs the remover first and appends RELEASED only after it returns.

The folded view is cached: later operations verify and fold only the records appended
since (the chain log keeps its verified position), so one operation costs the same on a
journal of a hundred records as on one of a hundred thousand. A cold start loads the
verified checkpoint of the fold beside the journal and folds only the records after it
(see :mod:`toolswap.retention.checkpoint`); the journal writes a new checkpoint every
``checkpoint_every`` records.

A journal bound to a memory owner acknowledges its head (sequence, hash) to the owner
after each append and checks it before each operation, so a journal that lost whole
trailing records fails closed (see :mod:`toolswap.retention.owner`). Lock order: the
owner's fence may be held while the session lock is taken, never the reverse: the journal
writes to the owner only outside the session lock, and the head it reads under a caller's
lock (cleanup) is a read that a fence does not block (SQLite WAL).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..artifact import SHA256_RE
from ..chainlog import GENESIS_HASH, ChainLog, canonical_json
from ..crashpoints import crash_point
from ..errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactFenceStaleError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactNotFoundError,
    ArtifactPublicationRejected,
    ArtifactReferenceOwnerError,
    ArtifactRetentionError,
    ChainLogError,
    ConfigurationError,
    SourceIdError,
)
from ..manifest import JournalAnchor, Manifest
from ..reader import ArtifactReader
from ..session import Session
from . import checkpoint as _checkpoint
from .claims import MAX_REFERENCE_COUNT, ArtifactClaimView, ArtifactRetentionClaim
from .journal_store import JournalStore, LocalJournalStore
from .lease import (
    TRANSACTION_ID_RE,
    ArtifactLeasePhase,
    ArtifactLeaseTransaction,
    validate_transaction_id,
)
from .owner import (
    ArtifactObservationState,
    ArtifactReconcileReport,
    ArtifactReconcileStatus,
    ArtifactReferenceFence,
    ArtifactReferenceObservation,
    ArtifactReferenceOwner,
    JournalHead,
)

__all__ = [
    "ArtifactJournalSummary",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactRetentionJournal",
    "validate_transaction_id",
]

T = TypeVar("T")

_RECORD_KEYS = frozenset(
    {"v", "seq", "session", "prev", "hash", "transaction_id", "phase", "recorded_at"}
    | {"intent_hash", "intent"}
)
_INTENT_CACHE = 4096
_Status = ArtifactReconcileStatus


P = ArtifactLeasePhase
_TRANSITIONS: dict[ArtifactLeasePhase, frozenset[ArtifactLeasePhase]] = {
    P.PREPARED: frozenset({P.COMMITTED, P.ABORTED}),
    P.COMMITTED: frozenset({P.RELEASED}),
    P.ABORTED: frozenset(),
    P.RELEASED: frozenset(),
}
_PHASES = {p.value: p for p in ArtifactLeasePhase}
_ALREADY = {
    P.COMMITTED: _Status.ALREADY_COMMITTED,
    P.ABORTED: _Status.ALREADY_ABORTED,
    P.RELEASED: _Status.ALREADY_RELEASED,
}


def intent_hash(claim: ArtifactRetentionClaim) -> str:
    """SHA-256 of the claim's canonical JSON (the intent a PREPARED record carries)."""
    return hashlib.sha256(canonical_json(claim.to_dict())).hexdigest()


@dataclass(frozen=True, slots=True)
class ArtifactJournalSummary:
    """What a full verification of the journal found (``toolswap journal verify``)."""

    records: int
    head: JournalHead
    phases: dict[str, int]
    """Leases per current phase."""
    torn_tail_bytes: int
    """Bytes of an incomplete final record that recovery ignores (0 if none)."""
    owner_head: JournalHead | None
    """The head the memory owner acknowledged, when an owner was consulted."""

    def to_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "head": self.head.to_dict(),
            "phases": dict(self.phases),
            "torn_tail_bytes": self.torn_tail_bytes,
            "owner_head": self.owner_head.to_dict() if self.owner_head else None,
        }


class ArtifactRetentionJournal:
    """The lease journal of one session.

    Args:
        session_dir: the trusted session root (or an open :class:`~toolswap.Session`).
        owner: the memory owner the journal acknowledges its head to and checks it
            against (see :mod:`toolswap.retention.owner`). The default, ``"default"``,
            binds the embedded :class:`~toolswap.SqliteMemoryOwner` at
            ``<session>/memory.sqlite3`` whenever that database exists; pass ``None`` to
            bind nothing, or the owner you publish to.
        now: clock for ``recorded_at`` and for deadlines (timezone-aware UTC).
        checkpoint_every: write a checkpoint of the fold once this many records were
            appended after the last one (0: never write one; an existing one is still
            used).
        store: where the records, the lock and the checkpoint live (default: the
            session's journal file and flock; see :mod:`toolswap.retention.journal_store`).
    """

    def __init__(
        self,
        session_dir: Path | str | Session,
        *,
        owner: ArtifactReferenceOwner | Literal["default"] | None = "default",
        now: Callable[[], datetime] | None = None,
        checkpoint_every: int = _checkpoint.CHECKPOINT_INTERVAL,
        store: JournalStore | None = None,
    ) -> None:
        if not isinstance(checkpoint_every, int) or checkpoint_every < 0:
            raise ValueError("checkpoint_every must be a non-negative number of records")
        self.session = (
            session_dir
            if isinstance(session_dir, Session)
            else Session.at(session_dir, create=False)
        )
        self.path = self.session.journal_path
        if store is not None and (
            not isinstance(store, JournalStore)
            or store.session.session_id != self.session.session_id
        ):
            raise TypeError("store must be a JournalStore of this session")
        self._store = store if store is not None else LocalJournalStore(self.session)
        why = self.session.backend.local_retention_refused()
        if why is not None and not self._store.shared:
            raise ConfigurationError(
                f"session {self.session.session_id!r} {why}, so its leases must live in a "
                "journal every host sees: pass a PostgresJournalStore (CLI: --database-url or "
                "TOOLSWAP_DATABASE_URL)"
            )
        self._log = self._store.open_log()
        self._manifest = Manifest.of(self.session)
        self._reader = ArtifactReader(self.session, self._manifest)
        self._owner_seq = 0
        """The owner's acknowledged head seen by the last owner-checked sync."""
        self._now = now or (lambda: datetime.now(UTC))
        if (
            owner is not None
            and owner != "default"
            and not isinstance(owner, ArtifactReferenceOwner)
        ):
            raise TypeError("owner must be an ArtifactReferenceOwner, 'default' or None")
        self._owner_spec = owner
        self._owner = owner if isinstance(owner, ArtifactReferenceOwner) else None
        self._leases: dict[str, ArtifactLeaseTransaction] = {}
        self._live: dict[str, ArtifactLeaseTransaction] = {}
        """PREPARED and COMMITTED leases, in the order they were prepared."""
        self._hashes = bytearray()
        """The 32-byte hash of every record, by sequence: checks an owner's head in O(1)."""
        self._intents: dict[str, tuple[dict[str, Any], ArtifactRetentionClaim]] = {}
        """Intents already validated, by intent hash (many leases repeat an intent)."""
        self._checkpoint_every = checkpoint_every
        self._checkpoint_seq = 0
        """The record the newest checkpoint this object loaded or wrote covers."""

    # -- identity and owner ----------------------------------------------------------

    @property
    def journal_key(self) -> str:
        """The name this journal's head is acknowledged under (:attr:`Session.key`)."""
        return self.session.key

    def lock(self) -> AbstractContextManager[None]:
        """The lock prepare(), every append and gc share (hold it to keep the view still)."""
        return self._store.lock()

    @property
    def log(self) -> ChainLog:
        """The underlying hash-chained log."""
        return self._log

    @property
    def owner(self) -> ArtifactReferenceOwner | None:
        """The bound memory owner, if any (the default one once its database exists)."""
        if self._owner is None and self._owner_spec == "default":
            from .owners.sqlite import DEFAULT_OWNER_FILENAME, SqliteMemoryOwner

            path = self.session.root / DEFAULT_OWNER_FILENAME
            if os.path.lexists(path):
                self._owner = SqliteMemoryOwner(path, create=False)
        return self._owner

    def _now_utc(self, now: datetime | None = None) -> datetime:
        when = now if now is not None else self._now()
        if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
            raise ArtifactRetentionError("the clock must give timezone-aware datetimes")
        return when.astimezone(UTC)

    # -- folding ---------------------------------------------------------------------

    def _fail(self, message: str) -> ArtifactLeaseJournalError:
        return ArtifactLeaseJournalError(
            f"{self._store.name}: {message}; nothing may be deleted until the journal is "
            "restored (run `toolswap journal verify`)"
        )

    def _clear(self) -> None:
        self._leases.clear()
        self._live.clear()
        self._hashes = bytearray()

    def _forget(self) -> None:
        """Drop every cached position: the next operation verifies the whole journal."""
        self._log.reset()
        self._clear()

    def _hash_at(self, seq: int) -> str:
        return self._hashes[(seq - 1) * 32 : seq * 32].hex()

    def _sync(self, *, use_checkpoint: bool = True) -> None:
        """Verify and fold the records appended since the last sync (hold the lock)."""
        previous = self._log.head
        try:
            if use_checkpoint and previous[0] == 0 and self._log.identity is None:
                self._load_checkpoint()
            reset, records = self._log.refresh()
            if reset:
                self._clear()
            for record in records:
                self._fold(record)
            if reset and previous[0] > 0:
                # The file was replaced: the new one must still hold what we saw.
                seq = self._log.head[0]
                if seq < previous[0] or self._hash_at(previous[0]) != previous[1]:
                    raise self._fail(
                        f"was replaced by a file without record {previous[0]} that this "
                        "process already read"
                    )
        except ArtifactLeaseJournalError:
            self._forget()
            raise
        self._checkpoint_if_due()

    def _load_checkpoint(self) -> None:
        loaded = self._store.load_checkpoint()
        if loaded is None or not self._log.resume(
            loaded.offset, loaded.seq, loaded.hash, loaded.identity
        ):
            return
        self._clear()
        for lease in loaded.leases:
            self._leases[lease.transaction_id] = lease
            if not lease.phase.is_terminal:
                self._live[lease.transaction_id] = lease
        self._hashes = bytearray(loaded.hashes)
        self._checkpoint_seq = loaded.seq

    def _checkpoint_if_due(self) -> None:
        seq = self._log.head[0]
        if self._checkpoint_every and seq - self._checkpoint_seq >= self._checkpoint_every:
            # An optimization: a checkpoint that cannot be written (a full disk, a database
            # that went away) leaves the journal whole; the next interval tries again.
            with suppress(OSError, ArtifactLeaseJournalError):
                self._write_checkpoint()
            self._checkpoint_seq = seq

    def _write_checkpoint(self) -> bool:
        return self._store.write_checkpoint(
            self._log, list(self._leases.values()), bytes(self._hashes)
        )

    def checkpoint(self) -> JournalHead | None:
        """Write a checkpoint of the fold as of the journal's head now.

        Returns:
            The record it covers, or None when the journal holds no record.

        Raises:
            ArtifactLeaseJournalError: the journal cannot be trusted.
            ArtifactRetentionError: the checkpoint could not be written (the previous one
                stays).
        """
        with self._store.lock():
            self._sync()
            try:
                written = self._write_checkpoint()
            except OSError as exc:
                raise ArtifactRetentionError(
                    f"cannot write the checkpoint of {self._store.name} "
                    f"({exc.strerror or exc}); the journal and the previous checkpoint are "
                    "intact: free disk space and retry"
                ) from exc
            if not written:
                return None
            self._checkpoint_seq = self._log.head[0]
            return self.head

    def _fold(self, record: dict[str, Any]) -> None:
        seq = record["seq"]
        where = f"record {seq}"
        if not record.keys() <= _RECORD_KEYS:
            extra = sorted(record.keys() - _RECORD_KEYS)
            raise self._fail(f"{where} has unknown fields {extra}")
        tx = record.get("transaction_id")
        if not isinstance(tx, str) or not TRANSACTION_ID_RE.fullmatch(tx):
            raise self._fail(f"{where} has an invalid transaction ID")
        phase = _PHASES.get(record.get("phase"))  # type: ignore[arg-type]
        if phase is None:
            raise self._fail(f"{where} has unknown phase {record.get('phase')!r}")
        recorded_at = record.get("recorded_at")
        try:
            when = datetime.fromisoformat(recorded_at)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._fail(f"{where} has an invalid recorded_at") from None
        if when.tzinfo is None:
            raise self._fail(f"{where} has a recorded_at without a timezone")
        digest = record.get("intent_hash")
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            raise self._fail(f"{where} has an invalid intent_hash")
        if phase is P.PREPARED:
            intent = record.get("intent")
            if not isinstance(intent, dict):
                raise self._fail(f"{where} is PREPARED without an intent")
            if tx in self._leases:
                raise self._fail(f"{where} prepares transaction {tx!r} a second time")
            claim = self._intent_claim(where, intent, digest)
            lease = ArtifactLeaseTransaction(tx, claim, phase, digest, when, when, seq, seq)
            self._live[tx] = lease
        else:
            if "intent" in record:
                raise self._fail(f"{where}: only a PREPARED record carries the intent")
            prev = self._leases.get(tx)
            if prev is None:
                raise self._fail(f"{where} records {phase.value} for {tx!r}, never prepared")
            if phase not in _TRANSITIONS[prev.phase]:
                raise self._fail(
                    f"{where}: illegal transition {prev.phase.value} -> {phase.value} for {tx!r}"
                )
            if digest != prev.intent_hash:
                raise self._fail(f"{where} rewrites the intent of {tx!r}")
            lease = ArtifactLeaseTransaction(
                tx, prev.claim, phase, digest, prev.prepared_at, when, prev.prepared_seq, seq
            )
            if phase is P.COMMITTED:
                self._live[tx] = lease
            else:
                self._live.pop(tx, None)
        self._leases[tx] = lease
        self._hashes += bytes.fromhex(record["hash"])

    def _intent_claim(
        self, where: str, intent: dict[str, Any], digest: str
    ) -> ArtifactRetentionClaim:
        """The validated claim of a PREPARED intent (identical intents are checked once)."""
        cached = self._intents.get(digest)
        if cached is not None and cached[0] == intent:
            return cached[1]
        if hashlib.sha256(canonical_json(intent)).hexdigest() != digest:
            raise self._fail(f"{where}: the intent does not match its intent_hash")
        try:
            claim = ArtifactRetentionClaim.from_dict(intent)
        except (ArtifactRetentionError, SourceIdError) as exc:
            raise self._fail(f"{where} has an invalid intent: {exc}") from None
        if claim.to_dict() != intent:
            raise self._fail(f"{where} has an intent that is not in canonical form")
        if claim.session != self.session.session_id:
            raise self._fail(f"{where} claims an artifact of another session")
        if len(self._intents) >= _INTENT_CACHE:
            self._intents.clear()
        self._intents[digest] = (intent, claim)
        return claim

    def _check_owner_head(self, head: JournalHead | None) -> None:
        if head is None or head.seq <= 0:
            return
        seq = self._log.head[0]
        if head.seq > seq:
            raise self._fail(
                f"is behind its memory owner: the owner acknowledged record {head.seq} but the "
                f"journal ends at record {seq}, so records were lost (truncated, or restored "
                "from an older copy)"
            )
        if self._hash_at(head.seq) != head.hash:
            raise self._fail(
                f"record {head.seq} is not the record the memory owner acknowledged (the "
                "journal was rewritten)"
            )

    def _read_anchor(self) -> JournalAnchor | None:
        try:
            return self._manifest.journal_anchor(self._store.name)
        except ChainLogError as exc:
            raise self._fail(f"its anchor in the session manifest cannot be read ({exc})") from exc

    def _check_anchor(self, head: JournalHead | None, seen: JournalAnchor | None) -> None:
        """Check the journal (and the owner's head) against the session manifest's anchor.

        Every append anchors the journal's head in the hash-chained manifest, with the
        highest record the owner had acknowledged by then. A journal deleted, emptied or
        rolled back no longer reaches the anchor, and an owner database deleted, emptied
        or swapped for another session's knows less than it once did: both are refused
        even when no owner holds the journal's head.

        ``seen`` is the anchor read before the owner's head was (None: the owner is not
        checked): the owner cannot know less than the anchor it had acknowledged by then.
        The owner's head is never read under the lock, so a newer anchor may name a head
        the owner acknowledged after that read.
        """
        anchor = self._read_anchor()
        # A session's leases live in one store: a manifest that anchors another store means
        # this one (empty or not) does not hold every claim; reading it alone could make
        # referenced artifacts look like orphans.
        others = [name for name in self._manifest.journal_stores() if name != self._store.name]
        if others:
            raise self._fail(
                f"is not the only lease journal of this session: the session manifest also "
                f"anchors {others[0]}; open the session's journal there (--database-url)"
            )
        if anchor is None:
            return
        seq = self._log.head[0]
        if seq < anchor.seq:
            raise self._fail(
                f"ends at record {seq} but the session manifest anchored record {anchor.seq}: "
                "the journal was deleted, emptied or restored from an older copy"
            )
        if self._hash_at(anchor.seq) != anchor.hash:
            raise self._fail(
                f"record {anchor.seq} is not the record the session manifest anchored (the "
                "journal was rewritten)"
            )
        if seen is not None and seen.owner_seq > (head.seq if head is not None else 0):
            known = "no memory owner is bound" if head is None else f"it knows {head.seq}"
            raise self._fail(
                f"its memory owner had acknowledged record {seen.owner_seq} but {known}: "
                "the owner database was deleted, emptied or replaced by another session's"
            )

    def _anchor(self) -> None:
        """Record the journal's new head in the session manifest (the lock is held).

        Best effort: a missing anchor only leaves an older one, which is still a valid
        lower bound; the journal record itself is already durable.
        """
        seq, digest = self._log.head
        with suppress(ChainLogError, OSError):
            self._manifest.append(
                JournalAnchor(
                    journal=self._store.name, seq=seq, hash=digest, owner_seq=self._owner_seq
                )
            )

    @contextmanager
    def _synced(
        self, owner: ArtifactReferenceOwner | None, *, owner_checked: bool = True
    ) -> Iterator[None]:
        """Hold the session lock with the folded view current and checked against ``owner``
        and the session manifest's anchor.

        The owner's head is read before the lock is taken (and before the journal is
        read): a head the owner acknowledged was appended before it was acknowledged, so
        the refresh that follows always sees it. The owner is never called under the lock.
        ``owner_checked=False`` is for reads that never decide anything about the owner.
        """
        # A journal opened with owner=None on purpose checks no owner; the default binding
        # whose database is gone must still prove the owner was never acknowledged.
        bound = owner is not None or self._owner_spec is not None
        seen = self._read_anchor() if owner_checked and bound else None
        head = owner.journal_head(self.journal_key) if owner is not None else None
        with self._store.lock():
            self._sync()
            self._check_owner_head(head)
            self._check_anchor(head, seen)
            if owner_checked:
                self._owner_seq = head.seq if head is not None else 0
            yield

    def _acknowledge(self, owner: ArtifactReferenceOwner | None) -> None:
        """Tell the owner the current head (outside the lock and any fence)."""
        if owner is None:
            return
        seq, digest = self._log.head
        if seq > 0:
            owner.acknowledge_journal_head(self.journal_key, JournalHead(seq, digest))

    def _acknowledge_best_effort(self, owner: ArtifactReferenceOwner | None) -> None:
        # After a terminal record the lease is settled whatever the owner says; a lost
        # acknowledgment only leaves the owner's head lower, which is still a valid bound.
        with suppress(ArtifactReferenceOwnerError):
            self._acknowledge(owner)

    # -- appending -------------------------------------------------------------------

    def _append(
        self, transaction_id: str, phase: ArtifactLeasePhase, claim: ArtifactRetentionClaim
    ) -> ArtifactLeaseTransaction:
        """Append one record (hold the lock, synced, transition already checked)."""
        body: dict[str, Any] = {
            "transaction_id": transaction_id,
            "phase": phase.value,
            "recorded_at": self._now_utc().isoformat(),
            "intent_hash": intent_hash(claim),
        }
        if phase is P.PREPARED:
            body["intent"] = claim.to_dict()
        before, record = self._log.append(body, crash_prefix=f"journal.{phase.value.lower()}")
        try:
            for earlier in before:  # appended without the lock by someone else
                self._fold(earlier)
            self._fold(record)
        except ArtifactLeaseJournalError:
            self._forget()
            raise
        self._anchor()
        self._checkpoint_if_due()
        return self._leases[transaction_id]

    def _require(self, transaction_id: str) -> ArtifactLeaseTransaction:
        lease = self._leases.get(transaction_id)
        if lease is None:
            raise ArtifactRetentionError(
                f"no lease with transaction ID {transaction_id!r} in session "
                f"{self.session.session_id!r}; list them with `toolswap leases --all`"
            )
        return lease

    def _transition(
        self, transaction_id: str, phase: ArtifactLeasePhase
    ) -> tuple[ArtifactLeaseTransaction, bool]:
        """Move a lease to ``phase`` under the lock; (lease, appended). Idempotent."""
        lease = self._require(transaction_id)
        if lease.phase is phase:
            return lease, False
        if phase not in _TRANSITIONS[lease.phase]:
            raise ArtifactRetentionError(
                f"transaction {transaction_id!r} is {lease.phase.value}; it cannot become "
                f"{phase.value}"
                + (
                    ": reconcile it with the memory owner first (`toolswap reconcile`)"
                    if lease.phase is P.PREPARED
                    else ""
                )
            )
        return self._append(transaction_id, phase, lease.claim), True

    def _finish(self, transaction_id: str, phase: ArtifactLeasePhase) -> ArtifactLeaseTransaction:
        owner = self.owner
        with self._synced(owner):
            lease, appended = self._transition(transaction_id, phase)
        if appended:
            self._acknowledge_best_effort(owner)
        return lease

    # -- the protocol ----------------------------------------------------------------

    def _verify_artifact(self, claim: ArtifactRetentionClaim) -> None:
        sid = claim.source_id
        try:
            # Another host's gc may have collected it since the last pull: decide on the
            # authority's chain, never on a replica that may lag (or be cut off).
            self._manifest.sync()
            ref = self._reader.verify(sid)
        except (ArtifactCollectedError, ArtifactNotFoundError) as exc:
            raise ArtifactRetentionError(
                f"missing artifact {sid}: {exc} (a reference to it would dangle, so nothing "
                "was published)"
            ) from exc
        except ArtifactIntegrityError as exc:
            raise ArtifactRetentionError(
                f"artifact {sid} failed verification, nothing was published: {exc}"
            ) from exc
        except ArtifactAccessError as exc:
            raise ArtifactRetentionError(
                f"artifact {sid} is not a regular file this session owns, nothing was "
                f"published: {exc}"
            ) from exc
        if ref.source.source_type != "tool_result":
            raise ArtifactRetentionError(f"{sid} is not a tool_result source")
        if ref.content_sha256 != claim.content_sha256:
            raise ArtifactRetentionError(
                f"the claim's digest differs from the artifact's for {sid}; nothing was published"
            )

    def prepare(
        self, claim: ArtifactRetentionClaim, *, transaction_id: str
    ) -> ArtifactLeaseTransaction:
        """Verify the artifact and append PREPARED (durably), under the session lock.

        Raises:
            ArtifactRetentionError: the claim is of another session, the transaction ID
                exists already (it is never published again: reconcile it), or the artifact
                is missing, collected, replaced or not a regular owned file.
        """
        tx = validate_transaction_id(transaction_id)
        if not isinstance(claim, ArtifactRetentionClaim):
            raise ArtifactRetentionError("prepare takes an ArtifactRetentionClaim")
        if claim.session != self.session.session_id:
            raise ArtifactRetentionError(
                f"the claim names an artifact of session {claim.session!r}, not of this "
                f"session ({self.session.session_id!r}); use that session's journal"
            )
        owner = self.owner
        with self._synced(owner):
            existing = self._leases.get(tx)
            if existing is not None:
                raise ArtifactRetentionError(
                    f"transaction {tx!r} already exists ({existing.phase.value}); a transaction "
                    "ID is never published again: reconcile it with reconcile_reference() "
                    "(`toolswap reconcile`) and use a new ID for a new publication"
                )
            self._verify_artifact(claim)
            lease = self._append(tx, P.PREPARED, claim)
        # Before the publisher runs, so a lost PREPARED record cannot go unnoticed.
        self._acknowledge(owner)
        return lease

    def commit(self, transaction_id: str) -> ArtifactLeaseTransaction:
        """Append COMMITTED: only once the owner has confirmed the reference is durable."""
        return self._finish(validate_transaction_id(transaction_id), P.COMMITTED)

    def abort(self, transaction_id: str) -> ArtifactLeaseTransaction:
        """Append ABORTED: only once the owner proved the reference absent for good."""
        return self._finish(validate_transaction_id(transaction_id), P.ABORTED)

    def release(self, transaction_id: str) -> ArtifactLeaseTransaction:
        """Append RELEASED: only after the owner deleted the reference (see remove_reference)."""
        return self._finish(validate_transaction_id(transaction_id), P.RELEASED)

    def publish_reference(
        self,
        claim: ArtifactRetentionClaim,
        publisher: Callable[[], T],
        *,
        transaction_id: str,
    ) -> tuple[ArtifactLeaseTransaction, T]:
        """PREPARED (fsync), then ``publisher()``, then COMMITTED (fsync).

        Args:
            claim: what the lease protects.
            publisher: writes the reference to the memory owner under ``transaction_id``
                (the stable publication ID); returning means the reference is durable.
            transaction_id: the stable ID; it is never published again.

        Returns:
            The committed lease and what the publisher returned.

        Raises:
            ArtifactPublicationRejected: the publisher proved nothing was written; the
                lease is ABORTED.
            ArtifactRetentionError: refused before the publisher ran (see :meth:`prepare`).
            ArtifactReferenceOwnerError: the bound owner could not acknowledge the PREPARED
                head; the publisher was not called and the lease stays PREPARED.
            Exception: anything else the publisher raised, unchanged; the lease stays
                PREPARED until reconciled.
        """
        lease = self.prepare(claim, transaction_id=transaction_id)
        crash_point("journal.publisher.before")
        try:
            result = publisher()
        except ArtifactPublicationRejected:
            self._finish(lease.transaction_id, P.ABORTED)
            raise
        crash_point("journal.publisher.after")
        return self._finish(lease.transaction_id, P.COMMITTED), result

    def remove_reference(
        self, transaction_id: str, remover: Callable[[], object]
    ) -> ArtifactLeaseTransaction:
        """``remover()`` first; RELEASED (fsync) only after it returns.

        A failed remover leaves the lease COMMITTED (still protecting the artifact); call
        again with an idempotent remover to finish. A RELEASED lease returns at once.

        Raises:
            ArtifactRetentionError: the lease is PREPARED (reconcile it first) or ABORTED.
        """
        tx = validate_transaction_id(transaction_id)
        with self._synced(self.owner):
            lease = self._require(tx)
            if lease.phase is P.RELEASED:
                return lease
            if lease.phase is not P.COMMITTED:
                self._transition(tx, P.RELEASED)  # raises with the reason
        crash_point("journal.remover.before")
        remover()
        crash_point("journal.remover.after")
        return self._finish(tx, P.RELEASED)

    # -- views -----------------------------------------------------------------------

    def recover(
        self, now: datetime | None = None, *, owner: ArtifactReferenceOwner | None = None
    ) -> ArtifactClaimView:
        """The claims this journal protects at ``now`` (default: the clock).

        Committed leases count while active; every PREPARED lease counts with no deadline
        and is listed in ``pending_transaction_ids``.

        Raises:
            ArtifactLeaseJournalError: the journal is corrupt, unsafe to open, or behind the
                head its memory owner (``owner``, else the bound one) acknowledged.
        """
        when = self._now_utc(now)
        with self._synced(owner if owner is not None else self.owner):
            return self._view(when)

    def _view(self, when: datetime) -> ArtifactClaimView:
        folded: dict[str, list[Any]] = {}
        conflicts: list[str] = []
        pending: list[str] = []
        for lease in self._live.values():
            claim = lease.claim
            if lease.phase is P.PREPARED:
                pending.append(lease.transaction_id)
                deadline = None
            elif claim.retain_until is not None and claim.retain_until <= when:
                continue
            else:
                deadline = claim.retain_until
            entry = folded.get(claim.source_id)
            if entry is None:
                folded[claim.source_id] = [claim.content_sha256, claim.reference_count, deadline]
                continue
            if entry[0] != claim.content_sha256:
                if claim.source_id not in conflicts:
                    conflicts.append(claim.source_id)
                continue
            entry[1] = min(entry[1] + claim.reference_count, MAX_REFERENCE_COUNT)
            entry[2] = None if entry[2] is None or deadline is None else max(entry[2], deadline)
        seq, digest = self._log.head
        return ArtifactClaimView(
            claims={
                sid: ArtifactRetentionClaim(sid, sha, count, deadline)
                for sid, (sha, count, deadline) in folded.items()
            },
            pending_transaction_ids=tuple(pending),
            as_of=when,
            journal_seq=seq,
            journal_hash=digest,
            digest_conflicts=tuple(conflicts),
        )

    def transaction(self, transaction_id: str) -> ArtifactLeaseTransaction | None:
        """The lease with this ID as the journal records it now, or None."""
        with self._synced(None, owner_checked=False):
            return self._leases.get(transaction_id)

    def transactions(self) -> list[ArtifactLeaseTransaction]:
        """Every lease, in the order they were prepared."""
        with self._synced(None, owner_checked=False):
            return sorted(self._leases.values(), key=lambda lease: lease.prepared_seq)

    def has_durable_journal(self) -> bool:
        """True when the journal file exists and holds at least one complete record.

        Raises:
            ArtifactLeaseJournalError: the journal exists but is corrupt or unsafe.
        """
        with self._synced(None, owner_checked=False):
            return self._log.head[0] > 0

    @property
    def head(self) -> JournalHead:
        """The last record folded (sequence 0 and the genesis hash before any)."""
        seq, digest = self._log.head
        return JournalHead(seq, digest if seq else GENESIS_HASH)

    def verify(self, *, owner: ArtifactReferenceOwner | None = None) -> ArtifactJournalSummary:
        """Verify the whole journal from its first byte (ignoring the cache).

        Raises:
            ArtifactLeaseJournalError: any defect but a torn final record, or the journal is
                behind its owner's acknowledged head.
        """
        owner = owner if owner is not None else self.owner
        head = owner.journal_head(self.journal_key) if owner is not None else None
        with self._store.lock():
            self._forget()
            self._sync(use_checkpoint=False)
            self._check_owner_head(head)
            self._store.check_checkpoint(bytes(self._hashes))
            phases = {p.value: 0 for p in ArtifactLeasePhase}
            for lease in self._leases.values():
                phases[lease.phase.value] += 1
            torn = self._log.torn_tail
            return ArtifactJournalSummary(
                records=self._log.head[0],
                head=self.head,
                phases=phases,
                torn_tail_bytes=torn[1] if torn else 0,
                owner_head=head,
            )

    # -- reconciliation --------------------------------------------------------------

    def _report(
        self,
        transaction_id: str,
        status: ArtifactReconcileStatus,
        reason: str,
        generation: int | None = None,
    ) -> ArtifactReconcileReport:
        return ArtifactReconcileReport(transaction_id, status, reason, generation)

    def _already(
        self, lease: ArtifactLeaseTransaction, generation: int | None = None
    ) -> ArtifactReconcileReport:
        return self._report(
            lease.transaction_id,
            _ALREADY[lease.phase],
            f"the lease was already {lease.phase.value} (record {lease.last_seq})",
            generation,
        )

    def reconcile_reference(
        self, transaction_id: str, owner: ArtifactReferenceOwner
    ) -> ArtifactReconcileReport:
        """Settle one lease with the memory owner, under the owner's fence.

        A PREPARED lease becomes COMMITTED when the owner holds the matching reference,
        ABORTED once the owner has sealed its absence, and stays PREPARED otherwise (the
        report says why). A lease already settled reports ``already_*``. Idempotent: of
        several concurrent reconcilers at most one appends the terminal record.

        Raises:
            ArtifactLeaseJournalError: the journal cannot be trusted.
            ArtifactRetentionError: no lease has this transaction ID.
        """
        tx = validate_transaction_id(transaction_id)
        if not isinstance(owner, ArtifactReferenceOwner):
            raise TypeError("reconcile_reference needs an ArtifactReferenceOwner")
        with self._synced(owner):
            lease = self._require(tx)
        if lease.phase is not P.PREPARED:
            return self._already(lease)
        decided: ArtifactReconcileReport | None = None
        try:
            with owner.inspect_fenced(lease) as fence:
                crash_point("reconcile.fenced")
                decided = self._decide(lease, fence)
        except ArtifactLeaseJournalError:
            raise
        except Exception as exc:
            # The owner failed (taking the fence, sealing, or releasing it). The journal
            # is the truth: report what it holds now.
            if decided is None:
                with self._store.lock():
                    self._sync()
                    current = self._leases[tx]
                if current.phase is not P.PREPARED:
                    return self._already(current)
                return self._report(
                    tx,
                    _Status.PENDING_UNKNOWN,
                    f"the memory owner failed ({type(exc).__name__}); the lease stays PREPARED "
                    "and keeps its artifact; reconcile again later",
                )
        assert decided is not None
        if decided.status in (_Status.COMMITTED, _Status.ABORTED):
            self._acknowledge_best_effort(owner)
        return decided

    def _decide(
        self, lease: ArtifactLeaseTransaction, fence: ArtifactReferenceFence
    ) -> ArtifactReconcileReport:
        tx = lease.transaction_id
        claim = lease.claim
        obs = fence.observation
        if not isinstance(obs, ArtifactReferenceObservation):
            raise ArtifactReferenceOwnerError("the fence gave no ArtifactReferenceObservation")
        with self._store.lock():
            self._sync()
            current = self._leases[tx]
        if current.phase is not P.PREPARED:
            return self._already(current, obs.generation)
        if obs.state is ArtifactObservationState.PUBLISHED:
            if obs.source_id == claim.source_id and obs.content_sha256 == claim.content_sha256:
                return self._settle(
                    lease,
                    P.COMMITTED,
                    "the owner holds the reference with the claimed source ID and digest",
                    obs.generation,
                )
            return self._report(
                tx,
                _Status.PENDING_CONFLICT,
                "the owner holds a different reference under this transaction ID; the lease "
                "stays PREPARED and keeps its artifact",
                obs.generation,
            )
        if obs.state is ArtifactObservationState.UNKNOWN:
            return self._report(
                tx,
                _Status.PENDING_UNKNOWN,
                "the owner cannot tell whether the reference exists; the lease stays PREPARED",
                obs.generation,
            )
        if obs.sealed:
            return self._settle(
                lease, P.ABORTED, "the owner had already sealed the absence", obs.generation
            )
        try:
            sealed = fence.seal_absent()
        except ArtifactFenceStaleError:
            return self._report(
                tx,
                _Status.PENDING_STALE,
                "the owner's generation changed before the absence could be sealed; the lease "
                "stays PREPARED: observe again",
                obs.generation,
            )
        if sealed.state is not ArtifactObservationState.ABSENT or not sealed.sealed:
            raise ArtifactReferenceOwnerError("seal_absent did not return a sealed absence")
        return self._settle(
            lease,
            P.ABORTED,
            "the owner sealed the absence with a tombstone; the transaction ID can never be "
            "published",
            sealed.generation,
        )

    def _settle(
        self,
        lease: ArtifactLeaseTransaction,
        phase: ArtifactLeasePhase,
        reason: str,
        generation: int | None,
    ) -> ArtifactReconcileReport:
        with self._store.lock():
            self._sync()
            current = self._leases[lease.transaction_id]
            if current.phase is not P.PREPARED:
                return self._already(current, generation)
            self._append(lease.transaction_id, phase, current.claim)
        status = _Status.COMMITTED if phase is P.COMMITTED else _Status.ABORTED
        return self._report(lease.transaction_id, status, reason, generation)

    def reconcile_pending(self, owner: ArtifactReferenceOwner) -> list[ArtifactReconcileReport]:
        """Reconcile every lease that was PREPARED when the call started.

        Leases prepared meanwhile wait for the next round. Each lease gets a report, even
        when reconciling another one failed.

        Raises:
            ArtifactLeaseJournalError: the journal cannot be trusted.
        """
        pending = self.recover(owner=owner).pending_transaction_ids
        reports: list[ArtifactReconcileReport] = []
        for tx in pending:
            try:
                reports.append(self.reconcile_reference(tx, owner))
            except ArtifactLeaseJournalError:
                raise
            except Exception as exc:
                reports.append(
                    self._report(
                        tx,
                        _Status.PENDING_UNKNOWN,
                        f"reconciliation failed ({type(exc).__name__}); the lease stays "
                        "PREPARED and keeps its artifact",
                    )
                )
        return reports
