"""PostgresMemoryOwner: the memory owner on PostgreSQL, for hosts that share one database.

Install the ``postgres`` extra (psycopg 3). Same contract and same answers as
:class:`~toolswap.SqliteMemoryOwner`, for agents on many hosts::

    owner = PostgresMemoryOwner("postgresql://toolswap@db.internal/toolswap")
    journal.publish_reference(
        claim, lambda: owner.publish(tx_id, memory_reference), transaction_id=tx_id
    )
    journal.reconcile_pending(owner)

Tables live in one schema (``schema``, default ``toolswap``), created on first use:
``publications`` (one row per publication ID ever fenced or written: its generation, and
the row every decision about the ID locks), ``memory_references``, ``tombstones``,
``journal_heads`` and ``owner_meta``. Every write is one transaction, durable when it
commits (the server's ``fsync`` and ``synchronous_commit`` keep their defaults).

**Fence.** :meth:`PostgresMemoryOwner.inspect_fenced` opens a transaction, takes the
publication's row lock (``SELECT ... FOR UPDATE``), observes, and holds the lock until
the fence closes: a publish, remove or seal of that ID waits (up to ``lock_timeout``),
other IDs go on. ``fence="optimistic"`` observes without a lock; its seal is then a
compare-and-swap on the generation in a transaction of its own.

**Rules the server enforces** (triggers, so a client that bypasses this class is bound
too): a reference is never written under a tombstoned ID (SQLSTATE ``TS001``, raised
to the caller as :class:`~toolswap.errors.ArtifactReferenceTombstonedError`); a
tombstone is never written beside a reference, never changed and never deleted; a
generation only ever moves up by one. Each trigger first takes the publication's row
lock, so a late publish racing a seal sees the committed tombstone.

Errors and their meaning are those of the SQLite owner (see its module docstring):
a tombstoned or conflicting publish is an owner error, not a rejection; only validation
before any write raises :class:`~toolswap.errors.ArtifactPublicationRejected`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import datetime
from typing import Any

import psycopg

from ...crashpoints import crash_point
from ...errors import (
    ArtifactFenceStaleError,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
)
from .._postgres import SCHEMA_VERSION, TOMBSTONED_SQLSTATE, PgConnections, error_text
from ..owner import ArtifactReferenceObservation
from ._shared import StoredMemoryReference, stored_reference, tombstoned_message
from ._sql import FenceMode, SqlFence, SqlOwner

__all__ = ["TOMBSTONED_SQLSTATE", "PostgresMemoryOwner"]


def _owner_error(action: str, exc: psycopg.Error) -> ArtifactReferenceOwnerError:
    if exc.sqlstate == TOMBSTONED_SQLSTATE:
        return ArtifactReferenceTombstonedError(
            f"the database refused the write: {exc.diag.message_primary}; it can never be "
            "published again; use a new transaction ID"
        )
    return ArtifactReferenceOwnerError(
        f"memory owner (PostgreSQL): {action} failed ({error_text(exc)}); retry, or check "
        "the server"
    )


class PostgresMemoryOwner(SqlOwner):
    """A memory store of artifact references in PostgreSQL, shared by many hosts.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL (credentials never appear
            in this object's repr or in its errors).
        schema: the schema holding the owner's tables (created if missing).
        lock_timeout: seconds a write waits for a fence on the same publication ID.
        connect_timeout: seconds to wait for the server.
        fence: ``"immediate"`` (the row lock held for the fence's lifetime) or
            ``"optimistic"`` (observe without a lock; the seal is a CAS that may go stale).
        now: clock for timestamps (timezone-aware UTC).

    Raises:
        ArtifactReferenceOwnerError: the server cannot be reached, or the schema is of a
            newer version.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "toolswap",
        lock_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        fence: FenceMode = "immediate",
        now: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(fence=fence, now=now)
        self._pg = PgConnections(
            dsn,
            schema,
            lock_timeout=lock_timeout,
            connect_timeout=connect_timeout,
            error=_owner_error,
        )
        self.schema = schema
        version = self._pg.init_schema()
        if version != str(SCHEMA_VERSION):
            raise ArtifactReferenceOwnerError(
                f"memory owner schema {schema!r} has schema version {version!r}; this "
                f"toolswap reads version {SCHEMA_VERSION}"
            )

    def __repr__(self) -> str:
        return f"PostgresMemoryOwner(schema={self.schema!r}, fence={self.fence_mode!r})"

    # -- connections -----------------------------------------------------------------

    def _connection(self, action: str) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._pg.connection(action)

    @contextmanager
    def _write(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        with self._connection(action) as conn, conn.transaction():
            yield conn

    def close(self) -> None:
        """Close the idle connections this object keeps (it stays usable)."""
        self._pg.close()

    def __enter__(self) -> PostgresMemoryOwner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what PostgreSQL does its own way (see toolswap.retention.owners._sql) ----------

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def _hold(self, conn: psycopg.Connection[Any], transaction_id: str) -> int:
        """Take the publication's row lock (creating the row) and return its generation."""
        conn.execute(
            "INSERT INTO publications (transaction_id) VALUES (%s) ON CONFLICT DO NOTHING",
            (transaction_id,),
        )
        row = conn.execute(
            "SELECT generation FROM publications WHERE transaction_id = %s FOR UPDATE",
            (transaction_id,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _advance(self, conn: psycopg.Connection[Any], transaction_id: str, expected: int) -> int:
        cur = conn.execute(
            "UPDATE publications SET generation = generation + 1 "
            "WHERE transaction_id = %s AND generation = %s",
            (transaction_id, expected),
        )
        if cur.rowcount != 1:
            raise ArtifactFenceStaleError(
                f"the generation of {transaction_id!r} moved from {expected}; observe again"
            )
        return expected + 1

    @contextmanager
    def _refusing_tombstoned(
        self, conn: psycopg.Connection[Any], transaction_id: str
    ) -> Iterator[None]:
        # No check first: the server refuses the write (TS001), whoever makes it.
        try:
            yield
        except psycopg.Error as exc:
            if exc.sqlstate == TOMBSTONED_SQLSTATE:
                raise ArtifactReferenceTombstonedError(
                    tombstoned_message(transaction_id) + " (refused by the database)"
                ) from exc
            raise

    # -- reads -----------------------------------------------------------------------

    def get(self, transaction_id: str) -> StoredMemoryReference | None:
        """The reference stored under ``transaction_id``, or None."""
        with self._connection("read") as conn:
            row = conn.execute(
                "SELECT m.reference, m.published_at, p.generation FROM memory_references m "
                "JOIN publications p USING (transaction_id) WHERE m.transaction_id = %s",
                (transaction_id,),
            ).fetchone()
        if row is None:
            return None
        return stored_reference(transaction_id, row[0], self._py_time(row[1]), int(row[2]))

    def list_references(
        self, *, session: str | None = None, source_id: str | None = None
    ) -> list[StoredMemoryReference]:
        """Stored references, oldest first, optionally of one session or one artifact."""
        with self._connection("list") as conn:
            rows = conn.execute(
                "SELECT m.transaction_id, m.reference, m.published_at, p.generation "
                "FROM memory_references m JOIN publications p USING (transaction_id) "
                "WHERE (%(session)s::text IS NULL OR m.session = %(session)s) "
                "AND (%(source)s::text IS NULL OR m.source_id = %(source)s) "
                "ORDER BY m.published_at, m.transaction_id",
                {"session": session, "source": source_id},
            ).fetchall()
        return [stored_reference(r[0], r[1], self._py_time(r[2]), int(r[3])) for r in rows]

    # -- the fence -------------------------------------------------------------------

    @contextmanager
    def _fence(self, conn: psycopg.Connection[Any], transaction_id: str) -> Iterator[SqlFence]:
        tx = transaction_id
        if self.fence_mode == "optimistic":
            # One consistent snapshot, no lock: the seal's CAS decides later.
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = conn.execute(
                "SELECT generation FROM publications WHERE transaction_id = %s", (tx,)
            ).fetchone()
            observation = self._observe(conn, tx, int(row[0]) if row else 0)
            conn.execute("COMMIT")
            yield _PostgresFence(self, conn, tx, observation)
            return
        # Managed by hand: the seal commits this transaction from inside the fence.
        conn.execute("BEGIN")
        try:
            observation = self._observe(conn, tx, self._hold(conn, tx))
            yield _PostgresFence(self, conn, tx, observation, locked=True)
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")


class _PostgresFence(SqlFence):
    def __init__(
        self,
        owner: PostgresMemoryOwner,
        conn: psycopg.Connection[Any],
        transaction_id: str,
        observation: ArtifactReferenceObservation,
        *,
        locked: bool = False,
    ) -> None:
        super().__init__(owner, conn, transaction_id, observation)
        self._locked = locked

    def _seal(self) -> int:
        conn = self._conn
        try:
            if self._locked:
                # The fence's own transaction: the tombstone is durable at this COMMIT,
                # which also releases the row lock (the decision is made).
                generation = self._tombstone(conn)
                crash_point("owner.tombstoning")
                conn.execute("COMMIT")
            else:
                with conn.transaction():
                    generation = self._tombstone(conn)
                    crash_point("owner.tombstoning")
        except psycopg.Error as exc:
            raise _owner_error("seal", exc) from exc
        return generation
