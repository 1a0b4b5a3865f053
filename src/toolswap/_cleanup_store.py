"""Cleanup of a session kept in a shared store: its objects, listed and deleted.

Planning lists the objects (size, last write, version) and takes each digest from the
manifest; apply checks each one again with one HEAD (same version and size, stored SHA-256
equal to the manifest's), records the collection only onto a chain where the name's record
is still the one checked, then deletes exactly that version (a replaced object is never
deleted) and drops this host's replica copy.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ._cleanup_model import (
    ArtifactCleanupPolicy,
    ClaimIndex,
    CleanupEntry,
    S,
    claimed_since,
    verdict,
)
from .artifact import parse_artifact_filename
from .crashpoints import crash_point
from .errors import ArtifactStoreError, CleanupError
from .manifest import Manifest, ManifestConflict
from .remote import StoreObject
from .session import Session

__all__ = ["apply_object", "store_entries", "store_objects"]


def store_entries(
    objects: list[StoreObject],
    index: ClaimIndex,
    records: Mapping[str, Mapping[str, Any]],
    collected: set[str],
    now_ns: int,
    ttl_ns: int,
    progress: Callable[[int, int], None] | None,
) -> Iterator[CleanupEntry]:
    """One entry per stored object, with its verdict."""
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
        yield verdict(base, False, index, record, collected, now_ns, ttl_ns)


def store_objects(session: Session) -> list[StoreObject]:
    binding = session.binding
    assert binding is not None
    try:
        return binding.store.artifacts(binding.workspace, binding.session)
    except ArtifactStoreError as exc:
        raise CleanupError(f"cannot list {binding.url}: {exc}; nothing was changed") from exc


def apply_object(
    session: Session,
    dir_fd: int,
    entry: CleanupEntry,
    index: ClaimIndex,
    manifest: Manifest,
    now: datetime,
    policy: ArtifactCleanupPolicy,
    records: Mapping[str, str],
) -> CleanupEntry:
    """Delete one object of a session kept in a store, if every check still holds."""
    binding = session.binding
    assert binding is not None
    name = entry.name
    kept = claimed_since(entry, index, parse_artifact_filename(name) is not None)
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
