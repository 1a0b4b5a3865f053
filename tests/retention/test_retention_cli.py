"""`toolswap leases`, `reconcile`, `journal verify` and `journal checkpoint`, local and shared."""

from __future__ import annotations

import gc
import json
import shutil

import pytest
from click.testing import CliRunner, Result

from toolswap.cli import main

from .conftest import Env


def _cli(env: Env, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--session-dir", str(env.session_dir)])


@pytest.mark.parametrize(
    "command",
    [["leases"], ["reconcile"], ["journal"], ["journal", "verify"], ["journal", "checkpoint"]],
)
def test_retention_commands_have_help(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0
    assert len(result.output.split("\n\n")[1].strip()) > 20


def test_leases_lists_protected_artifacts_and_pending_transactions_as_json(env: Env) -> None:
    env.publish("a", 0)
    env.journal().prepare(env.claim(1), transaction_id="b")
    result = _cli(env, "leases", "--json", "--all")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pending_transaction_ids"] == ["b"]
    assert {c["source_id"] for c in data["claims"]} == set(env.source_ids[:2])
    assert {lease["transaction_id"]: lease["phase"] for lease in data["leases"]} == {
        "a": "COMMITTED",
        "b": "PREPARED",
    }
    assert str(env.session_dir) not in result.stdout


def test_leases_text_output_is_one_line_per_claim_and_pending_transaction(env: Env) -> None:
    env.journal().prepare(env.claim(0), transaction_id="b")
    result = _cli(env, "leases")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"{env.source_ids[0]}\t1\tunbounded", "pending\tb"]
    assert "1 pending transaction(s)" in result.stderr


def test_reconcile_settles_pending_leases_with_the_default_owner(env: Env) -> None:
    journal = env.journal()
    journal.prepare(env.claim(0), transaction_id="a")
    journal.prepare(env.claim(1), transaction_id="b")
    env.owner().publish("a", env.reference(0))
    result = _cli(env, "reconcile", "--json")
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert [(r["transaction_id"], r["status"]) for r in reports] == [
        ("a", "committed"),
        ("b", "aborted"),
    ]
    assert _cli(env, "leases", "--json").stdout.count('"pending_transaction_ids": []') == 1


def test_reconcile_exits_3_when_a_lease_stays_pending(env: Env) -> None:
    env.journal().prepare(env.claim(0), transaction_id="a")
    env.owner().publish("a", env.reference(1))
    result = _cli(env, "reconcile")
    assert result.exit_code == 3
    assert "a\tpending_conflict" in result.stdout


def test_reconcile_never_creates_an_owner_database(env: Env) -> None:
    env.journal(owner=None).prepare(env.claim(0), transaction_id="a")
    result = _cli(env, "reconcile")
    assert result.exit_code == 1
    assert "no memory owner database" in result.stderr
    assert not env.owner_db.exists()
    assert env.journal(owner=None).recover().pending_transaction_ids == ("a",)


def test_reconcile_uses_the_owner_database_named_by_owner_db(env: Env) -> None:
    env.journal(owner=None).prepare(env.claim(0), transaction_id="a")
    elsewhere = env.tmp / "shared-memory.sqlite3"
    env.owner()  # creates the default one too
    from toolswap import SqliteMemoryOwner

    SqliteMemoryOwner(elsewhere).publish("a", env.reference(0))
    result = _cli(env, "reconcile", "--owner-db", str(elsewhere), "--json")
    assert json.loads(result.stdout)[0]["status"] == "committed"


def test_journal_verify_reports_records_and_a_torn_tail(env: Env) -> None:
    env.publish("a")
    with open(env.session_dir / "retention-leases.jsonl", "ab") as f:
        f.write(b'{"tor')
    result = _cli(env, "journal", "verify", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["ok"], data["records"], data["torn_tail_bytes"]) == (True, 2, 5)
    assert data["owner_head"]["seq"] == 2
    text = _cli(env, "journal", "verify")
    assert "journal ok: 2 record(s)" in text.stdout
    assert "torn final record: 5 byte(s)" in text.stdout


def test_journal_verify_and_leases_exit_1_on_a_corrupt_journal(env: Env) -> None:
    env.publish("a")
    path = env.session_dir / "retention-leases.jsonl"
    data = bytearray(path.read_bytes())
    data[30] ^= 0x01
    path.write_bytes(bytes(data))
    for args in (["journal", "verify"], ["leases"], ["reconcile"]):
        result = _cli(env, *args)
        assert result.exit_code == 1, args
        assert "ArtifactLeaseJournalError" in result.stderr


def test_journal_verify_fails_when_the_journal_is_behind_its_owner(env: Env) -> None:
    env.publish("a")
    backup = env.tmp / "backup.jsonl"
    shutil.copy(env.session_dir / "retention-leases.jsonl", backup)
    env.publish("b", 1)
    shutil.copy(backup, env.session_dir / "retention-leases.jsonl")
    result = _cli(env, "journal", "verify")
    assert result.exit_code == 1
    assert "behind its memory owner" in result.stderr


def test_journal_checkpoint_writes_a_checkpoint_that_recovery_uses(env: Env) -> None:
    env.publish("a", 0)
    result = _cli(env, "journal", "checkpoint", "--json")
    assert result.exit_code == 0, result.output
    head = env.journal().verify().head
    assert json.loads(result.stdout) == {"checkpoint": head.to_dict()}
    assert (env.session_dir / "retention-leases.checkpoint").exists()
    assert _cli(env, "leases", "--json").exit_code == 0


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_the_commands_work_on_a_shared_session_in_postgresql(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.publish("a", 0)
    env.journal().prepare(env.claim(1), transaction_id="b")
    monkeypatch.setenv("TOOLSWAP_DATABASE_URL", env.dsn)
    monkeypatch.setenv("TOOLSWAP_DATABASE_SCHEMA", env.schema)
    assert not (env.session_dir / "retention-leases.jsonl").exists()  # all in the database
    listed = _cli(env, "leases", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)["pending_transaction_ids"] == ["b"]
    settled = _cli(env, "reconcile", "--json")
    assert settled.exit_code == 0, settled.output
    assert [r["status"] for r in json.loads(settled.stdout)] == ["aborted"]
    verified = _cli(env, "journal", "verify", "--json")
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["records"] == 4
    assert _cli(env, "journal", "checkpoint").exit_code == 0
    both = _cli(env, "leases", "--owner-db", str(env.owner_db))
    assert both.exit_code == 2


def _open_connections() -> set[int]:
    import psycopg

    return {id(o) for o in gc.get_objects() if isinstance(o, psycopg.Connection) and not o.closed}


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_command_closes_its_database_connections_when_it_ends(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not whenever the garbage collector gets to them: the journal and the owner sit in
    reference cycles, so with the collector off a leaked connection would stay open."""
    env.publish("a", 0)
    env.journal().prepare(env.claim(1), transaction_id="b")
    monkeypatch.setenv("TOOLSWAP_DATABASE_URL", env.dsn)
    monkeypatch.setenv("TOOLSWAP_DATABASE_SCHEMA", env.schema)
    gc.collect()
    gc.disable()
    try:
        before = _open_connections()
        for command in (["leases", "--json"], ["reconcile", "--json"], ["journal", "verify"]):
            result = _cli(env, *command)
            assert result.exit_code == 0, result.output
            assert _open_connections() <= before, command
    finally:
        gc.enable()
        gc.collect()
