"""The cleanup state machine (tests/test_cleanup_state_machine.py) on a fleet.

The same rules and invariants, with the session kept in S3 (moto's server) and its owner
and lease journal in PostgreSQL. Each restart moves to the other host (its own replica of
the session), so captures, publishes, plans and applies alternate between two hosts; a
crash is a real subprocess killed with SIGKILL mid-publish on the database.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

import test_cleanup_state_machine as base
from s3_server import S3Server
from toolswap import ArtifactLeasePhase, ArtifactRetentionJournal, ToolResultExternalizer

pytest.importorskip("boto3")
pytest.importorskip("psycopg")

CRASHING_PUBLISH = """
import sys
from toolswap import *
from toolswap.retention.owners.postgres import PostgresMemoryOwner
from toolswap.retention.postgres_journal import PostgresJournalStore
session_dir, source_id, sha, tx, dsn, schema = sys.argv[1:7]
owner = PostgresMemoryOwner(dsn, schema=schema)
store = PostgresJournalStore(dsn, session_dir, schema=schema)
journal = ArtifactRetentionJournal(session_dir, owner=owner, store=store)
ref = ToolResultExternalizer(session_dir).get_artifact(source_id).for_memory()
claim = ArtifactRetentionClaim(source_id=source_id, content_sha256=sha)
journal.publish_reference(claim, lambda: owner.publish(tx, ref), transaction_id=tx)
"""


class FleetCleanupMachine(base.CleanupMachine):
    dsn: ClassVar[str] = ""
    schemas: ClassVar[Iterator[int]] = itertools.count()

    @initialize()
    def open_session(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="toolswap-fleet-sm-"))
        self.schema = f"fsm{os.getpid()}_{next(self.schemas)}"
        self.hosts = [self.tmp / host / "ws" / "s1" for host in ("a", "b")]
        self.turn = 0
        self._open()
        self.committed: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        self.collected: set[str] = set()
        self.plan = None
        self.next_tx = 0

    def _open(self) -> None:
        from toolswap.retention.owners.postgres import PostgresMemoryOwner
        from toolswap.retention.postgres_journal import PostgresJournalStore

        self.root = self.hosts[self.turn % 2]
        self.ext = ToolResultExternalizer(self.root)
        self.owner: Any = PostgresMemoryOwner(self.dsn, schema=self.schema)
        store = PostgresJournalStore(self.dsn, self.ext.session, schema=self.schema)
        self.journal = ArtifactRetentionJournal(self.ext.session, owner=self.owner, store=store)

    @rule()
    def restart(self) -> None:
        self.turn += 1  # the other host carries on
        self._open()

    @rule(
        source_id=base.CleanupMachine.artifacts, point=st.sampled_from(base.CRASH_POINTS_IN_PUBLISH)
    )
    def publisher_process_is_killed(self, source_id: str, point: str) -> None:
        if source_id in self.collected:
            return
        tx = self._tx()
        argv = [str(self.root), source_id, self.digests[source_id], tx, self.dsn, self.schema]
        done = subprocess.run(
            [sys.executable, "-c", CRASHING_PUBLISH, *argv],
            env=dict(os.environ, TOOLSWAP_CRASH_POINT=point),
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


def test_cleanup_on_a_fleet_never_loses_a_protected_artifact(
    s3_server: S3Server, bucket: str, postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = 10
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TOOLSWAP_STORE", f"s3://{bucket}/sm")
    FleetCleanupMachine.dsn = postgres_server.dsn
    # Every example is a new session: its own prefix in the store, its own schema.
    original = FleetCleanupMachine._open

    def fresh_prefix(self: FleetCleanupMachine) -> None:
        os.environ["TOOLSWAP_STORE"] = f"s3://{bucket}/{self.schema}"
        original(self)

    monkeypatch.setattr(FleetCleanupMachine, "_open", fresh_prefix)
    run_state_machine_as_test(
        FleetCleanupMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
