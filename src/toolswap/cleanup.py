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

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from ._cleanup_apply import apply as _apply
from ._cleanup_model import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    ArtifactCleanupStatus,
    ClaimView,
    CleanupClaim,
    CleanupEntry,
    JournalLike,
    S,
    claims_of,
    utc_now,
)
from ._cleanup_plan import plan as _plan
from .errors import ChainLogError, CleanupError
from .layout import OWNER_DB_NAME, RETENTION_CHOICE_NAME
from .manifest import Manifest
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


def _refuse_raw_claims(session: Session) -> None:
    """Caller-supplied claims are trusted only while no durable retention state exists.

    A journal (even an empty file), the default memory owner's database, a recorded
    retention choice (``retention.json``: leases kept in PostgreSQL leave no file here) or
    a journal head the manifest anchors means the session's real references live in a
    journal; a journal missing while any of the others remains was lost, never "no
    references" (a review: a lost journal file, and a PostgreSQL session, let raw claims
    delete a leased artifact).
    """
    why = session.backend.local_retention_refused()
    if why is not None:
        raise CleanupError(
            f"session {session.session_id!r} {why}; plan and apply from that journal "
            "(CLI: --database-url)"
        )
    for path, what in (
        (session.journal_path, "a durable retention journal"),
        (session.root / OWNER_DB_NAME, "a memory owner database"),
        (session.root / RETENTION_CHOICE_NAME, "a recorded retention choice"),
    ):
        if os.path.lexists(path):
            raise CleanupError(
                f"this session has {what} ({path.name}); use plan_cleanup_from_journal / "
                "apply_cleanup_from_journal so cleanup sees the journal's claims"
            )
    try:
        stores = Manifest.of(session).journal_stores()
    except ChainLogError as exc:
        raise CleanupError(f"cannot read the manifest: {exc}; nothing was changed") from exc
    if stores:
        raise CleanupError(
            f"the manifest anchors a lease journal ({', '.join(stores)}) that is not here; "
            "its leases still protect artifacts: restore it, or plan and apply from it "
            "(plan_cleanup_from_journal / apply_cleanup_from_journal)"
        )


_NOT_GIVEN = object()


def _check_arguments(
    policy: object = None, plan: object = _NOT_GIVEN, journal: object = _NOT_GIVEN
) -> None:
    """Refuse arguments of the wrong kind with a typed error, before anything is read."""
    if policy is not None and not isinstance(policy, ArtifactCleanupPolicy):
        raise CleanupError(f"policy must be an ArtifactCleanupPolicy, not {type(policy).__name__}")
    if plan is not _NOT_GIVEN and not isinstance(plan, ArtifactCleanupPlan):
        raise CleanupError(
            f"plan must be an ArtifactCleanupPlan (ArtifactCleanupPlan.from_dict reads a saved "
            f"one), not {type(plan).__name__}"
        )
    if journal is not _NOT_GIVEN and not callable(getattr(journal, "recover", None)):
        raise CleanupError(
            "journal must be a lease journal (ArtifactRetentionJournal, or "
            f"open_retention(...).journal), not {type(journal).__name__}"
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
    if claims is None:
        raise CleanupError("plan_cleanup needs the current claims; pass an empty list if none")
    _check_arguments(policy)
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
    _check_arguments(policy, journal=journal)
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
    _check_arguments(policy, plan)
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
    _check_arguments(policy, plan, journal)

    def current(when: datetime) -> tuple[list[CleanupClaim], tuple[str, ...]]:
        view = journal.recover(now=when)
        return claims_of(view), tuple(view.pending_transaction_ids)

    # The journal's lock (a database lock for a shared journal) is the one prepare() takes.
    with journal.lock():
        return _apply(journal.session, plan, current, utc_now(now), progress, policy)


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
