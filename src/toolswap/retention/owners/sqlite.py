"""SqliteMemoryOwner: the embedded default memory owner, on one SQLite file (WAL).

It stores :class:`~toolswap.ArtifactMemoryReference` records (never a body) under their
publication ID, which is the journal's transaction ID::

    owner = SqliteMemoryOwner(session_dir / "memory.sqlite3")
    journal.publish_reference(
        claim, lambda: owner.publish(tx_id, memory_reference), transaction_id=tx_id
    )
    journal.remove_reference(tx_id, lambda: owner.remove(tx_id))
    journal.reconcile_pending(owner)

Several processes may share the file. Every write is one ``BEGIN IMMEDIATE`` transaction
with ``synchronous=FULL``, so it is durable when it returns.

**Fence.** :meth:`SqliteMemoryOwner.inspect_fenced` opens a ``BEGIN IMMEDIATE``
transaction, observes the publication inside it, and holds it until the fence closes: no
publish, remove or seal of any ID can commit meanwhile (writers wait up to the busy
timeout). ``fence="optimistic"`` observes in a read transaction and holds nothing; its
seal is then a compare-and-swap on the generation inside its own write transaction, so a
change in between makes the seal fail (``pending_stale``) instead of waiting. That is the
shape of owners that cannot hold a lock (object stores with generations, ETags).

**Generation.** Each publication ID has a counter, advanced by every publish, remove and
seal; the seal advances it by compare-and-swap from the observed value.

**Tombstones.** Sealing an absence and removing a reference both write a tombstone, and a
tombstone is never deleted: a publish under that ID is refused forever, whether it is a
late write of the original attempt or a replay. The refusal is
:class:`~toolswap.errors.ArtifactReferenceTombstonedError`, an owner error, deliberately
*not* :class:`~toolswap.errors.ArtifactPublicationRejected`: after a remove the ID *was*
written once, so "the reference was not written" would be false, and it is not this
call's job to settle the lease. ``publish_reference`` lets it propagate, the lease stays
PREPARED, and reconciliation observes the sealed absence and aborts it. For the same
reason a publish under an ID that already holds a *different* reference raises
:class:`~toolswap.errors.ArtifactPublicationConflictError` and reconciliation reports
``pending_conflict``. ``ArtifactPublicationRejected`` is raised only by validation that
runs before any write (a malformed reference or ID).

**Journal heads.** ``journal_heads`` keeps the last head each journal acknowledged
(see :mod:`toolswap.retention.owner`), only ever moving forward.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from ... import durable
from ...crashpoints import crash_point
from ...durable import not_ours
from ...errors import (
    ArtifactFenceStaleError,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
    InvalidArgumentError,
)
from ...layout import OWNER_DB_NAME
from ._shared import StoredMemoryReference, stored_reference, tombstoned_message
from ._sql import FenceMode, SqlFence, SqlOwner

__all__ = ["DEFAULT_OWNER_FILENAME", "SqliteMemoryOwner", "StoredMemoryReference"]

DEFAULT_OWNER_FILENAME = OWNER_DB_NAME
"""Name of the default owner database inside a session directory."""
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS owner_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_references (
    transaction_id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    source_id TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    reference TEXT NOT NULL,
    published_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_references_by_source
    ON memory_references (session, source_id);
CREATE TABLE IF NOT EXISTS generations (
    transaction_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (
    transaction_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    reason TEXT NOT NULL,
    sealed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS journal_heads (
    journal_key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    acknowledged_at TEXT NOT NULL
);
"""


def _owner_error(action: str, exc: sqlite3.Error) -> ArtifactReferenceOwnerError:
    return ArtifactReferenceOwnerError(
        f"memory owner: {action} failed ({type(exc).__name__}: {exc}); retry, or check the "
        "database with `sqlite3 <file> 'PRAGMA integrity_check'`"
    )


class SqliteMemoryOwner(SqlOwner):
    """A memory store of artifact references in SQLite, and the owner side of reconciliation.

    Args:
        path: the database file (created 0600 unless ``create=False``; never a symlink).
        create: create the database if it does not exist.
        busy_timeout: seconds a writer waits for another's transaction (or fence).
        fence: ``"immediate"`` (a write transaction held for the fence's lifetime) or
            ``"optimistic"`` (observe without a lock; the seal is a CAS that may go stale).
        now: clock for timestamps (timezone-aware UTC).

    Raises:
        ArtifactReferenceOwnerError: the file is a symlink, not a regular file, owned by
            another user, missing with ``create=False``, or from a newer schema.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        create: bool = True,
        busy_timeout: float = 30.0,
        fence: FenceMode = "immediate",
        now: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(fence=fence, now=now)
        if not busy_timeout >= 0:
            raise InvalidArgumentError("busy_timeout must be a non-negative number of seconds")
        self.path = Path(path).expanduser().absolute()
        self.busy_timeout = float(busy_timeout)
        self._check_file(create)
        self._init_schema()

    def __repr__(self) -> str:
        return f"SqliteMemoryOwner({str(self.path)!r}, fence={self.fence_mode!r})"

    # -- the database ----------------------------------------------------------------

    def _check_file(self, create: bool) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            if not create:
                raise ArtifactReferenceOwnerError(
                    f"no memory owner database at {self.path}; pass the owner's database "
                    "(--owner-db) or create it by publishing through it"
                ) from None
            try:
                self._create_file()
            except OSError as exc:
                raise ArtifactReferenceOwnerError(
                    f"cannot create the memory owner database {self.path}: {exc.strerror}"
                ) from exc
            st = os.lstat(self.path)
        refusal = not_ours(st, directory=False)
        if refusal is not None:
            raise ArtifactReferenceOwnerError(f"memory owner database {self.path} {refusal}")
        if not create and st.st_size == 0:
            # SQLite would open it as a new, empty database: every reference forgotten.
            raise ArtifactReferenceOwnerError(
                f"memory owner database {self.path} is empty (0 bytes): it was truncated or "
                "replaced; restore it from a backup"
            )

    def _create_file(self) -> None:
        """Create the database whole: SQLite writes its schema under a temporary name,
        which is then linked to the real name, so a crash never leaves an empty file there
        (``create=False`` refuses one: it looks like a truncated database). A database
        another process created meanwhile is kept."""
        io = durable.current()
        tmp = self.path.with_name(durable.temporary_name(self.path.name))
        io.close(io.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW))
        try:
            self._init_schema(tmp)
            dir_fd = io.open(self.path.parent, durable.DIR_FLAGS)
            try:
                durable.link_new(tmp.name, self.path.name, dir_fd=dir_fd)
                durable.unlink_synced(tmp.name, dir_fd=dir_fd)
            finally:
                durable.close_unwritten(dir_fd)
        finally:
            with suppress(FileNotFoundError):
                io.unlink(tmp)

    def _connect(self, path: Path | None = None) -> sqlite3.Connection:
        conn = sqlite3.connect(
            path or self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _connection(self, action: str, path: Path | None = None) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._connect(path)
        except sqlite3.Error as exc:
            raise _owner_error(action, exc) from exc
        try:
            yield conn
        except sqlite3.Error as exc:
            raise _owner_error(action, exc) from exc
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            conn.close()

    @contextmanager
    def _write(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._connection(action) as conn:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")

    def _init_schema(self, path: Path | None = None) -> None:
        with self._connection("opening the database", path) as conn:
            mode = self._wal(conn)
            if not mode or str(mode[0]).lower() != "wal":
                raise ArtifactReferenceOwnerError(
                    f"memory owner database {self.path} cannot use WAL mode"
                )
            row = None
            try:
                row = conn.execute(
                    "SELECT value FROM owner_meta WHERE key = 'schema_version'"
                ).fetchone()
            except sqlite3.OperationalError:
                row = None
            if row is None:
                # One transaction: concurrent first opens create the schema exactly once.
                conn.executescript(
                    "BEGIN IMMEDIATE;"
                    + _SCHEMA
                    + "INSERT OR IGNORE INTO owner_meta (key, value) "
                    + f"VALUES ('schema_version', '{SCHEMA_VERSION}');"
                    + "COMMIT;"
                )
                row = conn.execute(
                    "SELECT value FROM owner_meta WHERE key = 'schema_version'"
                ).fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                raise ArtifactReferenceOwnerError(
                    f"memory owner database {self.path} has schema version "
                    f"{row[0] if row else None!r}; this toolswap reads version {SCHEMA_VERSION}"
                )

    def _wal(self, conn: sqlite3.Connection) -> Any:
        """Switch to WAL. Several processes opening a new database at once can get
        SQLITE_BUSY here without the busy handler ever running: wait like it would."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(0.005)

    # -- what SQLite does its own way (see toolswap.retention.owners._sql) ---------------

    def _db_time(self, when: datetime) -> str:
        return when.isoformat()

    def _py_time(self, value: Any) -> datetime:
        return datetime.fromisoformat(value)

    def _hold(self, conn: sqlite3.Connection, transaction_id: str) -> int:
        # BEGIN IMMEDIATE already holds the whole database: reading is enough.
        return self._generation(conn, transaction_id)

    @staticmethod
    def _generation(conn: sqlite3.Connection, transaction_id: str) -> int:
        row = conn.execute(
            "SELECT generation FROM generations WHERE transaction_id = ?", (transaction_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def _advance(self, conn: sqlite3.Connection, transaction_id: str, expected: int) -> int:
        if expected == 0:
            cur = conn.execute(
                "INSERT OR IGNORE INTO generations (transaction_id, generation) VALUES (?, 1)",
                (transaction_id,),
            )
        else:
            cur = conn.execute(
                "UPDATE generations SET generation = ? WHERE transaction_id = ? AND generation = ?",
                (expected + 1, transaction_id, expected),
            )
        if cur.rowcount != 1:
            raise ArtifactFenceStaleError(
                f"the generation of {transaction_id!r} moved from {expected}; observe again"
            )
        return expected + 1

    @contextmanager
    def _refusing_tombstoned(self, conn: sqlite3.Connection, transaction_id: str) -> Iterator[None]:
        if self._tombstoned(conn, transaction_id):
            raise ArtifactReferenceTombstonedError(tombstoned_message(transaction_id))
        yield

    @contextmanager
    def _fence(self, conn: sqlite3.Connection, transaction_id: str) -> Iterator[SqlFence]:
        conn.execute("BEGIN IMMEDIATE" if self.fence_mode == "immediate" else "BEGIN")
        observation = self._observe(conn, transaction_id, self._hold(conn, transaction_id))
        if self.fence_mode == "optimistic":
            conn.execute("COMMIT")
        yield _SqliteFence(self, conn, transaction_id, observation)

    # -- reads -----------------------------------------------------------------------

    def get(self, transaction_id: str) -> StoredMemoryReference | None:
        """The reference stored under ``transaction_id``, or None."""
        with self._connection("read") as conn:
            conn.execute("BEGIN")
            row = conn.execute(
                "SELECT reference, published_at FROM memory_references WHERE transaction_id = ?",
                (transaction_id,),
            ).fetchone()
            generation = self._generation(conn, transaction_id)
        if row is None:
            return None
        return stored_reference(transaction_id, row[0], self._py_time(row[1]), generation)

    def list_references(
        self, *, session: str | None = None, source_id: str | None = None
    ) -> list[StoredMemoryReference]:
        """Stored references, oldest first, optionally of one session or one artifact."""
        query = (
            "SELECT m.transaction_id, m.reference, m.published_at, COALESCE(g.generation, 0) "
            "FROM memory_references m LEFT JOIN generations g USING (transaction_id)"
        )
        where: list[str] = []
        args: list[str] = []
        if session is not None:
            where.append("m.session = ?")
            args.append(session)
        if source_id is not None:
            where.append("m.source_id = ?")
            args.append(source_id)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY m.published_at, m.transaction_id"
        with self._connection("list") as conn:
            rows = conn.execute(query, args).fetchall()
        return [stored_reference(r[0], r[1], self._py_time(r[2]), int(r[3])) for r in rows]


class _SqliteFence(SqlFence):
    def _seal(self) -> int:
        conn = self._conn
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE")  # optimistic fence: the CAS decides
            generation = self._tombstone(conn)
            crash_point("owner.tombstoning")
            conn.execute("COMMIT")
        except ArtifactFenceStaleError:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        except sqlite3.Error as exc:
            raise _owner_error("seal", exc) from exc
        return generation
