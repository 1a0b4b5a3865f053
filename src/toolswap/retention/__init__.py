"""Durable retention: claims, the lease journal, owner reconciliation, memory owners.

See :mod:`toolswap.retention.journal` for the publish/remove protocol,
:mod:`toolswap.retention.owner` for the owner's fence, tombstone and journal-head
acknowledgment, and :mod:`toolswap.retention.session_retention` for
:func:`open_retention`, which opens the journal and owner a session uses.
"""

from __future__ import annotations

from . import owner as _owner
from .claims import ArtifactClaimView, ArtifactRetentionClaim
from .journal import (
    ArtifactJournalSummary,
    ArtifactLeasePhase,
    ArtifactLeaseTransaction,
    ArtifactRetentionJournal,
)
from .owner import *  # noqa: F403 (the owner interface is public; owner.__all__ names it)
from .owners.sqlite import DEFAULT_OWNER_FILENAME, SqliteMemoryOwner, StoredMemoryReference
from .session_retention import (
    RetentionChoice,
    RetentionKind,
    SessionRetention,
    open_retention,
    read_retention_choice,
)

__all__ = [
    "DEFAULT_OWNER_FILENAME",
    "ArtifactClaimView",
    "ArtifactJournalSummary",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactRetentionClaim",
    "ArtifactRetentionJournal",
    "RetentionChoice",
    "RetentionKind",
    "SessionRetention",
    "SqliteMemoryOwner",
    "StoredMemoryReference",
    "open_retention",
    "read_retention_choice",
]
__all__ += _owner.__all__
