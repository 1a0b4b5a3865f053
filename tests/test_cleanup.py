"""Cleanup: one test per status and reason, and the spec's race cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from toolswap import (
    ArtifactCollectedError,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    CleanupError,
    SourceIdError,
    ToolResultExternalizer,
)
from toolswap.cleanup import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupStatus,
    CleanupEntry,
    apply_cleanup,
    limit_plans,
)
from toolswap.session import Session

S = ArtifactCleanupStatus
DAY = timedelta(days=1)
LIVE = ArtifactCleanupPolicy(dry_run=False)


def _big(tag: str, size: int = 60_000) -> str:
    return (tag * size)[:size]


def _claim(ext: ToolResultExternalizer, source_id: str, **kw: object) -> ArtifactRetentionClaim:
    ref = ext.get_artifact(source_id)
    return ArtifactRetentionClaim.from_memory_reference(ref.for_memory(), **kw)  # type: ignore[arg-type]


def _status(plan: ArtifactCleanupPlan, name: str) -> CleanupEntry:
    matches = [e for e in plan.entries if e.name == name]
    assert len(matches) == 1, plan.entries
    return matches[0]


def _age(ext: ToolResultExternalizer, name: str, seconds: float) -> None:
    """Make a file look ``seconds`` old, relative to the real clock."""
    path = ext.tool_results_dir / name
    st = os.stat(path, follow_symlinks=False)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)), follow_symlinks=False)


def test_plan_is_read_only_and_dry_run_by_default(externalizer: ToolResultExternalizer) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    before = sorted(os.listdir(externalizer.tool_results_dir))
    plan = externalizer.plan_cleanup([], now=_future(2))
    assert plan.policy.dry_run is True
    assert _status(plan, art.filename).status is S.PLANNED_DELETE
    report = externalizer.apply_cleanup(plan, [], now=_future(2))
    assert report.dry_run is True
    assert sorted(os.listdir(externalizer.tool_results_dir)) == before
    assert externalizer.read_artifact(art.source_id, 0, 1)


def _future(days: float) -> object:
    from datetime import UTC, datetime

    return datetime.now(UTC) + timedelta(days=days)


def test_referenced_artifact_with_matching_digest_is_retained(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    claim = _claim(externalizer, art.source_id)
    plan = externalizer.plan_cleanup([claim], policy=LIVE, now=_future(2))
    entry = _status(plan, art.filename)
    assert entry.status is S.RETAINED_REFERENCED
    assert entry.source_id == art.source_id
    externalizer.apply_cleanup(plan, [claim], now=_future(2))
    assert (externalizer.tool_results_dir / art.filename).exists()


def test_orphan_younger_than_ttl_is_retained_recent(externalizer: ToolResultExternalizer) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(0.5))
    entry = _status(plan, art.filename)
    assert entry.status is S.RETAINED_RECENT
    assert "younger than the orphan TTL" in entry.reason


def test_expired_claim_still_waits_for_the_orphan_ttl(externalizer: ToolResultExternalizer) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    from datetime import UTC, datetime

    claim = _claim(externalizer, art.source_id, retain_until=datetime.now(UTC) + timedelta(hours=1))
    plan = externalizer.plan_cleanup([claim], policy=LIVE, now=_future(0.5))
    entry = _status(plan, art.filename)
    assert entry.status is S.RETAINED_RECENT
    assert "claim expired" in entry.reason
    later = externalizer.plan_cleanup([claim], policy=LIVE, now=_future(2))
    assert _status(later, art.filename).status is S.PLANNED_DELETE
    assert "every claim expired" in _status(later, art.filename).reason


def test_max_deletions_deletes_the_oldest_first(externalizer: ToolResultExternalizer) -> None:
    arts = [externalizer.externalize(_big(c), "t").artifact for c in "abc"]
    for i, art in enumerate(arts):
        _age(externalizer, art.filename, (10 - i) * 86400)  # the first is the oldest
    policy = ArtifactCleanupPolicy(max_deletions=2, dry_run=False)
    plan = externalizer.plan_cleanup([], policy=policy)
    statuses = [_status(plan, a.filename).status for a in arts]
    assert statuses == [S.PLANNED_DELETE, S.PLANNED_DELETE, S.RETAINED_LIMIT]
    assert _status(plan, arts[2].filename).reason == "max_deletions reached this run"


def test_files_toolswap_does_not_write_are_retained_unknown(
    externalizer: ToolResultExternalizer,
) -> None:
    (externalizer.tool_results_dir / "notes.txt").write_text("mine", encoding="utf-8")
    (externalizer.tool_results_dir / "tool_result_007.txt").mkdir()
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(30))
    assert _status(plan, "notes.txt").status is S.RETAINED_UNKNOWN
    assert _status(plan, "tool_result_007.txt").status is S.RETAINED_UNKNOWN
    externalizer.apply_cleanup(plan, [], now=_future(30))
    assert (externalizer.tool_results_dir / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_symlink_to_a_file_outside_is_denied_and_its_target_untouched(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me", encoding="utf-8")
    os.symlink(outside, externalizer.tool_results_dir / "tool_result_050.txt")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(30))
    entry = _status(plan, "tool_result_050.txt")
    assert entry.status is S.DENIED
    assert "symlink" in entry.reason
    externalizer.apply_cleanup(plan, [], now=_future(30))
    assert outside.read_text(encoding="utf-8") == "keep me"
    assert (externalizer.tool_results_dir / "tool_result_050.txt").is_symlink()


def test_claim_whose_digest_disagrees_with_the_file_is_retained_corrupt(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    path = externalizer.tool_results_dir / art.filename
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.write(b"Z")
    claim = _claim(externalizer, art.source_id)
    plan = externalizer.plan_cleanup([claim], policy=LIVE, now=_future(30))
    entry = _status(plan, art.filename)
    assert entry.status is S.RETAINED_CORRUPT
    assert "disagrees" in entry.reason


def test_file_that_no_longer_matches_its_manifest_is_retained_corrupt(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    with open(externalizer.tool_results_dir / art.filename, "r+b") as f:
        f.write(b"Z")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(30))
    assert _status(plan, art.filename).status is S.RETAINED_CORRUPT


def test_active_claim_whose_file_is_gone_is_reported_missing_referenced(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    claim = _claim(externalizer, art.source_id)
    os.unlink(externalizer.tool_results_dir / art.filename)
    plan = externalizer.plan_cleanup([claim], policy=LIVE, now=_future(30))
    entry = _status(plan, art.filename)
    assert entry.status is S.MISSING_REFERENCED
    assert entry.source_id == art.source_id


def test_expired_orphan_is_deleted_and_a_later_read_says_when_and_why(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    report = externalizer.apply_cleanup(plan, [], now=_future(2))
    assert [e.name for e in report.deleted] == [art.filename]
    assert report.freed_bytes == art.byte_size
    assert not (externalizer.tool_results_dir / art.filename).exists()
    with pytest.raises(ArtifactCollectedError, match=r"collected by cleanup at .*orphan TTL"):
        externalizer.read_artifact(art.source_id)


def test_collected_names_are_never_handed_out_again(externalizer: ToolResultExternalizer) -> None:
    first = externalizer.externalize(_big("a"), "t").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    externalizer.apply_cleanup(plan, [], now=_future(2))
    again = ToolResultExternalizer(externalizer.session_dir)
    second = again.externalize(_big("b"), "t").artifact
    assert second.filename != first.filename
    assert second.filename == "tool_result_002.txt"


def test_claim_added_after_planning_keeps_the_file(externalizer: ToolResultExternalizer) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert _status(plan, art.filename).status is S.PLANNED_DELETE
    claim = _claim(externalizer, art.source_id)
    report = externalizer.apply_cleanup(plan, [claim], now=_future(2))
    entry = _status(replace(plan, entries=report.entries), art.filename)
    assert entry.status is S.RETAINED_REFERENCED
    assert "after planning" in entry.reason
    assert externalizer.read_artifact(art.source_id, 0, 1)


def test_file_rewritten_with_same_size_and_restored_mtime_is_race_detected(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    path = externalizer.tool_results_dir / art.filename
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = externalizer.apply_cleanup(plan, [], now=_future(2))
    entry = report.entries[0]
    assert entry.status is S.RACE_DETECTED
    assert "content changed" in entry.reason
    assert path.exists()


def test_file_replaced_by_another_inode_is_race_detected(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    path = externalizer.tool_results_dir / art.filename
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    other = b"b" * len(path.read_bytes())
    st = os.stat(path)
    os.unlink(path)
    path.write_bytes(other)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = externalizer.apply_cleanup(plan, [], now=_future(2))
    assert report.entries[0].status is S.RACE_DETECTED
    assert path.read_bytes() == other


def test_second_apply_of_the_same_plan_reports_already_missing(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize(_big("a"), "t")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert externalizer.apply_cleanup(plan, [], now=_future(2)).entries[0].status is S.DELETED
    again = externalizer.apply_cleanup(plan, [], now=_future(2))
    assert again.entries[0].status is S.ALREADY_MISSING


def test_claim_of_another_session_is_refused_before_anything_happens(tmp_path: Path) -> None:
    other = ToolResultExternalizer(tmp_path / "other" / "s2")
    art = other.externalize(_big("a"), "t").artifact
    claim = _claim(other, art.source_id)
    mine = ToolResultExternalizer(tmp_path / "mine" / "s1")
    mine.externalize(_big("b"), "t")
    with pytest.raises(CleanupError, match="another session"):
        mine.plan_cleanup([claim], policy=LIVE, now=_future(2))
    plan = mine.plan_cleanup([], policy=LIVE, now=_future(2))
    with pytest.raises(CleanupError, match="another session"):
        mine.apply_cleanup(plan, [claim], now=_future(2))
    assert len(os.listdir(mine.tool_results_dir)) == 1


def test_source_id_with_a_path_component_never_becomes_a_claim(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    with pytest.raises(SourceIdError):
        ArtifactRetentionClaim(
            source_id="artifact:s1:../../etc/passwd:" + art.content_sha256[:12],
            content_sha256=art.content_sha256,
        )


def test_plan_entry_naming_a_path_is_refused_when_loaded(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize(_big("a"), "t")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    document = plan.to_dict()
    document["entries"][0]["name"] = "../../victim.txt"  # type: ignore[index]
    with pytest.raises(CleanupError, match="invalid plan entry name"):
        ArtifactCleanupPlan.from_dict(document)


def test_saved_plan_round_trips_through_json_without_paths(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    text = json.dumps(plan.to_dict())
    assert str(externalizer.session_dir) not in text
    assert "/" not in "".join(str(e["name"]) for e in plan.to_dict()["entries"])  # type: ignore[union-attr]
    loaded = ArtifactCleanupPlan.from_dict(json.loads(text))
    report = externalizer.apply_cleanup(loaded, [], now=_future(2))
    assert report.deleted[0].name == art.filename
    assert str(externalizer.session_dir) not in json.dumps(report.to_dict())


def test_a_saved_plan_cannot_put_another_files_source_id_into_the_manifest(
    externalizer: ToolResultExternalizer,
) -> None:
    """Apply copied an entry's source ID from the plan into the ``collected`` record: one
    naming another file passed the plan's checks, was written, and the manifest's own
    decoder then refused it, so every later read, capture and cleanup of the session
    failed (a review). The file is kept and the manifest stays readable."""
    kept = externalizer.externalize(_big("a"), "t").artifact
    other = externalizer.externalize(_big("b"), "t").artifact
    data = externalizer.plan_cleanup([], policy=LIVE, now=_future(2)).to_dict()
    for entry in data["entries"]:  # type: ignore[union-attr]
        if entry["name"] == other.filename:  # type: ignore[index]
            entry["source_id"] = kept.source_id  # type: ignore[index]
    report = externalizer.apply_cleanup(ArtifactCleanupPlan.from_dict(data), [], now=_future(2))
    assert _status(report, other.filename).status is S.RETAINED_UNKNOWN
    assert (externalizer.tool_results_dir / other.filename).exists()
    fresh = ToolResultExternalizer(externalizer.session_dir)
    assert fresh.manifest.collected(kept.filename) is not None
    assert fresh.externalize(_big("c"), "t").artifact.filename == "tool_result_003.txt"


def test_raw_claims_entry_point_refuses_a_session_with_a_durable_journal(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    journal = ArtifactRetentionJournal(externalizer.session_dir)
    claim = _claim(externalizer, art.source_id)
    journal.publish_reference(claim, lambda: None, transaction_id="tx-1")
    with pytest.raises(CleanupError, match="durable retention journal"):
        externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    plan = externalizer.plan_cleanup_from_journal(journal, policy=LIVE, now=_future(2))
    with pytest.raises(CleanupError, match="durable retention journal"):
        externalizer.apply_cleanup(plan, [], now=_future(2))


def test_raw_claims_are_refused_while_the_manifest_anchors_a_journal_that_is_gone(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    """A journal moved aside (as ``journal verify`` may advise) or deleted left no file
    the raw-claims entry looked for, and ``plan_cleanup([])`` deleted the artifact its
    lease protected, while the manifest still anchored it (a review)."""
    art = externalizer.externalize(_big("a"), "t").artifact
    journal = ArtifactRetentionJournal(externalizer.session_dir)
    journal.publish_reference(
        _claim(externalizer, art.source_id), lambda: None, transaction_id="tx-1"
    )
    os.rename(externalizer.session.journal_path, tmp_path / "aside.jsonl")
    with pytest.raises(CleanupError, match="anchors a lease journal"):
        externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert (externalizer.tool_results_dir / art.filename).exists()


def test_apply_refuses_to_run_without_the_current_claims(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize(_big("a"), "t")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    with pytest.raises(CleanupError, match="needs the current claims"):
        externalizer.apply_cleanup(plan, None, now=_future(2))


def test_temporary_files_of_crashed_captures_are_collected_after_the_ttl(
    externalizer: ToolResultExternalizer,
) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    name = f".tmp-{int(dead.stdout)}-0123456789abcdef.partial"
    (externalizer.tool_results_dir / name).write_bytes(b"half an output")
    young = externalizer.plan_cleanup([], policy=LIVE)
    assert _status(young, name).status is S.RETAINED_RECENT
    old = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert _status(old, name).status is S.PLANNED_DELETE
    assert "temporary file" in _status(old, name).reason
    externalizer.apply_cleanup(old, [], now=_future(2))
    assert not (externalizer.tool_results_dir / name).exists()


def test_size_budget_deletes_expired_orphans_oldest_first_until_under_budget(
    externalizer: ToolResultExternalizer,
) -> None:
    arts = [externalizer.externalize(_big(c, 100_000), "t").artifact for c in "abcd"]
    for i, art in enumerate(arts):
        _age(externalizer, art.filename, (10 - i) * 86400)
    policy = ArtifactCleanupPolicy(dry_run=False, max_bytes=250_000)
    plan = externalizer.plan_cleanup([], policy=policy)
    statuses = [_status(plan, a.filename).status for a in arts]
    assert statuses == [S.PLANNED_DELETE, S.PLANNED_DELETE, S.RETAINED_LIMIT, S.RETAINED_LIMIT]
    assert _status(plan, arts[3].filename).reason == "within the size budget"
    assert plan.budget_note is None


def test_size_budget_never_deletes_referenced_artifacts_and_says_it_cannot_be_met(
    externalizer: ToolResultExternalizer,
) -> None:
    arts = [externalizer.externalize(_big(c, 100_000), "t").artifact for c in "ab"]
    for art in arts:
        _age(externalizer, art.filename, 10 * 86400)
    claims = [_claim(externalizer, a.source_id) for a in arts]
    plan = externalizer.plan_cleanup(
        claims, policy=ArtifactCleanupPolicy(dry_run=False, max_bytes=1000)
    )
    assert {e.status for e in plan.entries} == {S.RETAINED_REFERENCED}
    assert plan.budget_note is not None and "cannot be met" in plan.budget_note


def test_budget_across_sessions_takes_the_globally_oldest_orphans(tmp_path: Path) -> None:
    a = ToolResultExternalizer(tmp_path / "w" / "sa")
    b = ToolResultExternalizer(tmp_path / "w" / "sb")
    old = a.externalize(_big("a", 100_000), "t").artifact
    new = b.externalize(_big("b", 100_000), "t").artifact
    _age(a, old.filename, 20 * 86400)
    _age(b, new.filename, 5 * 86400)
    unlimited = ArtifactCleanupPolicy(dry_run=False)
    plans = [a.plan_cleanup([], policy=unlimited), b.plan_cleanup([], policy=unlimited)]
    limited = limit_plans(plans, ArtifactCleanupPolicy(dry_run=False, max_bytes=150_000))
    assert _status(limited[0], old.filename).status is S.PLANNED_DELETE
    assert _status(limited[1], new.filename).status is S.RETAINED_LIMIT


def test_plan_of_another_session_cannot_be_applied(tmp_path: Path) -> None:
    a = ToolResultExternalizer(tmp_path / "w" / "sa")
    b = ToolResultExternalizer(tmp_path / "w" / "sb")
    a.externalize(_big("a"), "t")
    plan = a.plan_cleanup([], policy=LIVE, now=_future(2))
    with pytest.raises(CleanupError, match="is for session 'sa'"):
        b.apply_cleanup(plan, [], now=_future(2))
    assert len(os.listdir(a.tool_results_dir)) == 1


def test_cleanup_never_touches_anything_outside_tool_results(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    externalizer.externalize(_big("a"), "t")
    sibling = externalizer.session_dir / "notes.md"
    sibling.write_text("session notes", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("x", encoding="utf-8")
    session = Session.at(externalizer.session_dir, create=False)
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(30))
    externalizer.apply_cleanup(plan, [], now=_future(30))
    assert sibling.exists() and outside.exists()
    assert session.manifest_path.exists()


def test_temporary_file_of_a_live_capture_is_never_collected(
    externalizer: ToolResultExternalizer,
) -> None:
    name = f".tmp-{os.getpid()}-0123456789abcdef.partial"
    (externalizer.tool_results_dir / name).write_bytes(b"still writing")
    plan = externalizer.plan_cleanup(
        [], policy=ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False), now=_future(2)
    )
    entry = _status(plan, name)
    assert entry.status is S.RETAINED_RECENT
    assert "in progress" in entry.reason


def test_raw_claims_are_refused_next_to_a_memory_owner_database(
    externalizer: ToolResultExternalizer,
) -> None:
    from toolswap import SqliteMemoryOwner

    externalizer.externalize(_big("a"), "t")
    SqliteMemoryOwner(externalizer.session_dir / "memory.sqlite3")
    with pytest.raises(CleanupError, match="memory owner database"):
        externalizer.plan_cleanup([], policy=LIVE, now=_future(2))


def test_cleanup_fails_closed_when_the_journal_is_deleted_behind_its_owner(
    externalizer: ToolResultExternalizer,
) -> None:
    from toolswap import ArtifactLeaseJournalError, SqliteMemoryOwner

    art = externalizer.externalize(_big("a"), "t").artifact
    owner = SqliteMemoryOwner(externalizer.session_dir / "memory.sqlite3")
    journal = ArtifactRetentionJournal(externalizer.session_dir, owner=owner)
    ref = art.for_memory()
    claim = ArtifactRetentionClaim.from_memory_reference(ref)
    journal.publish_reference(claim, lambda: owner.publish("tx-1", ref), transaction_id="tx-1")
    os.unlink(externalizer.session.journal_path)
    with pytest.raises(ArtifactLeaseJournalError):
        externalizer.plan_cleanup_from_journal(
            ArtifactRetentionJournal(externalizer.session_dir), policy=LIVE, now=_future(2)
        )
    assert (externalizer.tool_results_dir / art.filename).exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("entries", "not a list"),
        ("entries", [1, 2]),
        ("policy", None),
        ("total_bytes", "many"),
        ("total_bytes", -1),
        ("budget_note", 7),
        ("session", "../x"),
        ("created_at", "yesterday"),
        ("created_at", "2026-01-01T00:00:00"),
    ],
)
def test_a_malformed_saved_plan_is_refused_with_a_cleanup_error(
    externalizer: ToolResultExternalizer, field: str, value: object
) -> None:
    externalizer.externalize(_big("a"), "t")
    document = externalizer.plan_cleanup([], policy=LIVE, now=_future(2)).to_dict()
    document[field] = value
    with pytest.raises(CleanupError):
        ArtifactCleanupPlan.from_dict(document)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_file_owned_by_another_user_is_denied_and_kept(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(_big("a"), "t").artifact
    path = externalizer.tool_results_dir / art.filename
    os.chown(path, 65534, 65534)
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(30))
    entry = _status(plan, art.filename)
    assert entry.status is S.DENIED
    assert "another user" in entry.reason
    externalizer.apply_cleanup(plan, [], now=_future(30))
    assert path.exists()


def test_apply_with_a_dry_run_policy_in_force_deletes_nothing(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("orphan\n" * 100, "bash").artifact
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert [e.status for e in plan.entries] == [S.PLANNED_DELETE]

    report = apply_cleanup(
        externalizer.session, plan, [], now=_future(2), policy=ArtifactCleanupPolicy()
    )

    assert report.dry_run
    assert externalizer.read_artifact(art, 0, 1) == "orphan"


def test_a_temporary_name_with_digits_toolswap_never_writes_is_not_collected(
    externalizer: ToolResultExternalizer,
) -> None:
    """``\\d`` matched Arabic-Indic digits: ``.tmp-1٢٣-...partial`` was taken for a crashed
    capture's file of pid 123 and deleted, where any name toolswap never writes is kept
    (a review)."""
    externalizer.externalize(_big("a"), "t")
    name = ".tmp-1\u0662\u0663-0123456789abcdef.partial"
    (externalizer.tool_results_dir / name).write_bytes(b"not ours")
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    assert _status(plan, name).status is S.RETAINED_UNKNOWN
    externalizer.apply_cleanup(plan, [], now=_future(2))
    assert (externalizer.tool_results_dir / name).exists()


def test_public_entry_points_refuse_arguments_of_the_wrong_kind_with_a_typed_error(
    externalizer: ToolResultExternalizer,
) -> None:
    """Each of these raised OverflowError, AttributeError or TypeError (a review); now a
    typed error, and nothing on disk changes."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from toolswap import ArtifactRetentionError, ClockError
    from toolswap.cleanup import apply_cleanup_from_journal, plan_cleanup_from_journal

    art = externalizer.externalize(_big("a"), "t").artifact
    journal = ArtifactRetentionJournal(externalizer.session_dir)
    plan = externalizer.plan_cleanup([], policy=LIVE, now=_future(2))
    before = sorted(p.name for p in externalizer.session_dir.rglob("*"))
    calls: list[tuple[type[Exception], object]] = [
        (CleanupError, lambda: ArtifactCleanupPolicy(orphan_ttl_seconds=float("inf"))),
        (CleanupError, lambda: ArtifactCleanupPolicy(orphan_ttl_seconds=1e300)),
        (CleanupError, lambda: externalizer.plan_cleanup(None)),  # type: ignore[arg-type]
        (CleanupError, lambda: externalizer.plan_cleanup(["x"])),  # type: ignore[list-item]
        (
            CleanupError,
            lambda: externalizer.plan_cleanup(
                [
                    SimpleNamespace(
                        source_id=art.source_id,
                        content_sha256=art.content_sha256,
                        retain_until="2030",
                    )
                ]
            ),
        ),  # type: ignore[list-item]
        (CleanupError, lambda: plan_cleanup_from_journal(None)),  # type: ignore[arg-type]
        (CleanupError, lambda: plan_cleanup_from_journal(journal, policy={"dry_run": 0})),  # type: ignore[arg-type]
        (CleanupError, lambda: apply_cleanup_from_journal(None, journal)),  # type: ignore[arg-type]
        (CleanupError, lambda: apply_cleanup_from_journal({"entries": []}, journal)),  # type: ignore[arg-type]
        (CleanupError, lambda: apply_cleanup(externalizer.session, plan, [], policy=3)),  # type: ignore[arg-type]
        (
            CleanupError,
            lambda: CleanupEntry.from_dict(
                {"name": art.filename, "status": "planned_delete", "reason": [1]}
            ),
        ),
        (CleanupError, lambda: ArtifactCleanupPlan.from_dict([1])),  # type: ignore[arg-type]
        (
            ArtifactRetentionError,
            lambda: _claim(externalizer, art.source_id, retain_until="0001-01-01T00:00:00+01:00"),
        ),
        (
            ClockError,
            lambda: journal.recover(now=datetime.min.replace(tzinfo=timezone(DAY / 24))),
        ),
        (ClockError, lambda: journal.recover(now=datetime.max.replace(tzinfo=timezone(-DAY / 24)))),
    ]
    for error, call in calls:
        with pytest.raises(error):
            call()  # type: ignore[operator]
    assert sorted(p.name for p in externalizer.session_dir.rglob("*")) == before
