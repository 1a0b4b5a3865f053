"""A Hypothesis state machine over externalize / publish / release / crash / plan / apply.

Plan and apply are separate rules, so publishes, releases, crashes and reconciliation run
between them, with the plan going stale as in production. The memory owner is the real
SQLite owner; a "crash" is a real subprocess killed with SIGKILL in the middle of a
publish. Invariant, checked after every step: no artifact with an active or pending claim
is missing, and each still verifies against its digest.

It runs again with the journal (records, lock, checkpoint) and the owner in PostgreSQL:
gc then plans and applies under the database's advisory lock, and every restart and
crashed publisher opens the journal from the database.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import journal_backend
from journal_backend import open_journal, open_owner
from postgres_server import PostgresServer
from toolswap import (
    ArtifactLeasePhase,
    ArtifactReconcileStatus,
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    ToolResultExternalizer,
)
from toolswap.cleanup import ArtifactCleanupPlan, ArtifactCleanupPolicy, ArtifactCleanupStatus

LATER = datetime.now(UTC) + timedelta(days=2)
CRASHING_PUBLISH = """
import sys
from journal_backend import open_journal, open_owner
from toolswap import *
session_dir, source_id, sha, tx = sys.argv[1:5]
owner = open_owner(session_dir)
journal = open_journal(session_dir, owner=owner)
ref = ToolResultExternalizer(session_dir).get_artifact(source_id).for_memory()
claim = ArtifactRetentionClaim(source_id=source_id, content_sha256=sha)
journal.publish_reference(claim, lambda: owner.publish(tx, ref), transaction_id=tx)
"""
CRASH_POINTS_IN_PUBLISH = [
    "journal.prepared.fsynced",
    "journal.publisher.before",
    "owner.published",
    "journal.committed.appended",
]


class PublishTimedOut(RuntimeError):
    """A publisher whose outcome is unknown: the lease must stay PREPARED."""


_SCHEMAS = itertools.count(1)


class CleanupMachine(RuleBasedStateMachine):
    artifacts = Bundle("artifacts")
    dsn = ""
    """Set: the journal and the owner live in PostgreSQL (a schema per example)."""

    @initialize()
    def open_session(self) -> None:
        if self.dsn:
            schema = f"cleanup_{os.getpid()}_{next(_SCHEMAS)}"
            os.environ[journal_backend.ENV] = journal_backend.spec(schema, self.dsn)
        self.tmp = Path(tempfile.mkdtemp(prefix="toolswap-sm-"))
        self.root = self.tmp / "s1"
        self.ext = ToolResultExternalizer(self.root)
        self.owner = open_owner(self.root)
        self.journal = open_journal(self.root, owner=self.owner)
        self.committed: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        self.collected: set[str] = set()
        self.plan: ArtifactCleanupPlan | None = None
        self.next_tx = 0

    def teardown(self) -> None:
        if hasattr(self, "tmp"):
            shutil.rmtree(self.tmp, ignore_errors=True)
        os.environ.pop(journal_backend.ENV, None)

    def _tx(self) -> str:
        self.next_tx += 1
        return f"tx-{self.next_tx}"

    def _claim(self, source_id: str) -> ArtifactRetentionClaim:
        return ArtifactRetentionClaim(source_id=source_id, content_sha256=self.digests[source_id])

    @rule(target=artifacts, body=st.binary(min_size=1, max_size=2000), tag=st.integers(0, 10**9))
    def externalize(self, body: bytes, tag: int) -> str:
        artifact = self.ext.externalize(body + str(tag).encode(), "tool").artifact
        self.digests[artifact.source_id] = artifact.content_sha256
        return artifact.source_id

    @rule(source_id=artifacts)
    def publish(self, source_id: str) -> None:
        tx = self._tx()
        ref_holder: list[object] = []

        def publisher() -> None:
            ref = self.ext.get_artifact(source_id).for_memory()
            ref_holder.append(self.owner.publish(tx, ref))

        if source_id in self.collected:
            with pytest.raises(ArtifactRetentionError, match="missing artifact"):
                self.journal.publish_reference(self._claim(source_id), publisher, transaction_id=tx)
            assert ref_holder == [] and self.owner.get(tx) is None
            return
        self.journal.publish_reference(self._claim(source_id), publisher, transaction_id=tx)
        self.committed[tx] = source_id

    @rule(source_id=artifacts)
    def publish_times_out(self, source_id: str) -> None:
        if source_id in self.collected:
            return
        tx = self._tx()

        def publisher() -> None:
            self.owner.publish(tx, self.ext.get_artifact(source_id).for_memory())
            raise PublishTimedOut("the write landed; the acknowledgement did not")

        with pytest.raises(PublishTimedOut):
            self.journal.publish_reference(self._claim(source_id), publisher, transaction_id=tx)
        self.pending[tx] = source_id

    @rule(source_id=artifacts, point=st.sampled_from(CRASH_POINTS_IN_PUBLISH))
    def publisher_process_is_killed(self, source_id: str, point: str) -> None:
        if source_id in self.collected:
            return
        tx = self._tx()
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CRASHING_PUBLISH,
                str(self.root),
                source_id,
                self.digests[source_id],
                tx,
            ],
            env=dict(journal_backend.child_env(), TOOLSWAP_CRASH_POINT=point),
            capture_output=True,
            check=False,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        self.restart()
        lease = self.journal.transaction(tx)
        assert lease is not None and lease.phase in (
            ArtifactLeasePhase.PREPARED,
            ArtifactLeasePhase.COMMITTED,
        )
        target = self.pending if lease.phase is ArtifactLeasePhase.PREPARED else self.committed
        target[tx] = source_id

    @precondition(lambda self: bool(self.committed))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        tx = data.draw(st.sampled_from(sorted(self.committed)))
        self.journal.remove_reference(tx, lambda: self.owner.remove(tx))
        del self.committed[tx]

    @precondition(lambda self: bool(self.pending))
    @rule()
    def reconcile(self) -> None:
        for report in self.journal.reconcile_pending(self.owner):
            source_id = self.pending.pop(report.transaction_id)
            if report.status is ArtifactReconcileStatus.COMMITTED:
                self.committed[report.transaction_id] = source_id
            else:
                assert report.status is ArtifactReconcileStatus.ABORTED, report

    @rule()
    def restart(self) -> None:
        self.ext = ToolResultExternalizer(self.root)
        self.owner = open_owner(self.root)
        self.journal = open_journal(self.root, owner=self.owner)

    @rule()
    def plan_cleanup(self) -> None:
        policy = ArtifactCleanupPolicy(dry_run=False)
        self.plan = self.ext.plan_cleanup_from_journal(self.journal, policy=policy, now=LATER)

    @precondition(lambda self: self.plan is not None)
    @rule()
    def apply_the_plan(self) -> None:
        assert self.plan is not None
        report = self.ext.apply_cleanup_from_journal(self.plan, self.journal, now=LATER)
        for entry in report.entries:
            if entry.status is ArtifactCleanupStatus.DELETED and entry.source_id:
                self.collected.add(entry.source_id)

    @invariant()
    def protected_artifacts_exist_and_verify(self) -> None:
        if not hasattr(self, "ext"):
            return
        for source_id in {*self.committed.values(), *self.pending.values()}:
            assert source_id not in self.collected
            self.ext.reader.verify(source_id)

    @invariant()
    def journal_view_matches_the_model(self) -> None:
        if not hasattr(self, "journal"):
            return
        view = self.journal.recover(now=LATER)
        assert set(view.pending_transaction_ids) == set(self.pending)
        if self.dsn:  # the journal is in the database alone
            assert not (self.root / "retention-leases.jsonl").exists()
        assert set(view.claims) == {*self.committed.values(), *self.pending.values()}

    @invariant()
    def every_reference_the_owner_holds_is_protected(self) -> None:
        if not hasattr(self, "owner"):
            return
        view = self.journal.recover(now=LATER)
        for stored in self.owner.list_references():
            assert view.is_protected(stored.reference.source.source_id), stored


CleanupMachine.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cleanup_never_loses_a_protected_artifact = CleanupMachine.TestCase


class PostgresCleanupMachine(CleanupMachine):
    """The same machine with the journal and the owner in PostgreSQL."""


def test_cleanup_never_loses_a_protected_artifact_with_the_journal_in_postgres(
    postgres_server: PostgresServer,
) -> None:
    PostgresCleanupMachine.dsn = postgres_server.dsn
    run_state_machine_as_test(
        PostgresCleanupMachine,
        settings=settings(
            max_examples=5,  # the fleet machine runs it with the store in S3 as well
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
