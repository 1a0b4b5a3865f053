"""One step of the retention protocol, run in its own process by the crash and race tests.

Usage: ``python worker.py ACTION SESSION_DIR OWNER [ARGS...]``; prints one JSON line.
OWNER is a SQLite owner database, or ``postgres|SCHEMA|DSN``. With
``TOOLSWAP_TEST_JOURNAL_STORE=postgres|SCHEMA|DSN`` the journal lives in PostgreSQL too
(see ``tests/journal_backend.py``).
The tests kill it with ``TOOLSWAP_CRASH_POINT`` or stop it with ``TOOLSWAP_SYNC_POINT``.

Actions:
    publish SOURCE_ID TX [reject|fail-after-write]   publish_reference through the owner
    prepare SOURCE_ID TX                             prepare only (the publisher never runs)
    owner-publish SOURCE_ID TX                       the owner's write alone (a late write)
    remove TX                                        remove_reference through the owner
    reconcile [optimistic]                           reconcile_pending, print the reports
    checkpoint                                       write a checkpoint of the fold
    publish-many PREFIX COUNT SOURCE_ID...           COUNT publishes, round-robin on artifacts
    prepare-many PREFIX COUNT GATE SOURCE_ID...      wait for a shared lock on GATE, then
                                                     COUNT prepares, round-robin on artifacts
    recover                                          fresh recovery, reconcile, finish
                                                     removals; print the whole state
"""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from toolswap import (
    ArtifactPublicationRejected,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from journal_backend import open_journal

if TYPE_CHECKING:
    from toolswap.retention.owners.postgres import PostgresMemoryOwner

    Owner = SqliteMemoryOwner | PostgresMemoryOwner


def open_owner(spec: str, fence: Literal["immediate", "optimistic"]) -> Owner:
    if spec.startswith("postgres|"):
        from toolswap.retention.owners.postgres import PostgresMemoryOwner

        _, schema, dsn = spec.split("|", 2)
        return PostgresMemoryOwner(dsn, schema=schema, fence=fence)
    return SqliteMemoryOwner(spec, fence=fence)


def _state(journal: ArtifactRetentionJournal, owner: Owner) -> dict[str, object]:
    view = journal.recover()
    leases = journal.transactions()
    return {
        "view": view.to_dict(),
        "leases": {t.transaction_id: t.phase.value for t in leases},
        "sources": {t.transaction_id: t.claim.source_id for t in leases},
        "owner": {
            r.transaction_id: [r.reference.source.source_id, r.reference.content_sha256]
            for r in owner.list_references()
        },
        "tombstoned": {t.transaction_id: owner.is_tombstoned(t.transaction_id) for t in leases},
        "protected": sorted(
            r.reference.source.source_id
            for r in owner.list_references()
            if view.is_protected(r.reference.source.source_id)
        ),
    }


def main(argv: list[str]) -> None:
    action, session_dir, owner_db, *rest = argv
    fence: Literal["immediate", "optimistic"] = (
        "optimistic" if rest[-1:] == ["optimistic"] else "immediate"
    )
    owner = open_owner(owner_db, fence)
    ext = ToolResultExternalizer(session_dir)
    journal = open_journal(session_dir, owner=owner)

    def claim_for(source_id: str) -> ArtifactRetentionClaim:
        return ArtifactRetentionClaim.from_memory_reference(
            ext.get_artifact(source_id).for_memory()
        )

    out: object = None
    if action in ("publish", "prepare", "owner-publish"):
        source_id, tx, *mode = rest
        reference = ext.get_artifact(source_id).for_memory()
        claim = ArtifactRetentionClaim.from_memory_reference(reference)

        def publisher() -> object:
            if mode == ["reject"]:
                raise ArtifactPublicationRejected("refused by local validation before any write")
            stored = owner.publish(tx, reference)
            if mode == ["fail-after-write"]:
                raise TimeoutError("the reply was lost after the write")
            return stored

        if action == "prepare":
            out = journal.prepare(claim, transaction_id=tx).phase.value
        elif action == "owner-publish":
            try:
                out = owner.publish(tx, reference).generation
            except Exception as exc:
                out = type(exc).__name__
        else:
            try:
                lease, _ = journal.publish_reference(claim, publisher, transaction_id=tx)
                out = lease.phase.value
            except Exception as exc:
                out = type(exc).__name__
    elif action == "remove":
        (tx,) = rest
        out = journal.remove_reference(tx, lambda: owner.remove(tx)).phase.value
    elif action == "reconcile":
        out = [r.to_dict() for r in journal.reconcile_pending(owner)]
    elif action == "checkpoint":
        head = journal.checkpoint()
        out = head.seq if head else None
    elif action == "publish-many":
        prefix, count, *sources = rest
        claims = [claim_for(s) for s in sources]
        refs = [ext.get_artifact(s).for_memory() for s in sources]
        for i in range(int(count)):
            tx = f"{prefix}-{i}"
            ref = refs[i % len(refs)]
            journal.publish_reference(
                claims[i % len(claims)],
                lambda tx=tx, ref=ref: owner.publish(tx, ref),  # type: ignore[misc]
                transaction_id=tx,
            )
        out = int(count)
    elif action == "prepare-many":
        prefix, count, gate, *sources = rest
        claims = [claim_for(s) for s in sources]
        with open(gate, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)  # the test holds it exclusively until all are ready
        for i in range(int(count)):
            journal.prepare(claims[i % len(claims)], transaction_id=f"{prefix}-{i}")
        out = int(count)
    elif action == "recover":
        # A fresh process: recover (full verification), reconcile, then finish removals
        # whose owner side completed before the crash (the remover is idempotent).
        fresh = open_journal(session_dir, owner=owner)
        before = _state(fresh, owner)
        reports = [r.to_dict() for r in fresh.reconcile_pending(owner)]
        owned = {r.transaction_id for r in owner.list_references()}
        finished = []
        for t in fresh.transactions():
            tx = t.transaction_id
            if t.phase.value == "COMMITTED" and tx not in owned and owner.is_tombstoned(tx):
                fresh.remove_reference(tx, lambda tx=tx: owner.remove(tx))  # type: ignore[misc]
                finished.append(tx)
        out = {
            "before": before,
            "reports": reports,
            "finished_removals": finished,
            "after": _state(fresh, owner),
            "verified_records": fresh.verify().records,
        }
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
