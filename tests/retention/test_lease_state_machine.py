"""A Hypothesis state machine: publish / remove / crash / reconcile / restart vs a model.

The model is a dict of lease phases and the set of references the owner holds. After
every step a fresh journal (a restart) must recover exactly the model's claim view, and
no reference the owner holds may be unprotected. Crashes are real: a worker process is
killed with SIGKILL at a crash point of the publish or reconcile path.

It runs with the SQLite owner, with the PostgreSQL owner beside the local journal, and
with the owner and the journal both in PostgreSQL (a restart then re-opens the journal
from the database with a new store and new connections, as another process would).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from postgres_server import PostgresServer
from toolswap import (
    ArtifactPublicationRejected,
    ArtifactReconcileStatus,
    ArtifactReferenceTombstonedError,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    ToolResultExternalizer,
)

from .conftest import Env

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINES = st.sampled_from([None, NOW + timedelta(days=1), NOW - timedelta(days=1)])

PUBLISH_POINTS = {
    # crash point -> (phase after the crash, does the owner hold the reference)
    "journal.prepared.appended": ("PREPARED", False),
    "journal.prepared.fsynced": ("PREPARED", False),
    "journal.publisher.before": ("PREPARED", False),
    "owner.publishing": ("PREPARED", False),
    "owner.published": ("PREPARED", True),
    "journal.publisher.after": ("PREPARED", True),
    "journal.committed.appended": ("COMMITTED", True),
    "journal.committed.fsynced": ("COMMITTED", True),
}
LOST_UNCOMMITTED: dict[str, str | None] = {
    # crash point -> phase after the crash with the journal in PostgreSQL (None: no lease)
    "journal.prepared.appended": None,
    "journal.committed.appended": "PREPARED",
}
_SCHEMAS = itertools.count(1)
"""Numbers the examples' PostgreSQL schemas (every machine class of this run shares it)."""
RECONCILE_POINTS = [
    "reconcile.fenced",
    "owner.tombstoning",
    "owner.tombstoned",
    "journal.aborted.appended",
    "journal.committed.fsynced",
]


class LeaseMachine(RuleBasedStateMachine):
    committed = Bundle("committed")
    sealed = Bundle("sealed")
    backend = "sqlite"
    dsn = ""

    @initialize()
    def open_session(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="toolswap-leases-"))
        session_dir = self.tmp / "sessions" / "s1"
        ext = ToolResultExternalizer(session_dir)
        sids = [
            ext.externalize(f"{tag}\n" * 40_000, "grep").artifact.source_id
            for tag in ("alpha", "beta")
        ]
        self.env = Env(
            self.tmp,
            session_dir,
            session_dir / "memory.sqlite3",
            ext,
            sids,
            backend=self.backend,
            dsn=self.dsn,
            schema=f"machine_{os.getpid()}_{next(_SCHEMAS)}",  # one per example
        )
        self.owner = self.env.owner()
        self.stores: dict[int, Any] = {}
        self.journal = self._open_journal()
        self.phase: dict[str, str] = {}
        self.claims: dict[str, ArtifactRetentionClaim] = {}
        self.order: list[str] = []
        self.owner_holds: set[str] = set()
        self.counter = 0

    def teardown(self) -> None:
        if self.backend.startswith("postgres"):
            self.owner.close()
        self._close(self.journal)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _open_journal(self) -> ArtifactRetentionJournal:
        """A journal of this backend, as a new process opens it (a new store if shared)."""
        store = self.env.store()
        journal = self.env.journal(owner=self.owner, store=store)
        self.stores[id(journal)] = store
        return journal

    def _close(self, journal: ArtifactRetentionJournal) -> None:
        store = self.stores.pop(id(journal), None)
        if store is not None:
            store.close()

    @contextmanager
    def _fresh(self) -> Iterator[ArtifactRetentionJournal]:
        journal = self._open_journal()
        try:
            yield journal
        finally:
            self._close(journal)

    def _new(self, index: int, deadline: datetime | None) -> tuple[str, ArtifactRetentionClaim]:
        self.counter += 1
        tx = f"tx-{self.counter}"
        claim = self.env.claim(index, retain_until=deadline)
        self.claims[tx] = claim
        self.order.append(tx)
        return tx, claim

    # -- rules --------------------------------------------------------------------------

    @rule(target=committed, index=st.integers(0, 1), deadline=DEADLINES)
    def publish(self, index: int, deadline: datetime | None) -> str:
        tx, claim = self._new(index, deadline)
        ref = self.env.reference(index)
        self.journal.publish_reference(
            claim, lambda: self.owner.publish(tx, ref), transaction_id=tx
        )
        self.phase[tx] = "COMMITTED"
        self.owner_holds.add(tx)
        return tx

    @rule(index=st.integers(0, 1))
    def publish_rejected(self, index: int) -> None:
        tx, claim = self._new(index, None)

        def publisher() -> None:
            raise ArtifactPublicationRejected("refused before write")

        with suppress(ArtifactPublicationRejected):
            self.journal.publish_reference(claim, publisher, transaction_id=tx)
        self.phase[tx] = "ABORTED"

    @rule(index=st.integers(0, 1), wrote=st.booleans(), deadline=DEADLINES)
    def publish_with_lost_reply(self, index: int, wrote: bool, deadline: datetime | None) -> None:
        tx, claim = self._new(index, deadline)
        ref = self.env.reference(index)

        def publisher() -> None:
            if wrote:
                self.owner.publish(tx, ref)
            raise TimeoutError("no reply")

        with suppress(TimeoutError):
            self.journal.publish_reference(claim, publisher, transaction_id=tx)
        self.phase[tx] = "PREPARED"
        if wrote:
            self.owner_holds.add(tx)

    @rule(index=st.integers(0, 1), point=st.sampled_from(sorted(PUBLISH_POINTS)))
    def crash_while_publishing(self, index: int, point: str) -> None:
        tx, _ = self._new(index, None)
        result = self.env.run("publish", self.env.source_ids[index], tx, crash=point)
        assert result.killed, result.err
        phase, holds = PUBLISH_POINTS[point]
        if self.env.shared_journal and point.endswith(".appended"):
            # A database journal loses the record whose transaction had not committed (a
            # file keeps bytes written before the fsync when only the process dies).
            phase = LOST_UNCOMMITTED[point]
        if phase is None:
            self.order.remove(tx)
            del self.claims[tx]
            self.restart()
            return
        self.phase[tx] = phase
        if holds:
            self.owner_holds.add(tx)
        self.restart()

    @rule(target=sealed, tx=consumes(committed))
    def remove(self, tx: str) -> str:
        self.journal.remove_reference(tx, lambda: self.owner.remove(tx))
        self.phase[tx] = "RELEASED"
        self.owner_holds.discard(tx)
        return tx

    @rule(tx=committed)
    def remove_that_fails(self, tx: str) -> None:
        def remover() -> None:
            raise ConnectionError("owner unreachable")

        with suppress(ConnectionError):
            self.journal.remove_reference(tx, remover)
        assert self.phase[tx] == "COMMITTED"

    def _reconcile_model(self) -> dict[str, str]:
        expected = {}
        for tx in self.order:
            if self.phase[tx] == "PREPARED":
                expected[tx] = "COMMITTED" if tx in self.owner_holds else "ABORTED"
        return expected

    @rule()
    def reconcile(self) -> None:
        expected = self._reconcile_model()
        reports = self.journal.reconcile_pending(self.owner)
        assert [r.transaction_id for r in reports] == list(expected)
        for report in reports:
            want = expected[report.transaction_id]
            assert report.status is ArtifactReconcileStatus(want.lower())
            self.phase[report.transaction_id] = want

    @rule(point=st.sampled_from(RECONCILE_POINTS))
    def crash_while_reconciling(self, point: str) -> None:
        expected = self._reconcile_model()
        result = self.env.run("reconcile", crash=point)
        assert result.killed or result.code == 0, result.err
        self.restart()
        # The worker may have settled some leases before it died, never wrongly.
        actual = {t.transaction_id: t.phase.value for t in self.journal.transactions()}
        for tx, want in expected.items():
            assert actual[tx] in ("PREPARED", want), (tx, actual[tx], want)
            self.phase[tx] = actual[tx]
        self.check_owner_references_are_protected()
        self.reconcile()

    @rule()
    def restart(self) -> None:
        self._close(self.journal)
        self.journal = self._open_journal()

    @rule()
    def checkpoint(self) -> None:
        # Later recoveries start from the checkpoint and fold only the records after it.
        head = self.journal.checkpoint()
        assert head == (self.journal.head if self.order else None)

    @rule(tx=sealed)
    def late_write_of_a_removed_reference_is_refused(self, tx: str) -> None:
        try:
            self.owner.publish(tx, self.env.reference(0))
        except ArtifactReferenceTombstonedError:
            return
        raise AssertionError(f"{tx} was published again after its removal")

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def fresh_recovery_matches_the_model(self) -> None:
        with self._fresh() as fresh:
            view = fresh.recover(NOW)
        if self.env.shared_journal:  # in the database alone: no process wrote a file
            assert not (self.env.session_dir / "retention-leases.jsonl").exists()
        pending = tuple(tx for tx in self.order if self.phase[tx] == "PREPARED")
        assert view.pending_transaction_ids == pending
        expected: dict[str, tuple[int, datetime | None]] = {}
        for tx in self.order:
            claim, phase = self.claims[tx], self.phase[tx]
            if phase == "PREPARED":
                deadline = None
            elif phase == "COMMITTED" and claim.is_active(NOW):
                deadline = claim.retain_until
            else:
                continue
            if claim.source_id in expected:
                count, old = expected[claim.source_id]
                latest = None if old is None or deadline is None else max(old, deadline)
                expected[claim.source_id] = (count + claim.reference_count, latest)
            else:
                expected[claim.source_id] = (claim.reference_count, deadline)
        got = {sid: (c.reference_count, c.retain_until) for sid, c in view.claims.items()}
        assert got == expected
        leases = {t.transaction_id: t.phase.value for t in self.journal.transactions()}
        assert leases == self.phase

    @invariant()
    def check_owner_references_are_protected(self) -> None:
        with self._fresh() as fresh:
            view = fresh.recover(NOW)
        held = {
            r.transaction_id: r.reference.source.source_id for r in self.owner.list_references()
        }
        assert set(held) == self.owner_holds
        for tx, source_id in held.items():
            assert self.phase[tx] in ("PREPARED", "COMMITTED")
            # Protected while pending, and while committed until its own deadline.
            if self.phase[tx] == "PREPARED" or self.claims[tx].is_active(NOW):
                assert view.is_protected(source_id)


LeaseMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLeaseStateMachine = LeaseMachine.TestCase


class PostgresLeaseMachine(LeaseMachine):
    """The same machine with the PostgreSQL owner (crash workers open it too)."""

    backend = "postgres"


class SharedJournalLeaseMachine(LeaseMachine):
    """The same machine with the owner and the journal (records, lock, checkpoint) in
    PostgreSQL: crash workers, restarts and every fresh recovery read it from the database."""

    backend = "postgres-journal"


@pytest.mark.parametrize(
    "machine", [PostgresLeaseMachine, SharedJournalLeaseMachine], ids=["owner", "owner+journal"]
)
def test_lease_state_machine_holds_with_postgres(
    postgres_server: PostgresServer, machine: type[LeaseMachine]
) -> None:
    machine.dsn = postgres_server.dsn
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=10,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
