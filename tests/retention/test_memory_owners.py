"""Every memory owner, on SQLite and on PostgreSQL: publication IDs, tombstones, heads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from toolswap import (
    ArtifactPublicationConflictError,
    ArtifactPublicationRejected,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
    JournalHead,
)

from .conftest import BACKENDS, Env

pytestmark = pytest.mark.parametrize("env", BACKENDS, indirect=True)


def test_publish_stores_the_thin_reference_under_the_transaction_id(env: Env) -> None:
    owner = env.owner()
    ref = env.reference()
    stored = owner.publish("tx-1", ref)
    assert stored.transaction_id == "tx-1"
    assert stored.reference == ref
    assert stored.generation == 1
    assert owner.get("tx-1") == stored
    assert owner.get("tx-2") is None
    assert "content" not in stored.to_dict()["reference"]  # type: ignore[operator]


def test_publishing_the_same_reference_again_is_idempotent(env: Env) -> None:
    owner = env.owner()
    first = owner.publish("tx-1", env.reference())
    again = owner.publish("tx-1", env.reference())
    assert again == first
    assert len(owner.list_references()) == 1


def test_a_different_reference_under_a_used_id_is_a_conflict_not_a_rejection(env: Env) -> None:
    owner = env.owner()
    owner.publish("tx-1", env.reference(0))
    with pytest.raises(ArtifactPublicationConflictError) as raised:
        owner.publish("tx-1", env.reference(1))
    assert not isinstance(raised.value, ArtifactPublicationRejected)
    assert owner.get("tx-1").reference == env.reference(0)  # type: ignore[union-attr]


def test_malformed_publication_is_rejected_before_any_write(env: Env) -> None:
    owner = env.owner()
    ref = env.reference()
    with pytest.raises(ArtifactPublicationRejected, match="before write"):
        owner.publish("bad id", ref)
    with pytest.raises(ArtifactPublicationRejected, match="before write"):
        owner.publish("tx-1", replace(ref, content_sha256="0" * 64))
    assert owner.list_references() == []
    assert not owner.is_tombstoned("tx-1")


def test_removed_id_is_tombstoned_and_refuses_late_and_replayed_writes_forever(
    env: Env,
) -> None:
    owner = env.owner()
    owner.publish("tx-1", env.reference())
    assert owner.remove("tx-1") is True
    assert owner.get("tx-1") is None
    assert owner.is_tombstoned("tx-1")
    for _ in range(2):
        with pytest.raises(ArtifactReferenceTombstonedError) as raised:
            owner.publish("tx-1", env.reference())
        assert not isinstance(raised.value, ArtifactPublicationRejected)
    # A new owner object on the same file (another process, later) refuses it too.
    with pytest.raises(ArtifactReferenceTombstonedError):
        env.owner().publish("tx-1", env.reference())
    assert owner.remove("tx-1") is False


def test_removing_an_unknown_id_seals_it(env: Env) -> None:
    owner = env.owner()
    assert owner.remove("never-published") is False
    with pytest.raises(ArtifactReferenceTombstonedError):
        owner.publish("never-published", env.reference())


def test_list_references_filters_by_session_and_artifact(env: Env) -> None:
    owner = env.owner()
    for tx, index in (("a", 0), ("b", 1), ("c", 0)):
        owner.publish(tx, env.reference(index))
    assert [r.transaction_id for r in owner.list_references()] == ["a", "b", "c"]
    assert {r.transaction_id for r in owner.list_references(source_id=env.source_ids[0])} == {
        "a",
        "c",
    }
    assert len(owner.list_references(session="s1")) == 3
    assert owner.list_references(session="s2") == []


def test_seal_writes_the_tombstone_and_advances_the_generation(env: Env) -> None:
    owner = env.owner()
    lease = env.journal(owner=owner).prepare(env.claim(), transaction_id="tx-1")
    with owner.inspect_fenced(lease) as fence:
        assert fence.observation.generation == 0
        sealed = fence.seal_absent()
        assert (sealed.state, sealed.sealed, sealed.generation) == ("absent", True, 1)
        assert fence.seal_absent() == sealed
    with owner.inspect_fenced(lease) as fence:
        assert fence.observation.sealed
        assert fence.observation.generation == 1
        with pytest.raises(ArtifactReferenceOwnerError, match="unsealed"):
            fence.seal_absent()
    with pytest.raises(ArtifactReferenceTombstonedError):
        owner.publish("tx-1", env.reference())


def test_journal_heads_only_move_forward(env: Env) -> None:
    owner = env.owner()
    assert owner.journal_head("ws/s1") is None
    owner.acknowledge_journal_head("ws/s1", JournalHead(5, "a" * 64))
    owner.acknowledge_journal_head("ws/s1", JournalHead(3, "b" * 64))
    owner.acknowledge_journal_head("ws/s1", JournalHead(5, "c" * 64))
    assert owner.journal_head("ws/s1") == JournalHead(5, "a" * 64)
    owner.acknowledge_journal_head("ws/s1", JournalHead(6, "d" * 64))
    assert owner.journal_head("ws/s1") == JournalHead(6, "d" * 64)
    assert owner.journal_head("other/s1") is None


def test_journal_key_names_workspace_and_session(env: Env) -> None:
    assert env.journal().journal_key == "sessions/s1"


def test_several_processes_publish_through_one_owner(env: Env) -> None:
    procs = [env.spawn("publish-many", f"w{i}", "5", *env.source_ids) for i in range(4)]
    for proc in procs:
        result = env.finish(proc)
        assert (result.code, result.out) == (0, 5), result.err
    owner = env.owner()
    assert len(owner.list_references()) == 20
    view = env.journal(owner=owner).recover()
    assert view.journal_seq == 40
    assert view.pending_transaction_ids == ()
    assert sum(c.reference_count for c in view.claims.values()) == 20
    assert owner.journal_head(env.journal().journal_key) is not None
