"""The lease protocol: prepare, commit, abort, release, publish and remove; and the views.

Publishing follows the spec's order exactly: verify the artifact and append PREPARED
(fsync) under the session lock, run the publisher, append COMMITTED (fsync). Only
:class:`~toolswap.errors.ArtifactPublicationRejected` appends ABORTED; any other exception
propagates unchanged and the lease stays PREPARED, protecting its artifact with no
deadline until reconciliation settles it with the memory owner. Removing runs the remover
first and appends RELEASED only after it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from .._json_form import JsonRecord
from ..crashpoints import crash_point
from ..errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from ._core import JournalCore
from .claims import ArtifactClaimView, ArtifactRetentionClaim
from .lease import ArtifactLeasePhase, ArtifactLeaseTransaction, validate_transaction_id
from .owner import ArtifactReferenceOwner, JournalHead

__all__ = ["ArtifactJournalSummary", "LeaseProtocol"]

T = TypeVar("T")
P = ArtifactLeasePhase


@dataclass(frozen=True, slots=True)
class ArtifactJournalSummary(JsonRecord):
    """What a full verification of the journal found (``toolswap journal verify``)."""

    records: int
    head: JournalHead
    phases: dict[str, int]
    """Leases per current phase."""
    torn_tail_bytes: int
    """Bytes of an incomplete final record that recovery ignores (0 if none)."""
    owner_head: JournalHead | None
    """The head the memory owner acknowledged, when an owner was consulted."""


class LeaseProtocol(JournalCore):
    """The publish/remove protocol and the read-only views of the journal."""

    # -- the protocol ----------------------------------------------------------------

    def _verify_artifact(self, claim: ArtifactRetentionClaim) -> None:
        sid = claim.source_id
        try:
            self._sync_shared_manifest()
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
            existing = self._fold.leases.get(tx)
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
            return self._fold.view(when, self._log.head)

    def transaction(self, transaction_id: str) -> ArtifactLeaseTransaction | None:
        """The lease with this ID as the journal records it now, or None."""
        with self._synced(None, owner_checked=False):
            return self._fold.leases.get(transaction_id)

    def transactions(self) -> list[ArtifactLeaseTransaction]:
        """Every lease, in the order they were prepared."""
        with self._synced(None, owner_checked=False):
            return sorted(self._fold.leases.values(), key=lambda lease: lease.prepared_seq)

    def has_durable_journal(self) -> bool:
        """True when the journal file exists and holds at least one complete record.

        Raises:
            ArtifactLeaseJournalError: the journal exists but is corrupt or unsafe.
        """
        with self._synced(None, owner_checked=False):
            return self._log.head[0] > 0

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
            self._guard.check_owner_head(head, self._log.head[0])
            self._store.check_checkpoint(bytes(self._fold.hashes))
            torn = self._log.torn_tail
            return ArtifactJournalSummary(
                records=self._log.head[0],
                head=self.head,
                phases=self._fold.phases(),
                torn_tail_bytes=torn[1] if torn else 0,
                owner_head=head,
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
