"""What cleanup decides, apart from where the files are: statuses, policy, plans, reports,
the claim index, the verdict on one file or object, and the limits.

Nothing here touches a file or a store; :mod:`toolswap.cleanup` (local files) and
:mod:`toolswap._cleanup_store` (objects of a session kept in a shared store) do, and both
decide through :func:`verdict` and :func:`claimed_since`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol, cast

from ._json_form import JsonRecord, fields_form
from ._utf8 import lone_surrogate
from .artifact import (
    parse_artifact_filename,
    parse_artifact_source_id,
    parse_temporary_filename,
    validate_session_id,
)
from .errors import CleanupError
from .manifest import Manifest
from .records import ArtifactRecord
from .session import Session
from .settings import require_aware

__all__ = [
    "MAX_ORPHAN_TTL_SECONDS",
    "ApplyContext",
    "ArtifactCleanupPlan",
    "ArtifactCleanupPolicy",
    "ArtifactCleanupReport",
    "ArtifactCleanupStatus",
    "ClaimIndex",
    "ClaimView",
    "CleanupClaim",
    "CleanupEntry",
    "JournalLike",
    "Limits",
    "PlanContext",
    "S",
    "capture_alive",
    "claimed_since",
    "claims_of",
    "content_changed",
    "foreign_source_id",
    "index_claims",
    "owned_name",
    "recheck_at_apply",
    "utc_now",
    "verdict",
]


class ArtifactCleanupStatus(StrEnum):
    """The spec's eleven statuses: what cleanup decided (plan) or did (apply) for a file."""

    RETAINED_REFERENCED = "retained_referenced"
    RETAINED_RECENT = "retained_recent"
    RETAINED_LIMIT = "retained_limit"
    RETAINED_UNKNOWN = "retained_unknown"
    DENIED = "denied"
    RETAINED_CORRUPT = "retained_corrupt"
    MISSING_REFERENCED = "missing_referenced"
    PLANNED_DELETE = "planned_delete"
    DELETED = "deleted"
    ALREADY_MISSING = "already_missing"
    RACE_DETECTED = "race_detected"


S = ArtifactCleanupStatus


class CleanupClaim(Protocol):
    """What cleanup reads of a retention claim (``ArtifactRetentionClaim`` fits)."""

    @property
    def source_id(self) -> str: ...
    @property
    def content_sha256(self) -> str: ...
    @property
    def retain_until(self) -> datetime | None: ...


class ClaimView(Protocol):
    """What cleanup reads of a journal's recovered view (``ArtifactClaimView`` fits)."""

    @property
    def claims(self) -> Mapping[str, CleanupClaim]: ...
    @property
    def pending_transaction_ids(self) -> tuple[str, ...]: ...


class JournalLike(Protocol):
    """What cleanup needs of ``ArtifactRetentionJournal``."""

    @property
    def session(self) -> Session: ...
    def recover(self, now: datetime | None = None) -> ClaimView: ...
    def lock(self) -> AbstractContextManager[None]: ...


MAX_ORPHAN_TTL_SECONDS = 100 * 365 * 24 * 60 * 60
"""The longest orphan TTL a policy takes (100 years: "never", for every practical clock)."""


@dataclass(frozen=True, slots=True)
class ArtifactCleanupPolicy(JsonRecord):
    """How much cleanup may delete. Dry run is the default."""

    orphan_ttl_seconds: float = 24 * 60 * 60
    """A file without an active claim is kept until it is at least this old."""
    max_deletions: int | None = None
    """At most this many deletions per run; the oldest go first."""
    dry_run: bool = True
    """Plan only: ``apply`` reports what it would delete and deletes nothing."""
    max_bytes: int | None = None
    """Size budget: delete expired orphans, oldest first, only until the session (or the
    whole home, for an all-sessions plan) is at or under this many bytes."""

    def __post_init__(self) -> None:
        ttl = self.orphan_ttl_seconds
        if (
            isinstance(ttl, bool)
            or not isinstance(ttl, (int, float))
            or not 0 <= ttl <= MAX_ORPHAN_TTL_SECONDS
        ):
            # (An infinite or astronomic TTL overflowed the clock arithmetic of planning.)
            raise CleanupError(
                "orphan_ttl_seconds must be a number of seconds from 0 to "
                f"{MAX_ORPHAN_TTL_SECONDS:,} (100 years)"
            )
        for name in ("max_deletions", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise CleanupError(f"{name} must be a non-negative integer or None")
        if not isinstance(self.dry_run, bool):
            raise CleanupError("dry_run must be a bool")

    def stricter(self, other: ArtifactCleanupPolicy) -> ArtifactCleanupPolicy:
        """The policy that deletes no more than either: the longer TTL, the lower deletion
        limit, the larger size budget (a set budget beats none), dry run if either is."""

        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        budgets = [b for b in (self.max_bytes, other.max_bytes) if b is not None]
        return ArtifactCleanupPolicy(
            orphan_ttl_seconds=max(self.orphan_ttl_seconds, other.orphan_ttl_seconds),
            max_deletions=low(self.max_deletions, other.max_deletions),
            dry_run=self.dry_run or other.dry_run,
            max_bytes=max(budgets) if budgets else None,
        )


@dataclass(frozen=True, slots=True)
class CleanupEntry(JsonRecord):
    """One file of ``tool-results/`` (or one claim whose file is gone)."""

    name: str
    """File name inside ``tool-results/`` (never a path)."""
    status: ArtifactCleanupStatus
    reason: str
    source_id: str | None = None
    size: int | None = None
    mtime_ns: int | None = None
    device: int | None = None
    inode: int | None = None
    sha256: str | None = None
    version: str | None = None
    """The object version planned on (a session kept in a store; None for a local file)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CleanupEntry:
        """Parse an entry from a saved plan (untrusted input: every field is checked)."""
        if not isinstance(data, Mapping):
            raise CleanupError("invalid plan entry: not an object")
        reason = data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 4096 or lone_surrogate(reason):
            # (A lone surrogate stopped apply midway, at the manifest's UTF-8 encoding.)
            raise CleanupError("invalid plan entry reason: text of at most 4,096 characters")
        try:
            name = data["name"]
            status = ArtifactCleanupStatus(str(data["status"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise CleanupError(f"invalid plan entry: {exc}") from None
        if not isinstance(name, str) or not owned_name(name):
            raise CleanupError(f"invalid plan entry name {str(name)[:80]!r}")
        ints: dict[str, int | None] = {}
        for key in ("size", "mtime_ns", "device", "inode"):
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise CleanupError(f"invalid plan entry {key}")
            ints[key] = value
        sha = data.get("sha256")
        if sha is not None and (not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise CleanupError("invalid plan entry sha256")
        source_id = data.get("source_id")
        if source_id is not None:
            if not isinstance(source_id, str):
                raise CleanupError("invalid plan entry source_id")
            parse_artifact_source_id(source_id)
        version = data.get("version")
        if version is not None and (not isinstance(version, str) or not 0 < len(version) <= 256):
            raise CleanupError("invalid plan entry version")
        return cls(
            name=name,
            status=status,
            reason=reason,
            source_id=source_id,
            sha256=sha,
            size=ints["size"],
            mtime_ns=ints["mtime_ns"],
            device=ints["device"],
            inode=ints["inode"],
            version=version,
        )


@dataclass(frozen=True, slots=True)
class ArtifactCleanupPlan:
    """The read-only result of planning; feed it to ``apply``."""

    session_id: str
    created_at: datetime
    policy: ArtifactCleanupPolicy
    entries: tuple[CleanupEntry, ...]
    total_bytes: int = 0
    """Bytes in ``tool-results/`` when planned."""
    budget_note: str | None = None
    """Set when ``max_bytes`` cannot be met, saying why."""

    @property
    def planned(self) -> tuple[CleanupEntry, ...]:
        return tuple(e for e in self.entries if e.status is S.PLANNED_DELETE)

    def counts(self) -> dict[str, int]:
        """How many entries have each status."""
        return dict(Counter(entry.status.value for entry in self.entries))

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": "toolswap.cleanup_plan",
            "session": self.session_id,
            **fields_form(self, skip=("session_id", "entries")),
            "counts": self.counts(),
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ArtifactCleanupPlan:
        """Rebuild a saved plan, validating every field (a plan file is untrusted)."""
        if not isinstance(data, Mapping) or data.get("kind") != "toolswap.cleanup_plan":
            raise CleanupError("not a toolswap cleanup plan")
        raw_entries = data.get("entries")
        raw_policy = data.get("policy")
        total = data.get("total_bytes", 0)
        note = data.get("budget_note")
        if not isinstance(raw_entries, list) or not all(
            isinstance(e, Mapping) for e in raw_entries
        ):
            raise CleanupError("invalid cleanup plan: entries must be a list of objects")
        if not isinstance(raw_policy, Mapping):
            raise CleanupError("invalid cleanup plan: policy must be an object")
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise CleanupError("invalid cleanup plan: total_bytes must be a non-negative integer")
        if note is not None and (
            not isinstance(note, str) or len(note) > 4096 or lone_surrogate(note)
        ):
            # (A lone surrogate failed the report's encoding after files were deleted.)
            raise CleanupError(
                "invalid cleanup plan: budget_note must be text of at most 4,096 characters"
            )
        try:
            session_id = validate_session_id(str(data.get("session")))
            created = datetime.fromisoformat(str(data.get("created_at")))
        except ValueError as exc:
            raise CleanupError(f"invalid cleanup plan: {exc}") from None
        if created.tzinfo is None:
            raise CleanupError("invalid cleanup plan: created_at has no timezone")
        entries = tuple(CleanupEntry.from_dict(e) for e in raw_entries)
        policy = ArtifactCleanupPolicy(
            orphan_ttl_seconds=raw_policy.get("orphan_ttl_seconds", 86400),
            max_deletions=raw_policy.get("max_deletions"),
            dry_run=raw_policy.get("dry_run", True),
            max_bytes=raw_policy.get("max_bytes"),
        )
        return cls(
            session_id=session_id,
            created_at=created,
            policy=policy,
            entries=entries,
            total_bytes=total,
            budget_note=note,
        )


@dataclass(frozen=True, slots=True)
class ArtifactCleanupReport:
    """What ``apply`` did: every plan entry with its final status."""

    session_id: str
    applied_at: datetime
    dry_run: bool
    entries: tuple[CleanupEntry, ...]
    freed_bytes: int = 0
    budget_note: str | None = None
    pending_transaction_ids: tuple[str, ...] = field(default=())

    @property
    def deleted(self) -> tuple[CleanupEntry, ...]:
        return tuple(e for e in self.entries if e.status is S.DELETED)

    def counts(self) -> dict[str, int]:
        """How many entries have each status."""
        return dict(Counter(entry.status.value for entry in self.entries))

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": "toolswap.cleanup_report",
            "session": self.session_id,
            **fields_form(self, skip=("session_id", "entries")),
            "counts": self.counts(),
            "entries": [e.to_dict() for e in self.entries],
        }


def owned_name(name: str) -> bool:
    return parse_artifact_filename(name) is not None or parse_temporary_filename(name) is not None


def utc_now(now: datetime | None) -> datetime:
    return require_aware(now if now is not None else datetime.now(UTC))


@dataclass(slots=True)
class ClaimIndex:
    """Active or pending claims of one session, by file name."""

    by_name: dict[str, list[CleanupClaim]]
    expired: dict[str, datetime]
    """Files whose every claim has expired, with the latest deadline."""


def index_claims(session: Session, claims: Iterable[CleanupClaim], now: datetime) -> ClaimIndex:
    by_name: dict[str, list[CleanupClaim]] = {}
    expired: dict[str, datetime] = {}
    for claim in claims:
        parsed = parse_artifact_source_id(claim.source_id)
        if parsed.session != session.session_id:
            raise CleanupError(
                f"claim {claim.source_id} belongs to session {parsed.session!r}, not "
                f"{session.session_id!r}; cleanup refuses claims of another session"
            )
        deadline = claim.retain_until
        if deadline is not None and deadline <= now:
            previous = expired.get(parsed.filename)
            expired[parsed.filename] = max(previous, deadline) if previous else deadline
            continue
        by_name.setdefault(parsed.filename, []).append(claim)
    for name in by_name:
        expired.pop(name, None)
    return ClaimIndex(by_name=by_name, expired=expired)


def claims_of(
    view_or_claims: ClaimView | Iterable[CleanupClaim] | Mapping[str, CleanupClaim],
) -> list[CleanupClaim]:
    claims_attr = getattr(view_or_claims, "claims", None)
    if isinstance(view_or_claims, Mapping):
        claims = list(view_or_claims.values())
    elif isinstance(claims_attr, Mapping):
        claims = list(claims_attr.values())
    else:
        try:
            claims = list(cast("Iterable[CleanupClaim]", view_or_claims))
        except TypeError:
            raise CleanupError(
                "claims must be a claim view, a mapping or an iterable of claims "
                f"(ArtifactRetentionClaim), not {type(view_or_claims).__name__}"
            ) from None
    for claim in claims:
        until = getattr(claim, "retain_until", None)
        if not isinstance(getattr(claim, "source_id", None), str) or not (
            until is None or (isinstance(until, datetime) and until.utcoffset() is not None)
        ):
            raise CleanupError(
                "a claim must be an ArtifactRetentionClaim (a source ID, and a deadline "
                f"that is None or a timezone-aware datetime), not {claim!r:.200}"
            )
    return claims


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What planning judges every file and stored object of a session against."""

    index: ClaimIndex
    records: Mapping[str, ArtifactRecord]
    """The manifest's records, by file name."""
    collected: set[str]
    """The file names the manifest records as collected."""
    now_ns: int
    ttl_ns: int
    """The orphan TTL."""


@dataclass(frozen=True, slots=True)
class ApplyContext:
    """What apply checks every planned delete against again (under the session lock)."""

    session: Session
    dir_fd: int
    """The session's ``tool-results/`` directory, open."""
    index: ClaimIndex
    manifest: Manifest
    now: datetime
    policy: ArtifactCleanupPolicy
    records: Mapping[str, str]
    """The manifest's SHA-256 of each recorded file name, read under the lock."""
    source_ids: Mapping[str, str | None]
    """The source ID the manifest gives each file name it records or records as
    collected, read under the lock with ``records`` (see ``foreign_source_id``)."""


def verdict(base: CleanupEntry, is_tmp: bool, plan: PlanContext) -> CleanupEntry:
    """The status of one file or object, from its snapshot (``base``) and the claims."""
    name, digest, source_id = base.name, base.sha256, base.source_id
    index, record = plan.index, plan.records.get(name)
    claims = index.by_name.get(name, [])
    if claims:
        wrong = [c for c in claims if c.content_sha256 != digest]
        if wrong:
            return replace(
                base,
                status=S.RETAINED_CORRUPT,
                source_id=source_id or claims[0].source_id,
                reason="a claim's SHA-256 disagrees with the file on disk",
            )
        return replace(
            base,
            status=S.RETAINED_REFERENCED,
            source_id=claims[0].source_id,
            reason=f"{len(claims)} active or pending claim(s) with a matching digest",
        )
    if record is not None and record.sha256 != digest:
        return replace(
            base,
            status=S.RETAINED_CORRUPT,
            reason="the file does not match its manifest SHA-256; kept for inspection",
        )
    if is_tmp and capture_alive(name):
        return replace(
            base, status=S.RETAINED_RECENT, reason="a capture in progress (its process is alive)"
        )
    age_ns = plan.now_ns - (base.mtime_ns or 0)
    if age_ns < plan.ttl_ns:
        expired = index.expired.get(name)
        why = (
            f"claim expired at {expired.isoformat()} but the file is younger than the orphan TTL"
            if expired
            else "younger than the orphan TTL"
        )
        return replace(base, status=S.RETAINED_RECENT, reason=why)
    if is_tmp:
        why = "temporary file left by a crashed capture, older than the TTL"
    elif record is None and name in plan.collected:
        why = "recorded as collected by a cleanup interrupted before the unlink"
    elif record is None:
        why = "no manifest record (a capture crashed before recording it), older than the TTL"
    elif name in index.expired:
        why = "every claim expired and the file is older than the orphan TTL"
    else:
        why = "no active claim and older than the orphan TTL"
    return replace(base, reason=why)


class Limits:
    """``max_deletions`` and ``max_bytes`` counted again at apply time."""

    def __init__(self, policy: ArtifactCleanupPolicy, total: int) -> None:
        self.left = policy.max_deletions
        self.excess = None if policy.max_bytes is None else total - policy.max_bytes

    def check(self, entry: CleanupEntry) -> CleanupEntry | None:
        if self.left is not None and self.left <= 0:
            return replace(entry, status=S.RETAINED_LIMIT, reason="max_deletions reached this run")
        if self.excess is not None and self.excess <= 0:
            return replace(entry, status=S.RETAINED_LIMIT, reason="within the size budget")
        return None

    def deleted(self, entry: CleanupEntry) -> None:
        if self.left is not None:
            self.left -= 1
        if self.excess is not None:
            self.excess -= entry.size or 0


def claimed_since(entry: CleanupEntry, index: ClaimIndex, ours: bool) -> CleanupEntry | None:
    """The entry kept, when its name is not one toolswap writes or a claim now names it."""
    if not ours:
        return replace(entry, status=S.RETAINED_UNKNOWN, reason="not a name toolswap writes")
    if entry.name in index.by_name:
        return replace(
            entry,
            status=S.RETAINED_REFERENCED,
            reason="a claim was added after planning; it is kept",
        )
    return None


def foreign_source_id(entry: CleanupEntry, context: ApplyContext) -> CleanupEntry | None:
    """The entry kept, when the source ID the plan gives it is not the one the manifest
    gives its name (recorded, or collected already: a plan applied again finds it gone).

    A saved plan is only a file: apply copied its source ID into the ``collected`` record,
    and one naming another file or session made a record the manifest's own decoder
    refuses, which broke every later read of the session (a review).
    """
    if entry.source_id is None or context.source_ids.get(entry.name) == entry.source_id:
        return None
    return replace(
        entry,
        status=S.RETAINED_UNKNOWN,
        reason="the plan gives it a source ID that is not its manifest record's; it is kept",
    )


def recheck_at_apply(
    entry: CleanupEntry,
    *,
    now: datetime,
    policy: ArtifactCleanupPolicy,
    mtime_ns: int,
    recorded: str | None,
    held: str | None,
    what: str,
) -> CleanupEntry | None:
    """The checks every delete makes again at apply time, for a local file and a stored
    object alike (a saved plan is only a file: its verdict is not trusted).

    Args:
        mtime_ns: when the bytes were last written, as the holder says now.
        recorded: the manifest's SHA-256 for the name now (None: no record).
        held: the SHA-256 the holder vouches for (the planned digest of a local file,
            which is hashed again next; the digest a store keeps with the object).
        what: "the file" or "the object's stored SHA-256", for the reason.

    Returns:
        The entry kept, with its status and reason; None when the delete may go on.
    """
    age_ns = int(now.timestamp() * 1_000_000_000) - mtime_ns
    if age_ns < int(policy.orphan_ttl_seconds * 1_000_000_000):
        return replace(
            entry, status=S.RETAINED_RECENT, reason="younger than the orphan TTL (at apply)"
        )
    if recorded is not None and held != recorded:
        return replace(
            entry,
            status=S.RETAINED_CORRUPT,
            reason=f"{what} does not match the manifest's SHA-256; kept for inspection",
        )
    return None


def content_changed(entry: CleanupEntry, digest: str | None) -> CleanupEntry | None:
    """The entry kept when the bytes are not the ones planned."""
    if entry.sha256 is not None and digest != entry.sha256:
        return replace(entry, status=S.RACE_DETECTED, reason="content changed since planning")
    return None


def capture_alive(tmp_name: str) -> bool:
    """Whether the process that named this temporary file still runs on this host."""
    pid = parse_temporary_filename(tmp_name)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
