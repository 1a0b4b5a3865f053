"""Reference-aware cleanup: a two-phase garbage collector that fails closed.

``plan`` is read-only: it scans ``tool-results/``, hashes every candidate with a streamed
SHA-256 and freezes size, mtime_ns, device and inode. Each file gets exactly one status.

``apply`` touches only ``planned_delete`` entries. Under the same session lock as the
journal's ``prepare()`` it re-folds the current claims, then for each entry re-checks
ownership, file type, the frozen snapshot and the full digest; any change keeps the file
(``race_detected``). Deletion goes through the directory descriptor by a validated name,
never through a path taken from the plan, and the directory is fsynced afterwards. The
manifest records each collection before the unlink, so a later read of that artifact says
when and why it was collected.

A session kept in a shared store (:mod:`toolswap.remote`) is collected in the store: plan
lists its objects (size, last write, version) and takes each digest from the manifest;
apply checks each object again with one HEAD (same version and size, stored SHA-256 equal
to the manifest's), records the collection, then deletes exactly that version (a replaced
object is never deleted) and drops this host's replica copy. It needs the journal shared
by every host (a database journal): a host-local journal is refused, since another host's
references would be invisible to it.

Plans and reports are JSON-serializable and contain no filesystem path.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, cast

from ._fs import open_dir_nofollow
from .artifact import (
    parse_artifact_filename,
    parse_artifact_source_id,
    parse_temporary_filename,
    validate_session_id,
)
from .crashpoints import crash_point
from .errors import ArtifactStoreError, ChainLogError, CleanupError
from .manifest import Manifest, ManifestConflict
from .remote import StoreObject
from .session import Session

__all__ = [
    "ArtifactCleanupPlan",
    "ArtifactCleanupPolicy",
    "ArtifactCleanupReport",
    "ArtifactCleanupStatus",
    "ClaimView",
    "CleanupClaim",
    "CleanupEntry",
    "JournalLike",
    "apply_cleanup",
    "apply_cleanup_from_journal",
    "limit_plans",
    "plan_cleanup",
    "plan_cleanup_from_journal",
]

_HASH_BLOCK = 1 << 20


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


@dataclass(frozen=True, slots=True)
class ArtifactCleanupPolicy:
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
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
            raise CleanupError("orphan_ttl_seconds must be a non-negative number")
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

    def to_dict(self) -> dict[str, object]:
        return {
            "orphan_ttl_seconds": self.orphan_ttl_seconds,
            "max_deletions": self.max_deletions,
            "dry_run": self.dry_run,
            "max_bytes": self.max_bytes,
        }


@dataclass(frozen=True, slots=True)
class CleanupEntry:
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

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason,
            "source_id": self.source_id,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "device": self.device,
            "inode": self.inode,
            "sha256": self.sha256,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CleanupEntry:
        """Parse an entry from a saved plan (untrusted input: every field is checked)."""
        try:
            name = data["name"]
            status = ArtifactCleanupStatus(str(data["status"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise CleanupError(f"invalid plan entry: {exc}") from None
        if not isinstance(name, str) or not _owned_name(name):
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
            reason=str(data.get("reason", "")),
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
            "created_at": self.created_at.isoformat(),
            "policy": self.policy.to_dict(),
            "total_bytes": self.total_bytes,
            "budget_note": self.budget_note,
            "counts": self.counts(),
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ArtifactCleanupPlan:
        """Rebuild a saved plan, validating every field (a plan file is untrusted)."""
        if data.get("kind") != "toolswap.cleanup_plan":
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
        if note is not None and not isinstance(note, str):
            raise CleanupError("invalid cleanup plan: budget_note must be a string")
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
            "applied_at": self.applied_at.isoformat(),
            "dry_run": self.dry_run,
            "freed_bytes": self.freed_bytes,
            "budget_note": self.budget_note,
            "pending_transaction_ids": list(self.pending_transaction_ids),
            "counts": self.counts(),
            "entries": [e.to_dict() for e in self.entries],
        }


def _owned_name(name: str) -> bool:
    return parse_artifact_filename(name) is not None or parse_temporary_filename(name) is not None


def _utc_now(now: datetime | None) -> datetime:
    value = now if now is not None else datetime.now(UTC)
    if value.tzinfo is None:
        raise CleanupError("now must be timezone-aware")
    return value


def _hash_fd(fd: int) -> str:
    sha = hashlib.sha256()
    while True:
        block = os.read(fd, _HASH_BLOCK)
        if not block:
            return sha.hexdigest()
        sha.update(block)


@dataclass(slots=True)
class _ClaimIndex:
    """Active or pending claims of one session, by file name."""

    by_name: dict[str, list[CleanupClaim]]
    expired: dict[str, datetime]
    """Files whose every claim has expired, with the latest deadline."""


def _index_claims(session: Session, claims: Iterable[CleanupClaim], now: datetime) -> _ClaimIndex:
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
    return _ClaimIndex(by_name=by_name, expired=expired)


def _claims_of(
    view_or_claims: ClaimView | Iterable[CleanupClaim] | Mapping[str, CleanupClaim],
) -> list[CleanupClaim]:
    if isinstance(view_or_claims, Mapping):
        return list(view_or_claims.values())
    claims_attr = getattr(view_or_claims, "claims", None)
    if isinstance(claims_attr, Mapping):
        return list(claims_attr.values())
    return list(cast("Iterable[CleanupClaim]", view_or_claims))


def _plan(
    session: Session,
    claims: Iterable[CleanupClaim],
    policy: ArtifactCleanupPolicy,
    now: datetime,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    index = _index_claims(session, claims, now)
    manifest = Manifest.of(session)
    _check_manifest(manifest)
    records = {r["filename"]: r for r in manifest.records()}
    collected = {c.filename for c in manifest.collected_records()}
    ttl_ns = int(policy.orphan_ttl_seconds * 1_000_000_000)
    now_ns = int(now.timestamp() * 1_000_000_000)
    entries: list[CleanupEntry] = []
    candidates: list[CleanupEntry] = []
    total = 0
    seen: set[str] = set()
    for entry in _planned_entries(session, index, records, collected, now_ns, ttl_ns, progress):
        seen.add(entry.name)
        if entry.size is not None and entry.status is not S.DENIED:
            total += entry.size
        if entry.status is S.PLANNED_DELETE:
            candidates.append(entry)
        else:
            entries.append(entry)
    for name, claim_list in sorted(index.by_name.items()):
        if name not in seen:
            entries.append(
                CleanupEntry(
                    name=name,
                    status=S.MISSING_REFERENCED,
                    reason="an active or pending claim names this artifact but its file is gone",
                    source_id=claim_list[0].source_id,
                    sha256=claim_list[0].content_sha256,
                )
            )
    # Oldest first, then by name for a stable order.
    candidates.sort(key=lambda e: (e.mtime_ns or 0, e.name))
    budget_note = None
    wanted = len(candidates)
    if policy.max_bytes is not None:
        wanted = _budget_cut(candidates, total, policy.max_bytes)
        excess = total - policy.max_bytes - sum(e.size or 0 for e in candidates[:wanted])
        if excess > 0:
            budget_note = (
                f"the {policy.max_bytes}-byte budget cannot be met: {excess} bytes more are "
                "referenced, pending, recent or not ours"
            )
    allowed = wanted if policy.max_deletions is None else min(wanted, policy.max_deletions)
    for i, entry in enumerate(candidates):
        if i < allowed:
            entries.append(entry)
        elif i < wanted:
            entries.append(
                replace(entry, status=S.RETAINED_LIMIT, reason="max_deletions reached this run")
            )
        else:
            entries.append(replace(entry, status=S.RETAINED_LIMIT, reason="within the size budget"))
    entries.sort(key=lambda e: (parse_artifact_filename(e.name) or 0, e.name))
    return ArtifactCleanupPlan(
        session_id=session.session_id,
        created_at=now,
        policy=policy,
        entries=tuple(entries),
        total_bytes=total,
        budget_note=budget_note,
    )


def _planned_entries(
    session: Session,
    index: _ClaimIndex,
    records: Mapping[str, Mapping[str, Any]],
    collected: set[str],
    now_ns: int,
    ttl_ns: int,
    progress: Callable[[int, int], None] | None,
) -> Iterator[CleanupEntry]:
    """One entry per file of ``tool-results/`` (per object, for a session in a store)."""
    objects: list[StoreObject] = []
    if session.binding is not None:
        objects = _store_objects(session)
        for done, obj in enumerate(objects, 1):
            if progress:
                progress(done, len(objects))
            record = records.get(obj.filename)
            base = CleanupEntry(
                name=obj.filename,
                status=S.PLANNED_DELETE,
                reason="",
                source_id=record["source_id"] if record else None,
                sha256=record["sha256"] if record else None,
                size=obj.size,
                mtime_ns=obj.mtime_ns,
                version=obj.version,
            )
            yield _verdict(base, False, index, record, collected, now_ns, ttl_ns)
    stored = {o.filename for o in objects} if session.binding is not None else None
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    try:
        names = sorted(os.listdir(dir_fd))
        for done, name in enumerate(names, 1):
            if stored is None:
                if progress:
                    progress(done, len(names))
            elif name in stored:
                continue  # this host's copy of a stored object: it goes with the object
            elif name in records:
                yield CleanupEntry(
                    name=name,
                    status=S.RETAINED_UNKNOWN,
                    reason="recorded, but missing from the store: this replica's copy may be "
                    "the only one (run verify)",
                )
                continue
            # A temporary file, or a leftover of a capture or collection cut short here.
            yield _plan_file(dir_fd, name, index, records, collected, now_ns, ttl_ns)
    finally:
        os.close(dir_fd)


def _store_objects(session: Session) -> list[StoreObject]:
    binding = session.binding
    assert binding is not None
    try:
        return binding.store.artifacts(binding.workspace, binding.session)
    except ArtifactStoreError as exc:
        raise CleanupError(f"cannot list {binding.url}: {exc}; nothing was changed") from exc


def _budget_cut(candidates: list[CleanupEntry], total: int, max_bytes: int) -> int:
    """How many of the oldest candidates the budget alone would delete."""
    excess = total - max_bytes
    count = 0
    for entry in candidates:
        if excess <= 0:
            break
        excess -= entry.size or 0
        count += 1
    return count


def _plan_file(
    dir_fd: int,
    name: str,
    index: _ClaimIndex,
    records: Mapping[str, Mapping[str, Any]],
    collected: set[str],
    now_ns: int,
    ttl_ns: int,
) -> CleanupEntry:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return CleanupEntry(name=name, status=S.ALREADY_MISSING, reason="vanished while planning")
    except PermissionError:
        return CleanupEntry(name=name, status=S.DENIED, reason="permission denied")
    if stat.S_ISLNK(st.st_mode):
        return CleanupEntry(name=name, status=S.DENIED, reason="symlink: never followed or deleted")
    is_tmp = parse_temporary_filename(name) is not None
    if not is_tmp and parse_artifact_filename(name) is None:
        return CleanupEntry(
            name=name, status=S.RETAINED_UNKNOWN, reason="not a name toolswap writes"
        )
    if not stat.S_ISREG(st.st_mode):
        return CleanupEntry(name=name, status=S.RETAINED_UNKNOWN, reason="not a regular file")
    if st.st_uid != os.geteuid():
        return CleanupEntry(name=name, status=S.DENIED, reason="owned by another user")
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except PermissionError:
        return CleanupEntry(name=name, status=S.DENIED, reason="permission denied")
    except OSError as exc:
        return CleanupEntry(
            name=name, status=S.RETAINED_UNKNOWN, reason=f"cannot open: {exc.strerror}"
        )
    try:
        fst = os.fstat(fd)
        digest = _hash_fd(fd)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    snap: dict[str, Any] = {
        "size": fst.st_size,
        "mtime_ns": fst.st_mtime_ns,
        "device": fst.st_dev,
        "inode": fst.st_ino,
    }
    if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino) or (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
    ) != (fst.st_size, fst.st_mtime_ns, fst.st_ctime_ns):
        return CleanupEntry(
            name=name, status=S.RACE_DETECTED, reason="changed while planning", **snap
        )
    record = records.get(name)
    source_id = record["source_id"] if record and record["sha256"] == digest else None
    base = CleanupEntry(
        name=name,
        status=S.PLANNED_DELETE,
        reason="",
        source_id=source_id,
        sha256=digest,
        **snap,
    )
    return _verdict(base, is_tmp, index, record, collected, now_ns, ttl_ns)


def _verdict(
    base: CleanupEntry,
    is_tmp: bool,
    index: _ClaimIndex,
    record: Mapping[str, Any] | None,
    collected: set[str],
    now_ns: int,
    ttl_ns: int,
) -> CleanupEntry:
    """The status of one file or object, from its snapshot (``base``) and the claims."""
    name, digest, source_id = base.name, base.sha256, base.source_id
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
    if record is not None and record["sha256"] != digest:
        return replace(
            base,
            status=S.RETAINED_CORRUPT,
            reason="the file does not match its manifest SHA-256; kept for inspection",
        )
    if is_tmp and _capture_alive(name):
        return replace(
            base, status=S.RETAINED_RECENT, reason="a capture in progress (its process is alive)"
        )
    age_ns = now_ns - (base.mtime_ns or 0)
    if age_ns < ttl_ns:
        expired = index.expired.get(name)
        why = (
            f"claim expired at {expired.isoformat()} but the file is younger than the orphan TTL"
            if expired
            else "younger than the orphan TTL"
        )
        return replace(base, status=S.RETAINED_RECENT, reason=why)
    if is_tmp:
        why = "temporary file left by a crashed capture, older than the TTL"
    elif record is None and name in collected:
        why = "recorded as collected by a cleanup interrupted before the unlink"
    elif record is None:
        why = "no manifest record (a capture crashed before recording it), older than the TTL"
    elif name in index.expired:
        why = "every claim expired and the file is older than the orphan TTL"
    else:
        why = "no active claim and older than the orphan TTL"
    return replace(base, reason=why)


def _check_manifest(manifest: Manifest) -> None:
    """Cleanup trusts no manifest that lost records (its journal anchor may be gone), and
    decides on every record there is (a replica pulls its store's first)."""
    try:
        manifest.sync()
        manifest.check_head()
    except ChainLogError as exc:
        raise CleanupError(str(exc)) from exc


def _capture_alive(tmp_name: str) -> bool:
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


_OWNER_DB = "memory.sqlite3"  # the embedded SqliteMemoryOwner's default database


def _refuse_raw_claims(session: Session) -> None:
    """Caller-supplied claims are trusted only while no durable retention state exists.

    A journal (even an empty file) or the default memory owner's database means the
    session's real references live there; a missing journal next to an owner database is
    a journal that was lost, never "no references".
    """
    if session.binding is not None:
        raise CleanupError(
            f"session {session.session_id!r} is kept in {session.binding.url}: its references "
            "live in the journal every host shares; plan and apply from that journal "
            "(CLI: --database-url)"
        )
    for path, what in (
        (session.journal_path, "a durable retention journal"),
        (session.root / _OWNER_DB, "a memory owner database"),
    ):
        if os.path.lexists(path):
            raise CleanupError(
                f"this session has {what} ({path.name}); use plan_cleanup_from_journal / "
                "apply_cleanup_from_journal so cleanup sees the journal's claims"
            )


def plan_cleanup(
    session: Session,
    claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim],
    *,
    policy: ArtifactCleanupPolicy | None = None,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    """Plan from claims the caller passes (sessions without a durable journal only)."""
    _refuse_raw_claims(session)
    return _plan(
        session, _claims_of(claims), policy or ArtifactCleanupPolicy(), _utc_now(now), progress
    )


def plan_cleanup_from_journal(
    journal: JournalLike,
    *,
    policy: ArtifactCleanupPolicy | None = None,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    """Plan from the journal's recovered claims (PREPARED leases protect too). Read-only."""
    when = _utc_now(now)
    view = journal.recover(now=when)
    return _plan(
        journal.session, _claims_of(view), policy or ArtifactCleanupPolicy(), when, progress
    )


def apply_cleanup(
    session: Session,
    plan: ArtifactCleanupPlan,
    claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim] | None,
    *,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
    policy: ArtifactCleanupPolicy | None = None,
) -> ArtifactCleanupReport:
    """Apply a plan against the current claims the caller passes (no durable journal).

    Every decision is made again from the current state (claims, TTL, limits): a plan
    only narrows what may go. ``policy`` is the policy in force now (a saved plan's own
    policy is combined with it, the stricter wins).
    """
    if claims is None:
        raise CleanupError("apply_cleanup needs the current claims; pass an empty list if none")
    _refuse_raw_claims(session)
    current = _claims_of(claims)

    def raw(when: datetime) -> tuple[list[CleanupClaim], tuple[str, ...]]:
        # Checked again under the session lock: a prepare() that won the lock may have
        # created the journal since the check above.
        _refuse_raw_claims(session)
        return current, ()

    return _apply(session, plan, raw, _utc_now(now), progress, policy)


def apply_cleanup_from_journal(
    plan: ArtifactCleanupPlan,
    journal: JournalLike,
    *,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
    policy: ArtifactCleanupPolicy | None = None,
) -> ArtifactCleanupReport:
    """Apply a plan, re-folding the journal's claims under the session lock.

    As :func:`apply_cleanup`: TTL, recency and limits are decided again from the current
    state with the stricter of ``policy`` and the plan's own.
    """

    def current(when: datetime) -> tuple[list[CleanupClaim], tuple[str, ...]]:
        view = journal.recover(now=when)
        return _claims_of(view), tuple(view.pending_transaction_ids)

    # The journal's lock (a database lock for a shared journal) is the one prepare() takes.
    with journal.lock():
        return _apply(journal.session, plan, current, _utc_now(now), progress, policy)


def _apply(
    session: Session,
    plan: ArtifactCleanupPlan,
    current_claims: Callable[[datetime], tuple[list[CleanupClaim], tuple[str, ...]]],
    now: datetime,
    progress: Callable[[int, int], None] | None,
    policy: ArtifactCleanupPolicy | None = None,
) -> ArtifactCleanupReport:
    if plan.session_id != session.session_id:
        raise CleanupError(
            f"the plan is for session {plan.session_id!r}, not {session.session_id!r}"
        )
    results: list[CleanupEntry] = []
    freed = 0
    with session.lock():
        crash_point("cleanup.locked")
        claims, pending = current_claims(now)
        index = _index_claims(session, claims, now)
        crash_point("cleanup.claims_folded")
        rules = plan.policy if policy is None else plan.policy.stricter(policy)
        if rules.dry_run:
            return ArtifactCleanupReport(
                session_id=session.session_id,
                applied_at=now,
                dry_run=True,
                entries=plan.entries,
                budget_note=plan.budget_note,
                pending_transaction_ids=pending,
            )
        manifest = Manifest.of(session)
        _check_manifest(manifest)
        records = {r["filename"]: r["sha256"] for r in manifest.records()}
        dir_fd = open_dir_nofollow(session.tool_results_dir)
        deleted_any = False
        shared = session.binding is not None
        try:
            if shared:
                limits = _Limits(rules, sum(o.size for o in _store_objects(session)))
            else:
                limits = _Limits(rules, _current_total(dir_fd))
            # Oldest first, as planning ranks them, so the limits keep the newest.
            order = sorted(
                range(len(plan.entries)),
                key=lambda i: (plan.entries[i].mtime_ns or 0, plan.entries[i].name),
            )
            outcomes: dict[int, CleanupEntry] = {}
            for done, i in enumerate(order, 1):
                entry = plan.entries[i]
                if progress:
                    progress(done, len(plan.entries))
                if entry.status is not S.PLANNED_DELETE:
                    outcomes[i] = entry
                    continue
                kept = limits.check(entry)
                # A session in a store: its objects, and leftovers of this host's replica.
                apply_one = _apply_object if shared and entry.version is not None else _apply_one
                outcome = kept or apply_one(
                    session, dir_fd, entry, index, manifest, now, rules, records
                )
                if outcome.status is S.DELETED:
                    deleted_any = True
                    freed += entry.size or 0
                    limits.deleted(entry)
                outcomes[i] = outcome
            results = [outcomes[i] for i in range(len(plan.entries))]
            if deleted_any:
                os.fsync(dir_fd)
                crash_point("cleanup.dir_fsynced")
        finally:
            os.close(dir_fd)
    return ArtifactCleanupReport(
        session_id=session.session_id,
        applied_at=now,
        dry_run=False,
        entries=tuple(results),
        freed_bytes=freed,
        budget_note=plan.budget_note,
        pending_transaction_ids=pending,
    )


class _Limits:
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


def _current_total(dir_fd: int) -> int:
    """Bytes in ``tool-results/`` now (regular files, lstat only)."""
    total = 0
    for name in os.listdir(dir_fd):
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def _claimed_since(entry: CleanupEntry, index: _ClaimIndex, ours: bool) -> CleanupEntry | None:
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


def _apply_one(
    session: Session,
    dir_fd: int,
    entry: CleanupEntry,
    index: _ClaimIndex,
    manifest: Manifest,
    now: datetime,
    policy: ArtifactCleanupPolicy,
    records: Mapping[str, str],
) -> CleanupEntry:
    name = entry.name
    kept = _claimed_since(entry, index, _owned_name(name))
    if kept is not None:
        return kept
    if parse_temporary_filename(name) is not None and _capture_alive(name):
        return replace(entry, status=S.RACE_DETECTED, reason="a capture is writing this file")
    if entry.sha256 is None or None in (entry.size, entry.mtime_ns, entry.device, entry.inode):
        return replace(entry, status=S.RACE_DETECTED, reason="the plan entry has no snapshot")
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return replace(entry, status=S.ALREADY_MISSING, reason="already gone")
    except OSError as exc:
        why = (
            "replaced by a symlink" if exc.errno == errno.ELOOP else f"cannot open: {exc.strerror}"
        )
        return replace(entry, status=S.RACE_DETECTED, reason=why)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return replace(entry, status=S.RACE_DETECTED, reason="no longer a regular file we own")
        if (st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino) != (
            entry.size,
            entry.mtime_ns,
            entry.device,
            entry.inode,
        ):
            return replace(
                entry,
                status=S.RACE_DETECTED,
                reason="size, mtime, device or inode changed since planning",
            )
        # The plan's verdict is not trusted (a saved plan is only a file): the TTL and the
        # manifest's digest are checked again against the current state.
        age_ns = int(now.timestamp() * 1_000_000_000) - st.st_mtime_ns
        if age_ns < int(policy.orphan_ttl_seconds * 1_000_000_000):
            return replace(
                entry, status=S.RETAINED_RECENT, reason="younger than the orphan TTL (at apply)"
            )
        recorded = records.get(name)
        if recorded is not None and recorded != entry.sha256:
            return replace(
                entry,
                status=S.RETAINED_CORRUPT,
                reason="the file does not match its manifest SHA-256; kept for inspection",
            )
        if _hash_fd(fd) != entry.sha256:
            return replace(entry, status=S.RACE_DETECTED, reason="content changed since planning")
        crash_point("cleanup.verified")
        # The name must still be the inode we verified, right before it goes.
        again = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            return replace(entry, status=S.RACE_DETECTED, reason="the name was replaced")
        if parse_artifact_filename(name) is not None:
            # Recorded first, so a crash before the unlink leaves a file the manifest calls
            # collected (a later plan collects it as unrecorded), never an artifact that
            # vanished without a word.
            manifest.append(
                {
                    "event": "collected",
                    "filename": name,
                    "source_id": entry.source_id,
                    "sha256": entry.sha256,
                    "collected_at": now.astimezone(UTC).isoformat(),
                    "reason": entry.reason,
                }
            )
            crash_point("cleanup.collect_recorded")
        os.unlink(name, dir_fd=dir_fd)
        crash_point("cleanup.unlinked")
    finally:
        os.close(fd)
    return replace(entry, status=S.DELETED, reason=entry.reason)


def _apply_object(
    session: Session,
    dir_fd: int,
    entry: CleanupEntry,
    index: _ClaimIndex,
    manifest: Manifest,
    now: datetime,
    policy: ArtifactCleanupPolicy,
    records: Mapping[str, str],
) -> CleanupEntry:
    """Delete one object of a session kept in a store, if every check still holds."""
    binding = session.binding
    assert binding is not None
    name = entry.name
    kept = _claimed_since(entry, index, parse_artifact_filename(name) is not None)
    if kept is not None:
        return kept
    if entry.version is None or entry.size is None:
        return replace(entry, status=S.RACE_DETECTED, reason="the plan entry has no snapshot")
    try:
        obj = binding.store.stat_artifact(binding.workspace, binding.session, name)
    except ArtifactStoreError as exc:
        return replace(entry, status=S.RETAINED_UNKNOWN, reason=f"the store failed: {exc}")
    if obj is None:
        return replace(entry, status=S.ALREADY_MISSING, reason="already gone from the store")
    if (obj.version, obj.size) != (entry.version, entry.size):
        return replace(
            entry, status=S.RACE_DETECTED, reason="the object was replaced since planning"
        )
    if int(now.timestamp() * 1_000_000_000) - obj.mtime_ns < int(
        policy.orphan_ttl_seconds * 1_000_000_000
    ):
        return replace(
            entry, status=S.RETAINED_RECENT, reason="younger than the orphan TTL (at apply)"
        )
    recorded = records.get(name)
    if recorded is not None and obj.sha256 != recorded:
        return replace(
            entry,
            status=S.RETAINED_CORRUPT,
            reason="the object's stored SHA-256 is not the manifest's; kept for inspection",
        )
    if entry.sha256 is not None and obj.sha256 != entry.sha256:
        return replace(entry, status=S.RACE_DETECTED, reason="content changed since planning")
    crash_point("cleanup.verified")

    def unchanged(record: Mapping[str, Any] | None, collected: object) -> str | None:
        if (record["sha256"] if record else None) != recorded:
            return "its manifest record changed after it was checked (another host)"
        return None

    # Recorded first, as for a local file: a crash before the delete leaves an object the
    # manifest calls collected, which a later cleanup removes. The record goes only onto a
    # chain where the name's record is still the one checked: a capture on another host
    # that records this object meanwhile keeps it.
    try:
        manifest.append(
            {
                "event": "collected",
                "filename": name,
                "source_id": entry.source_id,
                "sha256": obj.sha256 if recorded is None else recorded,
                "collected_at": now.astimezone(UTC).isoformat(),
                "reason": entry.reason,
            },
            expect=(name, unchanged),
        )
    except ManifestConflict as exc:
        return replace(entry, status=S.RACE_DETECTED, reason=f"{exc}; the object is kept")
    crash_point("cleanup.collect_recorded")
    try:
        deleted = binding.store.delete_artifact(binding.workspace, binding.session, obj)
    except ArtifactStoreError as exc:
        return replace(entry, status=S.RETAINED_UNKNOWN, reason=f"the store failed: {exc}")
    if not deleted:
        return replace(
            entry,
            status=S.RACE_DETECTED,
            reason="replaced or deleted after it was checked; a replacement is kept",
        )
    crash_point("store.deleted")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)  # this host's replica copy
    crash_point("cleanup.unlinked")
    return replace(entry, status=S.DELETED, reason=entry.reason)


def limit_plans(
    plans: list[ArtifactCleanupPlan], policy: ArtifactCleanupPolicy
) -> list[ArtifactCleanupPlan]:
    """Apply ``max_deletions`` and ``max_bytes`` across several sessions' plans at once.

    The plans must have been made without those limits. Expired orphans of every session
    compete oldest first; referenced, pending and recent artifacts still never go.
    """
    candidates = sorted(
        (
            (e.mtime_ns or 0, p.session_id, e.name, i)
            for i, p in enumerate(plans)
            for e in p.planned
        ),
    )
    total = sum(p.total_bytes for p in plans)
    sizes = {(i, e.name): e.size or 0 for i, p in enumerate(plans) for e in p.planned}
    wanted = len(candidates)
    note = None
    if policy.max_bytes is not None:
        excess = total - policy.max_bytes
        wanted = 0
        for _, _, name, i in candidates:
            if excess <= 0:
                break
            excess -= sizes[(i, name)]
            wanted += 1
        if excess > 0:
            note = (
                f"the {policy.max_bytes}-byte budget for all sessions cannot be met: {excess} "
                "bytes more are referenced, pending, recent or not ours"
            )
    allowed = wanted if policy.max_deletions is None else min(wanted, policy.max_deletions)
    verdict: dict[tuple[int, str], str | None] = {}
    for rank, (_, _, name, i) in enumerate(candidates):
        if rank < allowed:
            verdict[(i, name)] = None
        elif rank < wanted:
            verdict[(i, name)] = "max_deletions reached this run"
        else:
            verdict[(i, name)] = "within the size budget"
    out: list[ArtifactCleanupPlan] = []
    for i, plan in enumerate(plans):
        entries = []
        for entry in plan.entries:
            if entry.status is S.PLANNED_DELETE and verdict.get((i, entry.name)) is not None:
                entry = replace(
                    entry, status=S.RETAINED_LIMIT, reason=str(verdict[(i, entry.name)])
                )
            entries.append(entry)
        out.append(replace(plan, policy=policy, entries=tuple(entries), budget_note=note))
    return out
