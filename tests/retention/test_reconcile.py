"""Fenced reconciliation: the spec's table, idempotence, and forced interleavings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from toolswap import (
    ArtifactLeasePhase,
    ArtifactLeaseTransaction,
    ArtifactReconcileStatus,
    ArtifactReferenceOwner,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
    ArtifactRetentionError,
    JournalHead,
)
from toolswap.retention import ArtifactReferenceFence

from .conftest import BACKENDS, Env

pytestmark = pytest.mark.parametrize("env", BACKENDS, indirect=True)

S = ArtifactReconcileStatus
P = ArtifactLeasePhase


def _phases(env: Env) -> list[tuple[str, str]]:
    path = env.session_dir / "retention-leases.jsonl"
    with open(path, encoding="utf-8") as f:
        return [(r["transaction_id"], r["phase"]) for r in map(json.loads, f)]


def test_matching_publication_commits_the_pending_lease(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(), transaction_id="tx-1")
    owner.publish("tx-1", env.reference())
    report = journal.reconcile_reference("tx-1", owner)
    assert (report.status, report.generation) == (S.COMMITTED, 1)
    assert journal.transaction("tx-1").phase is P.COMMITTED  # type: ignore[union-attr]
    assert journal.recover().pending_transaction_ids == ()


def test_mismatching_publication_stays_pending_conflict_and_protected(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(0), transaction_id="tx-1")
    owner.publish("tx-1", env.reference(1))
    report = journal.reconcile_reference("tx-1", owner)
    assert report.status is S.PENDING_CONFLICT
    view = journal.recover()
    assert view.pending_transaction_ids == ("tx-1",)
    assert view.is_protected(env.source_ids[0])


def test_unreadable_owner_record_is_unknown_and_stays_pending(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(), transaction_id="tx-1")
    owner.publish("tx-1", env.reference())
    env.owner_sql("UPDATE memory_references SET reference = '{not json'")
    report = journal.reconcile_reference("tx-1", owner)
    assert report.status is S.PENDING_UNKNOWN
    assert journal.recover().pending_transaction_ids == ("tx-1",)


def test_unsealed_absence_is_tombstoned_first_then_aborted(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(), transaction_id="tx-1")
    report = journal.reconcile_reference("tx-1", owner)
    assert (report.status, report.generation) == (S.ABORTED, 1)
    assert owner.is_tombstoned("tx-1")
    assert _phases(env) == [("tx-1", "PREPARED"), ("tx-1", "ABORTED")]
    with pytest.raises(ArtifactReferenceTombstonedError):
        owner.publish("tx-1", env.reference())  # the late write never lands
    assert not journal.recover().is_protected(env.source_ids[0])


def test_sealed_absence_aborts_without_sealing_again(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(), transaction_id="tx-1")
    owner.publish("tx-1", env.reference())
    owner.remove("tx-1")  # generation 2, tombstoned
    report = journal.reconcile_reference("tx-1", owner)
    assert (report.status, report.generation) == (S.ABORTED, 2)
    assert "already sealed" in report.reason


@pytest.mark.parametrize(
    ("finish", "status"),
    [
        ("commit", S.ALREADY_COMMITTED),
        ("abort", S.ALREADY_ABORTED),
        ("release", S.ALREADY_RELEASED),
    ],
)
def test_terminal_leases_report_already_and_append_nothing(
    env: Env, finish: str, status: ArtifactReconcileStatus
) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    journal.prepare(env.claim(), transaction_id="tx-1")
    if finish == "release":
        journal.commit("tx-1")
    getattr(journal, finish)("tx-1")
    before = _phases(env)
    assert journal.reconcile_reference("tx-1", owner).status is status
    assert journal.reconcile_reference("tx-1", owner).status is status
    assert _phases(env) == before
    assert not owner.is_tombstoned("tx-1")


def test_reconcile_of_an_unknown_transaction_is_refused(env: Env) -> None:
    with pytest.raises(ArtifactRetentionError, match="no lease"):
        env.journal().reconcile_reference("nope", env.owner())


def test_reports_carry_only_id_status_reason_and_generation(env: Env) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    for tx, index in (("a", 0), ("b", 1)):
        journal.prepare(env.claim(index), transaction_id=tx)
    owner.publish("a", env.reference(0))
    reports = journal.reconcile_pending(owner)
    assert [(r.transaction_id, r.status) for r in reports] == [("a", S.COMMITTED), ("b", S.ABORTED)]
    for report in reports:
        data = report.to_dict()
        assert set(data) == {"transaction_id", "status", "reason", "generation"}
        text = json.dumps(data)
        assert str(env.session_dir) not in text and "/" not in text
        assert env.reference(0).summary not in text


class _FailsFor(ArtifactReferenceOwner):
    """A real owner, except that taking the fence for one ID fails."""

    failing = "b"

    def __init__(self, inner: ArtifactReferenceOwner) -> None:
        self.inner = inner

    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> AbstractContextManager[ArtifactReferenceFence]:
        if transaction.transaction_id == self.failing:
            raise ArtifactReferenceOwnerError("connection reset")
        return self.inner.inspect_fenced(transaction)

    def journal_head(self, journal_key: str) -> JournalHead | None:
        return self.inner.journal_head(journal_key)

    def acknowledge_journal_head(self, journal_key: str, head: JournalHead) -> None:
        self.inner.acknowledge_journal_head(journal_key, head)


def test_reconcile_pending_reports_every_lease_even_when_one_fails(env: Env) -> None:
    owner = _FailsFor(env.owner())
    journal = env.journal(owner=owner)
    for tx in ("a", "b", "c"):
        journal.prepare(env.claim(), transaction_id=tx)
    reports = journal.reconcile_pending(owner)
    assert [(r.transaction_id, r.status) for r in reports] == [
        ("a", S.ABORTED), ("b", S.PENDING_UNKNOWN), ("c", S.ABORTED),
    ]  # fmt: skip
    assert "ArtifactReferenceOwnerError" in reports[1].reason
    assert journal.recover().pending_transaction_ids == ("b",)


def test_tombstoned_publish_propagates_and_reconciliation_aborts_the_lease(env: Env) -> None:
    owner = env.owner()
    owner.remove("tx-1")  # a stale ID sealed earlier
    journal = env.journal(owner=owner)
    ref = env.reference()
    with pytest.raises(ArtifactReferenceTombstonedError):
        journal.publish_reference(
            env.claim(), lambda: owner.publish("tx-1", ref), transaction_id="tx-1"
        )
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    assert journal.reconcile_reference("tx-1", owner).status is S.ABORTED


def test_publisher_that_wrote_but_lost_its_reply_is_committed_by_reconciliation(
    env: Env,
) -> None:
    result = env.run("publish", env.source_ids[0], "tx-1", "fail-after-write")
    assert result.out == "TimeoutError"
    owner = env.owner()
    journal = env.journal(owner=owner)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    assert journal.reconcile_reference("tx-1", owner).status is S.COMMITTED


# -- forced interleavings between processes --------------------------------------------


@contextmanager
def _reconciler_inside_the_fence(env: Env, *mode: str) -> Iterator[None]:
    with env.stopped_at("reconcile.fenced", "reconcile", *mode) as proc:
        yield
    result = env.finish(proc)
    assert result.code == 0, result.err
    _last.clear()
    _last.extend(result.out)


_last: list[dict[str, object]] = []


def test_publish_that_starts_while_the_fence_is_held_meets_the_tombstone(env: Env) -> None:
    env.journal().prepare(env.claim(), transaction_id="tx-1")
    with _reconciler_inside_the_fence(env):
        # The reconciler observed ABSENT and holds the owner's write transaction.
        late = env.spawn("owner-publish", env.source_ids[0], "tx-1")
    assert [(r["transaction_id"], r["status"]) for r in _last] == [("tx-1", "aborted")]
    assert env.finish(late).out == "ArtifactReferenceTombstonedError"
    assert env.owner().get("tx-1") is None


def test_generation_that_moves_before_the_seal_is_pending_stale(env: Env) -> None:
    journal = env.journal()
    journal.prepare(env.claim(), transaction_id="tx-1")
    with _reconciler_inside_the_fence(env, "optimistic"):
        # The optimistic fence observed ABSENT at generation 0 and holds nothing.
        env.owner().publish("tx-1", env.reference())
    [report] = _last
    assert (report["status"], report["generation"]) == ("pending_stale", 0)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    assert not env.owner().is_tombstoned("tx-1")
    assert journal.reconcile_reference("tx-1", env.owner()).status is S.COMMITTED


@pytest.mark.parametrize("published", [False, True])
def test_two_reconcilers_that_observed_the_same_state_append_one_terminal_event(
    env: Env, published: bool
) -> None:
    journal = env.journal()
    journal.prepare(env.claim(), transaction_id="tx-1")
    if published:
        env.owner().publish("tx-1", env.reference())
    with env.stopped_at("reconcile.fenced", "reconcile", "optimistic") as first:
        with env.stopped_at("reconcile.fenced", "reconcile", "optimistic") as second:
            pass  # both observed; the second goes on first
        second_result = env.finish(second)
    first_result = env.finish(first)
    statuses = [first_result.out[0]["status"], second_result.out[0]["status"]]
    terminal = "committed" if published else "aborted"
    assert statuses == [f"already_{terminal}", terminal]
    assert _phases(env).count(("tx-1", terminal.upper())) == 1
    assert len(_phases(env)) == 2


def test_reconciler_waiting_for_the_fence_appends_nothing_more(env: Env) -> None:
    env.journal().prepare(env.claim(), transaction_id="tx-1")
    with _reconciler_inside_the_fence(env):
        waiting = env.spawn("reconcile")
    other = env.finish(waiting)
    assert other.code == 0, other.err
    assert [r["status"] for r in other.out] in ([], ["already_aborted"])
    assert _phases(env) == [("tx-1", "PREPARED"), ("tx-1", "ABORTED")]


def test_reconcile_pending_works_from_the_snapshot_taken_when_it_started(env: Env) -> None:
    env.journal().prepare(env.claim(0), transaction_id="first")
    # Not bound to the owner: acknowledging the head would wait for the held fence.
    journal = env.journal(owner=None)
    with _reconciler_inside_the_fence(env):
        journal.prepare(env.claim(1), transaction_id="second")
    assert [r["transaction_id"] for r in _last] == ["first"]
    assert journal.recover().pending_transaction_ids == ("second",)
