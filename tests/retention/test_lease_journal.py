"""The lease journal: record format, publish/remove order, the claim view, the cache."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conftest import Clock
from toolswap import (
    ArtifactLeaseJournalError,
    ArtifactLeasePhase,
    ArtifactPublicationRejected,
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    ArtifactRetentionJournal,
    ToolResultExternalizer,
)
from toolswap.chainlog import canonical_json
from toolswap.cleanup import ArtifactCleanupPolicy

from .conftest import Env

P = ArtifactLeasePhase


def _records(env: Env) -> list[dict[str, Any]]:
    with open(env.session_dir / "retention-leases.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_publish_appends_prepared_then_committed_with_the_spec_fields(
    env: Env, clock: Clock
) -> None:
    journal = ArtifactRetentionJournal(env.session_dir, now=clock)
    claim = env.claim(reference_count=2, retain_until="2026-09-01T00:00:00+00:00")
    transaction, stored = journal.publish_reference(
        claim, lambda: "stored-record", transaction_id="workspace-artifact-reference-1"
    )
    assert stored == "stored-record"
    assert transaction.transaction_id == "workspace-artifact-reference-1"
    assert transaction.phase is P.COMMITTED
    prepared, committed = _records(env)
    assert set(prepared) == {
        "v", "seq", "session", "transaction_id", "phase", "recorded_at", "intent_hash",
        "intent", "prev", "hash",
    }  # fmt: skip
    assert set(committed) == set(prepared) - {"intent"}
    assert (prepared["seq"], committed["seq"]) == (1, 2)
    assert prepared["phase"] == "PREPARED" and committed["phase"] == "COMMITTED"
    assert prepared["session"] == committed["session"] == "s1"
    assert prepared["intent"] == claim.to_dict()
    assert committed["prev"] == prepared["hash"]
    assert prepared["prev"] == "0" * 64
    assert committed["intent_hash"] == prepared["intent_hash"]
    assert prepared["recorded_at"] == clock.now.isoformat()
    assert "path" not in json.dumps(prepared["intent"])


def test_journal_is_private_and_each_record_is_one_canonical_line(env: Env) -> None:
    env.journal().publish_reference(env.claim(), lambda: None, transaction_id="tx-1")
    path = env.session_dir / "retention-leases.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for line in path.read_bytes().splitlines():
        record = json.loads(line)
        digest = record.pop("hash")
        assert line == canonical_json(record)[:-1] + b',"hash":"' + digest.encode() + b'"}'


def test_publisher_runs_after_prepared_is_durable_and_before_committed(env: Env) -> None:
    journal = env.journal()
    seen: list[list[str]] = []

    def publisher() -> None:
        seen.append([r["phase"] for r in _records(env)])
        fresh = ArtifactRetentionJournal(env.session_dir, owner=None).recover()
        assert fresh.pending_transaction_ids == ("tx-1",)

    journal.publish_reference(env.claim(), publisher, transaction_id="tx-1")
    assert seen == [["PREPARED"]]
    assert [r["phase"] for r in _records(env)] == ["PREPARED", "COMMITTED"]


def test_rejected_publication_appends_aborted_and_reraises(env: Env) -> None:
    journal = env.journal()
    with pytest.raises(ArtifactPublicationRejected, match="before write"):
        journal.publish_reference(
            env.claim(),
            lambda: (_ for _ in ()).throw(
                ArtifactPublicationRejected("reference rejected before write")
            ),
            transaction_id="tx-1",
        )
    assert [r["phase"] for r in _records(env)] == ["PREPARED", "ABORTED"]
    view = journal.recover()
    assert not view.is_protected(env.source_ids[0])
    assert view.pending_transaction_ids == ()


@pytest.mark.parametrize(
    "exc",
    [TimeoutError("no reply"), ConnectionError("reset"), OSError(5, "EIO"), RuntimeError("x")],
)
def test_any_other_publisher_exception_propagates_unchanged_and_the_lease_stays_prepared(
    env: Env, exc: Exception
) -> None:
    journal = env.journal()

    def publisher() -> None:
        raise exc

    with pytest.raises(type(exc)) as raised:
        journal.publish_reference(env.claim(), publisher, transaction_id="tx-1")
    assert raised.value is exc
    assert [r["phase"] for r in _records(env)] == ["PREPARED"]
    view = journal.recover()
    assert view.pending_transaction_ids == ("tx-1",)
    assert view.claims[env.source_ids[0]].retain_until is None


def test_existing_transaction_id_is_never_published_again(env: Env) -> None:
    journal = env.journal()
    calls: list[int] = []
    journal.publish_reference(env.claim(), lambda: calls.append(1), transaction_id="tx-1")
    with pytest.raises(ArtifactRetentionError, match=r"never published again.*reconcile"):
        journal.publish_reference(env.claim(1), lambda: calls.append(2), transaction_id="tx-1")
    journal.prepare(env.claim(), transaction_id="tx-2")
    with pytest.raises(ArtifactRetentionError, match=r"already exists \(PREPARED\)"):
        journal.publish_reference(env.claim(), lambda: calls.append(3), transaction_id="tx-2")
    assert calls == [1]
    # A fresh journal (after a restart) refuses too.
    with pytest.raises(ArtifactRetentionError, match="already exists"):
        env.journal().prepare(env.claim(), transaction_id="tx-1")


def test_prepare_of_a_missing_artifact_fails_clearly_and_the_publisher_is_not_called(
    env: Env,
) -> None:
    claim = env.claim()
    (env.session_dir / "tool-results" / "tool_result_001.txt").unlink()
    calls: list[int] = []
    with pytest.raises(ArtifactRetentionError, match="missing artifact"):
        env.journal().publish_reference(claim, lambda: calls.append(1), transaction_id="t")
    assert calls == []
    assert not (env.session_dir / "retention-leases.jsonl").exists()


def test_prepare_of_a_collected_artifact_fails_with_missing_artifact(
    env: Env, clock: Clock
) -> None:
    claim = env.claim()
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
    later = datetime.now(UTC) + timedelta(days=2)
    plan = env.ext.plan_cleanup([], policy=policy, now=later)
    env.ext.apply_cleanup(plan, [], now=later)
    with pytest.raises(ArtifactRetentionError, match="missing artifact"):
        env.journal().prepare(claim, transaction_id="tx-1")


def test_prepare_refuses_a_replaced_artifact_or_a_symlink(env: Env) -> None:
    claim = env.claim()
    path = env.session_dir / "tool-results" / "tool_result_001.txt"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[:-1] + b"X")
    with pytest.raises(ArtifactRetentionError, match="failed verification"):
        env.journal().prepare(claim, transaction_id="tx-1")
    path.unlink()
    os.symlink(env.session_dir / "tool-results" / "tool_result_002.txt", path)
    with pytest.raises(ArtifactRetentionError, match="not a regular file"):
        env.journal().prepare(claim, transaction_id="tx-1")
    assert not (env.session_dir / "retention-leases.jsonl").exists()


def test_claim_of_another_session_is_refused_by_prepare(env: Env) -> None:
    other = ToolResultExternalizer(env.tmp / "sessions" / "s2")
    art = other.externalize("zz\n" * 40_000, "grep").artifact
    claim = ArtifactRetentionClaim.from_memory_reference(art.for_memory())
    with pytest.raises(ArtifactRetentionError, match=r"session 's2'"):
        env.journal().publish_reference(claim, lambda: None, transaction_id="tx-1")


def test_claim_with_a_digest_the_manifest_does_not_know_is_refused(env: Env) -> None:
    real = env.claim()
    forged = ArtifactRetentionClaim(real.source_id, real.content_sha256[:12] + "0" * 52)
    with pytest.raises(ArtifactRetentionError, match="digest differs"):
        env.journal().prepare(forged, transaction_id="tx-1")


def test_remove_runs_the_remover_first_and_releases_only_after_it_succeeds(env: Env) -> None:
    journal = env.journal()
    journal.publish_reference(env.claim(), lambda: None, transaction_id="tx-1")
    phases_seen: list[list[str]] = []

    def failing() -> None:
        phases_seen.append([r["phase"] for r in _records(env)])
        raise ConnectionError("owner unreachable")

    with pytest.raises(ConnectionError):
        journal.remove_reference("tx-1", failing)
    assert phases_seen == [["PREPARED", "COMMITTED"]]
    assert journal.recover().is_protected(env.source_ids[0])
    lease = journal.remove_reference("tx-1", lambda: None)
    assert lease.phase is P.RELEASED
    assert [r["phase"] for r in _records(env)] == ["PREPARED", "COMMITTED", "RELEASED"]
    assert not journal.recover().is_protected(env.source_ids[0])
    # Released already: nothing runs, nothing is appended.
    journal.remove_reference("tx-1", lambda: pytest.fail("remover ran twice"))
    assert len(_records(env)) == 3


def test_remove_of_a_pending_or_aborted_lease_is_refused_before_the_remover_runs(
    env: Env,
) -> None:
    journal = env.journal()
    journal.prepare(env.claim(), transaction_id="tx-1")
    with pytest.raises(ArtifactRetentionError, match=r"PREPARED.*reconcile"):
        journal.remove_reference("tx-1", lambda: pytest.fail("remover ran"))
    journal.abort("tx-1")
    with pytest.raises(ArtifactRetentionError, match="ABORTED"):
        journal.remove_reference("tx-1", lambda: pytest.fail("remover ran"))
    with pytest.raises(ArtifactRetentionError, match="no lease"):
        journal.remove_reference("tx-9", lambda: pytest.fail("remover ran"))


def test_raw_transitions_follow_the_phase_graph_only(env: Env) -> None:
    journal = env.journal()
    journal.prepare(env.claim(), transaction_id="a")
    journal.prepare(env.claim(), transaction_id="b")
    with pytest.raises(ArtifactRetentionError, match="cannot become RELEASED"):
        journal.release("a")
    assert journal.commit("a").phase is P.COMMITTED
    assert journal.commit("a").phase is P.COMMITTED  # idempotent, nothing appended
    with pytest.raises(ArtifactRetentionError, match="cannot become ABORTED"):
        journal.abort("a")
    assert journal.abort("b").phase is P.ABORTED
    with pytest.raises(ArtifactRetentionError, match="cannot become COMMITTED"):
        journal.commit("b")
    assert journal.release("a").phase is P.RELEASED
    assert [r["phase"] for r in _records(env)] == [
        "PREPARED", "PREPARED", "COMMITTED", "ABORTED", "RELEASED",
    ]  # fmt: skip


@pytest.mark.parametrize("tx", ["", " x", "a b", "x\n", "../x", "-x", "x" * 201, "é"])
def test_malformed_transaction_id_is_refused(env: Env, tx: str) -> None:
    with pytest.raises(ArtifactRetentionError, match="invalid transaction ID"):
        env.journal().prepare(env.claim(), transaction_id=tx)


def test_claim_view_sums_counts_takes_the_latest_deadline_and_none_is_unbounded(
    env: Env, clock: Clock
) -> None:
    journal = env.journal(now=clock)
    t0 = clock.now
    sid0, sid1, sid2 = env.source_ids
    for tx, index, count, days in [
        ("a", 0, 2, 10), ("b", 0, 3, 20), ("c", 1, 1, None), ("d", 1, 1, 5), ("e", 2, 4, 1),
    ]:  # fmt: skip
        deadline = t0 + timedelta(days=days) if days is not None else None
        journal.publish_reference(
            env.claim(index, reference_count=count, retain_until=deadline),
            lambda: None,
            transaction_id=tx,
        )
    view = journal.recover(now=t0)
    assert view.claims[sid0].reference_count == 5
    assert view.claims[sid0].retain_until == t0 + timedelta(days=20)
    assert view.claims[sid1].reference_count == 2
    assert view.claims[sid1].retain_until is None
    assert view.claims[sid2].reference_count == 4
    later = journal.recover(now=t0 + timedelta(days=15))
    assert later.claims[sid0].reference_count == 3
    assert not later.is_protected(sid2)
    assert later.claims[sid1].reference_count == 1
    assert later.as_of == t0 + timedelta(days=15)


def test_prepared_lease_protects_without_deadline_however_old_it_is(env: Env, clock: Clock) -> None:
    journal = env.journal(now=clock)
    journal.prepare(env.claim(retain_until=clock.now + timedelta(hours=1)), transaction_id="p")
    view = journal.recover(now=clock.now + timedelta(days=3650))
    assert view.pending_transaction_ids == ("p",)
    assert view.claims[env.source_ids[0]].retain_until is None
    assert view.is_protected(env.source_ids[0])


def test_pending_transaction_ids_are_listed_oldest_first(env: Env) -> None:
    journal = env.journal()
    for tx in ("z", "a", "m"):
        journal.prepare(env.claim(), transaction_id=tx)
    journal.commit("a")
    assert journal.recover().pending_transaction_ids == ("z", "m")


def test_recover_refuses_a_naive_time(env: Env) -> None:
    with pytest.raises(ArtifactRetentionError, match="timezone-aware"):
        env.journal().recover(now=datetime(2026, 1, 1))


def test_fresh_journal_recovers_the_same_view_as_the_one_that_wrote_it(
    env: Env, clock: Clock
) -> None:
    journal = env.journal(now=clock)
    journal.publish_reference(env.claim(0, reference_count=2), lambda: None, transaction_id="a")
    journal.prepare(env.claim(1), transaction_id="b")
    journal.publish_reference(env.claim(2), lambda: None, transaction_id="c")
    journal.remove_reference("c", lambda: None)
    fresh = ArtifactRetentionJournal(env.session_dir, owner=None)
    assert fresh.recover(now=clock.now) == journal.recover(now=clock.now)
    assert fresh.has_durable_journal()


def test_has_durable_journal_is_false_until_a_record_exists(env: Env) -> None:
    journal = env.journal()
    assert not journal.has_durable_journal()
    (env.session_dir / "retention-leases.jsonl").write_bytes(b'{"torn')
    assert not journal.has_durable_journal()
    journal.prepare(env.claim(), transaction_id="tx-1")
    assert journal.has_durable_journal()
    assert journal.session.session_id == "s1"


def test_operations_verify_only_the_appended_suffix(env: Env) -> None:
    journal = env.journal(owner=None)
    journal.publish_reference(env.claim(), lambda: None, transaction_id="a")
    path = env.session_dir / "retention-leases.jsonl"
    # Damage the first record in place, keeping the size: this journal object has
    # verified it already and does not read it again; a fresh one must refuse it.
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    journal.publish_reference(env.claim(1), lambda: None, transaction_id="b")
    assert journal.recover().journal_seq == 4
    with pytest.raises(ArtifactLeaseJournalError):
        ArtifactRetentionJournal(env.session_dir, owner=None).recover()


def test_records_appended_by_another_journal_object_are_folded_incrementally(env: Env) -> None:
    first, second = env.journal(), env.journal()
    first.publish_reference(env.claim(0), lambda: None, transaction_id="a")
    second.publish_reference(env.claim(1), lambda: None, transaction_id="b")
    first.prepare(env.claim(2), transaction_id="c")
    assert second.recover().pending_transaction_ids == ("c",)
    when = datetime.now(UTC)
    assert first.recover(now=when) == second.recover(now=when)
    assert [r["seq"] for r in _records(env)] == [1, 2, 3, 4, 5]


def test_verify_reports_the_whole_journal_and_a_torn_tail(env: Env) -> None:
    journal = env.journal()
    journal.publish_reference(env.claim(), lambda: None, transaction_id="a")
    journal.prepare(env.claim(1), transaction_id="b")
    with open(env.session_dir / "retention-leases.jsonl", "ab") as f:
        f.write(b'{"intent":')
    summary = journal.verify()
    assert summary.records == 3
    assert summary.torn_tail_bytes == 10
    assert summary.phases == {"PREPARED": 1, "COMMITTED": 1, "ABORTED": 0, "RELEASED": 0}
    assert summary.owner_head is not None and summary.owner_head.seq == 3


def test_bound_owner_is_told_the_head_after_every_append(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    ref = env.reference()

    def acknowledged() -> object:
        return owner.journal_head(journal.journal_key)

    journal.publish_reference(env.claim(), lambda: owner.publish("a", ref), transaction_id="a")
    assert acknowledged() == journal.head and journal.head.seq == 2
    journal.prepare(env.claim(), transaction_id="b")
    assert acknowledged() == journal.head and journal.head.seq == 3
    journal.reconcile_reference("b", owner)
    assert acknowledged() == journal.head and journal.head.seq == 4
    journal.remove_reference("a", lambda: owner.remove("a"))
    assert acknowledged() == journal.head and journal.head.seq == 5


def test_default_owner_is_bound_once_its_database_exists(env: Env) -> None:
    journal = ArtifactRetentionJournal(env.session_dir)
    assert journal.owner is None
    journal.prepare(env.claim(), transaction_id="a")
    env.owner()
    assert journal.owner is not None
    assert journal.owner.path == env.owner_db  # type: ignore[attr-defined]
    journal.commit("a")
    assert env.owner().journal_head(journal.journal_key) == journal.head
    assert ArtifactRetentionJournal(env.session_dir, owner=None).owner is None


def test_a_journal_for_a_session_that_does_not_exist_is_refused_and_nothing_is_created(
    tmp_path: Any,
) -> None:
    from toolswap import ArtifactAccessError, ArtifactRetentionJournal

    missing = tmp_path / "no-such-workspace" / "s1"
    with pytest.raises(ArtifactAccessError, match="does not exist"):
        ArtifactRetentionJournal(missing)
    assert not (tmp_path / "no-such-workspace").exists()
