"""A Hypothesis state machine over externalize / publish / release / crash / plan / apply.

Invariant, checked after every step: no artifact with an active or pending claim is
missing, and each still verifies against its digest.
"""

from __future__ import annotations

import shutil
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
)

from toolswap import (
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    ArtifactRetentionJournal,
    ToolResultExternalizer,
)
from toolswap.cleanup import ArtifactCleanupPolicy, ArtifactCleanupStatus


class PublishTimedOut(RuntimeError):
    """A publisher whose outcome is unknown: the lease must stay PREPARED."""


class CleanupMachine(RuleBasedStateMachine):
    artifacts = Bundle("artifacts")

    @initialize()
    def open_session(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="toolswap-sm-"))
        self.root = self.tmp / "s1"
        self.ext = ToolResultExternalizer(self.root)
        self.journal = ArtifactRetentionJournal(self.root)
        self.memory: set[str] = set()
        self.committed: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.collected: set[str] = set()
        self.digests: dict[str, str] = {}
        self.next_tx = 0

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _tx(self) -> str:
        self.next_tx += 1
        return f"tx-{self.next_tx}"

    def _claim(self, source_id: str) -> ArtifactRetentionClaim:
        ref = self.ext.get_artifact(source_id)
        return ArtifactRetentionClaim.from_memory_reference(ref.for_memory())

    @rule(target=artifacts, body=st.binary(min_size=1, max_size=2000), tag=st.integers(0, 10**9))
    def externalize(self, body: bytes, tag: int) -> str:
        result = self.ext.externalize(body + str(tag).encode(), "tool")
        return result.artifact.source_id

    @rule(source_id=artifacts)
    def publish(self, source_id: str) -> None:
        tx = self._tx()
        if source_id in self.collected:
            with pytest.raises(ArtifactRetentionError, match="missing artifact"):
                self.journal.publish_reference(
                    self._claim_for_collected(source_id),
                    lambda: self.memory.add(tx),
                    transaction_id=tx,
                )
            assert tx not in self.memory
            return
        self.journal.publish_reference(
            self._claim(source_id), lambda: self.memory.add(tx), transaction_id=tx
        )
        self.committed[tx] = source_id

    def _claim_for_collected(self, source_id: str) -> ArtifactRetentionClaim:
        digest = self.digests[source_id]
        return ArtifactRetentionClaim(source_id=source_id, content_sha256=digest)

    @rule(source_id=artifacts)
    def publish_times_out(self, source_id: str) -> None:
        if source_id in self.collected:
            return
        tx = self._tx()

        def publisher() -> None:
            self.memory.add(tx)  # the write landed; the acknowledgement did not
            raise PublishTimedOut("no answer from memory")

        with pytest.raises(PublishTimedOut):
            self.journal.publish_reference(self._claim(source_id), publisher, transaction_id=tx)
        self.pending[tx] = source_id

    @precondition(lambda self: bool(self.committed))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        tx = data.draw(st.sampled_from(sorted(self.committed)))
        self.journal.remove_reference(tx, lambda: self.memory.discard(tx))
        del self.committed[tx]

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def resolve_pending(self, data: st.DataObject) -> None:
        """What reconciliation concludes once the owner answers: the write landed."""
        tx = data.draw(st.sampled_from(sorted(self.pending)))
        self.journal.commit(tx)
        self.committed[tx] = self.pending.pop(tx)

    @rule()
    def restart(self) -> None:
        self.ext = ToolResultExternalizer(self.root)
        self.journal = ArtifactRetentionJournal(self.root)

    @rule()
    def collect(self) -> None:
        when = datetime.now(UTC) + timedelta(days=2)
        policy = ArtifactCleanupPolicy(dry_run=False)
        plan = self.ext.plan_cleanup_from_journal(self.journal, policy=policy, now=when)
        report = self.ext.apply_cleanup_from_journal(plan, self.journal, now=when)
        for entry in report.entries:
            if entry.status is ArtifactCleanupStatus.DELETED and entry.source_id:
                self.collected.add(entry.source_id)
                self.digests[entry.source_id] = entry.sha256 or ""

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
        view = self.journal.recover(now=datetime.now(UTC))
        assert set(view.pending_transaction_ids) == set(self.pending)
        protected = {*self.committed.values(), *self.pending.values()}
        assert set(view.claims) == protected


CleanupMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cleanup_never_loses_a_protected_artifact = CleanupMachine.TestCase
