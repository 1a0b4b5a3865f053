"""Cleanup of the versions a session's backend holds beyond its directory (the objects of
a shared store): listed, checked again and deleted one exact version at a time.

Planning lists the objects (size, last write, version); a listing carries no digest, so
each object the plan would delete that has a manifest record is read once more with a HEAD
(its stored SHA-256), and one stored with another digest is planned as apply will find it:
kept as corrupt. Apply checks each one again with one HEAD (same version and size, stored
SHA-256 equal to the manifest's), records the collection only onto a chain where the
name's record is still the one checked, then deletes exactly that version (a replaced
object is never deleted) and drops this host's replica copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC

from . import durable
from ._cleanup_model import (
    ApplyContext,
    CleanupEntry,
    PlanContext,
    S,
    claimed_since,
    content_changed,
    foreign_source_id,
    recheck_at_apply,
    verdict,
)
from .artifact import parse_artifact_filename
from .backends.store import StoreObject
from .crashpoints import crash_point
from .errors import ArtifactStoreError
from .manifest import ManifestConflict
from .records import ArtifactRecord, CollectedRecord

__all__ = ["apply_object", "store_entries"]


def store_entries(
    objects: list[StoreObject],
    context: PlanContext,
    progress: Callable[[int, int], None] | None,
    stat: Callable[[str], StoreObject | None],
) -> Iterator[CleanupEntry]:
    """One entry per stored object, with its verdict (``stat``: the store's HEAD)."""
    for done, obj in enumerate(objects, 1):
        if progress:
            progress(done, len(objects))
        record = context.records.get(obj.filename)
        base = CleanupEntry(
            name=obj.filename,
            status=S.PLANNED_DELETE,
            reason="",
            source_id=record.source_id if record else None,
            sha256=record.sha256 if record else None,
            size=obj.size,
            mtime_ns=obj.mtime_ns,
            version=obj.version,
        )
        entry = verdict(base, False, context)
        if entry.status is S.PLANNED_DELETE and record is not None:
            # The listing has no digest: judge what apply will check, the stored SHA-256
            # of the current version (one HEAD, only for an object the plan would delete).
            try:
                head = stat(obj.filename)
            except ArtifactStoreError as exc:
                entry = replace(entry, status=S.RETAINED_UNKNOWN, reason=f"the store failed: {exc}")
            else:
                if head is not None:  # None: gone since the listing (apply says so)
                    current = replace(
                        base,
                        size=head.size,
                        mtime_ns=head.mtime_ns,
                        version=head.version,
                        sha256=head.sha256,
                    )
                    entry = verdict(current, False, context)
        yield entry


def apply_object(entry: CleanupEntry, context: ApplyContext) -> CleanupEntry:
    """Delete one version the session's backend holds beyond this directory (an object of
    a store), if every check still holds."""
    backend = context.session.backend
    name, now = entry.name, context.now
    kept = claimed_since(
        entry, context.index, parse_artifact_filename(name) is not None
    ) or foreign_source_id(entry, context)
    if kept is not None:
        return kept
    if entry.version is None or entry.size is None:
        return replace(entry, status=S.RACE_DETECTED, reason="the plan entry has no snapshot")
    try:
        obj = backend.stat_object(name)
    except ArtifactStoreError as exc:
        return replace(entry, status=S.RETAINED_UNKNOWN, reason=f"the store failed: {exc}")
    if obj is None:
        return replace(
            entry, status=S.ALREADY_MISSING, reason=f"already gone from {backend.location}"
        )
    if (obj.version, obj.size) != (entry.version, entry.size):
        return replace(
            entry, status=S.RACE_DETECTED, reason="the object was replaced since planning"
        )
    recorded = context.records.get(name)
    kept = recheck_at_apply(
        entry,
        now=now,
        policy=context.policy,
        mtime_ns=obj.mtime_ns,
        recorded=recorded,
        held=obj.sha256,
        what="the object's stored SHA-256",
    ) or content_changed(entry, obj.sha256)
    if kept is not None:
        return kept
    crash_point("cleanup.verified")

    def unchanged(record: ArtifactRecord | None, collected: object) -> str | None:
        if (record.sha256 if record else None) != recorded:
            return "its manifest record changed after it was checked (another host)"
        return None

    # Recorded first, as for a local file: a crash before the delete leaves an object the
    # manifest calls collected, which a later cleanup removes. The record goes only onto a
    # chain where the name's record is still the one checked: a capture on another host
    # that records this object meanwhile keeps it.
    try:
        context.manifest.append(
            CollectedRecord(
                filename=name,
                source_id=entry.source_id,
                sha256=obj.sha256 if recorded is None else recorded,
                collected_at=now.astimezone(UTC).isoformat(),
                reason=entry.reason,
            ),
            expect=(name, unchanged),
        )
    except ManifestConflict as exc:
        return replace(entry, status=S.RACE_DETECTED, reason=f"{exc}; the object is kept")
    crash_point("cleanup.collect_recorded")
    try:
        deleted = backend.delete_object(obj)
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
        durable.current().unlink(name, dir_fd=context.dir_fd)  # this host's copy
    crash_point("cleanup.unlinked")
    return replace(entry, status=S.DELETED, reason=entry.reason)
