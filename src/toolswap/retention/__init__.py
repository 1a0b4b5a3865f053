"""Durable retention: claims, the lease journal, owner reconciliation, memory owners.

See :mod:`toolswap.retention.journal` for the publish/remove protocol and
:mod:`toolswap.retention.owner` for the owner's fence, tombstone and journal-head
acknowledgment.
"""

from __future__ import annotations

from .claims import ArtifactClaimView, ArtifactRetentionClaim
from .journal import (
    ArtifactJournalSummary,
    ArtifactLeasePhase,
    ArtifactLeaseTransaction,
    ArtifactRetentionJournal,
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
from .owners.sqlite import DEFAULT_OWNER_FILENAME, SqliteMemoryOwner, StoredMemoryReference

__all__ = [
    "DEFAULT_OWNER_FILENAME",
    "ArtifactClaimView",
    "ArtifactJournalSummary",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactObservationState",
    "ArtifactReconcileReport",
    "ArtifactReconcileStatus",
    "ArtifactReferenceFence",
    "ArtifactReferenceObservation",
    "ArtifactReferenceOwner",
    "ArtifactRetentionClaim",
    "ArtifactRetentionJournal",
    "JournalHead",
    "SqliteMemoryOwner",
    "StoredMemoryReference",
]
