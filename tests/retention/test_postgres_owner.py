"""PostgresMemoryOwner on a real server: the rules the server enforces, its fence, restarts.

The owner's contract itself (publication IDs, tombstones, seals, heads, reconciliation,
crashes) runs on both owners in test_memory_owners, test_reconcile, test_crash_matrix and
test_lease_state_machine; these tests cover what only PostgreSQL has.
"""

from __future__ import annotations

import dataclasses

import pytest

from postgres_server import PostgresServer
from toolswap import (
    ArtifactReconcileStatus,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
)
from toolswap.retention import ArtifactObservationState

from .conftest import Env

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.parametrize("env", ["postgres"], indirect=True)

S = ArtifactReconcileStatus


def test_the_server_refuses_a_reference_under_a_tombstone_whoever_writes_it(env: Env) -> None:
    owner = env.owner()
    owner.publish("tx-1", env.reference())
    owner.remove("tx-1")
    owner.close()
    # A client that bypasses toolswap entirely is refused by the database.
    state = env.sqlstate(
        "INSERT INTO memory_references (transaction_id, session, source_id, content_sha256, "
        "reference, published_at) VALUES ('tx-1', 's1', 'x', 'y', '{}', now())",
    )
    assert state == "TS001"
    with pytest.raises(ArtifactReferenceTombstonedError, match="refused by the database"):
        env.owner().publish("tx-1", env.reference())


def test_tombstones_are_never_updated_deleted_or_truncated(env: Env) -> None:
    owner = env.owner()
    owner.remove("tx-1")
    assert env.sqlstate("DELETE FROM tombstones") == "TS003"
    assert env.sqlstate("UPDATE tombstones SET reason = 'x'") == "TS003"
    assert env.sqlstate("TRUNCATE tombstones") == "TS003"
    assert env.sqlstate("DELETE FROM publications") == "TS003"
    assert owner.is_tombstoned("tx-1")


def test_a_tombstone_is_never_written_beside_a_reference(env: Env) -> None:
    env.owner().publish("tx-1", env.reference())
    state = env.sqlstate(
        "INSERT INTO tombstones (transaction_id, generation, reason, sealed_at) "
        "VALUES ('tx-1', 9, 'absent', now())",
    )
    assert state == "TS002"


def test_a_generation_only_moves_up_by_one(env: Env) -> None:
    env.owner().publish("tx-1", env.reference())
    assert env.sqlstate("UPDATE publications SET generation = 5") == "TS004"
    assert env.sqlstate("UPDATE publications SET generation = 0") == "TS004"
    assert env.sqlstate("UPDATE publications SET generation = generation + 1") is None


def test_the_fence_locks_its_publication_id_and_no_other(env: Env) -> None:
    owner = env.owner()
    lease = env.journal(owner=owner).prepare(env.claim(), transaction_id="tx-1")
    impatient = env.owner(lock_timeout=0.05)
    with owner.inspect_fenced(lease) as fence:
        assert fence.observation.state is ArtifactObservationState.ABSENT
        with pytest.raises(ArtifactReferenceOwnerError, match="locked"):
            impatient.publish("tx-1", env.reference())
        with pytest.raises(ArtifactReferenceOwnerError, match="locked"):
            impatient.remove("tx-1")
        impatient.publish("other", env.reference())  # another ID goes on
        assert impatient.get("tx-1") is None  # readers never wait
    impatient.publish("tx-1", env.reference())


def test_a_schema_of_a_newer_version_is_refused(env: Env) -> None:
    env.owner()
    env.owner_sql("UPDATE owner_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ArtifactReferenceOwnerError, match="schema version '99'"):
        env.owner()


def test_bad_arguments_are_refused_before_connecting(env: Env) -> None:
    from toolswap.retention.owners.postgres import PostgresMemoryOwner

    for kwargs in ({"schema": "Bad-Name"}, {"schema": ""}, {"fence": "none"}):
        with pytest.raises(ValueError):
            PostgresMemoryOwner(env.dsn, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dsn"):
        PostgresMemoryOwner("  ")


def test_an_unreachable_server_is_an_owner_error_that_names_no_credentials(env: Env) -> None:
    from toolswap.retention.owners.postgres import PostgresMemoryOwner

    dsn = f"host={env.tmp} port=5999 user=postgres password=hunter2 dbname=postgres"
    with pytest.raises(ArtifactReferenceOwnerError) as raised:
        PostgresMemoryOwner(dsn, connect_timeout=2)
    assert "hunter2" not in str(raised.value)
    assert "hunter2" not in repr(env.owner())


# -- a server that goes away mid-publish ----------------------------------------------


def test_a_server_crash_mid_publish_leaves_the_lease_prepared_and_reconcile_settles_it(
    env: Env, own_server: PostgresServer
) -> None:
    env = dataclasses.replace(env, dsn=own_server.dsn, schema="restart")
    env.owner().close()  # the schema exists before the worker starts
    with env.stopped_at("owner.publishing", "publish", env.source_ids[0], "tx-1") as proc:
        # The worker's INSERT is in its open transaction; the server crashes and comes back.
        own_server.stop("immediate")
        own_server.start()
    result = env.finish(proc)
    assert result.out == "ArtifactReferenceOwnerError", result.err
    owner = env.owner()
    journal = env.journal(owner=owner)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    assert owner.get("tx-1") is None  # the uncommitted write did not survive the crash
    [report] = journal.reconcile_pending(owner)
    assert report.status is S.ABORTED
    with pytest.raises(ArtifactReferenceTombstonedError):
        owner.publish("tx-1", env.reference())


def test_a_server_down_during_reconcile_keeps_the_lease_pending_until_it_is_back(
    env: Env, own_server: PostgresServer
) -> None:
    env = dataclasses.replace(env, dsn=own_server.dsn, schema="down")
    owner = env.owner(connect_timeout=2)
    journal = env.journal(owner=None)
    journal.prepare(env.claim(), transaction_id="tx-1")
    owner.publish("tx-1", env.reference())
    own_server.stop("fast")  # the kept connections die with it
    with pytest.raises(ArtifactReferenceOwnerError):
        journal.reconcile_pending(owner)
    with pytest.raises(ArtifactReferenceOwnerError):
        journal.reconcile_reference("tx-1", owner)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    own_server.start()
    [report] = journal.reconcile_pending(owner)
    assert report.status is S.COMMITTED
