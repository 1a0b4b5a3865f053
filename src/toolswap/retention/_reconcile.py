"""Reconciliation: settle PREPARED leases with the memory owner, under its fence.

A lease stays PREPARED when its publisher failed or its process died between PREPARED and
COMMITTED. Only the owner can say whether the reference was written, so the journal asks
it inside the owner's fence (see :mod:`toolswap.retention.owner`): a matching reference
commits the lease, a sealed absence (a tombstone) aborts it, anything uncertain keeps it
PREPARED and protecting its artifact. Of several concurrent reconcilers at most one
appends the terminal record.
"""

from __future__ import annotations

from ..crashpoints import crash_point
from ..errors import (
    ArtifactFenceStaleError,
    ArtifactLeaseJournalError,
    ArtifactReferenceOwnerError,
    InvalidArgumentError,
)
from ._protocol import LeaseProtocol
from .lease import ArtifactLeasePhase, ArtifactLeaseTransaction, validate_transaction_id
from .owner import (
    ArtifactObservationState,
    ArtifactReconcileReport,
    ArtifactReconcileStatus,
    ArtifactReferenceFence,
    ArtifactReferenceObservation,
    ArtifactReferenceOwner,
)

__all__ = ["LeaseReconciliation"]

P = ArtifactLeasePhase
_Status = ArtifactReconcileStatus
_ALREADY = {
    P.COMMITTED: _Status.ALREADY_COMMITTED,
    P.ABORTED: _Status.ALREADY_ABORTED,
    P.RELEASED: _Status.ALREADY_RELEASED,
}


def _report(
    transaction_id: str,
    status: ArtifactReconcileStatus,
    reason: str,
    generation: int | None = None,
) -> ArtifactReconcileReport:
    return ArtifactReconcileReport(transaction_id, status, reason, generation)


def _already(
    lease: ArtifactLeaseTransaction, generation: int | None = None
) -> ArtifactReconcileReport:
    return _report(
        lease.transaction_id,
        _ALREADY[lease.phase],
        f"the lease was already {lease.phase.value} (record {lease.last_seq})",
        generation,
    )


class LeaseReconciliation(LeaseProtocol):
    """``reconcile_reference`` and ``reconcile_pending`` on top of the protocol."""

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
            raise InvalidArgumentError("reconcile_reference needs an ArtifactReferenceOwner")
        with self._synced(owner):
            lease = self._require(tx)
        if lease.phase is not P.PREPARED:
            return _already(lease)
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
                    current = self._fold.leases[tx]
                if current.phase is not P.PREPARED:
                    return _already(current)
                return _report(
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
            current = self._fold.leases[tx]
        if current.phase is not P.PREPARED:
            return _already(current, obs.generation)
        if obs.state is ArtifactObservationState.PUBLISHED:
            if obs.source_id == claim.source_id and obs.content_sha256 == claim.content_sha256:
                return self._settle(
                    lease,
                    P.COMMITTED,
                    "the owner holds the reference with the claimed source ID and digest",
                    obs.generation,
                )
            return _report(
                tx,
                _Status.PENDING_CONFLICT,
                "the owner holds a different reference under this transaction ID; the lease "
                "stays PREPARED and keeps its artifact",
                obs.generation,
            )
        if obs.state is ArtifactObservationState.UNKNOWN:
            return _report(
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
            return _report(
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
            current = self._fold.leases[lease.transaction_id]
            if current.phase is not P.PREPARED:
                return _already(current, generation)
            self._append(lease.transaction_id, phase, current.claim)
        status = _Status.COMMITTED if phase is P.COMMITTED else _Status.ABORTED
        return _report(lease.transaction_id, status, reason, generation)

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
                    _report(
                        tx,
                        _Status.PENDING_UNKNOWN,
                        f"reconciliation failed ({type(exc).__name__}); the lease stays "
                        "PREPARED and keeps its artifact",
                    )
                )
        return reports
