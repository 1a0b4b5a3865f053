"""The fleet explorer can fail: toolswap broken on purpose (one order swapped for the
store, one for the database) makes it report a violation, so its silence about the real
code means something.

Each test explores one operation under one fault kind only (a store that stays down, a
connection dropped before a statement), at every request or every fourth statement.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

pytest.importorskip("boto3")
pytest.importorskip("psycopg")

from fault_proxy import PgFault, S3Fault
from toolswap import ArtifactRetentionClaim, ArtifactRetentionJournal
from toolswap.artifact import artifact_filename
from toolswap.capture import StreamCapture
from toolswap.externalizer import ToolResultExternalizer
from toolswap.records import ArtifactRecord
from toolswap.retention.lease import ArtifactLeasePhase, ArtifactLeaseTransaction

from .fleet import FleetExplorer, FleetServers, fleet_operations

T = TypeVar("T")


def _problems(explorer: FleetExplorer, name: str) -> list[str]:
    explorer.explore([op for op in fleet_operations() if op.name == name])
    assert explorer.result.states > 1
    return [problem for v in explorer.result.violations for problem in v.problems]


def test_the_fleet_explorer_reports_a_capture_recorded_before_its_object_is_in_the_store(
    fleet_servers: FleetServers, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def record_then_upload(
        self: ToolResultExternalizer,
        capture: StreamCapture,
        record_for: Callable[[str], ArtifactRecord],
        **_: object,
    ) -> ArtifactRecord:
        self.manifest.sync()
        record = record_for(artifact_filename(self.manifest.high_water() + 1))
        self.manifest.append(record)  # the record first (the store's record object)...
        backend = self.session.backend
        size, sha256 = record.byte_size, record.sha256
        # ...the artifact's object second.
        if not backend.accept(capture.dir_fd, capture.tmp_name, record.filename, size, sha256):
            raise AssertionError("the name was taken")
        if not capture.link_as(record.filename):
            raise AssertionError("the name was taken here")
        return record

    monkeypatch.setattr(ToolResultExternalizer, "_publish", record_then_upload)
    explorer = FleetExplorer(fleet_servers, scratch, s3_faults=(S3Fault.DOWN,), pg_faults=())

    problems = _problems(explorer, "capture")

    assert any("is recorded but its object is missing from the store" in p for p in problems), (
        problems
    )


def test_the_fleet_explorer_reports_a_reference_published_before_its_lease_is_prepared(
    fleet_servers: FleetServers, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def publish_then_prepare(
        self: ArtifactRetentionJournal,
        claim: ArtifactRetentionClaim,
        publisher: Callable[[], T],
        *,
        transaction_id: str,
    ) -> tuple[ArtifactLeaseTransaction, T]:
        result = publisher()  # the owner's reference first...
        self.prepare(claim, transaction_id=transaction_id)  # ...the lease protecting it second
        return self._finish(transaction_id, ArtifactLeasePhase.COMMITTED), result

    monkeypatch.setattr(ArtifactRetentionJournal, "publish_reference", publish_then_prepare)
    explorer = FleetExplorer(
        fleet_servers, scratch, s3_faults=(), pg_faults=(PgFault.DROP,), pg_stride=4
    )

    problems = _problems(explorer, "journal publish")

    assert any("the owner holds tx-new but the journal says nothing" in p for p in problems), (
        problems
    )
