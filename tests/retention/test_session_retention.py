"""open_retention: one decision of which journal and owner a session uses, recorded once."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

from toolswap import (
    ArtifactLeaseJournalError,
    ArtifactReferenceOwnerError,
    ConfigurationError,
    SqliteMemoryOwner,
)
from toolswap.cli import main
from toolswap.retention import (
    RetentionChoice,
    RetentionKind,
    open_retention,
    read_retention_choice,
)
from toolswap.retention.journal_store import LocalJournalStore
from toolswap.retention.session_retention import RETENTION_CHOICE_NAME, _record

from .conftest import Env

LOCAL = RetentionChoice(RetentionKind.LOCAL)


def _cli(env: Env, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--session-dir", str(env.session_dir)])


def _choice_file(env: Env) -> dict[str, object]:
    data: dict[str, object] = json.loads((env.session_dir / RETENTION_CHOICE_NAME).read_bytes())
    return data


def _publish(env: Env, tx: str, index: int = 0, **kw: object) -> None:
    with open_retention(env.session_dir, create=True, **kw) as retention:  # type: ignore[arg-type]
        owner = retention.owner
        assert owner is not None
        ref = env.reference(index)
        retention.journal.publish_reference(
            env.claim(index),
            lambda: owner.publish(tx, ref),  # type: ignore[attr-defined]
            transaction_id=tx,
        )


# -- the same journal and owner as the CLI -----------------------------------------------


def test_a_library_publisher_and_the_cli_use_the_same_local_journal_and_owner(env: Env) -> None:
    _publish(env, "a")

    retention = open_retention(env.session_dir)
    assert isinstance(retention.journal._store, LocalJournalStore)
    assert isinstance(retention.owner, SqliteMemoryOwner)
    assert retention.owner.path == env.owner_db
    listed = _cli(env, "leases", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)["claims"] == json.loads(
        json.dumps(retention.journal.recover().to_dict()["claims"], default=str)
    )
    verified = json.loads(_cli(env, "journal", "verify", "--json").stdout)
    head = retention.owner.journal_head(retention.journal.journal_key)
    assert head is not None
    assert verified["owner_head"] == head.to_dict() == retention.journal.head.to_dict()


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_library_publisher_and_the_cli_use_the_same_database_journal_and_owner(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_DATABASE_URL", env.dsn)
    monkeypatch.setenv("TOOLSWAP_DATABASE_SCHEMA", env.schema)
    _publish(env, "a")

    retention = open_retention(env.session_dir)
    assert retention.choice == RetentionChoice(RetentionKind.POSTGRES, env.schema)
    assert type(retention.owner).__name__ == "PostgresMemoryOwner"
    assert not (env.session_dir / "retention-leases.jsonl").exists()
    listed = _cli(env, "leases", "--json")
    assert listed.exit_code == 0, listed.output
    assert [c["source_id"] for c in json.loads(listed.stdout)["claims"]] == [env.source_ids[0]]
    verified = json.loads(_cli(env, "journal", "verify", "--json").stdout)
    assert verified["records"] == 2
    assert verified["owner_head"] == retention.journal.verify().head.to_dict()
    # What env.journal() opens by hand is the same journal.
    assert env.journal().verify().head == retention.journal.head


# -- the recorded choice -----------------------------------------------------------------


def test_a_publisher_records_the_choice_once_privately_and_without_secrets(env: Env) -> None:
    _publish(env, "a")

    path = env.session_dir / RETENTION_CHOICE_NAME
    assert _choice_file(env) == {"kind": "local", "schema": None, "v": 1}
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert read_retention_choice(env.session_dir) == LOCAL
    assert [p.name for p in env.session_dir.iterdir() if p.name.startswith(".retention")] == []


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_the_recorded_choice_holds_the_schema_but_never_the_database_url(env: Env) -> None:
    _publish(env, "a", database_url=env.dsn, schema=env.schema)

    assert _choice_file(env) == {"kind": "postgres", "schema": env.schema, "v": 1}
    raw = (env.session_dir / RETENTION_CHOICE_NAME).read_text(encoding="utf-8")
    assert env.dsn not in raw
    assert "host" not in raw and "user" not in raw and "password" not in raw


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_the_recorded_schema_is_used_when_only_the_database_url_is_given(env: Env) -> None:
    _publish(env, "a", database_url=env.dsn, schema=env.schema)

    with open_retention(env.session_dir, database_url=env.dsn) as retention:
        assert retention.choice.schema == env.schema
        assert list(retention.journal.recover().claims) == [env.source_ids[0]]
    listed = _cli(env, "leases", "--database-url", env.dsn, "--json")
    assert listed.exit_code == 0, listed.output
    assert [c["source_id"] for c in json.loads(listed.stdout)["claims"]] == [env.source_ids[0]]


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_local_session_refuses_a_database_url(env: Env) -> None:
    _publish(env, "a")

    with pytest.raises(ConfigurationError, match="not in a database"):
        open_retention(env.session_dir, database_url=env.dsn, schema=env.schema)
    done = _cli(env, "leases", "--database-url", env.dsn, "--database-schema", env.schema)
    assert done.exit_code == 1
    assert "ConfigurationError" in done.stderr and "not in a database" in done.stderr
    assert _choice_file(env)["kind"] == "local"


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_database_session_refuses_to_open_without_its_url_or_in_another_schema(
    env: Env,
) -> None:
    _publish(env, "a", database_url=env.dsn, schema=env.schema)

    with pytest.raises(ConfigurationError, match="pass its database URL"):
        open_retention(env.session_dir)
    with pytest.raises(ConfigurationError, match="not in schema 'elsewhere'"):
        open_retention(env.session_dir, database_url=env.dsn, schema="elsewhere")
    for args in (["gc", "plan"], ["leases"], ["reconcile"]):
        done = _cli(env, *args)
        assert done.exit_code == 1, args
        assert "ConfigurationError" in done.stderr and "pass its database URL" in done.stderr
    assert env.ext.read_artifact(env.source_ids[0], 0, 1) == "alpha line"


def test_a_read_only_open_of_a_session_without_leases_records_nothing(env: Env) -> None:
    assert open_retention(env.session_dir).owner is None
    assert _cli(env, "leases").exit_code == 0
    assert _cli(env, "gc", "plan").exit_code == 0
    assert read_retention_choice(env.session_dir) is None
    assert not env.owner_db.exists()


def test_a_read_only_open_records_where_the_session_s_leases_already_are(env: Env) -> None:
    env.publish("a")  # by hand, before any open_retention
    assert read_retention_choice(env.session_dir) is None

    assert _cli(env, "leases").exit_code == 0
    assert read_retention_choice(env.session_dir) == LOCAL


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_read_only_open_that_contradicts_the_leases_records_nothing(env: Env) -> None:
    env.publish("a")  # in the database, by hand

    done = _cli(env, "gc", "plan")  # no --database-url: the journal itself refuses
    assert done.exit_code == 1
    assert "is not the only lease journal of this session" in done.stderr
    assert read_retention_choice(env.session_dir) is None
    with pytest.raises(ConfigurationError, match="already keeps leases in"):
        open_retention(env.session_dir, create=True)
    assert read_retention_choice(env.session_dir) is None
    assert not env.owner_db.exists()


def test_a_choice_recorded_meanwhile_by_another_process_wins(env: Env) -> None:
    _publish(env, "a")

    with pytest.raises(ConfigurationError, match="by another process"):
        _record(env.ext.session, RetentionChoice(RetentionKind.POSTGRES, "toolswap"))
    assert read_retention_choice(env.session_dir) == LOCAL


def test_a_crashed_writer_s_temporary_file_is_not_a_choice(env: Env) -> None:
    (env.session_dir / f".{RETENTION_CHOICE_NAME}.999999.1").write_bytes(b'{"kind": "po')

    _publish(env, "a")
    assert read_retention_choice(env.session_dir) == LOCAL


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b'{"kind": "local", "schema": null}',
        b'{"kind": "remote", "schema": null, "v": 1}',
        b'{"kind": "local", "schema": "toolswap", "v": 1}',
        b'{"kind": "postgres", "schema": "Bad-Name", "v": 1}',
        b'{"kind": "postgres", "schema": null, "v": 1}',
        b'{"kind": "local", "schema": null, "v": 1, "url": "postgresql://x"}',
    ],
)
def test_a_damaged_choice_is_refused_not_guessed(env: Env, content: bytes) -> None:
    (env.session_dir / RETENTION_CHOICE_NAME).write_bytes(content)

    with pytest.raises(ConfigurationError, match="not a valid retention choice"):
        open_retention(env.session_dir)
    assert _cli(env, "leases").exit_code == 1


def test_a_choice_that_is_a_symlink_is_refused(env: Env) -> None:
    target = env.tmp / "elsewhere.json"
    target.write_bytes(b'{"kind": "local", "schema": null, "v": 1}')
    (env.session_dir / RETENTION_CHOICE_NAME).symlink_to(target)

    with pytest.raises(ConfigurationError, match="cannot read"):
        open_retention(env.session_dir)


# -- owners --------------------------------------------------------------------------------


def test_reconciliation_never_gets_a_created_owner(env: Env) -> None:
    env.journal(owner=None).prepare(env.claim(0), transaction_id="a")

    with pytest.raises(ArtifactReferenceOwnerError, match="no memory owner database"):
        open_retention(env.session_dir, require_owner=True)
    assert not env.owner_db.exists()
    assert open_retention(env.session_dir, create=True).owner is not None
    assert env.owner_db.exists()


def test_a_named_owner_database_must_exist_and_excludes_a_database_url(env: Env) -> None:
    missing = env.tmp / "missing.sqlite3"
    with pytest.raises(ArtifactReferenceOwnerError, match="no memory owner database"):
        open_retention(env.session_dir, owner_db=missing)
    with pytest.raises(ConfigurationError, match="owner_db names a SQLite owner"):
        open_retention(env.session_dir, owner_db=missing, database_url="host=/nowhere")
    assert read_retention_choice(env.session_dir) is None


def test_leases_refuses_like_gc_when_the_owner_that_acknowledged_the_journal_is_gone(
    env: Env,
) -> None:
    _publish(env, "a")
    env.owner_db.unlink()

    for args in (["leases"], ["gc", "plan"]):
        done = _cli(env, *args)
        assert done.exit_code == 1, args
        assert "the owner database was deleted" in done.stderr


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_gc_over_every_session_with_a_database_url_ties_no_session_without_leases(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_DATABASE_URL", env.dsn)
    monkeypatch.setenv("TOOLSWAP_DATABASE_SCHEMA", env.schema)

    assert open_retention(env.session_dir).choice.kind is RetentionKind.POSTGRES
    assert _cli(env, "gc", "plan").exit_code == 0
    assert read_retention_choice(env.session_dir) is None


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_an_open_in_the_wrong_schema_is_not_recorded_as_the_session_s(env: Env) -> None:
    env.publish("a")  # in env.schema, by hand: the manifest anchors the session's key only

    with open_retention(env.session_dir, database_url=env.dsn, schema=f"{env.schema}_x") as wrong:
        assert read_retention_choice(env.session_dir) is None
        with pytest.raises(ArtifactLeaseJournalError, match="anchored record 2"):
            wrong.journal.recover()
    with open_retention(env.session_dir, database_url=env.dsn, schema=env.schema) as right:
        assert read_retention_choice(env.session_dir) == right.choice
        assert list(right.journal.recover().claims) == [env.source_ids[0]]


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_raw_claims_cannot_collect_a_session_whose_leases_live_in_postgresql(env: Env) -> None:
    """No journal file and no owner database are here: the raw-claims entry took the
    session for one without leases, and ``plan_cleanup([])`` / ``apply_cleanup`` deleted
    the artifact a committed lease in the database protects (a review)."""
    from toolswap import ArtifactCleanupPolicy, CleanupError

    _publish(env, "a", database_url=env.dsn, schema=env.schema)
    later = datetime.now(UTC) + timedelta(days=30)
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
    with pytest.raises(CleanupError, match=r"retention\.json"):
        env.ext.plan_cleanup([], policy=policy, now=later)
    with open_retention(env.session_dir, database_url=env.dsn) as retention:
        plan = env.ext.plan_cleanup_from_journal(retention.journal, policy=policy, now=later)
    with pytest.raises(CleanupError, match=r"retention\.json"):
        env.ext.apply_cleanup(plan, [], now=later)
    assert env.ext.read_artifact(env.source_ids[0], 0, 1) == "alpha line"
