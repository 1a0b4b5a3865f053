"""Planning a cleanup: read-only, every file and stored version gets exactly one status.

Each file of ``tool-results/`` is hashed with a streamed SHA-256 and its size, mtime,
device and inode are frozen; each version the session's backend holds beyond the directory
(the objects of a store) is listed with its size, last write and version. What each one's
status is, and why, is decided in :mod:`toolswap._cleanup_model`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from . import durable
from ._cleanup_model import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    CleanupClaim,
    CleanupEntry,
    PlanContext,
    S,
    index_claims,
    verdict,
)
from ._cleanup_store import store_entries
from .artifact import parse_artifact_filename, parse_temporary_filename
from .durable import open_dir_nofollow
from .errors import ArtifactStoreError, ChainLogError, CleanupError
from .manifest import Manifest
from .session import Session

__all__ = ["check_manifest", "plan"]


def plan(
    session: Session,
    claims: Iterable[CleanupClaim],
    policy: ArtifactCleanupPolicy,
    now: datetime,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    index = index_claims(session, claims, now)
    manifest = Manifest.of(session)
    check_manifest(manifest)
    context = PlanContext(
        index=index,
        records={r.filename: r for r in manifest.records()},
        collected={c.filename for c in manifest.collected_records()},
        now_ns=int(now.timestamp() * 1_000_000_000),
        ttl_ns=int(policy.orphan_ttl_seconds * 1_000_000_000),
    )
    entries: list[CleanupEntry] = []
    candidates: list[CleanupEntry] = []
    total = 0
    seen: set[str] = set()
    for entry in _planned_entries(session, context, progress):
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
    session: Session, context: PlanContext, progress: Callable[[int, int], None] | None
) -> Iterator[CleanupEntry]:
    """One entry per version the session's backend holds beyond this directory (the
    objects of a store), then one per file of ``tool-results/``."""
    backend = session.backend
    try:
        objects = backend.objects()
    except ArtifactStoreError as exc:
        raise CleanupError(f"cannot list {backend.location}: {exc}; nothing was changed") from exc
    yield from store_entries(objects, context, progress, backend.stat_object)
    stored = {o.filename for o in objects}
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    try:
        names = sorted(_list_dir(dir_fd, session))
        for done, name in enumerate(names, 1):
            if progress and not objects:
                progress(done, len(names))
            if name in stored:
                continue  # this host's copy of a stored object: it goes with the object
            if backend.copies_only and name in context.records:
                yield CleanupEntry(
                    name=name,
                    status=S.RETAINED_UNKNOWN,
                    reason=f"recorded, but missing from {backend.location}: this replica's "
                    "copy may be the only one (run verify)",
                )
                continue
            # An artifact here, or a leftover of a capture or collection cut short.
            yield _plan_file(dir_fd, name, context)
    finally:
        durable.close_unwritten(dir_fd)


def _list_dir(dir_fd: int, session: Session) -> list[str]:
    try:
        return os.listdir(dir_fd)
    except OSError as exc:
        raise CleanupError(
            f"cannot list {session.tool_results_dir}: {exc.strerror}; nothing was changed"
        ) from exc


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


def _plan_file(dir_fd: int, name: str, context: PlanContext) -> CleanupEntry:
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
    io = durable.current()
    try:
        fd = io.open(name, durable.READ_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        return CleanupEntry(name=name, status=S.DENIED, reason="permission denied")
    except OSError as exc:
        return CleanupEntry(
            name=name, status=S.RETAINED_UNKNOWN, reason=f"cannot open: {exc.strerror}"
        )
    try:
        fst = os.fstat(fd)
        digest = durable.hash_fd(fd)[0]
        after = os.fstat(fd)
    except OSError as exc:
        # One unreadable file is kept, with its reason; the rest of the session goes on.
        return CleanupEntry(
            name=name, status=S.RETAINED_UNKNOWN, reason=f"cannot read: {exc.strerror}"
        )
    finally:
        durable.close_unwritten(fd)
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
    record = context.records.get(name)
    source_id = record.source_id if record and record.sha256 == digest else None
    base = CleanupEntry(
        name=name,
        status=S.PLANNED_DELETE,
        reason="",
        source_id=source_id,
        sha256=digest,
        **snap,
    )
    return verdict(base, is_tmp, context)


def check_manifest(manifest: Manifest) -> None:
    """Cleanup trusts no manifest that lost records (its journal anchor may be gone), and
    decides on every record there is (a replica pulls its store's first)."""
    try:
        manifest.sync()
        manifest.check_head()
    except ChainLogError as exc:
        raise CleanupError(str(exc)) from exc
