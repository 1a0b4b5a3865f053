"""The checkpoint of the journal's fold: used only when verified, never trusted otherwise."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from toolswap import (
    ArtifactLeaseJournalError,
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    ArtifactRetentionJournal,
    ToolResultExternalizer,
)
from toolswap.retention.checkpoint import checkpoint_path, load_checkpoint

from .conftest import Env


def _journal_path(env: Env) -> Path:
    return env.session_dir / "retention-leases.jsonl"


def _checkpoint(env: Env) -> Path:
    return checkpoint_path(_journal_path(env))


def _history(journal: ArtifactRetentionJournal, env: Env, prefix: str, count: int) -> None:
    """Leases in every phase: committed, released, aborted and pending."""
    for i in range(count):
        tx = f"{prefix}-{i}"
        claim = env.claim(i % 3, reference_count=1 + i % 2)
        if i % 4 == 3:
            journal.prepare(claim, transaction_id=tx)
            if i % 8 == 3:
                journal.abort(tx)
            continue
        journal.publish_reference(claim, lambda: None, transaction_id=tx)
        if i % 4 == 1:
            journal.remove_reference(tx, lambda: None)


NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _state(journal: ArtifactRetentionJournal) -> tuple[object, ...]:
    view = journal.recover(NOW)
    return (
        view.to_dict(),
        [t.to_dict() for t in journal.transactions()],
        journal.head,
    )


def _full_fold(env: Env) -> tuple[object, ...]:
    """The state folded from the journal's first byte, the checkpoint set aside."""
    path = _checkpoint(env)
    kept = path.read_bytes() if path.exists() else None
    path.unlink(missing_ok=True)
    try:
        return _state(env.journal(owner=None, checkpoint_every=0))
    finally:
        if kept is not None:
            path.write_bytes(kept)


def _checkpointed(env: Env, *, before: int = 12, after: int = 5) -> ArtifactRetentionJournal:
    journal = env.journal(owner=None, checkpoint_every=0)
    _history(journal, env, "early", before)
    assert journal.checkpoint() == journal.head
    _history(journal, env, "late", after)
    return journal


def test_a_cold_journal_recovers_from_its_checkpoint_the_same_state_as_a_full_fold(
    env: Env,
) -> None:
    journal = _checkpointed(env)
    loaded = load_checkpoint(_journal_path(env), env.ext.session.session_id)
    assert loaded is not None and 0 < loaded.seq < journal.head.seq
    cold = env.journal(owner=None, checkpoint_every=0)
    assert _state(cold) == _full_fold(env) == _state(journal)


def test_a_journal_continues_appending_and_reconciling_after_starting_from_a_checkpoint(
    env: Env,
) -> None:
    _checkpointed(env)
    cold = env.journal(owner=None, checkpoint_every=0)
    with pytest.raises(ArtifactRetentionError, match="already exists"):
        cold.prepare(env.claim(0), transaction_id="early-0")
    assert cold.commit("early-7").phase.value == "COMMITTED"  # PREPARED before the checkpoint
    cold.remove_reference("early-0", lambda: None)
    cold.publish_reference(env.claim(1), lambda: None, transaction_id="after-checkpoint")
    assert cold.verify().records == cold.head.seq
    assert _state(cold) == _full_fold(env)


def test_the_journal_writes_a_checkpoint_every_checkpoint_every_records(env: Env) -> None:
    journal = env.journal(owner=None, checkpoint_every=7)
    _history(journal, env, "tx", 4)
    assert not _checkpoint(env).exists() or journal.head.seq >= 7
    _history(journal, env, "more", 6)
    loaded = load_checkpoint(_journal_path(env), env.ext.session.session_id)
    assert loaded is not None
    assert journal.head.seq - 7 < loaded.seq <= journal.head.seq
    assert _state(env.journal(owner=None)) == _full_fold(env)


def test_checkpoint_every_zero_never_writes_one(env: Env) -> None:
    journal = env.journal(owner=None, checkpoint_every=0)
    _history(journal, env, "tx", 20)
    assert not _checkpoint(env).exists()


def test_checkpoint_every_must_be_a_non_negative_count(env: Env) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        env.journal(owner=None, checkpoint_every=-1)


@pytest.mark.parametrize("where", [0, 10, "middle", -40, -2])
def test_a_damaged_checkpoint_is_ignored_and_the_journal_folded_from_its_first_byte(
    env: Env, where: int | str
) -> None:
    _checkpointed(env)
    path = _checkpoint(env)
    data = bytearray(path.read_bytes())
    index = len(data) // 2 if where == "middle" else int(where)
    data[index] ^= 0x01
    path.write_bytes(bytes(data))
    assert load_checkpoint(_journal_path(env), env.ext.session.session_id) is None
    assert _state(env.journal(owner=None, checkpoint_every=0)) == _full_fold(env)


def test_a_truncated_or_empty_checkpoint_is_ignored(env: Env) -> None:
    _checkpointed(env)
    path = _checkpoint(env)
    expected = _full_fold(env)
    for data in (path.read_bytes()[:-1], path.read_bytes()[:100], b""):
        path.write_bytes(data)
        assert _state(env.journal(owner=None, checkpoint_every=0)) == expected


def test_a_symlinked_checkpoint_is_never_followed(env: Env) -> None:
    _checkpointed(env)
    path = _checkpoint(env)
    real = env.tmp / "elsewhere.checkpoint"
    os.replace(path, real)
    path.symlink_to(real)
    assert load_checkpoint(_journal_path(env), env.ext.session.session_id) is None
    assert _state(env.journal(owner=None, checkpoint_every=0)) == _full_fold(env)


def test_a_checkpoint_of_another_session_is_ignored(env: Env, tmp_path: Path) -> None:
    other = ToolResultExternalizer(tmp_path / "sessions" / "s2")
    sid = other.externalize("other line\n" * 20_000, "grep").artifact.source_id
    other_journal = ArtifactRetentionJournal(other.session, owner=None, checkpoint_every=0)
    claim = ArtifactRetentionClaim.from_memory_reference(other.get_artifact(sid).for_memory())
    for i in range(5):
        other_journal.publish_reference(claim, lambda: None, transaction_id=f"o-{i}")
    other_journal.checkpoint()
    journal = env.journal(owner=None, checkpoint_every=0)
    _history(journal, env, "tx", 6)
    shutil.copyfile(checkpoint_path(other.session.journal_path), _checkpoint(env))
    assert load_checkpoint(_journal_path(env), env.ext.session.session_id) is None
    assert _state(env.journal(owner=None, checkpoint_every=0)) == _full_fold(env)


def test_a_stale_checkpoint_is_used_and_the_records_after_it_are_folded(env: Env) -> None:
    journal = _checkpointed(env, before=6, after=0)
    stale = _checkpoint(env).read_bytes()
    _history(journal, env, "later", 15)
    journal.checkpoint()
    _checkpoint(env).write_bytes(stale)
    loaded = load_checkpoint(_journal_path(env), env.ext.session.session_id)
    assert loaded is not None and loaded.seq < journal.head.seq - 15
    assert _state(env.journal(owner=None, checkpoint_every=0)) == _state(journal)


def test_a_journal_cut_behind_its_checkpoint_is_refused(env: Env) -> None:
    _checkpointed(env, after=0)
    path = _journal_path(env)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-3]))  # whole records: still a valid chain
    with pytest.raises(ArtifactLeaseJournalError, match="records were lost"):
        env.journal(owner=None).recover()
    with pytest.raises(ArtifactLeaseJournalError, match="checkpoint covers"):
        env.journal(owner=None).verify()


def test_a_deleted_journal_beside_its_checkpoint_is_refused(env: Env) -> None:
    _checkpointed(env)
    _journal_path(env).unlink()
    with pytest.raises(ArtifactLeaseJournalError, match="journal is missing"):
        env.journal(owner=None).recover()


def test_a_journal_rewritten_before_its_checkpoint_is_refused(env: Env) -> None:
    """Another valid history (a chain of its own) under the same checkpoint is refused."""
    manifest = env.session_dir / "manifest.jsonl"
    before = manifest.read_bytes()
    _checkpointed(env)
    path = _journal_path(env)
    kept = _checkpoint(env).read_bytes()
    path.unlink()
    _checkpoint(env).unlink()
    # The session manifest anchors the first history too (a rewrite is refused there
    # first); this test takes those anchors away to reach the checkpoint's own check.
    manifest.write_bytes(before)
    env.ext = ToolResultExternalizer(env.session_dir)  # one that never read the anchors
    journal = env.journal(owner=None, checkpoint_every=0)
    _history(journal, env, "rewritten", 20)
    _checkpoint(env).write_bytes(kept)
    with pytest.raises(ArtifactLeaseJournalError, match="not the ones its checkpoint covers"):
        env.journal(owner=None).recover()
    with pytest.raises(ArtifactLeaseJournalError, match="checkpoint covers"):
        env.journal(owner=None).verify()


def test_a_damaged_record_before_the_checkpoint_is_never_hidden_by_it(env: Env) -> None:
    _checkpointed(env)
    path = _journal_path(env)
    data = bytearray(path.read_bytes())
    data[200] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactLeaseJournalError):
        env.journal(owner=None).recover()
    with pytest.raises(ArtifactLeaseJournalError):
        env.journal(owner=None).verify()


def test_a_damaged_record_after_the_checkpoint_is_refused(env: Env) -> None:
    _checkpointed(env)
    path = _journal_path(env)
    data = bytearray(path.read_bytes())
    data[-50] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactLeaseJournalError, match="does not match its hash"):
        env.journal(owner=None).recover()


def test_a_journal_that_read_past_its_checkpoint_keeps_refusing_a_cut_after_it(
    env: Env,
) -> None:
    """The checkpoint is intact, but this object verified records the cut removed."""
    journal = _checkpointed(env, after=0)
    _history(journal, env, "after", 4)
    head = journal.head.seq
    path = _journal_path(env)
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "r+b") as f:
        f.truncate(sum(len(line) for line in lines[: head - 3]))
    for _ in range(3):  # the first refusal drops the cache; the checkpoint must not hide it
        with pytest.raises(ArtifactLeaseJournalError):
            journal.recover()


@pytest.mark.parametrize(
    "point",
    [
        "journal.checkpoint.tmp_written",
        "journal.checkpoint.tmp_fsynced",
        "journal.checkpoint.renamed",
        "journal.checkpoint.dir_fsynced",
    ],
)
def test_a_crash_while_writing_a_checkpoint_leaves_a_journal_that_recovers_whole(
    env: Env, point: str
) -> None:
    journal = _checkpointed(env, before=6, after=0)
    _history(journal, env, "later", 6)
    crashed = env.run("checkpoint", crash=point)
    assert crashed.killed, crashed.err
    expected = _full_fold(env)
    assert _state(env.journal(owner=None, checkpoint_every=0)) == expected
    # The next write replaces whatever the crash left behind.
    written = env.run("checkpoint")
    assert written.code == 0, written.err
    assert written.out == journal.head.seq
    assert not _checkpoint(env).with_name(_checkpoint(env).name + ".tmp").exists()
    assert _state(env.journal(owner=None, checkpoint_every=0)) == expected
