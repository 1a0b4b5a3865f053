"""The lease journal of a shared session, in PostgreSQL: records, lock and checkpoint.

For a session that several hosts write (install the ``postgres`` extra)::

    store = PostgresJournalStore("postgresql://toolswap@db.internal/toolswap", session)
    journal = ArtifactRetentionJournal(session, owner=owner, store=store)

**Records.** The same hash-chained records as the local journal file, byte for byte
(canonical JSON with the hash last), one row each in ``lease_journal`` keyed by the
journal key (``<workspace>/<session>``) and sequence number. Every append is one
transaction, durable when it commits; the server refuses a row that does not extend
the chain (``TS005``: the sequence must follow, ``prev`` must be the previous hash) and
any update, delete or truncate of the table (``TS003``). Readers verify every record
they fold exactly as they verify the file (hash, chain, session, schema version).

**Lock.** The lock that ``prepare()``, every append and gc share is a PostgreSQL
session-level advisory lock on the journal key, held on a connection of its own for as
long as the lock is held (re-entrant in one thread), and then this host's session
``flock`` (the local artifacts and manifest). If the lock's connection dies the server
releases the lock; the chain trigger still lets only one of two writers append a given
sequence number, and the loser's append fails without writing.

**Checkpoint.** ``lease_journal_checkpoints`` keeps the newest checkpoint of the fold
(same encoding as the file checkpoint, with its own digest). It is used only when it is
intact, of this session, the journal's record at its sequence has its hash, and the
stored records up to it hash to its ``prefix_sha256`` (the server hashes them, one pass
like the file checkpoint's prefix hash): the triggers keep the rows append-only, but a
superuser, a restored backup or a corrupt page can still change one, and the fold must
never be trusted over records that changed. A damaged or foreign checkpoint (or one
without ``prefix_sha256``) is ignored; one whose records the journal lost or changed is
refused.

**Errors.** A database failure while reading or appending raises
:class:`~toolswap.errors.ArtifactLeaseJournalError` (nothing may be deleted meanwhile);
an append whose commit was lost is found by the next read, never written twice.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from .._fork import track
from ..chainlog import ChainLog
from ..crashpoints import crash_point
from ..errors import ArtifactLeaseJournalError, ChainLogError
from ..session import Session
from . import checkpoint as _checkpoint
from ._postgres import SCHEMA_VERSION as DB_SCHEMA_VERSION
from ._postgres import PgConnections, error_text
from .journal_store import JournalStore
from .lease import ArtifactLeaseTransaction

__all__ = ["PostgresJournalStore"]

_INHERITED: list[Any] = []
"""Connections a forked child inherited holding its parent's lock: kept, never closed."""
_PREFIX_BLOCK = 10_000
"""Records the server hashes per block for ``prefix_sha256`` (bounds its memory)."""


def _journal_error(action: str, exc: psycopg.Error) -> ArtifactLeaseJournalError:
    return ArtifactLeaseJournalError(
        f"lease journal (PostgreSQL): {action} failed ({error_text(exc)}); nothing may be "
        "deleted until it answers again; retry"
    )


class PostgresJournalStore(JournalStore):
    """A session's lease journal in PostgreSQL (see the module docstring).

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        session: the session (or its directory) whose journal this is.
        schema: the schema holding the tables (shared with PostgresMemoryOwner).
        lock_timeout: seconds to wait for the journal lock (0: wait forever).
        connect_timeout: seconds to wait for the server.

    Raises:
        ArtifactLeaseJournalError: the server cannot be reached, or the schema is of a
            newer version.
    """

    shared = True

    def __init__(
        self,
        dsn: str,
        session: Session | Path | str,
        *,
        schema: str = "toolswap",
        lock_timeout: float = 0.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.session = (
            session if isinstance(session, Session) else Session.at(session, create=False)
        )
        self._pg = PgConnections(
            dsn,
            schema,
            lock_timeout=lock_timeout,
            connect_timeout=connect_timeout,
            error=_journal_error,
        )
        self.journal_key = self.session.key
        version = self._pg.init_schema()
        if version != str(DB_SCHEMA_VERSION):
            raise ArtifactLeaseJournalError(
                f"lease journal schema {schema!r} has schema version {version!r}; this "
                f"toolswap reads version {DB_SCHEMA_VERSION}"
            )
        self._lock_key = "toolswap.journal:" + self.journal_key
        self._rlock = threading.RLock()
        self._lock_conn: psycopg.Connection[Any] | None = None
        """The connection that holds the advisory lock, while this process holds it."""
        track(self)

    def _forked(self) -> None:
        """In a forked child: a new lock, and the parent's advisory lock not held here. Its
        connection is the parent's: kept, never used or closed from here (closing it would
        end the parent's session on the server, and with it the parent's lock)."""
        self._rlock = threading.RLock()
        if self._lock_conn is not None:
            _INHERITED.append(self._lock_conn)
            self._lock_conn = None

    def __repr__(self) -> str:
        return f"PostgresJournalStore({self.journal_key!r}, schema={self._pg.schema!r})"

    @property
    def name(self) -> str:
        return f"lease journal {self.journal_key!r} (PostgreSQL)"

    def close(self) -> None:
        """Close the kept connections (the store stays usable)."""
        self._pg.close()

    def open_log(self) -> ChainLog:
        return _PostgresChainLog(self)

    # -- the lock --------------------------------------------------------------------

    @contextmanager
    def lock(self) -> Iterator[None]:
        with self._rlock:
            outer = self._lock_conn is None
            if outer:
                self._acquire()
            conn = self._lock_conn
            try:
                with self.session.lock():
                    yield
            finally:
                # (A forked child leaving the parent's lock: not its own to release.)
                if outer and self._lock_conn is conn:
                    self._release()

    def _acquire(self) -> None:
        try:
            conn = self._pg.connect()
        except psycopg.Error as exc:
            raise _journal_error("taking the journal lock", exc) from exc
        try:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (self._lock_key,))
        except psycopg.Error as exc:
            conn.close()
            raise _journal_error("taking the journal lock", exc) from exc
        self._lock_conn = conn

    def _release(self) -> None:
        conn, self._lock_conn = self._lock_conn, None
        if conn is None:
            return
        # Closing the connection ends its session and so releases the lock in any case.
        with suppress(psycopg.Error):
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (self._lock_key,))
        conn.close()

    # -- records ---------------------------------------------------------------------

    def record_hash(self, conn: psycopg.Connection[Any], seq: int) -> str | None:
        row = conn.execute(
            "SELECT hash FROM lease_journal WHERE journal_key = %s AND seq = %s",
            (self.journal_key, seq),
        ).fetchone()
        return None if row is None else str(row[0])

    def prefix_sha256(self, conn: psycopg.Connection[Any], seq: int) -> str:
        """The SHA-256 of the SHA-256s of the stored records 1..``seq``, in blocks of
        ``_PREFIX_BLOCK`` (the server hashes the bytes; only the block digests travel)."""
        rows = conn.execute(
            "SELECT (seq - 1) / %(block)s AS block, sha256(string_agg(line, ''::bytea ORDER BY "
            "seq)) FROM lease_journal WHERE journal_key = %(key)s AND seq <= %(seq)s "
            "GROUP BY block ORDER BY block",
            {"block": _PREFIX_BLOCK, "key": self.journal_key, "seq": seq},
        ).fetchall()
        return hashlib.sha256(b"".join(bytes(digest) for _, digest in rows)).hexdigest()

    # -- the checkpoint --------------------------------------------------------------

    def _checkpoint_row(self) -> tuple[int, str, dict[str, Any]] | None:
        with self._pg.connection("reading the checkpoint") as conn:
            row = conn.execute(
                "SELECT body FROM lease_journal_checkpoints WHERE journal_key = %s",
                (self.journal_key,),
            ).fetchone()
            if row is None:
                return None
            decoded = _checkpoint.decode_checkpoint(bytes(row[0]), self.session.session_id)
            if decoded is None:
                return None
            seq, held = decoded[0], self.record_hash(conn, decoded[0])
            prefix = decoded[2].get("prefix_sha256")
            if held is None:
                problem = f"does not hold record {seq} that its checkpoint covers"
            elif held != decoded[1]:
                problem = f"holds another record {seq} than its checkpoint covers"
            elif not isinstance(prefix, str):
                return None  # nothing pins the records before it: fold them all
            elif self.prefix_sha256(conn, seq) != prefix:
                problem = f"holds other records up to {seq} than its checkpoint covers"
            else:
                return decoded
        raise ArtifactLeaseJournalError(
            f"{self.name}: the journal {problem}: records were lost or rewritten; nothing "
            "may be deleted until the journal is restored"
        )

    def load_checkpoint(self) -> _checkpoint.FoldCheckpoint | None:
        decoded = self._checkpoint_row()
        if decoded is None:
            return None
        return _checkpoint.checkpoint_fold(decoded[2], self.session.session_id)

    def write_checkpoint(
        self, log: ChainLog, leases: list[ArtifactLeaseTransaction], hashes: bytes
    ) -> bool:
        seq, digest = log.head
        if seq == 0:
            return False
        with self._pg.connection("writing the checkpoint") as conn:
            # The records were verified as they were folded; the prefix hash pins them.
            extra: dict[str, object] = {
                "journal_key": self.journal_key,
                "prefix_sha256": self.prefix_sha256(conn, seq),
            }
            data = _checkpoint.encode_checkpoint(
                self.session.session_id,
                seq=seq,
                digest=digest,
                leases=leases,
                hashes=hashes,
                extra=extra,
            )
            conn.execute(
                "INSERT INTO lease_journal_checkpoints (journal_key, seq, body) "
                "VALUES (%s, %s, %s) ON CONFLICT (journal_key) DO UPDATE "
                "SET seq = excluded.seq, body = excluded.body "
                "WHERE excluded.seq > lease_journal_checkpoints.seq",
                (self.journal_key, seq, data),
            )
        return True

    def check_checkpoint(self, hashes: bytes) -> None:
        decoded = self._checkpoint_row()  # refuses a checkpoint beyond the journal
        if decoded is not None:
            seq = decoded[0]
            if hashes[(seq - 1) * 32 : seq * 32].hex() != decoded[1]:
                raise ArtifactLeaseJournalError(
                    f"{self.name}: record {seq} is not the one its checkpoint covers"
                )


class _PostgresChainLog(ChainLog):
    """The journal's records in ``lease_journal``, verified like the file's."""

    def __init__(self, store: PostgresJournalStore) -> None:
        super().__init__(
            Path(store.journal_key), store.session.session_id, error=ArtifactLeaseJournalError
        )
        self._store = store

    def _fail(self, message: str) -> ChainLogError:
        return self._error(f"{self._store.name}: {message}")

    def _refresh(self) -> tuple[bool, list[dict[str, Any]]]:
        store = self._store
        with store._pg.connection("reading the journal") as conn:
            if self._seq > 0 and store.record_hash(conn, self._seq) != self._hash:
                raise self._fail(
                    f"no longer holds record {self._seq} that this process read (rows were "
                    "deleted or rewritten); refusing to trust it"
                )
            rows = conn.execute(
                "SELECT seq, line FROM lease_journal WHERE journal_key = %s AND seq > %s "
                "ORDER BY seq",
                (store.journal_key, self._seq),
            ).fetchall()
        from_start = self._seq == 0
        floor_seq, floor_hash = self._floor
        self._watch_seq, self._floor_seen = floor_seq, None
        records = [self._verify(bytes(line), -1) for _, line in rows]
        if from_start and floor_seq > 0 and self._floor_seen != floor_hash:
            raise self._fail(
                f"no longer holds record {floor_seq} that this process verified before "
                "(deleted or rewritten); refusing to trust it"
            )
        return False, records

    def _append(
        self, body: dict[str, Any], crash_prefix: str
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self._next_record(body)  # refuses a body that sets the chain's own fields
        reset, before = self.refresh()
        if reset:  # (a forked child's first refresh: its reader must fold them all first)
            raise self._fail("was read afresh while in use; reopen it")
        record, digest, line = self._next_record(body)
        store = self._store
        with store._pg.connection("appending to the journal") as conn:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO lease_journal (journal_key, seq, prev, hash, line) "
                "VALUES (%s, %s, %s, %s, %s)",
                (store.journal_key, self._seq + 1, self._hash, digest, line),
            )
            crash_point(f"{crash_prefix}.appended")
            conn.execute("COMMIT")
        crash_point(f"{crash_prefix}.fsynced")
        self._seq += 1
        self._hash = digest
        self._floor = (self._seq, digest)
        record["hash"] = digest
        return before, record
