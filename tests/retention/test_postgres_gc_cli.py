"""`toolswap gc` on a session whose owner and lease journal live in PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from toolswap import ArtifactRetentionJournal

from .conftest import TIMEOUT, Env

pytest.importorskip("psycopg")

pytestmark = pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)


def _gc(env: Env, *args: str, database: bool = True) -> subprocess.CompletedProcess[str]:
    backend = ["--database-url", env.dsn, "--database-schema", env.schema] if database else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "toolswap",
            "gc",
            *args,
            "--session-dir",
            str(env.session_dir),
            "--ttl",
            "0s",
            *backend,
            "--json",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
        timeout=TIMEOUT,
        check=False,
    )


def test_gc_with_the_database_keeps_what_the_shared_journal_references(env: Env) -> None:
    env.publish("a", 0)

    done = _gc(env, "apply", "--yes")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["reports"][0]["report"]
    statuses = {e["source_id"]: e["status"] for e in report["entries"]}
    assert statuses[env.source_ids[0]] == "retained_referenced"
    assert statuses[env.source_ids[1]] == "deleted"
    assert env.ext.read_artifact(env.source_ids[0], 0, 1) == "alpha line"


def test_gc_without_the_database_refuses_instead_of_reading_no_references(env: Env) -> None:
    env.publish("a", 0)

    done = _gc(env, "plan", database=False)

    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "is not the only lease journal of this session" in line
    assert env.ext.read_artifact(env.source_ids[1], 0, 1) == "beta line"


def test_gc_on_the_database_refuses_a_session_whose_leases_are_in_its_local_journal(
    env: Env,
) -> None:
    ArtifactRetentionJournal(env.session_dir, owner=None).publish_reference(
        env.claim(0), lambda: None, transaction_id="local"
    )

    done = _gc(env, "apply", "--yes")

    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "is not the only lease journal of this session" in line
    assert env.ext.read_artifact(env.source_ids[0], 0, 1) == "alpha line"
    assert env.ext.read_artifact(env.source_ids[1], 0, 1) == "beta line"
