"""Cleanup against the lease protocol in two real processes, each order forced.

The order is forced with the crash-point FIFOs (``TOOLSWAP_SYNC_POINT``): a process stops
at a named durable step until the test lets it go. Nothing depends on timing.

The tests that take the journal's lock run twice: with the session's journal file (its
lock is the session ``flock``) and with the journal and the owner in PostgreSQL (the lock
that ``prepare()`` and gc's apply share is then a database advisory lock); every process
opens them through ``journal_backend`` (see the ``journal_store`` fixture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import journal_backend
from journal_backend import open_journal, open_owner
from toolswap import ToolResultExternalizer
from toolswap.cleanup import ArtifactCleanupPlan, ArtifactCleanupPolicy, ArtifactCleanupStatus

S = ArtifactCleanupStatus
LATER = (datetime.now(UTC) + timedelta(days=2)).isoformat()

PUBLISH = """
import sys
from pathlib import Path
from journal_backend import open_journal
from toolswap import ArtifactRetentionClaim
session_dir, source_id, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])
# The claim comes from what memory kept (source ID + digest), not from the disk.
claim = ArtifactRetentionClaim(source_id=source_id, content_sha256=sys.argv[4])
journal = open_journal(session_dir)
def publisher():
    marker.write_text("published", encoding="utf-8")
try:
    journal.publish_reference(claim, publisher, transaction_id="tx-" + source_id[-12:])
except Exception as exc:
    print(type(exc).__name__ + ": " + str(exc))
    sys.exit(3)
print("committed")
"""

APPLY = """
import json, sys
from datetime import datetime
from journal_backend import open_journal
from toolswap.cleanup import ArtifactCleanupPlan, apply_cleanup_from_journal
session_dir, plan_file, now = sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3])
plan = ArtifactCleanupPlan.from_dict(json.loads(open(plan_file, encoding="utf-8").read()))
report = apply_cleanup_from_journal(plan, open_journal(session_dir), now=now)
print(json.dumps(report.to_dict()))
"""

CAPTURE = """
import sys
from toolswap import ToolResultExternalizer
result = ToolResultExternalizer(sys.argv[1]).externalize("y" * 100000, "slow-tool")
print(result.artifact.source_id)
"""


def _spawn(
    code: str, *args: str, sync: tuple[Path, str] | None = None, crash: str | None = None
) -> subprocess.Popen[str]:
    env = journal_backend.child_env()
    if crash is not None:
        env["TOOLSWAP_CRASH_POINT"] = crash
    if sync is not None:
        env["TOOLSWAP_SYNC_DIR"] = str(sync[0])
        env["TOOLSWAP_SYNC_POINT"] = sync[1]
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@contextmanager
def _stopped_at(
    tmp_path: Path, point: str, code: str, *args: str
) -> Iterator[subprocess.Popen[str]]:
    """Run ``code`` until it reaches ``point``; the body runs while it waits there."""
    sync = tmp_path / f"sync-{point}"
    sync.mkdir()
    os.mkfifo(sync / f"{point}.reached")
    os.mkfifo(sync / f"{point}.go")
    proc = _spawn(code, *args, sync=(sync, point))
    with open(sync / f"{point}.reached", encoding="utf-8") as reached:
        assert reached.read().strip() == point
    try:
        yield proc
    finally:
        with open(sync / f"{point}.go", "w", encoding="utf-8") as go:
            go.write("go")


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _until_it_waits_for_the_database_lock(proc: subprocess.Popen[str]) -> None:
    """With the journal in PostgreSQL: return once ``proc`` waits for the journal's
    advisory lock (the one gc holds), so the order is the database's, not the flock's."""
    if journal_backend.postgres_dsn() is None:
        return
    deadline = time.monotonic() + 60
    while journal_backend.advisory_lock_waiters() == 0:
        assert proc.poll() is None, _finish(proc)
        assert time.monotonic() < deadline, "the process never waited for the journal lock"
        time.sleep(0.02)


def _setup(tmp_path: Path) -> tuple[Path, str, Path, str]:
    session_dir = tmp_path / "sessions" / "s1"
    ext = ToolResultExternalizer(session_dir)
    art = ext.externalize("x" * 100_000, "grep").artifact
    # A journal with one unrelated committed lease, so cleanup runs in journal mode.
    other = ext.externalize("z" * 100_000, "grep").artifact
    from toolswap import ArtifactRetentionClaim

    open_journal(session_dir).publish_reference(
        ArtifactRetentionClaim.from_memory_reference(other.for_memory()),
        lambda: None,
        transaction_id="tx-other",
    )
    plan = ext.plan_cleanup_from_journal(
        open_journal(session_dir),
        policy=ArtifactCleanupPolicy(dry_run=False),
        now=datetime.fromisoformat(LATER),
    )
    assert [e.name for e in plan.planned] == [art.filename]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan.to_dict()), encoding="utf-8")
    return session_dir, art.source_id, plan_file, art.content_sha256


def test_lease_that_wins_the_lock_keeps_its_file_although_the_plan_said_delete(
    tmp_path: Path,
    journal_store: str,
) -> None:
    session_dir, source_id, plan_file, sha = _setup(tmp_path)
    marker = tmp_path / "published"
    with _stopped_at(
        tmp_path, "journal.publisher.before", PUBLISH, str(session_dir), source_id, str(marker), sha
    ) as publisher:
        # PREPARED is durable; the publisher has not run yet. Cleanup applies now.
        code, out, err = _finish(_spawn(APPLY, str(session_dir), str(plan_file), LATER))
        assert code == 0, err
        report = json.loads(out)
        [entry] = [e for e in report["entries"] if e["source_id"] == source_id]
        assert entry["status"] == "retained_referenced"
    code, out, err = _finish(publisher)
    assert (code, out.strip()) == (0, "committed"), err
    ext = ToolResultExternalizer(session_dir)
    assert ext.read_artifact(source_id, 0, 1).startswith("xxx")
    assert marker.exists()


def test_cleanup_that_wins_the_lock_makes_the_later_prepare_fail_without_publishing(
    tmp_path: Path,
    journal_store: str,
) -> None:
    session_dir, source_id, plan_file, sha = _setup(tmp_path)
    marker = tmp_path / "published"
    with _stopped_at(
        tmp_path, "cleanup.unlinked", APPLY, str(session_dir), str(plan_file), LATER
    ) as cleaner:
        # The file is unlinked and cleanup still holds the session lock.
        publisher = _spawn(PUBLISH, str(session_dir), source_id, str(marker), sha)
        _until_it_waits_for_the_database_lock(publisher)
    code, out, err = _finish(cleaner)
    assert code == 0, err
    [entry] = [e for e in json.loads(out)["entries"] if e["source_id"] == source_id]
    assert entry["status"] == "deleted"
    code, out, err = _finish(publisher)
    assert code == 3, (out, err)
    assert "missing artifact" in out
    assert not marker.exists()
    view = open_journal(session_dir).recover()
    assert not view.is_protected(source_id)
    assert view.pending_transaction_ids == ()


def test_apply_waits_for_a_prepare_in_progress_and_then_keeps_the_file(
    tmp_path: Path, journal_store: str
) -> None:
    session_dir, source_id, plan_file, sha = _setup(tmp_path)
    marker = tmp_path / "published"
    with _stopped_at(
        tmp_path,
        "journal.prepared.appended",
        PUBLISH,
        str(session_dir),
        source_id,
        str(marker),
        sha,
    ) as publisher:
        # PREPARED is written but not yet fsynced, and the session lock is held.
        cleaner = _spawn(APPLY, str(session_dir), str(plan_file), LATER)
    code, out, err = _finish(publisher)
    assert code == 0, err
    code, out, err = _finish(cleaner)
    assert code == 0, err
    [entry] = [e for e in json.loads(out)["entries"] if e["source_id"] == source_id]
    assert entry["status"] == "retained_referenced"
    assert ToolResultExternalizer(session_dir).read_artifact(source_id, 0, 1)


def test_capture_in_progress_survives_a_zero_ttl_cleanup(tmp_path: Path) -> None:
    session_dir = tmp_path / "sessions" / "s1"
    ext = ToolResultExternalizer(session_dir)
    with _stopped_at(tmp_path, "capture.tmp_fsynced", CAPTURE, str(session_dir)) as capture:
        policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
        plan = ext.plan_cleanup([], policy=policy, now=datetime.fromisoformat(LATER))
        [entry] = plan.entries
        assert entry.status is S.RETAINED_RECENT
        ext.apply_cleanup(plan, [], now=datetime.fromisoformat(LATER))
    code, out, err = _finish(capture)
    assert code == 0, err
    assert ext.read_artifact(out.strip(), 0, 1).startswith("yyy")


def test_released_lease_no_longer_protects_and_committed_one_does(
    tmp_path: Path, journal_store: str
) -> None:
    session_dir, source_id, _, sha = _setup(tmp_path)
    marker = tmp_path / "published"
    code, out, err = _finish(_spawn(PUBLISH, str(session_dir), source_id, str(marker), sha))
    assert (code, out.strip()) == (0, "committed"), err
    ext = ToolResultExternalizer(session_dir)
    journal = open_journal(session_dir)
    policy = ArtifactCleanupPolicy(dry_run=False)
    when = datetime.fromisoformat(LATER)
    plan = ext.plan_cleanup_from_journal(journal, policy=policy, now=when)
    assert not plan.planned
    journal.remove_reference("tx-" + source_id[-12:], lambda: None)
    plan = ext.plan_cleanup_from_journal(journal, policy=policy, now=when)
    assert [e.source_id for e in plan.planned] == [source_id]
    report = ext.apply_cleanup_from_journal(plan, journal, now=when)
    assert [e.source_id for e in report.deleted] == [source_id]


def test_saved_plan_survives_the_round_trip_used_by_the_subprocess(tmp_path: Path) -> None:
    _, _, plan_file, _ = _setup(tmp_path)
    plan = ArtifactCleanupPlan.from_dict(json.loads(plan_file.read_text(encoding="utf-8")))
    assert plan.planned


PROTOCOL = """
import sys
from journal_backend import open_journal, open_owner
from toolswap import *
session_dir, source_id, sha, mode = sys.argv[1:5]
owner = open_owner(session_dir)
journal = open_journal(session_dir, owner=owner)
claim = ArtifactRetentionClaim(source_id=source_id, content_sha256=sha)
def publisher():
    ref = ToolResultExternalizer(session_dir).get_artifact(source_id).for_memory()
    owner.publish("tx", ref)
try:
    journal.publish_reference(claim, publisher, transaction_id="tx")
    if mode == "publish_remove":
        journal.remove_reference("tx", lambda: owner.remove("tx"))
except ArtifactRetentionError as exc:
    print("refused: " + str(exc))
    sys.exit(3)
print("done")
"""

PLAN_AND_APPLY = """
import json, sys
from datetime import datetime
from journal_backend import open_journal, open_owner
from toolswap.cleanup import ArtifactCleanupPlan, ArtifactCleanupPolicy
from toolswap.cleanup import apply_cleanup_from_journal, plan_cleanup_from_journal
session_dir, plan_file, now = sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3])
owner = open_owner(session_dir)
journal = open_journal(session_dir, owner=owner)
if plan_file == "-":
    policy = ArtifactCleanupPolicy(dry_run=False)
    plan = plan_cleanup_from_journal(journal, policy=policy, now=now)
else:
    plan = ArtifactCleanupPlan.from_dict(json.loads(open(plan_file, encoding="utf-8").read()))
print(json.dumps(apply_cleanup_from_journal(plan, journal, now=now).to_dict()))
"""

# Each protocol step, the mode that reaches it, and whether the lease protects the file
# once the protocol process has finished.
PROTOCOL_STEPS = [
    ("journal.prepared.appended", "publish", True),
    ("journal.prepared.fsynced", "publish", True),
    ("owner.published", "publish", True),
    ("journal.committed.fsynced", "publish", True),
    ("owner.removed", "publish_remove", False),
    ("journal.released.fsynced", "publish_remove", False),
]


def _owner_setup(tmp_path: Path) -> tuple[Path, str, str, Path]:
    session_dir, source_id, plan_file, sha = _setup(tmp_path)
    open_owner(session_dir)  # its database exists before the processes race
    return session_dir, source_id, sha, plan_file


def _check_final_state(session_dir: Path, source_id: str, protects: bool, refused: bool) -> None:
    owner = open_owner(session_dir)
    journal = open_journal(session_dir, owner=owner)
    view = journal.recover()
    assert view.pending_transaction_ids == ()
    # Every process used the backend's journal: a database journal leaves no file.
    local = journal_backend.postgres_dsn() is None
    assert (session_dir / "retention-leases.jsonl").exists() == local
    if refused:
        assert journal.transaction("tx") is None
        assert owner.get("tx") is None
        return
    assert view.is_protected(source_id) is protects
    if protects:
        ToolResultExternalizer(session_dir).reader.verify(source_id)
    for stored in owner.list_references():
        assert view.is_protected(stored.reference.source.source_id)


@pytest.mark.parametrize(
    ("saved_plan", "journal_store"),
    # A saved plan applied late runs on PostgreSQL in the stale-plan and lock-order tests.
    [(True, "local"), (False, "local"), (False, "postgres")],
    ids=["apply-saved-plan-local", "plan-then-apply-local", "plan-then-apply-postgres"],
    indirect=["journal_store"],
)
@pytest.mark.parametrize(("point", "mode", "protects"), PROTOCOL_STEPS)
def test_cleanup_running_while_the_protocol_waits_at_each_step_never_strands_a_reference(
    tmp_path: Path, journal_store: str, point: str, mode: str, protects: bool, saved_plan: bool
) -> None:
    session_dir, source_id, sha, plan_file = _owner_setup(tmp_path)
    with _stopped_at(tmp_path, point, PROTOCOL, str(session_dir), source_id, sha, mode) as proto:
        cleaner = _spawn(
            PLAN_AND_APPLY, str(session_dir), str(plan_file) if saved_plan else "-", LATER
        )
    code, out, err = _finish(proto)
    assert (code, out.strip()) == (0, "done"), err
    code, out, err = _finish(cleaner)
    assert code == 0, err
    _check_final_state(session_dir, source_id, protects, refused=False)


@pytest.mark.parametrize("point", ["cleanup.locked", "cleanup.claims_folded", "cleanup.verified"])
@pytest.mark.parametrize("mode", ["publish", "publish_remove"])
def test_protocol_starting_while_cleanup_holds_the_lock_waits_and_then_fails_or_protects(
    tmp_path: Path, journal_store: str, point: str, mode: str
) -> None:
    session_dir, source_id, sha, plan_file = _owner_setup(tmp_path)
    with _stopped_at(tmp_path, point, PLAN_AND_APPLY, str(session_dir), str(plan_file), LATER) as c:
        proto = _spawn(PROTOCOL, str(session_dir), source_id, sha, mode)
        _until_it_waits_for_the_database_lock(proto)
    code, out, err = _finish(c)
    assert code == 0, err
    [entry] = [e for e in json.loads(out)["entries"] if e["source_id"] == source_id]
    assert entry["status"] == "deleted"  # cleanup held the lock first
    code, out, err = _finish(proto)
    assert code == 3 and "missing artifact" in out, (out, err)
    _check_final_state(session_dir, source_id, protects=False, refused=True)


def test_externalize_waiting_at_its_link_ends_readable_or_recorded_as_collected(
    tmp_path: Path,
) -> None:
    # The cleaner's clock is two days ahead, so the new artifact counts as an expired
    # orphan once it exists: whether cleanup sees it first or not, it must end either
    # readable or recorded as collected, never half-recorded.
    from toolswap import ArtifactCollectedError
    from toolswap.verify import verify_session

    session_dir, _, _, _ = _owner_setup(tmp_path)
    with _stopped_at(tmp_path, "capture.linked", CAPTURE, str(session_dir)) as capture:
        cleaner = _spawn(PLAN_AND_APPLY, str(session_dir), "-", LATER)
    code, new_id, err = _finish(capture)
    assert code == 0, err
    code, _, err = _finish(cleaner)
    assert code == 0, err
    ext = ToolResultExternalizer(session_dir)
    with suppress(ArtifactCollectedError):
        assert ext.read_artifact(new_id.strip(), 0, 1).startswith("yyy")
    assert [f for f in verify_session(ext.session) if f.kind.is_problem] == []


def _entry(report: str, source_id: str) -> str:
    [entry] = [e for e in json.loads(report)["entries"] if e["source_id"] == source_id]
    return str(entry["status"])


# Where the publisher is killed -> does the owner hold the reference afterwards.
KILLED_PUBLISHER = {
    "journal.prepared.appended": False,
    "journal.prepared.fsynced": False,
    "owner.publishing": False,
    "owner.published": True,
    "journal.committed.appended": True,
}


@pytest.mark.parametrize("point", sorted(KILLED_PUBLISHER))
def test_gc_after_a_publisher_killed_mid_publish_keeps_the_file_until_the_owner_settles_it(
    tmp_path: Path, journal_store: str, point: str
) -> None:
    session_dir, source_id, sha, plan_file = _owner_setup(tmp_path)
    killed = _spawn(PROTOCOL, str(session_dir), source_id, sha, "publish", crash=point)
    code, _, err = _finish(killed)
    assert code == -signal.SIGKILL, err
    owner = open_owner(session_dir)
    journal = open_journal(session_dir, owner=owner)
    lease = journal.transaction("tx")
    if journal_store == "postgres" and point == "journal.prepared.appended":
        # The PREPARED record's transaction never committed: no lease, and the publisher
        # never ran, so nothing refers to the file and gc may take it.
        assert lease is None and owner.get("tx") is None
        code, out, err = _finish(_spawn(PLAN_AND_APPLY, str(session_dir), str(plan_file), LATER))
        assert (code, _entry(out, source_id)) == (0, "deleted"), err
        return
    assert lease is not None
    # Pending (or committed, when only the database's commit was lost) protects the file:
    # the saved plan from before the publish and a fresh plan both keep it.
    for plan in (str(plan_file), "-"):
        code, out, err = _finish(_spawn(PLAN_AND_APPLY, str(session_dir), plan, LATER))
        assert (code, _entry(out, source_id)) == (0, "retained_referenced"), err
    # Reconciliation settles the lease by what the owner holds; gc then follows it.
    journal.reconcile_pending(owner)
    holds = KILLED_PUBLISHER[point]
    assert (owner.get("tx") is not None) == holds
    code, out, err = _finish(_spawn(PLAN_AND_APPLY, str(session_dir), "-", LATER))
    assert code == 0, err
    assert _entry(out, source_id) == ("retained_referenced" if holds else "deleted")
    _check_final_state(session_dir, source_id, protects=holds, refused=False)


@pytest.mark.parametrize("mode", ["publish", "publish_remove"])
def test_a_stale_plan_applied_after_the_protocol_finished_follows_the_journal_not_the_plan(
    tmp_path: Path, journal_store: str, mode: str
) -> None:
    session_dir, source_id, sha, plan_file = _owner_setup(tmp_path)
    # The plan (made before any reference) says delete; then a reference is published
    # (and, in one case, removed again) before the plan is applied.
    code, out, err = _finish(_spawn(PROTOCOL, str(session_dir), source_id, sha, mode))
    assert (code, out.strip()) == (0, "done"), err
    code, out, err = _finish(_spawn(APPLY, str(session_dir), str(plan_file), LATER))
    assert code == 0, err
    referenced = mode == "publish"
    assert _entry(out, source_id) == ("retained_referenced" if referenced else "deleted")
    _check_final_state(session_dir, source_id, protects=referenced, refused=False)
