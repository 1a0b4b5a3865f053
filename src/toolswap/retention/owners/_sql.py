"""The memory owner written once over SQL: what the SQLite and PostgreSQL owners share.

:class:`SqlOwner` holds the statements on ``memory_references``, ``tombstones`` and
``journal_heads`` and the order of every publish, remove and seal, so the two owners
cannot drift. Each owner supplies only what its engine does differently:

- connections, and a write transaction (SQLite: ``BEGIN IMMEDIATE``, the whole database;
  PostgreSQL: a transaction that takes the publication's row lock);
- the generation of a publication ID: how it is read under that write transaction and how
  it is advanced by compare-and-swap (a ``generations`` row; a ``publications`` row);
- how a write under a tombstone is refused (SQLite checks first; PostgreSQL's trigger
  refuses the INSERT);
- how a fence is taken, and how its seal commits;
- timestamps (ISO 8601 text; ``timestamptz``) and the parameter style (statements are
  written with ``?``; :meth:`SqlOwner._sql` turns them into the engine's).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from ...artifact import ArtifactMemoryReference
from ...crashpoints import crash_point
from ...errors import (
    ArtifactFenceStaleError,
    ArtifactPublicationConflictError,
    ArtifactReferenceOwnerError,
    InvalidArgumentError,
)
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
)

__all__ = ["FenceMode", "SqlFence", "SqlOwner"]

FenceMode = Literal["immediate", "optimistic"]


class SqlOwner(ArtifactReferenceOwner):
    """A memory owner on a SQL database (see the module docstring).

    Args:
        fence: ``"immediate"`` (the fence holds the publication for its lifetime) or
            ``"optimistic"`` (observe without a lock; the seal is a CAS that may go stale).
        now: clock for timestamps (timezone-aware UTC).
    """

    def __init__(self, *, fence: FenceMode, now: Callable[[], datetime] | None) -> None:
        if fence not in ("immediate", "optimistic"):
            raise InvalidArgumentError("fence must be 'immediate' or 'optimistic'")
        self.fence_mode: FenceMode = fence
        self._now = now or (lambda: datetime.now(UTC))

    # -- what each engine supplies -----------------------------------------------------

    @abstractmethod
    def _connection(self, action: str) -> AbstractContextManager[Any]:
        """A connection for one operation; database errors become owner errors."""

    @abstractmethod
    def _write(self, action: str) -> AbstractContextManager[Any]:
        """A connection inside a write transaction: committed (durably) when the block
        ends, rolled back when it raises."""

    @abstractmethod
    def _hold(self, conn: Any, transaction_id: str) -> int:
        """The ID's generation, held against other writers until the transaction ends."""

    @abstractmethod
    def _advance(self, conn: Any, transaction_id: str, expected: int) -> int:
        """Compare-and-swap the generation from ``expected`` to ``expected + 1``.

        Raises:
            ArtifactFenceStaleError: the generation is not ``expected``.
        """

    @abstractmethod
    def _refusing_tombstoned(self, conn: Any, transaction_id: str) -> AbstractContextManager[None]:
        """Around the writes of a publish: refuses them under a tombstoned ID with
        :class:`~toolswap.errors.ArtifactReferenceTombstonedError`."""

    @abstractmethod
    def _fence(self, conn: Any, transaction_id: str) -> AbstractContextManager[SqlFence]:
        """Take the fence on ``conn`` and observe the ID inside it."""

    def _sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` parameters) in the engine's parameter style."""
        return statement

    def _db_time(self, when: datetime) -> object:
        """A timestamp as the database stores it."""
        return when

    def _py_time(self, value: Any) -> datetime:
        """A stored timestamp, timezone-aware UTC."""
        when: datetime = value.astimezone(UTC)
        return when

    # -- memory operations -------------------------------------------------------------

    def publish(
        self, transaction_id: str, memory_reference: ArtifactMemoryReference
    ) -> StoredMemoryReference:
        """Store ``memory_reference`` under ``transaction_id`` (durable when this returns).

        Publishing the same reference again under the same ID returns the stored record.

        Raises:
            ArtifactPublicationRejected: the ID or the reference is malformed; checked
                before any write, so nothing was or will be written.
            ArtifactReferenceTombstonedError: the ID is sealed; nothing was written.
            ArtifactPublicationConflictError: the ID holds a different reference.
            ArtifactReferenceOwnerError: the database failed; the write may or may not have
                committed (reconcile to find out).
        """
        publication = check_publication(transaction_id, memory_reference)
        checked = publication.reference
        with self._write("publish") as conn:
            generation = self._hold(conn, transaction_id)
            row = conn.execute(
                self._sql(
                    "SELECT reference, published_at FROM memory_references WHERE transaction_id = ?"
                ),
                (transaction_id,),
            ).fetchone()
            if row is not None:
                if row[0] != publication.body:
                    raise ArtifactPublicationConflictError(
                        f"publication ID {transaction_id!r} already holds a different reference"
                    )
                return StoredMemoryReference(
                    transaction_id, checked, self._py_time(row[1]), generation
                )
            published_at = stamp(self._now)
            with self._refusing_tombstoned(conn, transaction_id):
                generation = self._advance(conn, transaction_id, generation)
                conn.execute(
                    self._sql(
                        "INSERT INTO memory_references (transaction_id, session, source_id, "
                        "content_sha256, reference, published_at) VALUES (?, ?, ?, ?, ?, ?)"
                    ),
                    (
                        transaction_id,
                        publication.session,
                        checked.source.source_id,
                        checked.content_sha256,
                        publication.body,
                        self._db_time(published_at),
                    ),
                )
            crash_point("owner.publishing")
        crash_point("owner.published")
        return StoredMemoryReference(transaction_id, checked, published_at, generation)

    def remove(self, transaction_id: str) -> bool:
        """Delete the reference and tombstone its ID (idempotent; durable on return).

        Returns:
            True if a reference was deleted, False if there was none.
        """
        validate_transaction_id(transaction_id)
        with self._write("remove") as conn:
            generation = self._hold(conn, transaction_id)
            deleted: int = conn.execute(
                self._sql("DELETE FROM memory_references WHERE transaction_id = ?"),
                (transaction_id,),
            ).rowcount
            if deleted == 0 and self._tombstoned(conn, transaction_id):
                return False
            generation = self._advance(conn, transaction_id, generation)
            self._write_tombstone(conn, transaction_id, generation, "removed")
            crash_point("owner.removing")
        crash_point("owner.removed")
        return deleted > 0

    def is_tombstoned(self, transaction_id: str) -> bool:
        """True when publishing under ``transaction_id`` is refused forever."""
        with self._connection("read") as conn:
            return self._tombstoned(conn, transaction_id)

    def _write_tombstone(
        self, conn: Any, transaction_id: str, generation: int, reason: Literal["absent", "removed"]
    ) -> None:
        """Tombstone the ID at its new generation: after a remove, or sealing an absence.

        Written once: the caller found none under the write transaction, and a tombstone
        is never changed or deleted.
        """
        conn.execute(
            self._sql(
                "INSERT INTO tombstones (transaction_id, generation, reason, sealed_at) "
                "VALUES (?, ?, ?, ?)"
            ),
            (transaction_id, generation, reason, self._db_time(stamp(self._now))),
        )

    def _tombstoned(self, conn: Any, transaction_id: str) -> bool:
        row = conn.execute(
            self._sql("SELECT 1 FROM tombstones WHERE transaction_id = ?"), (transaction_id,)
        ).fetchone()
        return row is not None

    # -- reconciliation ----------------------------------------------------------------

    @contextmanager
    def inspect_fenced(self, transaction: ArtifactLeaseTransaction) -> Iterator[SqlFence]:
        """Observe ``transaction.transaction_id`` inside a fence (see the owner's module
        docstring).

        Raises:
            ArtifactReferenceOwnerError: the fence could not be taken within the busy or
                lock timeout, or the database failed.
        """
        tx = validate_transaction_id(transaction.transaction_id)
        with self._connection("fence") as conn, self._fence(conn, tx) as fence:
            yield fence

    def _observe(
        self, conn: Any, transaction_id: str, generation: int
    ) -> ArtifactReferenceObservation:
        row = conn.execute(
            self._sql(
                "SELECT source_id, content_sha256, reference FROM memory_references "
                "WHERE transaction_id = ?"
            ),
            (transaction_id,),
        ).fetchone()
        sealed = self._tombstoned(conn, transaction_id)
        return observe_row(generation, (row[0], row[1], row[2]) if row else None, sealed)

    # -- journal heads -----------------------------------------------------------------

    def journal_head(self, journal_key: str) -> JournalHead | None:
        with self._connection("read journal head") as conn:
            row = conn.execute(
                self._sql("SELECT seq, hash FROM journal_heads WHERE journal_key = ?"),
                (journal_key,),
            ).fetchone()
        return JournalHead(int(row[0]), str(row[1])) if row else None

    def acknowledge_journal_head(self, journal_key: str, head: JournalHead) -> None:
        check_journal_head(head)
        with self._connection("acknowledge journal head") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO journal_heads (journal_key, seq, hash, acknowledged_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (journal_key) DO UPDATE SET "
                    "seq = excluded.seq, hash = excluded.hash, "
                    "acknowledged_at = excluded.acknowledged_at "
                    "WHERE excluded.seq > journal_heads.seq"
                ),
                (journal_key, head.seq, head.hash, self._db_time(stamp(self._now))),
            )


class SqlFence(ArtifactReferenceFence):
    """An open fence of a :class:`SqlOwner` on the connection the fence holds."""

    def __init__(
        self,
        owner: SqlOwner,
        conn: Any,
        transaction_id: str,
        observation: ArtifactReferenceObservation,
    ) -> None:
        self._owner = owner
        self._conn = conn
        self._tx = transaction_id
        self._observation = observation
        self._sealed: ArtifactReferenceObservation | None = None

    @property
    def observation(self) -> ArtifactReferenceObservation:
        return self._observation

    def seal_absent(self) -> ArtifactReferenceObservation:
        if self._sealed is not None:
            return self._sealed
        observed = self._observation
        if observed.state is not ArtifactObservationState.ABSENT or observed.sealed:
            raise ArtifactReferenceOwnerError("only an unsealed absence can be sealed")
        generation = self._seal()
        crash_point("owner.tombstoned")
        self._sealed = ArtifactReferenceObservation(
            ArtifactObservationState.ABSENT, generation, sealed=True
        )
        return self._sealed

    @abstractmethod
    def _seal(self) -> int:
        """Write the tombstone (:meth:`_tombstone`) in a transaction that has committed
        durably on return, passing the crash point ``owner.tombstoning`` before it does;
        the new generation."""

    def _tombstone(self, conn: Any) -> int:
        """The seal's statements: refuse an ID that changed since it was observed, then
        advance its generation and write the tombstone."""
        owner, tx = self._owner, self._tx
        expected = self._observation.generation or 0
        current = owner._hold(conn, tx)
        published = conn.execute(
            owner._sql("SELECT 1 FROM memory_references WHERE transaction_id = ?"), (tx,)
        ).fetchone()
        if current != expected or published is not None or owner._tombstoned(conn, tx):
            raise ArtifactFenceStaleError(f"{tx!r} changed since it was observed")
        generation = owner._advance(conn, tx, expected)
        owner._write_tombstone(conn, tx, generation, "absent")
        return generation
