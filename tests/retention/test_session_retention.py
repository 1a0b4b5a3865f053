"""open_retention: one decision of which journal and owner a session uses, recorded once."""

from __future__ import annotations

import json
import os
import stat

import pytest

from toolswap import (
    ArtifactReferenceOwnerError,
    ConfigurationError,
)
from toolswap.retention import (
    RetentionChoice,
    RetentionKind,
    open_retention,
    read_retention_choice,
)
from toolswap.retention.session_retention import RETENTION_CHOICE_NAME, _record

from .conftest import Env

LOCAL = RetentionChoice(RetentionKind.LOCAL)


def _choice_file(env: Env) -> dict[str, object]:
    data: dict[str, object] = json.loads((env.session_dir / RETENTION_CHOICE_NAME).read_bytes())
    return data


def _publish(env: Env, tx: str, index: int = 0, **kw: object) -> None:
    retention = open_retention(env.session_dir, create=True, **kw)  # type: ignore[arg-type]
    owner = retention.owner
    assert owner is not None
    ref = env.reference(index)
    retention.journal.publish_reference(
        env.claim(index),
        lambda: owner.publish(tx, ref),  # type: ignore[attr-defined]
        transaction_id=tx,
    )


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
