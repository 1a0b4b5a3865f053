"""Kill a real cleanup with SIGKILL at every ``cleanup.*`` durable step, then recover.

After each crash a fresh process checks: the referenced artifact is intact, the manifest
and the journal verify, and a second plan/apply finishes the job without losing a word
about what was collected. It runs with the session's journal file and with the journal
and its owner in PostgreSQL, where the killed cleanup held the journal's advisory lock
(the server releases it with the dead connection, so the next cleanup gets it).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import journal_backend
from journal_backend import open_journal
from toolswap import (
    ArtifactCollectedError,
    ArtifactRetentionClaim,
    ToolResultExternalizer,
)
from toolswap.cleanup import ArtifactCleanupPolicy, ArtifactCleanupStatus
from toolswap.testing import CRASH_POINTS
from toolswap.verify import FindingKind, verify_session

CLEANUP_POINTS = [p for p in CRASH_POINTS if p.startswith("cleanup.")]
LATER = datetime.now(UTC) + timedelta(days=2)

APPLY = """
import json, sys
from datetime import datetime
from journal_backend import open_journal
from toolswap.cleanup import ArtifactCleanupPlan, apply_cleanup_from_journal
plan = ArtifactCleanupPlan.from_dict(json.loads(open(sys.argv[2], encoding="utf-8").read()))
apply_cleanup_from_journal(
    plan, open_journal(sys.argv[1]), now=datetime.fromisoformat(sys.argv[3])
)
"""


def test_every_crash_point_belongs_to_a_family_with_a_crash_test() -> None:
    families = ("capture.", "manifest.", "journal.", "owner.", "reconcile.", "cleanup.", "store.")
    assert [p for p in CRASH_POINTS if not p.startswith(families)] == []
    assert len(set(CRASH_POINTS)) == len(CRASH_POINTS)


def test_the_cleanup_crash_matrix_covers_every_cleanup_point() -> None:
    assert CLEANUP_POINTS == [
        "cleanup.locked",
        "cleanup.claims_folded",
        "cleanup.verified",
        "cleanup.collect_recorded",
        "cleanup.unlinked",
        "cleanup.dir_fsynced",
    ]


@pytest.mark.parametrize("point", CLEANUP_POINTS)
def test_cleanup_killed_at_a_durable_step_loses_nothing_referenced_and_finishes_later(
    tmp_path: Path, point: str, journal_store: str
) -> None:
    session_dir = tmp_path / "s1"
    ext = ToolResultExternalizer(session_dir)
    kept = ext.externalize("referenced\n" * 10_000, "t").artifact
    orphan = ext.externalize("orphan\n" * 10_000, "t").artifact
    journal = open_journal(session_dir)
    claim = ArtifactRetentionClaim.from_memory_reference(kept.for_memory())
    journal.publish_reference(claim, lambda: None, transaction_id="tx-kept")
    policy = ArtifactCleanupPolicy(dry_run=False)
    plan = ext.plan_cleanup_from_journal(journal, policy=policy, now=LATER)
    assert [e.name for e in plan.planned] == [orphan.filename]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan.to_dict()), encoding="utf-8")

    crashed = subprocess.run(
        [sys.executable, "-c", APPLY, str(session_dir), str(plan_file), LATER.isoformat()],
        env=dict(journal_backend.child_env(), TOOLSWAP_CRASH_POINT=point),
        capture_output=True,
        text=True,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    # A fresh process: everything referenced is intact and both logs verify.
    fresh = ToolResultExternalizer(session_dir)
    fresh.reader.verify(kept.source_id)
    view = open_journal(session_dir).recover(now=LATER)
    assert view.is_protected(kept.source_id)
    problems = [f for f in verify_session(fresh.session) if f.kind.is_problem]
    assert problems == []

    # The orphan is either still there (and readable), or gone with a record saying so.
    orphan_path = session_dir / "tool-results" / orphan.filename
    recorded = fresh.manifest.collected(orphan.filename) is not None
    if not recorded:
        assert orphan_path.exists()
        assert fresh.read_artifact(orphan.source_id, 0, 1) == "orphan"

    # A later run finishes the job.
    again = fresh.plan_cleanup_from_journal(open_journal(session_dir), policy=policy, now=LATER)
    fresh.apply_cleanup_from_journal(again, open_journal(session_dir), now=LATER)
    assert not orphan_path.exists()
    with pytest.raises(ArtifactCollectedError):
        fresh.read_artifact(orphan.source_id)
    assert fresh.read_artifact(kept.source_id, 0, 1) == "referenced"
    statuses = {e.name: e.status for e in again.entries}
    assert statuses[kept.filename] is ArtifactCleanupStatus.RETAINED_REFERENCED
    assert [f for f in verify_session(fresh.session) if f.kind.is_problem] == []
    assert FindingKind.OK in {f.kind for f in verify_session(fresh.session)}
    # Both processes used the backend's journal (a database journal writes no file).
    assert (session_dir / "retention-leases.jsonl").exists() == (journal_store == "local")
