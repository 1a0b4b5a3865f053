"""The lease record types: a lease's phase, one lease as recorded, its stable ID.

A lease moves ``PREPARED -> COMMITTED | ABORTED`` and ``COMMITTED -> RELEASED`` (see
:mod:`toolswap.retention.journal`). This is a leaf module: the journal, the owner
contract and every owner import these types, and it imports none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from .._json_form import fields_form
from ..errors import ArtifactRetentionError
from .claims import ArtifactRetentionClaim

__all__ = [
    "TRANSACTION_ID_RE",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "validate_transaction_id",
]

TRANSACTION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]{0,199}")


class ArtifactLeasePhase(StrEnum):
    """Where a lease is in its life. Only the transitions in the module docstring exist."""

    PREPARED = "PREPARED"
    """Intent durable, publication unresolved: protects the artifact with no deadline."""
    COMMITTED = "COMMITTED"
    """The owner holds the reference: protects until released or past ``retain_until``."""
    ABORTED = "ABORTED"
    """The reference was never written and never will be."""
    RELEASED = "RELEASED"
    """The owner deleted the reference."""

    @property
    def is_terminal(self) -> bool:
        return self in (ArtifactLeasePhase.ABORTED, ArtifactLeasePhase.RELEASED)


def validate_transaction_id(transaction_id: str) -> str:
    """Return ``transaction_id`` if it is a usable stable ID, else raise.

    Raises:
        ArtifactRetentionError: not 1-200 characters of letters, digits and ``._:@+=/-``
            starting with a letter or digit.
    """
    if not isinstance(transaction_id, str) or not TRANSACTION_ID_RE.fullmatch(transaction_id):
        shown = transaction_id[:80] if isinstance(transaction_id, str) else transaction_id
        raise ArtifactRetentionError(
            f"invalid transaction ID {shown!r}: use 1-200 characters of letters, digits and "
            "'._:@+=/-', starting with a letter or digit"
        )
    return transaction_id


@dataclass(frozen=True, slots=True)
class ArtifactLeaseTransaction:
    """One lease as the journal last recorded it."""

    transaction_id: str
    claim: ArtifactRetentionClaim
    phase: ArtifactLeasePhase
    intent_hash: str
    """SHA-256 of the canonical claim; every later record of the lease repeats it."""
    prepared_at: datetime
    updated_at: datetime
    """When the current phase was recorded."""
    prepared_seq: int
    last_seq: int
    """Sequence number of the record that set the current phase."""

    @property
    def source_id(self) -> str:
        return self.claim.source_id

    def to_dict(self) -> dict[str, object]:
        return {
            "transaction_id": self.transaction_id,
            "phase": self.phase.value,
            **fields_form(self, skip=("transaction_id", "phase")),
        }
