"""The cleanup state machine (tests/test_cleanup_state_machine.py) on a fleet.

The same rules and invariants, with the session kept in S3 (moto's server) and its owner
and lease journal in PostgreSQL. Each restart moves to the other host (its own replica of
the session), so captures, publishes, plans and applies alternate between two hosts; a
crash is a real subprocess killed with SIGKILL mid-publish, on whichever host is current.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test

import test_cleanup_state_machine as base
from s3_server import S3Server

pytest.importorskip("boto3")
pytest.importorskip("psycopg")


class FleetCleanupMachine(base.CleanupMachine):
    bucket: ClassVar[str] = ""
    prefixes: ClassVar[Iterator[int]] = itertools.count()

    @initialize()
    def open_session(self) -> None:
        # Every example is a new session: its own prefix in the store (and schema).
        os.environ["TOOLSWAP_STORE"] = f"s3://{self.bucket}/sm{next(self.prefixes)}"
        super().open_session()
        # The other host's replica: the same workspace and session names, its own disk.
        self.hosts = [self.root, self.tmp / "b" / self.tmp.name / "s1"]
        self.turn = 0

    @invariant()
    def the_session_lives_in_the_store(self) -> None:
        if hasattr(self, "ext"):
            assert self.ext.session.backend.location == os.environ["TOOLSWAP_STORE"]

    @rule()
    def restart(self) -> None:
        self.turn += 1  # the other host carries on
        self.root = self.hosts[self.turn % 2]
        super().restart()


def test_cleanup_on_a_fleet_never_loses_a_protected_artifact(
    s3_server: S3Server, bucket: str, postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TOOLSWAP_STORE", "")  # each example sets its own
    FleetCleanupMachine.bucket = bucket
    FleetCleanupMachine.dsn = postgres_server.dsn
    run_state_machine_as_test(
        FleetCleanupMachine,
        settings=settings(
            max_examples=10,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
