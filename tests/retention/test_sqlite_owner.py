"""SqliteMemoryOwner on real SQLite files: publication IDs, tombstones, the fence, heads."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from toolswap import (
    ArtifactReconcileStatus,
    ArtifactReferenceOwnerError,
    SqliteMemoryOwner,
)
from toolswap.retention import ArtifactObservationState

from .conftest import Env


def test_owner_database_is_private_and_in_wal_mode(env: Env) -> None:
    env.owner()
    assert stat.S_IMODE(os.stat(env.owner_db).st_mode) == 0o600
    with sqlite3.connect(env.owner_db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_symlinked_or_missing_database_is_refused(env: Env) -> None:
    with pytest.raises(ArtifactReferenceOwnerError, match="no memory owner database"):
        SqliteMemoryOwner(env.tmp / "missing.sqlite3", create=False)
    env.owner()
    link = env.tmp / "link.sqlite3"
    os.symlink(env.owner_db, link)
    with pytest.raises(ArtifactReferenceOwnerError, match="not a symlink"):
        SqliteMemoryOwner(link)


def test_database_from_a_newer_schema_is_refused(env: Env) -> None:
    env.owner()
    with sqlite3.connect(env.owner_db) as conn:
        conn.execute("UPDATE owner_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ArtifactReferenceOwnerError, match="schema version '99'"):
        env.owner()


def test_fence_holds_a_write_transaction_that_blocks_every_writer(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    lease = journal.prepare(env.claim(), transaction_id="tx-1")
    impatient = env.owner(busy_timeout=0)
    with owner.inspect_fenced(lease) as fence:
        assert fence.observation.state is ArtifactObservationState.ABSENT
        assert not fence.observation.sealed
        with pytest.raises(ArtifactReferenceOwnerError, match="locked"):
            impatient.publish("tx-1", env.reference())
        with pytest.raises(ArtifactReferenceOwnerError, match="locked"):
            impatient.publish("other", env.reference())
        # Readers are not blocked (WAL).
        assert impatient.get("tx-1") is None
    impatient.publish("tx-1", env.reference())


def test_owner_that_cannot_take_the_fence_leaves_every_lease_pending(env: Env) -> None:
    journal = env.journal()
    journal.prepare(env.claim(), transaction_id="tx-1")
    owner = env.owner(busy_timeout=0)
    blocker = sqlite3.connect(env.owner_db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        [report] = journal.reconcile_pending(owner)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert report.status is ArtifactReconcileStatus.PENDING_UNKNOWN
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    assert journal.reconcile_pending(owner)[0].status is ArtifactReconcileStatus.ABORTED
