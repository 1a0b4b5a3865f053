"""A lost journal or owner database is noticed without an owner's help, so gc refuses.

The session's own hash-chained manifest anchors the journal's head (and the owner's last
acknowledged head) after every append; ``manifest.head`` anchors the manifest. Each test
damages one piece the way an accident or a careless script would, then asks cleanup to
plan, as ``toolswap gc plan`` does, and checks that nothing referenced could be deleted.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from toolswap import (
    ArtifactCleanupPolicy,
    ArtifactLeaseJournalError,
    ArtifactReferenceOwnerError,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
    plan_cleanup_from_journal,
)

from .conftest import Env

EVERYTHING = ArtifactCleanupPolicy(orphan_ttl_seconds=0)


def _plan(env: Env) -> None:
    plan_cleanup_from_journal(ArtifactRetentionJournal(env.session_dir), policy=EVERYTHING)


def _journal(env: Env) -> Path:
    return env.session_dir / "retention-leases.jsonl"


def _no_owner_publications(env: Env) -> bytes:
    """Two references published with no memory owner at all (owner=None)."""
    journal = ArtifactRetentionJournal(env.session_dir, owner=None)
    journal.publish_reference(env.claim(0), lambda: None, transaction_id="a")
    journal.publish_reference(env.claim(1), lambda: None, transaction_id="b")
    return _journal(env).read_bytes()


def test_an_intact_journal_without_an_owner_protects_its_references(env: Env) -> None:
    _no_owner_publications(env)
    plan = plan_cleanup_from_journal(ArtifactRetentionJournal(env.session_dir), policy=EVERYTHING)
    statuses = {e.source_id: e.status.value for e in plan.entries}
    assert statuses[env.source_ids[0]] == "retained_referenced"
    assert statuses[env.source_ids[1]] == "retained_referenced"
    assert statuses[env.source_ids[2]] == "planned_delete"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data, path: path.unlink(), id="deleted"),
        pytest.param(lambda data, path: path.write_bytes(b""), id="emptied"),
        pytest.param(
            lambda data, path: path.write_bytes(b"".join(data.splitlines(True)[:2])),
            id="rolled back",
        ),
    ],
)
def test_a_lost_journal_without_an_owner_makes_gc_refuse(
    env: Env, damage: Callable[[bytes, Path], None]
) -> None:
    data = _no_owner_publications(env)

    damage(data, _journal(env))

    with pytest.raises(ArtifactLeaseJournalError, match="session manifest anchored record 4"):
        _plan(env)
    assert all(ToolResultExternalizer(env.session_dir).get_artifact(s) for s in env.source_ids)


def _owner_publications(env: Env) -> None:
    env.publish("a", 0)
    env.publish("b", 1)


def test_a_deleted_owner_database_makes_gc_refuse(env: Env) -> None:
    _owner_publications(env)

    env.owner_db.unlink()

    with pytest.raises(ArtifactLeaseJournalError, match="no memory owner is bound"):
        _plan(env)


def test_an_owner_database_emptied_to_zero_bytes_is_refused(env: Env) -> None:
    _owner_publications(env)

    env.owner_db.write_bytes(b"")

    with pytest.raises(ArtifactReferenceOwnerError, match="empty"):
        _plan(env)


def test_an_owner_database_swapped_in_from_another_session_makes_gc_refuse(
    env: Env, tmp_path: Path
) -> None:
    _owner_publications(env)
    other = ToolResultExternalizer(tmp_path / "other" / "s1")
    art = other.externalize("other output\n" * 5000, "grep").artifact
    other_db = other.session_dir / "memory.sqlite3"
    owner = SqliteMemoryOwner(other_db)
    ArtifactRetentionJournal(other.session_dir, owner=owner).publish_reference(
        ArtifactRetentionClaim.from_memory_reference(art.for_memory()),
        lambda: owner.publish("x", art.for_memory()),
        transaction_id="x",
    )

    shutil.copyfile(other_db, env.owner_db)

    with pytest.raises(ArtifactLeaseJournalError, match="replaced by another session's"):
        _plan(env)


def test_a_journal_opened_without_an_owner_on_purpose_still_checks_the_anchor(env: Env) -> None:
    _owner_publications(env)
    data = _journal(env).read_bytes()
    _journal(env).write_bytes(b"".join(data.splitlines(True)[:2]))

    with pytest.raises(ArtifactLeaseJournalError, match="session manifest anchored"):
        ArtifactRetentionJournal(env.session_dir, owner=None).recover()


@pytest.mark.parametrize(
    "point", ["manifest.appended", "manifest.fsynced", "manifest.head_written"]
)
def test_a_publisher_killed_while_anchoring_the_journal_leaves_a_recoverable_session(
    env: Env, point: str
) -> None:
    # The first manifest append of a publish anchors its PREPARED record.
    crashed = env.run("publish", env.source_ids[0], "tx", crash=point)
    assert crashed.killed, (crashed.code, crashed.err)

    recovered = env.run("recover")

    assert recovered.code == 0, recovered.err
    assert recovered.out["after"]["view"]["pending_transaction_ids"] == []
    plan = plan_cleanup_from_journal(ArtifactRetentionJournal(env.session_dir), policy=EVERYTHING)
    statuses = {e.source_id: e.status.value for e in plan.entries}
    assert statuses[env.source_ids[0]] == "planned_delete"  # aborted: the owner never wrote it
    assert statuses[env.source_ids[1]] == "planned_delete"
