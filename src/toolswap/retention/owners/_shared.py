"""What every memory owner shares: the stored record, publish validation, observation.

One home for the rules both owners apply, so the SQLite and PostgreSQL owners cannot
drift: what a valid publication is, how a stored row becomes a reference, and when a
row is PUBLISHED, ABSENT or UNKNOWN.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ..._json_form import JsonRecord
from ...artifact import SHA256_RE, ArtifactMemoryReference, parse_artifact_source_id
from ...chainlog import canonical_json
from ...errors import (
    ArtifactPublicationRejected,
    ArtifactReferenceOwnerError,
    ArtifactRetentionError,
    InvalidArgumentError,
    SourceIdError,
)
from ...settings import require_aware
from ..lease import validate_transaction_id
from ..owner import ArtifactObservationState, ArtifactReferenceObservation, JournalHead

__all__ = [
    "CheckedPublication",
    "StoredMemoryReference",
    "check_journal_head",
    "check_publication",
    "observe_row",
    "stamp",
    "stored_reference",
    "tombstoned_message",
]


@dataclass(frozen=True, slots=True)
class StoredMemoryReference(JsonRecord):
    """A reference as the owner stores it."""

    transaction_id: str
    """The publication ID (the journal's transaction ID)."""
    reference: ArtifactMemoryReference
    published_at: datetime
    generation: int
    """The ID's generation after the publish."""


@dataclass(frozen=True, slots=True)
class CheckedPublication:
    """A publication that passed validation: what the owner writes."""

    reference: ArtifactMemoryReference
    session: str
    body: str
    """The canonical JSON of the reference, compared byte for byte on republish."""


def check_publication(
    transaction_id: str, memory_reference: ArtifactMemoryReference
) -> CheckedPublication:
    """Validate a publication before any write.

    Raises:
        ArtifactPublicationRejected: the ID or the reference is malformed.
    """
    try:
        validate_transaction_id(transaction_id)
        if not isinstance(memory_reference, ArtifactMemoryReference):
            raise ArtifactRetentionError("publish takes an ArtifactMemoryReference")
        checked = ArtifactMemoryReference.from_dict(memory_reference.to_dict())
        session = parse_artifact_source_id(checked.source.source_id).session
    except (ArtifactRetentionError, SourceIdError, KeyError, ValueError) as exc:
        raise ArtifactPublicationRejected(f"reference rejected before write: {exc}") from exc
    body = canonical_json(memory_reference.to_dict()).decode()
    return CheckedPublication(checked, session, body)


def tombstoned_message(transaction_id: str) -> str:
    return (
        f"publication ID {transaction_id!r} is tombstoned: it was aborted or removed and can "
        "never be published again; use a new transaction ID"
    )


def stored_reference(
    transaction_id: str, body: str, published_at: datetime, generation: int
) -> StoredMemoryReference:
    """A stored row as a reference.

    Raises:
        ArtifactReferenceOwnerError: the stored body is unreadable.
    """
    try:
        reference = ArtifactMemoryReference.from_dict(json.loads(body))
    except (ValueError, KeyError, TypeError, SourceIdError) as exc:
        raise ArtifactReferenceOwnerError(
            f"memory owner: the reference stored under {transaction_id!r} is unreadable"
        ) from exc
    return StoredMemoryReference(transaction_id, reference, published_at, generation)


def observe_row(
    generation: int, row: tuple[object, object, object] | None, sealed: bool
) -> ArtifactReferenceObservation:
    """The observation of a publication ID from its ``(source_id, sha256, body)`` row."""
    if row is None:
        return ArtifactReferenceObservation(
            ArtifactObservationState.ABSENT, generation, sealed=sealed
        )
    source_id, sha, body = row
    try:
        stored = ArtifactMemoryReference.from_dict(json.loads(str(body)))
        consistent = (
            not sealed
            and isinstance(sha, str)
            and isinstance(source_id, str)
            and SHA256_RE.fullmatch(sha) is not None
            and stored.source.source_id == source_id
            and stored.content_sha256 == sha
        )
    except (ValueError, KeyError, TypeError, SourceIdError):
        consistent = False
    if not consistent:
        # A row we cannot read, or a row beside a tombstone: do not guess.
        return ArtifactReferenceObservation(ArtifactObservationState.UNKNOWN, generation)
    return ArtifactReferenceObservation(
        ArtifactObservationState.PUBLISHED,
        generation,
        source_id=str(source_id),
        content_sha256=str(sha),
    )


def check_journal_head(head: JournalHead) -> None:
    """Raises ValueError unless ``head`` is a positive sequence and a SHA-256."""
    if head.seq < 1 or not SHA256_RE.fullmatch(head.hash):
        raise InvalidArgumentError("a journal head has a positive sequence and a SHA-256")


def stamp(now: Callable[[], datetime]) -> datetime:
    """The clock's time in UTC.

    Raises:
        ClockError: the clock gave a naive datetime.
    """
    return require_aware(now()).astimezone(UTC)
