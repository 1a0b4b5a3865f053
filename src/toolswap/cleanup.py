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

Versions the session's backend holds beyond this directory (the objects of a shared
store) are collected through the backend (:mod:`toolswap._cleanup_store`), each delete
naming the version it checked. Such a session needs the journal shared by every host (a
database journal): a host-local journal is refused, since another host's references would
be invisible to it. What is decided, and why, lives in :mod:`toolswap._cleanup_model`.

Plans and reports are JSON-serializable and contain no filesystem path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from . import durable
from ._cleanup_model import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    ArtifactCleanupStatus,
    ClaimIndex,
    ClaimView,
    CleanupClaim,
    CleanupEntry,
    JournalLike,
    Limits,
    S,
    capture_alive,
    claimed_since,
    claims_of,
    content_changed,
    index_claims,
    owned_name,
    recheck_at_apply,
    utc_now,
    verdict,
)
from ._cleanup_store import apply_object, store_entries
from .artifact import parse_artifact_filename, parse_temporary_filename
from .crashpoints import crash_point
from .durable import open_dir_nofollow
from .errors import ArtifactStoreError, ChainLogError, CleanupError
from .manifest import Manifest
from .records import ArtifactRecord, CollectedRecord
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


def _plan(
    session: Session,
    claims: Iterable[CleanupClaim],
    policy: ArtifactCleanupPolicy,
    now: datetime,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    index = index_claims(session, claims, now)
    manifest = Manifest.of(session)
    _check_manifest(manifest)
    records = {r.filename: r for r in manifest.records()}
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
    index: ClaimIndex,
    records: Mapping[str, ArtifactRecord],
    collected: set[str],
    now_ns: int,
    ttl_ns: int,
    progress: Callable[[int, int], None] | None,
) -> Iterator[CleanupEntry]:
    """One entry per version the session's backend holds beyond this directory (the
    objects of a store), then one per file of ``tool-results/``."""
    backend = session.backend
    try:
        objects = backend.objects()
    except ArtifactStoreError as exc:
        raise CleanupError(f"cannot list {backend.location}: {exc}; nothing was changed") from exc
    yield from store_entries(objects, index, records, collected, now_ns, ttl_ns, progress)
    stored = {o.filename for o in objects}
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    try:
        names = sorted(_list_dir(dir_fd, session))
        for done, name in enumerate(names, 1):
            if progress and not objects:
                progress(done, len(names))
            if name in stored:
                continue  # this host's copy of a stored object: it goes with the object
            if backend.copies_only and name in records:
                yield CleanupEntry(
                    name=name,
                    status=S.RETAINED_UNKNOWN,
                    reason=f"recorded, but missing from {backend.location}: this replica's "
                    "copy may be the only one (run verify)",
                )
                continue
            # An artifact here, or a leftover of a capture or collection cut short.
            yield _plan_file(dir_fd, name, index, records, collected, now_ns, ttl_ns)
    finally:
        durable.current().close(dir_fd)


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


def _plan_file(
    dir_fd: int,
    name: str,
    index: ClaimIndex,
    records: Mapping[str, ArtifactRecord],
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
        io.close(fd)
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
    source_id = record.source_id if record and record.sha256 == digest else None
    base = CleanupEntry(
        name=name,
        status=S.PLANNED_DELETE,
        reason="",
        source_id=source_id,
        sha256=digest,
        **snap,
    )
    return verdict(base, is_tmp, index, record, collected, now_ns, ttl_ns)


def _check_manifest(manifest: Manifest) -> None:
    """Cleanup trusts no manifest that lost records (its journal anchor may be gone), and
    decides on every record there is (a replica pulls its store's first)."""
    try:
        manifest.sync()
        manifest.check_head()
    except ChainLogError as exc:
        raise CleanupError(str(exc)) from exc


_OWNER_DB = "memory.sqlite3"  # the embedded SqliteMemoryOwner's default database


def _refuse_raw_claims(session: Session) -> None:
    """Caller-supplied claims are trusted only while no durable retention state exists.

    A journal (even an empty file) or the default memory owner's database means the
    session's real references live there; a missing journal next to an owner database is
    a journal that was lost, never "no references".
    """
    why = session.backend.local_retention_refused()
    if why is not None:
        raise CleanupError(
            f"session {session.session_id!r} {why}; plan and apply from that journal "
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
        session, claims_of(claims), policy or ArtifactCleanupPolicy(), utc_now(now), progress
    )


def plan_cleanup_from_journal(
    journal: JournalLike,
    *,
    policy: ArtifactCleanupPolicy | None = None,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    """Plan from the journal's recovered claims (PREPARED leases protect too). Read-only."""
    when = utc_now(now)
    view = journal.recover(now=when)
    return _plan(
        journal.session, claims_of(view), policy or ArtifactCleanupPolicy(), when, progress
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
    current = claims_of(claims)

    def raw(when: datetime) -> tuple[list[CleanupClaim], tuple[str, ...]]:
        # Checked again under the session lock: a prepare() that won the lock may have
        # created the journal since the check above.
        _refuse_raw_claims(session)
        return current, ()

    return _apply(session, plan, raw, utc_now(now), progress, policy)


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
        return claims_of(view), tuple(view.pending_transaction_ids)

    # The journal's lock (a database lock for a shared journal) is the one prepare() takes.
    with journal.lock():
        return _apply(journal.session, plan, current, utc_now(now), progress, policy)


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
        _check_manifest(manifest)
        records = {r.filename: r.sha256 for r in manifest.records()}
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
            durable.current().close(dir_fd)
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


def _apply_one(
    session: Session,
    dir_fd: int,
    entry: CleanupEntry,
    index: ClaimIndex,
    manifest: Manifest,
    now: datetime,
    policy: ArtifactCleanupPolicy,
    records: Mapping[str, str],
) -> CleanupEntry:
    if entry.source_id is None and entry.name in records:
        # Planned as a leftover without a record, recorded since (a capture on this host
        # whose bytes went to a store): it now goes with its record, never on its own.
        return replace(entry, status=S.RACE_DETECTED, reason="recorded since planning; kept")
    name = entry.name
    kept = claimed_since(entry, index, owned_name(name))
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
        kept = recheck_at_apply(
            entry,
            now=now,
            policy=policy,
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
            manifest.append(
                CollectedRecord(
                    filename=name,
                    source_id=entry.source_id,
                    sha256=entry.sha256,
                    collected_at=now.astimezone(UTC).isoformat(),
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
        io.close(fd)
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
