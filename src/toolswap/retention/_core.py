"""The journal's core: its fold kept current under the lock, checked, and appended to.

:class:`JournalCore` is the base the protocol (:mod:`toolswap.retention._protocol`) and
reconciliation (:mod:`toolswap.retention._reconcile`) build on; the public class,
:class:`~toolswap.retention.journal.ArtifactRetentionJournal`, sets the attributes it
declares. Everything that touches the journal's records goes through :meth:`_synced` (the
lock, the records appended since the last look folded, the guards checked) and
:meth:`_append` (one durable record, folded, anchored).

This is also the one place that asks whether the session is kept in a shared store
(the session's backend).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import UTC, datetime
from typing import Any, Literal

from .._gc import collector_paused
from ..chainlog import GENESIS_HASH, ChainLog
from ..errors import (
    ArtifactLeaseJournalError,
    ArtifactReferenceOwnerError,
    ArtifactRetentionError,
    ConfigurationError,
)
from ..manifest import Manifest
from ..reader import ArtifactReader
from ..session import Session
from ..settings import require_aware
from ._fold import TRANSITIONS, LeaseFold, intent_hash
from ._guards import LossGuard
from .claims import ArtifactRetentionClaim
from .journal_store import JournalStore
from .lease import ArtifactLeasePhase, ArtifactLeaseTransaction
from .owner import ArtifactReferenceOwner, JournalHead

__all__ = ["JournalCore"]

P = ArtifactLeasePhase


class JournalCore:
    """The state and the lock discipline every journal operation shares."""

    session: Session
    _store: JournalStore
    _log: ChainLog
    _manifest: Manifest
    _reader: ArtifactReader
    _fold: LeaseFold
    _guard: LossGuard
    _now: Callable[[], datetime]
    _owner_spec: ArtifactReferenceOwner | Literal["default"] | None
    """The owner the journal was opened with: one, the session's default, or none."""
    _owner: ArtifactReferenceOwner | None
    _owner_seq: int
    """The owner's acknowledged head seen by the last owner-checked sync."""
    _checkpoint_every: int
    _checkpoint_seq: int
    """The record the newest checkpoint this object loaded or wrote covers."""

    # -- the session's backend ---------------------------------------------------------

    def _refuse_unshared_store(self) -> None:
        why = self.session.backend.local_retention_refused()
        if why is not None and not self._store.shared:
            raise ConfigurationError(
                f"session {self.session.session_id!r} {why}, so its leases must live in a "
                "journal every host sees: pass a PostgresJournalStore (CLI: --database-url or "
                "TOOLSWAP_DATABASE_URL)"
            )

    def _sync_shared_manifest(self) -> None:
        # Another host's gc may have collected it since the last pull: decide on the
        # authority's chain, never on a replica that may lag (or be cut off).
        self._manifest.sync()

    # -- identity, owner, clock ------------------------------------------------------

    @property
    def journal_key(self) -> str:
        """The name this journal's head is acknowledged under (:attr:`Session.key`)."""
        return self.session.key

    def lock(self) -> AbstractContextManager[None]:
        """The lock prepare(), every append and gc share (hold it to keep the view still)."""
        return self._store.lock()

    def close(self) -> None:
        """Close the connections the journal's store and its bound owner keep between
        operations (a database's; local files keep none). Both stay usable."""
        self._store.close()
        if self._owner is not None:
            self._owner.close()

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

    @property
    def head(self) -> JournalHead:
        """The last record folded (sequence 0 and the genesis hash before any)."""
        seq, digest = self._log.head
        return JournalHead(seq, digest if seq else GENESIS_HASH)

    def _now_utc(self, now: datetime | None = None) -> datetime:
        return require_aware(now if now is not None else self._now()).astimezone(UTC)

    # -- keeping the fold current ----------------------------------------------------

    def _fail(self, message: str) -> ArtifactLeaseJournalError:
        return ArtifactLeaseJournalError(
            f"{self._store.name}: {message}; nothing may be deleted until the journal is "
            "restored (run `toolswap journal verify`)"
        )

    def _forget(self) -> None:
        """Drop every cached position: the next operation verifies the whole journal."""
        self._log.reset()
        self._fold.clear()

    def _sync(self, *, use_checkpoint: bool = True) -> None:
        """Verify and fold the records appended since the last sync (hold the lock)."""
        previous = self._log.head
        try:
            with collector_paused():  # a recovery builds many lasting objects, no cycles
                if use_checkpoint and previous[0] == 0 and self._log.identity is None:
                    self._load_checkpoint()
                reset, records = self._log.refresh()
                if reset:
                    self._fold.clear()
                for record in records:
                    self._fold.fold(record)
            if reset and previous[0] > 0:
                # The file was replaced: the new one must still hold what we saw.
                seq = self._log.head[0]
                if seq < previous[0] or self._fold.hash_at(previous[0]) != previous[1]:
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
        self._fold.restore(loaded.leases, loaded.hashes)
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
            self._log, list(self._fold.leases.values()), bytes(self._fold.hashes)
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
        # A journal opened with owner=None on purpose checks no owner; the default owner
        # whose database is gone must still prove the owner was never acknowledged.
        bound = owner is not None or self._owner_spec is not None
        seen = self._guard.read_anchor() if owner_checked and bound else None
        head = owner.journal_head(self.journal_key) if owner is not None else None
        with self._store.lock():
            self._sync()
            seq = self._log.head[0]
            self._guard.check_owner_head(head, seq)
            self._guard.check_anchor(head, seen, seq)
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
                self._fold.fold(earlier)
            self._fold.fold(record)
        except ArtifactLeaseJournalError:
            self._forget()
            raise
        self._guard.anchor(self._log.head, self._owner_seq)
        self._checkpoint_if_due()
        return self._fold.leases[transaction_id]

    def _require(self, transaction_id: str) -> ArtifactLeaseTransaction:
        lease = self._fold.leases.get(transaction_id)
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
        if phase not in TRANSITIONS[lease.phase]:
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
