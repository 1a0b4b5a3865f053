"""PostgreSQL plumbing shared by the fleet backends (private): schema, connections.

The memory owner (:mod:`toolswap.retention.owners.postgres`) and the lease journal store
(:mod:`toolswap.retention.postgres_journal`) live in one schema, created on first use
under an advisory lock so concurrent first opens create it once. Rules the server
enforces (so a client that bypasses toolswap is bound too):

- ``TS001`` a reference under a tombstoned publication ID;
- ``TS002`` a tombstone beside a reference;
- ``TS003`` a change to an append-only table (tombstones, publications, the journal);
- ``TS004`` a generation that does not move up by exactly one;
- ``TS005`` a journal record that does not extend its chain (sequence and ``prev``).

Connections: each user keeps a few idle connections (autocommit, ``search_path`` set to
the schema, ``lock_timeout`` set) and checks a kept one is alive before reuse; a
connection that failed, or that a caller left inside a transaction, is closed.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import sql

from .._fork import track
from ..errors import ConfigurationError

__all__ = [
    "SCHEMA_VERSION",
    "TOMBSTONED_SQLSTATE",
    "PgConnections",
    "check_schema_name",
    "error_text",
]

SCHEMA_VERSION = 1
TOMBSTONED_SQLSTATE = "TS001"
"""The SQLSTATE the server raises for a write under a tombstoned publication ID."""
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_IDLE_CONNECTIONS = 4

_DDL = """
CREATE TABLE IF NOT EXISTS owner_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS publications (
    transaction_id text PRIMARY KEY,
    generation bigint NOT NULL DEFAULT 0 CHECK (generation >= 0)
);
CREATE TABLE IF NOT EXISTS memory_references (
    transaction_id text PRIMARY KEY REFERENCES publications,
    session text NOT NULL,
    source_id text NOT NULL,
    content_sha256 text NOT NULL,
    reference text NOT NULL,
    published_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_references_by_source
    ON memory_references (session, source_id);
CREATE TABLE IF NOT EXISTS tombstones (
    transaction_id text PRIMARY KEY REFERENCES publications,
    generation bigint NOT NULL,
    reason text NOT NULL,
    sealed_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS journal_heads (
    journal_key text PRIMARY KEY,
    seq bigint NOT NULL,
    hash text NOT NULL,
    acknowledged_at timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION refuse_tombstoned_reference() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM 1 FROM publications WHERE transaction_id = NEW.transaction_id FOR UPDATE;
    IF EXISTS (SELECT 1 FROM tombstones WHERE transaction_id = NEW.transaction_id) THEN
        RAISE EXCEPTION 'publication ID % is tombstoned', NEW.transaction_id
            USING ERRCODE = 'TS001';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER memory_references_not_tombstoned
    BEFORE INSERT OR UPDATE ON memory_references
    FOR EACH ROW EXECUTE FUNCTION refuse_tombstoned_reference();

CREATE OR REPLACE FUNCTION check_tombstone_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM 1 FROM publications WHERE transaction_id = NEW.transaction_id FOR UPDATE;
    IF EXISTS (SELECT 1 FROM memory_references WHERE transaction_id = NEW.transaction_id)
    THEN
        RAISE EXCEPTION 'publication ID % holds a reference; remove it before the tombstone',
            NEW.transaction_id USING ERRCODE = 'TS002';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER tombstones_only_beside_nothing
    BEFORE INSERT ON tombstones
    FOR EACH ROW EXECUTE FUNCTION check_tombstone_insert();

CREATE OR REPLACE FUNCTION refuse_tombstone_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'TS003';
END $$;
CREATE OR REPLACE TRIGGER tombstones_are_permanent
    BEFORE UPDATE OR DELETE ON tombstones
    FOR EACH ROW EXECUTE FUNCTION refuse_tombstone_change();
CREATE OR REPLACE TRIGGER tombstones_are_never_truncated
    BEFORE TRUNCATE ON tombstones
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_tombstone_change();

CREATE OR REPLACE FUNCTION check_generation_step() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.transaction_id <> OLD.transaction_id
        OR NEW.generation <> OLD.generation + 1 THEN
        RAISE EXCEPTION 'a generation only moves up by one' USING ERRCODE = 'TS004';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER generations_move_up_by_one
    BEFORE UPDATE ON publications
    FOR EACH ROW EXECUTE FUNCTION check_generation_step();
CREATE OR REPLACE TRIGGER publications_are_never_deleted
    BEFORE DELETE ON publications
    FOR EACH ROW EXECUTE FUNCTION refuse_tombstone_change();
CREATE TABLE IF NOT EXISTS lease_journal (
    journal_key text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    prev text NOT NULL,
    hash text NOT NULL,
    line bytea NOT NULL,
    appended_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (journal_key, seq)
);
CREATE TABLE IF NOT EXISTS lease_journal_checkpoints (
    journal_key text PRIMARY KEY,
    seq bigint NOT NULL,
    body bytea NOT NULL
);

CREATE OR REPLACE FUNCTION check_journal_chain() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.seq = 1 THEN
        IF NEW.prev <> repeat('0', 64) THEN
            RAISE EXCEPTION 'record 1 of % must start the chain', NEW.journal_key
                USING ERRCODE = 'TS005';
        END IF;
    ELSIF NOT EXISTS (
        SELECT 1 FROM lease_journal
        WHERE journal_key = NEW.journal_key AND seq = NEW.seq - 1 AND hash = NEW.prev
    ) THEN
        RAISE EXCEPTION 'record % of % does not follow record %', NEW.seq, NEW.journal_key,
            NEW.seq - 1 USING ERRCODE = 'TS005';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER lease_journal_is_a_chain
    BEFORE INSERT ON lease_journal
    FOR EACH ROW EXECUTE FUNCTION check_journal_chain();
CREATE OR REPLACE TRIGGER lease_journal_is_append_only
    BEFORE UPDATE OR DELETE ON lease_journal
    FOR EACH ROW EXECUTE FUNCTION refuse_tombstone_change();
CREATE OR REPLACE TRIGGER lease_journal_is_never_truncated
    BEFORE TRUNCATE ON lease_journal
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_tombstone_change();
"""


def check_schema_name(schema: object) -> str:
    """Return ``schema`` if it is a plain lowercase identifier, else raise ConfigurationError."""
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema):
        raise ConfigurationError("schema must be 1-63 lowercase letters, digits or '_'")
    return schema


def error_text(exc: psycopg.Error) -> str:
    """One line naming a database error (never the connection string)."""
    if exc.sqlstate == "55P03":
        return "locked by another transaction; retry"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


class PgConnections:
    """A few kept connections to one schema, for one owner or journal store.

    Args:
        dsn: a libpq connection string or URL.
        schema: the schema (see :func:`check_schema_name`).
        lock_timeout: seconds a statement waits for a row or advisory lock.
        connect_timeout: seconds to wait for the server.
        error: turns a database error during ``action`` into the caller's error type.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        lock_timeout: float,
        connect_timeout: float,
        error: Callable[[str, psycopg.Error], Exception],
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError("dsn must be a PostgreSQL connection string or URL")
        if not lock_timeout >= 0 or not connect_timeout > 0:
            raise ConfigurationError("timeouts must be non-negative numbers of seconds")
        self._dsn = dsn
        self.schema = check_schema_name(schema)
        self.lock_timeout = float(lock_timeout)
        self.connect_timeout = float(connect_timeout)
        self._error = error
        self._idle: list[psycopg.Connection[Any]] = []
        self._idle_pid = os.getpid()
        self._lock = threading.Lock()
        self._inherited: list[psycopg.Connection[Any]] = []
        track(self)

    def _forked(self) -> None:
        """In a forked child: a new lock, and no idle connection (they are the parent's:
        kept, never used or closed from here, which would end them on the server)."""
        self._lock = threading.Lock()
        self._inherited, self._idle, self._idle_pid = self._idle, [], os.getpid()

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection of its own (the caller closes it)."""
        conn = psycopg.connect(
            self._dsn, autocommit=True, connect_timeout=max(1, round(self.connect_timeout))
        )
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            conn.execute(
                sql.SQL("SET lock_timeout = {}").format(
                    sql.Literal(f"{int(self.lock_timeout * 1000)}ms")
                )
            )
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one operation; database errors become the caller's error."""
        conn: psycopg.Connection[Any] | None = None
        pid = os.getpid()
        with self._lock:
            if self._idle_pid != os.getpid():  # a forked child never reuses the parent's
                self._idle, self._idle_pid = [], os.getpid()
            if self._idle:
                conn = self._idle.pop()
        if conn is not None:
            # A kept connection may have outlived its server (a restart, a failover).
            try:
                conn.execute("SELECT 1")
            except psycopg.Error:
                conn.close()
                conn = None
        try:
            if conn is None:
                conn = self.connect()
            yield conn
        except psycopg.Error as exc:
            if conn is not None and not self._inherit(conn, pid):
                conn.close()
            raise self._error(action, exc) from exc
        except BaseException:
            if conn is not None and not self._inherit(conn, pid):
                self.release(conn)
            raise
        if not self._inherit(conn, pid):
            self.release(conn)

    def _inherit(self, conn: psycopg.Connection[Any], pid: int) -> bool:
        """Whether ``conn`` was taken by the process this one was forked from, inside the
        operation this child leaves: its parent's, kept here, never used or closed."""
        if pid == os.getpid():
            return False
        with self._lock:
            self._inherited.append(conn)
        return True

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Keep an idle, healthy connection for the next operation; close any other."""
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            with self._lock:
                if len(self._idle) < _IDLE_CONNECTIONS and self._idle_pid == os.getpid():
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Close the kept connections (the object stays usable)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __del__(self) -> None:
        # Dropped without close(): its idle connections must not stay open.
        with suppress(Exception):
            self.close()

    def init_schema(self) -> str | None:
        """Create the schema and its tables if missing; return the stored schema version."""
        with self.connection("opening the database") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('toolswap.schema'))")
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            exists = conn.execute("SELECT to_regclass('owner_meta') IS NOT NULL").fetchone()
            if not (exists and exists[0]):
                conn.execute(_DDL)
                conn.execute(
                    "INSERT INTO owner_meta (key, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT DO NOTHING",
                    (str(SCHEMA_VERSION),),
                )
            row = conn.execute(
                "SELECT value FROM owner_meta WHERE key = 'schema_version'"
            ).fetchone()
        return None if row is None else str(row[0])
