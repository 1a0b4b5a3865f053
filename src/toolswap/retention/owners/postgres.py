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
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg

from ...artifact import ArtifactMemoryReference
from ...crashpoints import crash_point
from ...errors import (
    ArtifactFenceStaleError,
    ArtifactPublicationConflictError,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
    InvalidArgumentError,
)
from .._postgres import SCHEMA_VERSION, TOMBSTONED_SQLSTATE, PgConnections, error_text
from ..lease import ArtifactLeaseTransaction, validate_transaction_id
from ..owner import (
    ArtifactObservationState,
    ArtifactReferenceFence,
    ArtifactReferenceObservation,
    ArtifactReferenceOwner,
    JournalHead,
)
from ._shared import (
    StoredMemoryReference,
    check_journal_head,
    check_publication,
    observe_row,
    stamp,
    stored_reference,
    tombstoned_message,
)

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


class PostgresMemoryOwner(ArtifactReferenceOwner):
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
        fence: Literal["immediate", "optimistic"] = "immediate",
        now: Callable[[], datetime] | None = None,
    ) -> None:
        if fence not in ("immediate", "optimistic"):
            raise InvalidArgumentError("fence must be 'immediate' or 'optimistic'")
        self._pg = PgConnections(
            dsn,
            schema,
            lock_timeout=lock_timeout,
            connect_timeout=connect_timeout,
            error=_owner_error,
        )
        self.schema = schema
        self.fence_mode: Literal["immediate", "optimistic"] = fence
        self._now = now or (lambda: datetime.now(UTC))
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

    def close(self) -> None:
        """Close the idle connections this object keeps (it stays usable)."""
        self._pg.close()

    def __enter__(self) -> PostgresMemoryOwner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the publication row ---------------------------------------------------------

    @staticmethod
    def _lock(conn: psycopg.Connection[Any], transaction_id: str) -> int:
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

    @staticmethod
    def _advance(conn: psycopg.Connection[Any], transaction_id: str, expected: int) -> int:
        """Compare-and-swap the generation from ``expected`` to ``expected + 1``."""
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

    @staticmethod
    def _tombstoned(conn: psycopg.Connection[Any], transaction_id: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM tombstones WHERE transaction_id = %s", (transaction_id,)
        ).fetchone()
        return row is not None

    @staticmethod
    def _observe(
        conn: psycopg.Connection[Any], transaction_id: str, generation: int
    ) -> ArtifactReferenceObservation:
        row = conn.execute(
            "SELECT source_id, content_sha256, reference FROM memory_references "
            "WHERE transaction_id = %s",
            (transaction_id,),
        ).fetchone()
        sealed = PostgresMemoryOwner._tombstoned(conn, transaction_id)
        return observe_row(generation, (row[0], row[1], row[2]) if row else None, sealed)

    # -- memory operations -----------------------------------------------------------

    def publish(
        self, transaction_id: str, memory_reference: ArtifactMemoryReference
    ) -> StoredMemoryReference:
        """Store ``memory_reference`` under ``transaction_id`` (durable when this returns).

        Publishing the same reference again under the same ID returns the stored record.

        Raises:
            ArtifactPublicationRejected: the ID or the reference is malformed; checked
                before any write, so nothing was or will be written.
            ArtifactReferenceTombstonedError: the server refused the ID as sealed.
            ArtifactPublicationConflictError: the ID holds a different reference.
            ArtifactReferenceOwnerError: the database failed; the write may or may not have
                committed (reconcile to find out).
        """
        publication = check_publication(transaction_id, memory_reference)
        checked = publication.reference
        with self._connection("publish") as conn, conn.transaction():
            generation = self._lock(conn, transaction_id)
            row = conn.execute(
                "SELECT reference, published_at FROM memory_references WHERE transaction_id = %s",
                (transaction_id,),
            ).fetchone()
            if row is not None:
                if row[0] != publication.body:
                    raise ArtifactPublicationConflictError(
                        f"publication ID {transaction_id!r} already holds a different reference"
                    )
                return StoredMemoryReference(
                    transaction_id, checked, row[1].astimezone(UTC), generation
                )
            # No tombstone check here: the server refuses the write (TS001).
            generation = self._advance(conn, transaction_id, generation)
            published_at = stamp(self._now)
            try:
                conn.execute(
                    "INSERT INTO memory_references (transaction_id, session, source_id, "
                    "content_sha256, reference, published_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        transaction_id,
                        publication.session,
                        checked.source.source_id,
                        checked.content_sha256,
                        publication.body,
                        published_at,
                    ),
                )
            except psycopg.Error as exc:
                if exc.sqlstate == TOMBSTONED_SQLSTATE:
                    raise ArtifactReferenceTombstonedError(
                        tombstoned_message(transaction_id) + " (refused by the database)"
                    ) from exc
                raise
            crash_point("owner.publishing")
        crash_point("owner.published")
        return StoredMemoryReference(transaction_id, checked, published_at, generation)

    def remove(self, transaction_id: str) -> bool:
        """Delete the reference and tombstone its ID (idempotent; durable on return).

        Returns:
            True if a reference was deleted, False if there was none.
        """
        validate_transaction_id(transaction_id)
        with self._connection("remove") as conn, conn.transaction():
            generation = self._lock(conn, transaction_id)
            deleted = conn.execute(
                "DELETE FROM memory_references WHERE transaction_id = %s", (transaction_id,)
            ).rowcount
            if deleted == 0 and self._tombstoned(conn, transaction_id):
                return False
            generation = self._advance(conn, transaction_id, generation)
            conn.execute(
                "INSERT INTO tombstones (transaction_id, generation, reason, sealed_at) "
                "VALUES (%s, %s, 'removed', %s) ON CONFLICT DO NOTHING",
                (transaction_id, generation, stamp(self._now)),
            )
            crash_point("owner.removing")
        crash_point("owner.removed")
        return deleted > 0

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
        return stored_reference(transaction_id, row[0], row[1].astimezone(UTC), int(row[2]))

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
        return [stored_reference(r[0], r[1], r[2].astimezone(UTC), int(r[3])) for r in rows]

    def is_tombstoned(self, transaction_id: str) -> bool:
        """True when publishing under ``transaction_id`` is refused forever."""
        with self._connection("read") as conn:
            return self._tombstoned(conn, transaction_id)

    # -- reconciliation --------------------------------------------------------------

    @contextmanager
    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> Iterator[ArtifactReferenceFence]:
        """Observe ``transaction.transaction_id`` inside a fence (see the module docstring).

        Raises:
            ArtifactReferenceOwnerError: the fence could not be taken within the lock
                timeout, or the database failed.
        """
        tx = validate_transaction_id(transaction.transaction_id)
        with self._connection("fence") as conn:
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
                observation = self._observe(conn, tx, self._lock(conn, tx))
                yield _PostgresFence(self, conn, tx, observation, locked=True)
            finally:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")

    # -- journal heads ---------------------------------------------------------------

    def journal_head(self, journal_key: str) -> JournalHead | None:
        with self._connection("read journal head") as conn:
            row = conn.execute(
                "SELECT seq, hash FROM journal_heads WHERE journal_key = %s", (journal_key,)
            ).fetchone()
        return JournalHead(int(row[0]), str(row[1])) if row else None

    def acknowledge_journal_head(self, journal_key: str, head: JournalHead) -> None:
        check_journal_head(head)
        with self._connection("acknowledge journal head") as conn:
            conn.execute(
                "INSERT INTO journal_heads (journal_key, seq, hash, acknowledged_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (journal_key) DO UPDATE SET "
                "seq = excluded.seq, hash = excluded.hash, "
                "acknowledged_at = excluded.acknowledged_at "
                "WHERE excluded.seq > journal_heads.seq",
                (journal_key, head.seq, head.hash, stamp(self._now)),
            )


class _PostgresFence(ArtifactReferenceFence):
    def __init__(
        self,
        owner: PostgresMemoryOwner,
        conn: psycopg.Connection[Any],
        transaction_id: str,
        observation: ArtifactReferenceObservation,
        *,
        locked: bool = False,
    ) -> None:
        self._owner = owner
        self._conn = conn
        self._tx = transaction_id
        self._observation = observation
        self._locked = locked
        self._sealed: ArtifactReferenceObservation | None = None

    @property
    def observation(self) -> ArtifactReferenceObservation:
        return self._observation

    def _seal(self, conn: psycopg.Connection[Any]) -> int:
        tx = self._tx
        expected = self._observation.generation or 0
        current = PostgresMemoryOwner._lock(conn, tx)
        published = conn.execute(
            "SELECT 1 FROM memory_references WHERE transaction_id = %s", (tx,)
        ).fetchone()
        if (
            current != expected
            or published is not None
            or PostgresMemoryOwner._tombstoned(conn, tx)
        ):
            raise ArtifactFenceStaleError(f"{tx!r} changed since it was observed")
        generation = PostgresMemoryOwner._advance(conn, tx, expected)
        conn.execute(
            "INSERT INTO tombstones (transaction_id, generation, reason, sealed_at) "
            "VALUES (%s, %s, 'absent', %s)",
            (tx, generation, stamp(self._owner._now)),
        )
        return generation

    def seal_absent(self) -> ArtifactReferenceObservation:
        obs = self._observation
        if self._sealed is not None:
            return self._sealed
        if obs.state is not ArtifactObservationState.ABSENT or obs.sealed:
            raise ArtifactReferenceOwnerError("only an unsealed absence can be sealed")
        conn = self._conn
        try:
            if self._locked:
                # The fence's own transaction: the tombstone is durable at this COMMIT,
                # which also releases the row lock (the decision is made).
                generation = self._seal(conn)
                crash_point("owner.tombstoning")
                conn.execute("COMMIT")
            else:
                with conn.transaction():
                    generation = self._seal(conn)
                    crash_point("owner.tombstoning")
        except psycopg.Error as exc:
            raise _owner_error("seal", exc) from exc
        crash_point("owner.tombstoned")
        self._sealed = ArtifactReferenceObservation(
            ArtifactObservationState.ABSENT, generation, sealed=True
        )
        return self._sealed
