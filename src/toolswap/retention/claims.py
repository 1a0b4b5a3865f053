"""Retention claims: the path-free projection of a memory reference, and the claim view.

A claim names an artifact by source ID and full digest only. It never carries a path: the
file's location is derived from the trusted session root by whoever consumes the claim,
after checking that the claim's session is that session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from ..artifact import SHA256_RE, ArtifactMemoryReference, parse_artifact_source_id
from ..errors import ArtifactRetentionError

__all__ = ["MAX_REFERENCE_COUNT", "ArtifactClaimView", "ArtifactRetentionClaim"]

MAX_REFERENCE_COUNT = 1 << 31
"""Upper bound of one claim's reference count (a sanity bound, not a quota)."""


def parse_deadline(value: datetime | str | None, *, what: str = "retain_until") -> datetime | None:
    """A timezone-aware UTC datetime from a datetime or an ISO 8601 string (None stays None).

    Raises:
        ArtifactRetentionError: the value is naive, malformed or of another type.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ArtifactRetentionError(
                f"{what} {text[:64]!r} is not an ISO 8601 time such as '2026-09-01T00:00:00+00:00'"
            ) from None
    if not isinstance(value, datetime):
        raise ArtifactRetentionError(f"{what} must be a datetime, an ISO string or None")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ArtifactRetentionError(
            f"{what} must be timezone-aware (for example '2026-09-01T00:00:00+00:00')"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ArtifactRetentionError(f"{what} is out of the range of UTC times") from None


@dataclass(frozen=True, slots=True)
class ArtifactRetentionClaim:
    """A lease on one artifact: who references it is the memory owner's business.

    Validated on construction: the source ID parses (a path component raises
    :class:`~toolswap.errors.SourceIdError`), the digest is 64 lowercase hex digits that
    start with the ID's 12-digit prefix, the count is a positive integer and the deadline
    is timezone-aware (stored in UTC).
    """

    source_id: str
    content_sha256: str
    """The artifact's full SHA-256 (lowercase hex)."""
    reference_count: int = 1
    """Active references the memory adapter counted; never declared by the model."""
    retain_until: datetime | None = None
    """End of the lease; None means no deadline (protected until released)."""

    def __post_init__(self) -> None:
        parsed = parse_artifact_source_id(self.source_id)
        sha = self.content_sha256
        if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            raise ArtifactRetentionError(
                "content_sha256 must be the full SHA-256: 64 lowercase hex digits"
            )
        if not sha.startswith(parsed.digest_prefix):
            raise ArtifactRetentionError(
                f"content_sha256 does not match {self.source_id}: the ID ends with "
                f"{parsed.digest_prefix}, the digest starts with {sha[:12]}"
            )
        count = self.reference_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ArtifactRetentionError(
                f"reference_count must be a positive integer, not {count!r}"
            )
        if count > MAX_REFERENCE_COUNT:
            raise ArtifactRetentionError(f"reference_count may be at most {MAX_REFERENCE_COUNT}")
        if self.retain_until is not None and not isinstance(self.retain_until, datetime):
            raise ArtifactRetentionError(
                "retain_until must be a timezone-aware datetime or None; use "
                "from_memory_reference(..., retain_until='...') for an ISO string"
            )
        object.__setattr__(self, "retain_until", parse_deadline(self.retain_until))

    @property
    def session(self) -> str:
        """The session the artifact belongs to (parsed from the source ID)."""
        return parse_artifact_source_id(self.source_id).session

    @classmethod
    def from_memory_reference(
        cls,
        reference: ArtifactMemoryReference,
        *,
        reference_count: int = 1,
        retain_until: datetime | str | None = None,
    ) -> ArtifactRetentionClaim:
        """Project a memory reference to a claim (its path is dropped, never trusted).

        Args:
            reference: the thin reference memory stores.
            reference_count: active references the memory adapter counted.
            retain_until: deadline as a timezone-aware datetime or an ISO 8601 string.
        """
        if not isinstance(reference, ArtifactMemoryReference):
            raise ArtifactRetentionError(
                "from_memory_reference takes an ArtifactMemoryReference (artifact.for_memory())"
            )
        return cls(
            source_id=reference.source.source_id,
            content_sha256=reference.content_sha256,
            reference_count=reference_count,
            retain_until=parse_deadline(retain_until),
        )

    def is_active(self, now: datetime) -> bool:
        """True when the lease has no deadline or its deadline is after ``now``."""
        return self.retain_until is None or self.retain_until > now

    def to_dict(self) -> dict[str, object]:
        return {
            "source_id": self.source_id,
            "content_sha256": self.content_sha256,
            "reference_count": self.reference_count,
            "retain_until": self.retain_until.isoformat() if self.retain_until else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ArtifactRetentionClaim:
        """The inverse of :meth:`to_dict` (every field validated again).

        Raises:
            ArtifactRetentionError: a field is missing, extra or invalid.
            SourceIdError: the source ID is malformed.
        """
        if set(data) != {"source_id", "content_sha256", "reference_count", "retain_until"}:
            raise ArtifactRetentionError(f"a claim has exactly four fields, not {sorted(data)}")
        source_id, sha, count = data["source_id"], data["content_sha256"], data["reference_count"]
        deadline = data["retain_until"]
        if not isinstance(source_id, str) or not isinstance(sha, str):
            raise ArtifactRetentionError("claim source_id and content_sha256 must be strings")
        if not isinstance(count, int):
            raise ArtifactRetentionError("claim reference_count must be an integer")
        if deadline is not None and not isinstance(deadline, str):
            raise ArtifactRetentionError("claim retain_until must be an ISO string or null")
        return cls(source_id, sha, count, parse_deadline(deadline))


@dataclass(frozen=True, slots=True)
class ArtifactClaimView:
    """The claims a journal protects at one moment (what cleanup reads).

    ``claims`` is keyed by source ID and aggregated over every lease of that artifact:
    reference counts are summed and the latest deadline wins, None (unbounded) beating any
    date. A PREPARED lease is included with no deadline however old it is: its publication
    is unresolved, so its artifact stays protected until reconciliation.
    """

    claims: Mapping[str, ArtifactRetentionClaim]
    pending_transaction_ids: tuple[str, ...] = ()
    """Leases still PREPARED, oldest first: reconcile them with the memory owner."""
    as_of: datetime | None = None
    """The time committed deadlines were compared with."""
    journal_seq: int = 0
    """Sequence number of the last journal record folded into this view."""
    journal_hash: str = field(default="0" * 64)
    """Hash of that record (all zeros for an empty journal)."""
    digest_conflicts: tuple[str, ...] = ()
    """Source IDs whose leases name different full digests (the claim kept is the first;
    such an artifact must never be deleted automatically)."""

    def __post_init__(self) -> None:
        if not isinstance(self.claims, MappingProxyType):
            object.__setattr__(self, "claims", MappingProxyType(dict(self.claims)))

    def is_protected(self, source_id: str) -> bool:
        """True when an active or pending lease names ``source_id``."""
        return source_id in self.claims or source_id in self.digest_conflicts

    def to_dict(self) -> dict[str, object]:
        return {
            "claims": [self.claims[k].to_dict() for k in sorted(self.claims)],
            "pending_transaction_ids": list(self.pending_transaction_ids),
            "as_of": self.as_of.isoformat() if self.as_of else None,
            "journal_seq": self.journal_seq,
            "journal_hash": self.journal_hash,
            "digest_conflicts": list(self.digest_conflicts),
        }
