"""The states in which the fault explorer found toolswap breaking an invariant, kept.

Each test breaks one durable call by name (:attr:`FaultIO.fail_on`) or crashes after it,
checks what the caller saw, then restarts on the state left behind and checks every
invariant (``explorer.recover``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolswap import (
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
    ArtifactRetentionJournal,
    ArtifactWriteError,
    CleanupError,
    SqliteMemoryOwner,
)
from toolswap.cleanup import apply_cleanup_from_journal, plan_cleanup_from_journal
from toolswap.retention.checkpoint import checkpoint_path
from toolswap.testing import substituted

from .explorer import recover
from .faultfs import Fault, FaultIO, Survival
from .scenarios import DELETE_ORPHANS, OWNER_DB, Templates, World, clock, later, text_output

OUTPUT = text_output(7, 900)
"""About 38 KB: more than the bash threshold, and its first line is easy to look for."""


@pytest.fixture
def templates(scratch: Path) -> Templates:
    return Templates(scratch / "templates")


def _world(templates: Templates, scratch: Path, template: str = "busy") -> World:
    return templates.world(template, scratch / "state" / "home")


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _capture_fails(world: World, fio: FaultIO) -> ArtifactWriteError:
    """Capture ``OUTPUT`` under ``fio``; the caller must get its preview, and no descriptor
    may stay open."""
    ext = world.externalizer()
    before = _open_descriptors()
    with substituted(fio), pytest.raises(ArtifactWriteError) as failed:
        ext.externalize(OUTPUT, "bash")
    assert fio.injected, "the call to break never came"
    assert OUTPUT.splitlines()[0] in failed.value.preview
    assert _open_descriptors() == before
    return failed.value


def _restarts_cleanly(world: World) -> None:
    assert list(recover(world)) == []


@pytest.mark.parametrize(
    ("call", "fault"),
    [
        (("open", "tool-results", 2), Fault.EMFILE),  # opened for the capture, after the check
        (("open+create", ".lock"), Fault.ENOSPC),
        (("open+create", ".lock"), Fault.EIO),
        (("flock", ".lock"), Fault.EINTR),
    ],
)
def test_a_capture_that_cannot_open_its_directory_or_take_the_lock_still_hands_back_the_preview(
    templates: Templates, scratch: Path, call: tuple[str, str, int], fault: Fault
) -> None:
    world = _world(templates, scratch)

    _capture_fails(world, FaultIO(fail_on=call, fault=fault))

    ours = f".tmp-{os.getpid()}-"
    assert not [n for n in os.listdir(world.session_dir / "tool-results") if ours in n]
    _restarts_cleanly(world)


def test_a_close_error_on_the_finished_capture_is_reported_once_with_the_preview(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)

    _capture_fails(world, FaultIO(fail_on=("close+written", ".partial"), fault=Fault.EIO))

    _restarts_cleanly(world)


def test_a_capture_on_a_device_that_died_still_hands_back_the_preview(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)

    _capture_fails(world, FaultIO(fail_on=("write", ".partial"), fault=Fault.DEAD_DISK))

    _restarts_cleanly(world)  # the temporary file it could not remove is garbage-collected


def test_a_journal_append_whose_close_reports_an_error_after_its_fsync_is_kept(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)
    journal, claim = world.journal(), world.claim(3)
    fio = FaultIO(fail_on=("close+written", "retention-leases.jsonl"), fault=Fault.EIO)

    with substituted(fio):
        lease = journal.prepare(claim, transaction_id="tx-new")

    assert fio.injected
    assert lease.phase.value == "PREPARED"
    world.leases["tx-new"] = "PREPARED"
    fresh = ArtifactRetentionJournal(world.session_dir, now=clock)
    assert "tx-new" in fresh.recover().pending_transaction_ids
    _restarts_cleanly(world)


@pytest.mark.parametrize(
    ("call", "fault"),
    [
        (("pread", "retention-leases.jsonl", 3), Fault.EIO),  # reading the torn bytes
        (("open+create", "retention-leases.jsonl.torn-"), Fault.ENOSPC),
        (("ftruncate", "retention-leases.jsonl"), Fault.EIO),
        (("fsync", "retention-leases.jsonl", 2), Fault.ENOSPC),  # the cut (1: the copy)
    ],
)
def test_a_torn_journal_tail_that_cannot_be_cut_off_is_a_typed_journal_error(
    templates: Templates, scratch: Path, call: tuple[str, str, int], fault: Fault
) -> None:
    world = _world(templates, scratch, "torn")
    journal, claim = world.journal(), world.claim(3)
    fio = FaultIO(fail_on=call, fault=fault)

    with substituted(fio), pytest.raises(ArtifactLeaseJournalError, match="torn"):
        journal.prepare(claim, transaction_id="tx-new")

    assert fio.injected
    _restarts_cleanly(world)


def test_a_checkpoint_that_cannot_be_written_is_a_typed_error_and_leaves_none_behind(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)
    journal = world.journal()
    fio = FaultIO(fail_on=("write", "retention-leases.checkpoint.tmp"), fault=Fault.ENOSPC)

    with substituted(fio), pytest.raises(ArtifactRetentionError, match="checkpoint"):
        journal.checkpoint()

    checkpoint = checkpoint_path(world.session_dir / "retention-leases.jsonl")
    assert not checkpoint.exists()
    assert not checkpoint.with_name(checkpoint.name + ".tmp").exists()
    _restarts_cleanly(world)


@pytest.mark.parametrize("call", [("open", "retention-leases.jsonl", 2), ("pread", "leases", 2)])
def test_a_checkpoint_that_cannot_read_the_journal_is_a_typed_error(
    templates: Templates, scratch: Path, call: tuple[str, str, int]
) -> None:
    world = _world(templates, scratch)
    journal = world.journal()
    fio = FaultIO(fail_on=call, fault=Fault.EIO)

    with substituted(fio), pytest.raises(ArtifactRetentionError, match="checkpoint"):
        journal.checkpoint()

    assert fio.injected
    _restarts_cleanly(world)


def _collect(world: World, fio: FaultIO) -> dict[str, str]:
    plan = plan_cleanup_from_journal(world.journal(), policy=DELETE_ORPHANS, now=later())
    journal = world.journal()
    with substituted(fio):
        report = apply_cleanup_from_journal(plan, journal, policy=DELETE_ORPHANS, now=later())
    assert fio.injected
    return {e.name: e.status.value for e in report.entries}


def test_gc_keeps_a_file_it_cannot_unlink_and_the_next_gc_removes_it(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)

    statuses = _collect(world, FaultIO(fail_on=("unlink", "tool_result_004"), fault=Fault.EIO))

    assert statuses["tool_result_004.txt"] == "retained_unknown"
    assert statuses["tool_result_005.txt"] == "deleted"
    assert (world.session_dir / "tool-results" / "tool_result_004.txt").exists()
    _restarts_cleanly(world)  # which collects it
    assert not (world.session_dir / "tool-results" / "tool_result_004.txt").exists()


def test_gc_whose_head_file_close_fails_still_reports_what_it_deleted(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)

    statuses = _collect(world, FaultIO(fail_on=("close+written", "manifest.head"), fault=Fault.EIO))

    assert statuses["tool_result_004.txt"] == "deleted"
    _restarts_cleanly(world)


def test_gc_that_cannot_sync_its_deletions_says_so_with_a_typed_error(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch)
    plan = plan_cleanup_from_journal(world.journal(), policy=DELETE_ORPHANS, now=later())
    journal = world.journal()
    fio = FaultIO(fail_on=("fsync", "tool-results"), fault=Fault.ENOSPC)

    with substituted(fio), pytest.raises(CleanupError, match="cannot sync"):
        apply_cleanup_from_journal(plan, journal, policy=DELETE_ORPHANS, now=later())

    assert fio.injected
    _restarts_cleanly(world)


def test_a_crash_while_the_owner_database_is_created_never_leaves_an_empty_one(
    templates: Templates, scratch: Path
) -> None:
    world = _world(templates, scratch, "plain")
    path = world.session_dir / OWNER_DB
    fio = FaultIO(power_at=1, keep_dir=world.keep_dir)  # after toolswap creates the file

    with substituted(fio), pytest.raises(BaseException, match="power lost"):
        SqliteMemoryOwner(path, now=clock)
    fio.close_leftovers()
    fio.lose_power(Survival.PROCESS)  # the process died; the page cache kept everything

    assert not path.exists() or path.stat().st_size > 0
    _restarts_cleanly(world)
    owner = SqliteMemoryOwner(path, now=clock)  # and the next one creates it whole
    assert ArtifactRetentionJournal(world.session_dir, owner=owner).recover().claims == {}
