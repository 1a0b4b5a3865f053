"""How a test and its child processes open a session's memory owner and lease journal.

With ``TOOLSWAP_TEST_JOURNAL_STORE=postgres|SCHEMA|DSN`` in the environment the journal
(records, lock, checkpoint) lives in PostgreSQL and the owner does too (the same
schema); without it, the session's journal file and its
SQLite owner (``<session>/memory.sqlite3``). A
test sets the variable once and every process it starts inherits it, so one script runs
against either backend. Child processes import this module with ``tests/`` on their
``PYTHONPATH`` (see :data:`PYTHONPATH`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from toolswap import ArtifactRetentionJournal, SqliteMemoryOwner

__all__ = [
    "ENV",
    "PYTHONPATH",
    "advisory_lock_waiters",
    "child_env",
    "open_journal",
    "open_owner",
    "open_store",
    "postgres_dsn",
    "spec",
]

ENV = "TOOLSWAP_TEST_JOURNAL_STORE"
PYTHONPATH = str(Path(__file__).resolve().parent)
"""The directory to put on a child process's path so it can import this module."""


def spec(schema: str, dsn: str) -> str:
    """The value of :data:`ENV` for a journal in ``schema`` of the database at ``dsn``."""
    return f"postgres|{schema}|{dsn}"


def child_env() -> dict[str, str]:
    """This process's environment for a child that imports this module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHONPATH, env.get("PYTHONPATH")) if p)
    return env


def postgres_dsn() -> str | None:
    """The database the environment's journal is in (None: a local journal)."""
    where = _postgres()
    return None if where is None else where[1]


def advisory_lock_waiters() -> int:
    """How many sessions of the environment's database wait for an advisory lock."""
    import psycopg

    dsn = postgres_dsn()
    assert dsn is not None, "the journal is not in PostgreSQL"
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return 0 if row is None else int(row[0])


def _postgres() -> tuple[str, str] | None:
    value = os.environ.get(ENV)
    if not value:
        return None
    _, schema, dsn = value.split("|", 2)
    return schema, dsn


def open_store(session_dir: str | Path) -> Any:
    """The journal store the environment names (None: the session's journal file)."""
    where = _postgres()
    if where is None:
        return None
    from toolswap.retention.postgres_journal import PostgresJournalStore

    return PostgresJournalStore(where[1], session_dir, schema=where[0])


def open_owner(session_dir: str | Path) -> Any:
    """The memory owner: PostgreSQL beside a PostgreSQL journal, else the session's SQLite."""
    where = _postgres()
    if where is None:
        return SqliteMemoryOwner(Path(session_dir) / "memory.sqlite3")
    from toolswap.retention.owners.postgres import PostgresMemoryOwner

    return PostgresMemoryOwner(where[1], schema=where[0])


def open_journal(session_dir: str | Path, **kw: Any) -> ArtifactRetentionJournal:
    """``ArtifactRetentionJournal(session_dir, **kw)`` on the environment's journal store.

    Without an ``owner`` argument a local journal binds the session's SQLite owner if it
    exists (the journal's own default); a PostgreSQL journal binds the PostgreSQL owner.
    """
    kw.setdefault("store", open_store(session_dir))
    if kw["store"] is not None and "owner" not in kw:
        kw["owner"] = open_owner(session_dir)
    return ArtifactRetentionJournal(session_dir, **kw)
