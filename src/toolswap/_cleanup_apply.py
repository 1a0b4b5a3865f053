"""Applying a cleanup plan: under the session lock, every delete is checked again first.

The current claims are folded again, and each planned file is re-opened by its validated
name through the directory descriptor: ownership, file type, the frozen snapshot and the
full digest must all still hold (:func:`toolswap._cleanup_model.recheck_at_apply`); any
change keeps the file (``race_detected``). The manifest records each collection before the
unlink; the directory is fsynced after the last one. Versions held beyond the directory go
through :mod:`toolswap._cleanup_store`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from . import durable
from ._cleanup_model import (
    ApplyContext,
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    CleanupClaim,
    CleanupEntry,
    Limits,
    S,
    capture_alive,
    claimed_since,
    content_changed,
    foreign_source_id,
    index_claims,
    owned_name,
    recheck_at_apply,
)
from ._cleanup_plan import check_manifest
from ._cleanup_store import apply_object
from .artifact import parse_artifact_filename, parse_temporary_filename
from .crashpoints import crash_point
from .durable import not_ours, open_dir_nofollow
from .errors import ArtifactStoreError, CleanupError
from .manifest import Manifest
from .records import CollectedRecord
from .session import Session

__all__ = ["apply"]


def apply(
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
        index = index_claims(session, claims, now)
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
        check_manifest(manifest)
        recorded = manifest.records()
        records = {r.filename: r.sha256 for r in recorded}
        source_ids: dict[str, str | None] = {
            c.filename: c.source_id for c in manifest.collected_records()
        }
        source_ids.update((r.filename, r.source_id) for r in recorded)
        dir_fd = open_dir_nofollow(session.tool_results_dir)
        deleted_any = False
        try:
            try:
                objects = session.backend.objects()
            except ArtifactStoreError as exc:
                raise CleanupError(
                    f"cannot list {session.backend.location}: {exc}; nothing was changed"
                ) from exc
            stored = {o.filename for o in objects}
            # What the session occupies, as planning counts it: the versions held beyond
            # this directory and the files here that are not copies of them.
            limits = Limits(rules, sum(o.size for o in objects) + _current_total(dir_fd, stored))
            context = ApplyContext(
                session, dir_fd, index, manifest, now, rules, records, source_ids
            )
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
                # A version held beyond this directory (a stored object), or a file here.
                apply_one = apply_object if entry.version is not None else _apply_one
                outcome = kept or apply_one(entry, context)
                if outcome.status is S.DELETED:
                    deleted_any = True
                    freed += entry.size or 0
                    limits.deleted(entry)
                outcomes[i] = outcome
            results = [outcomes[i] for i in range(len(plan.entries))]
            if deleted_any:
                try:
                    durable.current().fsync(dir_fd)
                except OSError as exc:
                    raise CleanupError(
                        f"deleted files but cannot sync {session.tool_results_dir} "
                        f"({exc.strerror}): after a power loss some may come back; run "
                        "cleanup again"
                    ) from exc
                crash_point("cleanup.dir_fsynced")
        finally:
            durable.close_unwritten(dir_fd)
    return ArtifactCleanupReport(
        session_id=session.session_id,
        applied_at=now,
        dry_run=False,
        entries=tuple(results),
        freed_bytes=freed,
        budget_note=plan.budget_note,
        pending_transaction_ids=pending,
    )


def _current_total(dir_fd: int, skip: set[str]) -> int:
    """Bytes in ``tool-results/`` now (regular files, lstat only), but for ``skip``."""
    total = 0
    for name in os.listdir(dir_fd):
        if name in skip:
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def _apply_one(entry: CleanupEntry, context: ApplyContext) -> CleanupEntry:
    records, dir_fd = context.records, context.dir_fd
    if entry.source_id is None and entry.name in records:
        # Planned as a leftover without a record, recorded since (a capture on this host
        # whose bytes went to a store): it now goes with its record, never on its own.
        return replace(entry, status=S.RACE_DETECTED, reason="recorded since planning; kept")
    name = entry.name
    kept = claimed_since(entry, context.index, owned_name(name)) or foreign_source_id(
        entry, context
    )
    if kept is not None:
        return kept
    if parse_temporary_filename(name) is not None and capture_alive(name):
        return replace(entry, status=S.RACE_DETECTED, reason="a capture is writing this file")
    if entry.sha256 is None or None in (entry.size, entry.mtime_ns, entry.device, entry.inode):
        return replace(entry, status=S.RACE_DETECTED, reason="the plan entry has no snapshot")
    io = durable.current()
    try:
        fd = io.open(name, durable.READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return replace(entry, status=S.ALREADY_MISSING, reason="already gone")
    except OSError as exc:
        why = (
            "replaced by a symlink" if exc.errno == errno.ELOOP else f"cannot open: {exc.strerror}"
        )
        return replace(entry, status=S.RACE_DETECTED, reason=why)
    try:
        st = os.fstat(fd)
        if not_ours(st, directory=False) is not None:
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
        kept = recheck_at_apply(
            entry,
            now=context.now,
            policy=context.policy,
            mtime_ns=st.st_mtime_ns,
            recorded=records.get(name),
            held=entry.sha256,
            what="the file",
        )
        if kept is not None:
            return kept
        try:
            digest = durable.hash_fd(fd)[0]
        except OSError as exc:
            return replace(entry, status=S.RETAINED_UNKNOWN, reason=f"cannot read: {exc.strerror}")
        kept = content_changed(entry, digest)
        if kept is not None:
            return kept
        crash_point("cleanup.verified")
        # The name must still be the inode we verified, right before it goes.
        again = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            return replace(entry, status=S.RACE_DETECTED, reason="the name was replaced")
        if parse_artifact_filename(name) is not None:
            # Recorded first, so a crash before the unlink leaves a file the manifest calls
            # collected (a later plan collects it as unrecorded), never an artifact that
            # vanished without a word.
            context.manifest.append(
                CollectedRecord(
                    filename=name,
                    source_id=entry.source_id,
                    sha256=entry.sha256,
                    collected_at=context.now.astimezone(UTC).isoformat(),
                    reason=entry.reason,
                )
            )
            crash_point("cleanup.collect_recorded")
        try:
            io.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            # Kept, as after a crash before the unlink: the next cleanup removes it.
            return replace(
                entry, status=S.RETAINED_UNKNOWN, reason=f"cannot unlink: {exc.strerror}"
            )
        crash_point("cleanup.unlinked")
    finally:
        durable.close_unwritten(fd)
    return replace(entry, status=S.DELETED, reason=entry.reason)
