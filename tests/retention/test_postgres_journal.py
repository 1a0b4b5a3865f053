"""The lease journal of a shared session in PostgreSQL: records, lock, checkpoint, outages."""

from __future__ import annotations

import dataclasses
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from postgres_server import PostgresServer
from toolswap import (
    ArtifactLeaseJournalError,
    ArtifactReconcileStatus,
    ArtifactReferenceTombstonedError,
    ArtifactRetentionJournal,
)

from .conftest import TIMEOUT, Env

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)

S = ArtifactReconcileStatus
NOW = datetime(2030, 1, 1, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _history(journal: ArtifactRetentionJournal, env: Env, prefix: str, count: int) -> None:
    for i in range(count):
        tx = f"{prefix}-{i}"
        if i % 4 == 3:
            journal.prepare(env.claim(i % 3), transaction_id=tx)
            continue
        journal.publish_reference(env.claim(i % 3), lambda: None, transaction_id=tx)
        if i % 4 == 1:
            journal.remove_reference(tx, lambda: None)


def _state(journal: ArtifactRetentionJournal) -> tuple[Any, ...]:
    return (
        journal.recover(NOW).to_dict(),
        [t.to_dict() for t in journal.transactions()],
        journal.head,
    )


def _rows(env: Env) -> list[tuple[int, bytes]]:
    with psycopg.connect(env.dsn, options=f"-c search_path={env.schema}") as conn:
        rows = conn.execute("SELECT seq, line FROM lease_journal ORDER BY seq").fetchall()
    return [(int(seq), bytes(line)) for seq, line in rows]


def test_the_shared_journal_holds_the_local_journal_s_records_byte_for_byte(env: Env) -> None:
    # The same history in a local copy of the session (one session keeps its leases in
    # one store: its manifest anchors that store and refuses a second one).
    copy = env.tmp / "local" / env.session_dir.name
    shutil.copytree(env.session_dir, copy)
    local = ArtifactRetentionJournal(copy, owner=None, now=_Clock())
    _history(local, env, "tx", 12)
    shared = env.journal(owner=None, now=_Clock())
    _history(shared, env, "tx", 12)
    file_lines = (copy / "retention-leases.jsonl").read_bytes().splitlines(keepends=True)
    assert [line for _, line in _rows(env)] == file_lines
    assert [seq for seq, _ in _rows(env)] == list(range(1, len(file_lines) + 1))
    assert _state(env.journal(owner=None)) == _state(ArtifactRetentionJournal(copy, owner=None))
    assert shared.verify().records == len(file_lines)


def test_two_processes_sharing_a_session_append_one_contiguous_chain(env: Env) -> None:
    procs = [env.spawn("publish-many", f"w{i}", "6", *env.source_ids) for i in range(3)]
    for proc in procs:
        result = env.finish(proc)
        assert (result.code, result.out) == (0, 6), result.err
    journal = env.journal()
    summary = journal.verify()
    assert summary.records == 36
    assert summary.phases["COMMITTED"] == 18
    for w in range(3):
        txs = [t.transaction_id for t in journal.transactions()]
        mine = [tx for tx in txs if tx.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(6)]
    assert len(env.owner().list_references()) == 18


def test_the_database_refuses_rows_that_break_the_chain_or_rewrite_history(env: Env) -> None:
    _history(env.journal(owner=None), env, "tx", 3)
    key = env.journal().journal_key
    insert = (
        "INSERT INTO lease_journal (journal_key, seq, prev, hash, line) "
        f"VALUES ('{key}', {{seq}}, '{{prev}}', '{'a' * 64}', 'x')"
    )
    last = _rows(env)[-1][0]
    assert env.sqlstate(insert.format(seq=last + 1, prev="b" * 64)) == "TS005"
    assert env.sqlstate(insert.format(seq=last + 2, prev="b" * 64)) == "TS005"
    assert env.sqlstate("UPDATE lease_journal SET line = 'x'") == "TS003"
    assert env.sqlstate("DELETE FROM lease_journal WHERE seq > 1") == "TS003"
    assert env.sqlstate("TRUNCATE lease_journal") == "TS003"
    assert env.journal(owner=None).verify().records == last


def _cut(env: Env, after_seq: int) -> None:
    """What only a superuser can do: delete the journal's last rows (triggers off)."""
    env.owner_sql(
        "ALTER TABLE lease_journal DISABLE TRIGGER USER; "
        f"DELETE FROM lease_journal WHERE seq > {after_seq}; "
        "ALTER TABLE lease_journal ENABLE TRIGGER USER"
    )


def test_rows_deleted_behind_a_reader_are_refused(env: Env) -> None:
    journal = env.journal()
    _history(journal, env, "tx", 6)
    head = journal.head.seq
    _cut(env, head - 2)
    with pytest.raises(ArtifactLeaseJournalError, match="no longer holds record"):
        journal.recover()
    # A fresh reader is caught by the owner's acknowledged head.
    with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
        env.journal().recover()


def test_the_checkpoint_lives_in_the_database_and_is_checked_against_the_journal(
    env: Env,
) -> None:
    journal = env.journal(owner=None, checkpoint_every=5)
    _history(journal, env, "tx", 20)
    expected = _state(env.journal(owner=None, checkpoint_every=0))
    with psycopg.connect(env.dsn, options=f"-c search_path={env.schema}") as conn:
        [(seq, body)] = conn.execute("SELECT seq, body FROM lease_journal_checkpoints").fetchall()
    assert journal.head.seq - 5 < seq <= journal.head.seq
    assert _state(env.journal(owner=None, checkpoint_every=0)) == expected
    # A damaged checkpoint is ignored.
    damaged = bytearray(bytes(body))
    damaged[len(damaged) // 2] ^= 1
    with psycopg.connect(env.dsn, options=f"-c search_path={env.schema}") as conn:
        conn.execute("UPDATE lease_journal_checkpoints SET body = %s", (bytes(damaged),))
    assert _state(env.journal(owner=None, checkpoint_every=0)) == expected
    # An intact checkpoint of records the journal lost is refused.
    with psycopg.connect(env.dsn, options=f"-c search_path={env.schema}") as conn:
        conn.execute("UPDATE lease_journal_checkpoints SET body = %s", (bytes(body),))
    _cut(env, seq - 1)
    with pytest.raises(ArtifactLeaseJournalError, match="checkpoint covers"):
        env.journal(owner=None).recover()


def _waiting_advisory_locks(env: Env) -> int:
    with psycopg.connect(env.dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0])


def test_prepare_in_another_process_waits_for_the_journal_lock_that_gc_holds(env: Env) -> None:
    journal = env.journal()
    with journal.lock():
        proc = env.spawn("prepare", env.source_ids[0], "tx-1")
        deadline = time.monotonic() + TIMEOUT
        while _waiting_advisory_locks(env) == 0:
            assert proc.poll() is None, env.finish(proc).err
            assert time.monotonic() < deadline, "the worker never waited for the lock"
            time.sleep(0.02)
        assert journal.transaction("tx-1") is None  # still waiting
    result = env.finish(proc)
    assert (result.code, result.out) == (0, "PREPARED"), result.err
    assert journal.recover().pending_transaction_ids == ("tx-1",)


def test_a_network_cut_mid_publish_leaves_the_lease_prepared_and_reconcile_settles_it(
    env: Env,
) -> None:
    env.journal().recover()  # the schema exists before the worker starts
    stopped = env.stopped_at("owner.publishing", "publish", env.source_ids[0], "tx-1")
    with stopped as proc, psycopg.connect(env.dsn) as conn:
        # The worker's write is in its open transaction: cut every other connection.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
    result = env.finish(proc)
    assert result.out == "ArtifactReferenceOwnerError", result.err
    owner = env.owner()
    journal = env.journal(owner=owner)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    [report] = journal.reconcile_pending(owner)
    assert report.status is S.ABORTED
    with pytest.raises(ArtifactReferenceTombstonedError):
        owner.publish("tx-1", env.reference())


def test_a_server_crash_while_committing_leaves_the_lease_prepared_until_reconciled(
    env: Env, own_server: PostgresServer
) -> None:
    env = dataclasses.replace(env, dsn=own_server.dsn, schema="restart")
    env.journal().recover()
    point = "journal.committed.appended"
    with env.stopped_at(point, "publish", env.source_ids[0], "tx-1") as proc:
        # The owner holds the reference; the COMMITTED record is not committed yet.
        own_server.stop("immediate")
        own_server.start()
    result = env.finish(proc)
    assert result.out == "ArtifactLeaseJournalError", result.err
    owner = env.owner()
    journal = env.journal(owner=owner)
    assert journal.recover().pending_transaction_ids == ("tx-1",)
    [report] = journal.reconcile_pending(owner)
    assert report.status is S.COMMITTED
    assert journal.verify().records == 2
