"""A damaged journal is never read as "no references": only a torn final record is ignored.

The damage cases run on the session's journal file and on the journal's rows in
PostgreSQL. The database's triggers refuse any change to written rows, so the tests make
the damage as a superuser would (the triggers disabled inside the damaging transaction):
what an attacker with the database's keys, a restored backup or a corrupt disk page
could leave. A database journal has no torn tail (a record is a committed row or
nothing), so a cut inside its last row is damage too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from toolswap import ArtifactLeaseJournalError, ArtifactRetentionJournal
from toolswap.chainlog import GENESIS_HASH, canonical_json
from toolswap.cleanup import ArtifactCleanupPlan, ArtifactCleanupPolicy

from .conftest import Env

Records = list[dict[str, Any]]
JOURNALS = pytest.mark.parametrize("env", ["sqlite", "postgres-journal"], indirect=True)
"""The journal in the session's file and in PostgreSQL (with the PostgreSQL owner)."""


def _path(env: Env) -> Path:
    return env.session_dir / "retention-leases.jsonl"


@contextmanager
def _superuser(env: Env) -> Iterator[Callable[..., None]]:
    """``damage(*statements)`` runs ``(sql, params)`` statements on the journal's table as
    a superuser: triggers off, in one transaction (no other session sees them off)."""
    import psycopg

    options = f"-c search_path={env.schema}"
    with psycopg.connect(env.dsn, autocommit=True, options=options) as conn:

        def damage(*statements: tuple[str, tuple[Any, ...]]) -> None:
            with conn.transaction():
                conn.execute("ALTER TABLE lease_journal DISABLE TRIGGER USER")
                for statement, params in statements:
                    conn.execute(statement, params)
                conn.execute("ALTER TABLE lease_journal ENABLE TRIGGER USER")

        yield damage


def _damage(env: Env, *statements: tuple[str, tuple[Any, ...]]) -> None:
    with _superuser(env) as damage:
        damage(*statements)


def _key(env: Env) -> str:
    return str(env.store().journal_key)


def _read(env: Env) -> bytes:
    """The journal's bytes: the file, or the rows' stored records in sequence order."""
    if not env.shared_journal:
        return _path(env).read_bytes()
    import psycopg

    with psycopg.connect(env.dsn, options=f"-c search_path={env.schema}") as conn:
        rows = conn.execute(
            "SELECT line FROM lease_journal WHERE journal_key = %s ORDER BY seq", (_key(env),)
        ).fetchall()
    return b"".join(bytes(line) for (line,) in rows)


def _chain_columns(line: bytes) -> tuple[str, str]:
    """The (prev, hash) a row of ``line`` carries: the record's own, when it has them."""
    try:
        record = json.loads(line)
        return str(record.get("prev", GENESIS_HASH)), str(record.get("hash", GENESIS_HASH))
    except (ValueError, AttributeError):
        return GENESIS_HASH, GENESIS_HASH


def _write(env: Env, data: bytes) -> None:
    """Replace the journal with ``data``: the file, or one row per line (sequence 1...)."""
    if not env.shared_journal:
        _path(env).write_bytes(data)
        return
    key = _key(env)
    inserts = [
        (
            "INSERT INTO lease_journal (journal_key, seq, prev, hash, line) "
            "VALUES (%s, %s, %s, %s, %s)",
            (key, seq, *_chain_columns(line), line),
        )
        for seq, line in enumerate(data.splitlines(keepends=True), 1)
    ]
    _damage(env, ("DELETE FROM lease_journal WHERE journal_key = %s", (key,)), *inserts)


LATER = datetime.now(UTC) + timedelta(days=30)
GC = ArtifactCleanupPolicy(dry_run=False)


def _plan(env: Env) -> ArtifactCleanupPlan:
    """gc's plan on the intact journal: it would delete the released lease's artifact."""
    plan = env.ext.plan_cleanup_from_journal(env.journal(), policy=GC, now=LATER)
    assert [e.source_id for e in plan.planned] == [env.source_ids[1]]
    return plan


def _gc_refuses(env: Env, plan: ArtifactCleanupPlan | None, *, kept: int = 1) -> None:
    """On the damaged journal gc neither plans nor applies the earlier ``plan``, which
    would have deleted artifact ``kept``."""
    with pytest.raises(ArtifactLeaseJournalError):
        env.ext.plan_cleanup_from_journal(env.journal(), policy=GC, now=LATER)
    if plan is not None:
        with pytest.raises(ArtifactLeaseJournalError):
            env.ext.apply_cleanup_from_journal(plan, env.journal(), now=LATER)
    env.ext.reader.verify(env.source_ids[kept])  # still there, intact


def _build(env: Env) -> bytes:
    """A journal with every phase: a committed, a released, an aborted and a pending lease."""
    journal = env.journal(owner=None)
    journal.publish_reference(env.claim(0, reference_count=2), lambda: None, transaction_id="a")
    journal.publish_reference(env.claim(1), lambda: None, transaction_id="b")
    journal.remove_reference("b", lambda: None)
    journal.prepare(env.claim(2), transaction_id="c")
    journal.abort("c")
    journal.prepare(env.claim(2), transaction_id="d")
    return _read(env)


def _fresh(env: Env) -> ArtifactRetentionJournal:
    return env.journal(owner=None)


def _load(data: bytes) -> Records:
    return [json.loads(line) for line in data.splitlines()]


def _encode(records: Records, *, rechain: bool = True) -> bytes:
    """Serialize records, recomputing prev and hash so only the semantic defect remains."""
    out = bytearray()
    prev = "0" * 64
    for record in records:
        body = {k: v for k, v in record.items() if k not in ("hash", "keep_prev")}
        if rechain and not record.get("keep_prev"):
            body["prev"] = prev
        encoded = canonical_json(body)
        digest = hashlib.sha256(encoded).hexdigest() if rechain else record["hash"]
        out += encoded[:-1] + b',"hash":"' + digest.encode() + b'"}\n'
        prev = digest
    return bytes(out)


@JOURNALS
def test_rebuilding_an_untouched_journal_gives_the_same_bytes(env: Env) -> None:
    data = _build(env)
    assert _encode(_load(data)) == data
    _write(env, _encode(_load(data)))
    assert _read(env) == data
    assert _fresh(env).recover().pending_transaction_ids == ("d",)


def test_torn_tail_sweep_every_cut_inside_the_last_record_is_ignored(env: Env) -> None:
    manifest = env.session_dir / "manifest.jsonl"
    data = _build(env)
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    expected = _fresh(env).recover()
    assert expected.pending_transaction_ids == ("d",)
    # A crash tears the append before it is fsynced, so before the manifest anchors it:
    # the session manifest ends with the anchor of record 7.
    lines = manifest.read_bytes().splitlines(keepends=True)
    manifest.write_bytes(b"".join(lines[:-1]))
    path = _path(env)
    for cut in range(last_start, len(data)):
        path.write_bytes(data[:cut])
        view = _fresh(env).recover()
        assert view.journal_seq == 7, cut
        assert view.pending_transaction_ids == (), cut
        assert view.claims.keys() == {env.source_ids[0]}, cut


def test_changing_any_single_byte_of_an_earlier_record_fails_recovery(env: Env) -> None:
    data = _build(env)
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path = _path(env)
    for offset in range(last_start):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(ArtifactLeaseJournalError):
            _fresh(env).recover()


def test_next_append_cuts_the_torn_tail_and_keeps_the_cut_bytes_beside_the_journal(
    env: Env,
) -> None:
    data = _build(env)
    torn = b'{"intent":{"content_sha256":"ab'
    _path(env).write_bytes(data + torn)
    journal = _fresh(env)
    journal.commit("d")
    kept = env.session_dir / f"retention-leases.jsonl.torn-{len(data)}"
    assert kept.read_bytes() == torn
    assert _path(env).read_bytes().startswith(data)
    assert _fresh(env).recover().journal_seq == 9


def _mutations() -> dict[str, Callable[[Records], Records | bytes]]:
    def edit(index: int, **changes: Any) -> Callable[[Records], Records]:
        def apply(records: Records) -> Records:
            records[index].update(changes)
            return records

        return apply

    def drop(index: int) -> Callable[[Records], Records]:
        return lambda records: records[:index] + records[index + 1 :]

    def intent(records: Records, **changes: Any) -> Records:
        records[0]["intent"].update(changes)
        return records

    def rewritten_intent(records: Records) -> Records:
        records = intent(records, reference_count=99)
        records[0]["intent_hash"] = hashlib.sha256(canonical_json(records[0]["intent"])).hexdigest()
        return records

    def consistent_intent(records: Records, **changes: Any) -> Records:
        """Change a's intent and every intent_hash of a, so only the intent is wrong."""
        records = intent(records, **changes)
        digest = hashlib.sha256(canonical_json(records[0]["intent"])).hexdigest()
        for record in records:
            if record["transaction_id"] == "a":
                record["intent_hash"] = digest
        return records

    def foreign_intent(records: Records) -> Records:
        sid = records[0]["intent"]["source_id"].replace(":s1:", ":s2:")
        return consistent_intent(records, source_id=sid)

    def aborted_then_committed(records: Records) -> Records:
        records[7] = {
            **{k: v for k, v in records[7].items() if k != "intent"},
            "phase": "COMMITTED",
            "transaction_id": "c",
            "intent_hash": records[5]["intent_hash"],
        }
        return records

    def sequence_gap(records: Records) -> Records:
        return [r for r in records if r["seq"] != 3]

    def no_rechain(fn: Callable[[Records], Records]) -> Callable[[Records], bytes]:
        return lambda records: _encode(fn(records), rechain=False)

    return {
        "blank line": lambda records: _encode(records).replace(b"}\n", b"}\n\n", 1),
        "bad json": lambda records: b"not json at all\n" + _encode(records),
        "foreign session": edit(2, session="s2"),
        "intent of another session": foreign_intent,
        "sequence gap": no_rechain(sequence_gap),
        "sequence gap rechained": lambda records: _encode(sequence_gap(records)),
        "duplicated sequence": edit(3, seq=3),
        "broken chain": edit(2, prev="1" * 64, keep_prev=True),
        "wrong hash": no_rechain(edit(2, hash="2" * 64)),
        "rewritten intent": rewritten_intent,
        "intent changed, hash kept": lambda records: intent(records, reference_count=7),
        "intent on a later record": edit(1, intent={"x": 1}),
        "intent not canonical": lambda records: consistent_intent(
            records, retain_until="2026-09-01T02:00:00+02:00"
        ),
        "committed after aborted": aborted_then_committed,
        "released without commit": edit(6, phase="RELEASED"),
        "prepared twice": edit(7, transaction_id="a"),
        "commit of an unknown transaction": edit(1, transaction_id="zzz"),
        "unknown phase": edit(1, phase="DONE"),
        "unknown field": edit(1, artifact_path="/etc/passwd"),
        "naive recorded_at": edit(1, recorded_at="2026-01-01T00:00:00"),
        "missing recorded_at": edit(1, recorded_at=None),
        "bad intent hash": edit(1, intent_hash="xyz"),
        "bad transaction ID": edit(1, transaction_id="../a"),
        "future schema version": edit(0, v=2),
        "path in the intent": lambda records: consistent_intent(
            records, source_id="artifact:s1:../../x:" + records[0]["intent"]["source_id"][-12:]
        ),
    }


_WHY = {
    "bad intent hash": "invalid intent_hash",
    "bad json": "not a hash-chained record",
    "bad transaction ID": "invalid transaction ID",
    "blank line": "not a hash-chained record",
    "broken chain": "breaks the hash chain",
    "commit of an unknown transaction": "never prepared",
    "committed after aborted": "illegal transition ABORTED -> COMMITTED",
    "duplicated sequence": "must be contiguous",
    "foreign session": "another session",
    "future schema version": "unknown schema version",
    "intent changed, hash kept": "does not match its intent_hash",
    "intent not canonical": "not in canonical form",
    "intent of another session": "claims an artifact of another session",
    "intent on a later record": "only a PREPARED record carries the intent",
    "missing recorded_at": "invalid recorded_at",
    "naive recorded_at": "without a timezone",
    "path in the intent": "invalid intent: invalid source ID",
    "prepared twice": "a second time",
    "released without commit": "illegal transition PREPARED -> RELEASED",
    "rewritten intent": "rewrites the intent",
    "sequence gap": "must be contiguous",
    "sequence gap rechained": "must be contiguous",
    "unknown field": "unknown fields",
    "unknown phase": "unknown phase",
    "wrong hash": "does not match its hash",
}


def test_every_damage_case_names_its_expected_reason() -> None:
    assert sorted(_WHY) == sorted(_mutations())


@JOURNALS
@pytest.mark.parametrize("name", sorted(_mutations()))
def test_damaged_journal_fails_recovery(env: Env, name: str) -> None:
    data = _build(env)
    plan = _plan(env)
    changed = _mutations()[name](_load(data))
    damaged = changed if isinstance(changed, bytes) else _encode(changed)
    assert damaged != data
    _write(env, damaged)
    with pytest.raises(ArtifactLeaseJournalError, match=_WHY[name]):
        _fresh(env).recover()
    # Every entry point fails closed, and keeps failing.
    journal = _fresh(env)
    for attempt in (journal.recover, journal.has_durable_journal, journal.transactions):
        with pytest.raises(ArtifactLeaseJournalError):
            attempt()
    with pytest.raises(ArtifactLeaseJournalError):
        journal.prepare(env.claim(), transaction_id="new")
    _gc_refuses(env, plan)
    assert _read(env) == damaged


def test_symlinked_journal_is_refused(env: Env) -> None:
    data = _build(env)
    real = env.tmp / "elsewhere.jsonl"
    real.write_bytes(data)
    _path(env).unlink()
    os.symlink(real, _path(env))
    with pytest.raises(ArtifactLeaseJournalError, match="symlink"):
        _fresh(env).recover()
    with pytest.raises(ArtifactLeaseJournalError):
        _fresh(env).prepare(env.claim(), transaction_id="new")
    assert real.read_bytes() == data


def test_journal_that_is_a_directory_is_refused(env: Env) -> None:
    _path(env).mkdir()
    with pytest.raises(ArtifactLeaseJournalError):
        _fresh(env).recover()


def test_journal_cut_below_what_this_process_read_is_refused(env: Env) -> None:
    data = _build(env)
    journal = _fresh(env)
    journal.recover()
    _path(env).write_bytes(data[: data.find(b"\n") + 1])
    with pytest.raises(ArtifactLeaseJournalError, match="shrank"):
        journal.recover()


def test_journal_replaced_by_a_shorter_copy_is_refused_by_the_process_that_read_it(
    env: Env,
) -> None:
    data = _build(env)
    journal = _fresh(env)
    journal.recover()
    shorter = env.tmp / "short.jsonl"
    shorter.write_bytes(data[: data.find(b"\n") + 1])
    os.replace(shorter, _path(env))
    with pytest.raises(ArtifactLeaseJournalError, match="replaced"):
        journal.recover()


def _two_publications(env: Env) -> bytes:
    owner = env.owner()
    journal = env.journal(owner=owner)
    for tx, index in (("a", 0), ("b", 1)):
        ref = env.reference(index)
        journal.publish_reference(
            env.claim(index), lambda tx=tx, ref=ref: owner.publish(tx, ref), transaction_id=tx
        )
    assert owner.journal_head(journal.journal_key) == journal.head
    return _read(env)


@JOURNALS
def test_truncating_whole_trailing_records_fails_recovery_against_the_owner(env: Env) -> None:
    data = _two_publications(env)
    plan = _plan_after_two_publications(env)
    lines = data.splitlines(keepends=True)
    _write(env, b"".join(lines[:2]))  # b's PREPARED and COMMITTED are gone
    # The truncated journal is a valid chain: the session manifest's anchor notices even
    # without an owner, and the owner notices.
    with pytest.raises(ArtifactLeaseJournalError, match="session manifest anchored record 4"):
        _fresh(env).recover()
    with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
        env.journal().recover()
    if not env.shared_journal:
        # The default binding (<session>/memory.sqlite3) notices too, so cleanup does.
        with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
            ArtifactRetentionJournal(env.session_dir).recover()
    with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
        env.journal().prepare(env.claim(2), transaction_id="c")
    _gc_refuses(env, plan, kept=1)


def _plan_after_two_publications(env: Env) -> ArtifactCleanupPlan:
    """gc's plan while a and b are published: it would delete the unreferenced third."""
    plan = env.ext.plan_cleanup_from_journal(env.journal(), policy=GC, now=LATER)
    assert [e.source_id for e in plan.planned] == [env.source_ids[2]]
    return plan


@JOURNALS
def test_deleted_journal_fails_recovery_against_the_owner(env: Env) -> None:
    _two_publications(env)
    if env.shared_journal:
        _write(env, b"")  # every row of the journal deleted
    else:
        _path(env).unlink()
    with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
        env.journal().recover()
    _gc_refuses(env, None, kept=0)


@JOURNALS
def test_journal_rewritten_up_to_the_acknowledged_head_fails_against_the_owner(
    env: Env,
) -> None:
    data = _two_publications(env)
    records = _load(data)
    records[-1]["recorded_at"] = "2020-01-01T00:00:00+00:00"
    _write(env, _encode(records))
    with pytest.raises(ArtifactLeaseJournalError, match="the session manifest anchored"):
        _fresh(env).recover()
    with pytest.raises(ArtifactLeaseJournalError, match="rewritten"):
        env.journal().recover()


@JOURNALS
def test_lost_prepared_record_is_caught_because_prepared_is_acknowledged_first(
    env: Env,
) -> None:
    owner = env.owner()
    journal = env.journal(owner=owner)
    before = b""

    def publisher() -> None:
        nonlocal before
        assert owner.journal_head(journal.journal_key) == journal.head
        owner.publish("a", env.reference())
        raise TimeoutError("reply lost")

    with pytest.raises(TimeoutError):
        journal.publish_reference(env.claim(), publisher, transaction_id="a")
    _write(env, before)  # the PREPARED record is lost; the owner holds "a"
    with pytest.raises(ArtifactLeaseJournalError, match="behind its memory owner"):
        env.journal().recover()


# -- damage only a database journal can have ----------------------------------------

SHARED = pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)


def _flip(seq: int, offset: int) -> tuple[str, tuple[Any, ...]]:
    """Flip the lowest bit of byte ``offset`` of the stored record ``seq`` (its row's
    seq/prev/hash columns stay as they were: a corrupt page, or a careful attacker)."""
    return (
        "UPDATE lease_journal SET line = set_byte(line, %s, get_byte(line, %s) # 1) WHERE seq = %s",
        (offset, offset, seq),
    )


@SHARED
@pytest.mark.parametrize("checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_a_flipped_byte_in_any_stored_record_fails_recovery(env: Env, checkpoint: bool) -> None:
    _build(env)
    plan = _plan(env)
    if checkpoint:  # records 1-8 are covered by it, record 9 comes after it
        env.journal(owner=None).checkpoint()
        env.journal(owner=None).prepare(env.claim(2), transaction_id="e")
    data = _read(env)
    store = env.store()  # one store (its connections) for every fresh journal below
    with _superuser(env) as damage:
        for seq, line in enumerate(data.splitlines(keepends=True), 1):
            for offset in [*range(0, len(line), 41), len(line) - 2, len(line) - 1]:
                damage(_flip(seq, offset))
                with pytest.raises(ArtifactLeaseJournalError):
                    ArtifactRetentionJournal(env.session_dir, owner=None, store=store).recover()
                damage(_flip(seq, offset))
        assert _read(env) == data
        damage(_flip(2, 40))
    _gc_refuses(env, plan)


@SHARED
def test_a_cut_inside_the_last_row_is_damage_not_a_torn_tail(env: Env) -> None:
    data = _build(env)
    plan = _plan(env)
    last = data.splitlines(keepends=True)[-1]
    store = env.store()
    cut_row = "UPDATE lease_journal SET line = substring(%s::bytea from 1 for %s) WHERE seq = 8"
    with _superuser(env) as damage:
        for cut in range(0, len(last), 7):
            damage((cut_row, (last, cut)))
            # A file would ignore the torn record; a row is committed whole or not at all.
            with pytest.raises(ArtifactLeaseJournalError, match="not a hash-chained record"):
                ArtifactRetentionJournal(env.session_dir, owner=None, store=store).recover()
    _gc_refuses(env, plan)


@SHARED
def test_a_deleted_middle_row_fails_recovery(env: Env) -> None:
    _build(env)
    plan = _plan(env)
    _damage(env, ("DELETE FROM lease_journal WHERE journal_key = %s AND seq = 3", (_key(env),)))
    with pytest.raises(ArtifactLeaseJournalError, match="must be contiguous"):
        _fresh(env).recover()
    _gc_refuses(env, plan)


def _renumber_from(env: Env, seq: int) -> None:
    """Delete record ``seq`` and renumber the rows after it down, so the sequence column
    has no gap (the records' own sequence numbers still do)."""
    key = _key(env)
    _damage(
        env,
        ("DELETE FROM lease_journal WHERE journal_key = %s AND seq = %s", (key, seq)),
        ("UPDATE lease_journal SET seq = seq - 1 WHERE journal_key = %s AND seq > %s", (key, seq)),
    )


def _replace_record(env: Env, seq: int) -> None:
    """Replace record ``seq`` by a valid record of the same chain position and another
    hash (a rewritten history that chains correctly up to it)."""
    records = _load(_read(env))
    records[seq - 1]["recorded_at"] = "2020-01-01T00:00:00+00:00"
    _write(env, _encode(records))


@SHARED
@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda env: _damage(
            env, ("DELETE FROM lease_journal WHERE journal_key = %s AND seq >= 5", (_key(env),))
        ), "does not hold record 8"),
        (lambda env: _replace_record(env, 8), "holds another record 8"),
        (lambda env: _replace_record(env, 3), "holds another record 8"),
        (lambda env: _damage(env, _flip(3, 30)), "holds other records up to 8"),
        (lambda env: _renumber_from(env, 3), "holds another record 8"),
    ],
    ids=["tail-deleted", "its-record-rewritten", "earlier-rewritten", "earlier-flipped",
         "middle-deleted"],
)  # fmt: skip
def test_a_checkpoint_naming_lost_or_changed_records_is_refused(
    env: Env, damage: Callable[[Env], None], why: str
) -> None:
    _build(env)
    journal = env.journal(owner=None)
    assert journal.checkpoint() == journal.head
    assert journal.head.seq == 8
    journal.commit("d")  # record 9 comes after the checkpoint
    plan = _plan(env)
    damage(env)
    with pytest.raises(ArtifactLeaseJournalError, match=why):
        _fresh(env).recover()
    with pytest.raises(ArtifactLeaseJournalError):
        _fresh(env).verify()
    _gc_refuses(env, plan)
