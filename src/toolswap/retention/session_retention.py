"""The session's retention: which lease journal and memory owner a session uses, decided once.

Two kinds exist:

- ``local``: the journal file ``<session>/retention-leases.jsonl`` and the embedded SQLite
  owner ``<session>/memory.sqlite3`` (or another SQLite database the caller names);
- ``postgres``: the journal and the owner in one PostgreSQL schema, for sessions that
  several hosts share (the ``postgres`` extra).

:func:`open_retention` is the one place that decides which a session uses; the CLI, the
servers and library code all open a session's retention through it, so they get the same
journal and owner. The database URL is never stored: it comes from the caller or from
``TOOLSWAP_DATABASE_URL`` (the schema from ``TOOLSWAP_DATABASE_SCHEMA``, default
``toolswap``); a URL given means ``postgres``, none means ``local``.

The choice is recorded in ``<session>/retention.json`` (``{"kind": ..., "schema": ...,
"v": 1}``: never a URL or a password) once it is a fact: when a caller opens the retention
to publish (``create=True``), or when the session's manifest already anchors the chosen
journal store (its leases provably live there). A read-only open of a session without
leases records nothing, so ``gc --all-sessions --database-url`` does not tie a local
session to the database. Once recorded, an open that asks for the other kind, or another
schema, is refused with :class:`~toolswap.errors.ConfigurationError`; an open that names
neither gets the recorded one (a ``postgres`` session still needs its URL).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from .. import durable
from ..errors import (
    ArtifactAccessError,
    ArtifactReferenceOwnerError,
    ChainLogError,
    ConfigurationError,
    ToolswapError,
)
from ..layout import RETENTION_CHOICE_NAME
from ..manifest import Manifest
from ..session import Session
from .journal import ArtifactRetentionJournal
from .journal_store import JournalStore, LocalJournalStore
from .owner import ArtifactReferenceOwner
from .owners.sqlite import DEFAULT_OWNER_FILENAME, SqliteMemoryOwner

__all__ = [
    "DATABASE_SCHEMA_ENV",
    "DATABASE_URL_ENV",
    "DEFAULT_SCHEMA",
    "RETENTION_CHOICE_NAME",
    "RetentionChoice",
    "RetentionKind",
    "SessionRetention",
    "open_retention",
    "read_retention_choice",
]

DATABASE_URL_ENV = "TOOLSWAP_DATABASE_URL"
DATABASE_SCHEMA_ENV = "TOOLSWAP_DATABASE_SCHEMA"
DEFAULT_SCHEMA = "toolswap"
_CHOICE_MAX = 1024
_CHOICE_KEYS = frozenset({"v", "kind", "schema"})
_SCHEMA_SHAPE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""Only what a recorded schema must look like; PostgreSQL's own rule is checked on use."""


class RetentionKind(StrEnum):
    """Where a session keeps its lease journal and its memory owner."""

    LOCAL = "local"
    """The journal file and a SQLite owner, in the session directory."""
    POSTGRES = "postgres"
    """The journal and the owner in one PostgreSQL schema."""


@dataclass(frozen=True, slots=True)
class RetentionChoice:
    """The recorded choice of one session (``<session>/retention.json``)."""

    kind: RetentionKind
    schema: str | None = None
    """The PostgreSQL schema (``postgres`` only)."""

    def __post_init__(self) -> None:
        if (self.kind is RetentionKind.POSTGRES) != (self.schema is not None):
            raise ConfigurationError("a PostgreSQL retention needs a schema; a local one has none")

    def describe(self) -> str:
        if self.kind is RetentionKind.LOCAL:
            return "its own directory (retention-leases.jsonl and a SQLite memory owner)"
        return f"PostgreSQL (schema {self.schema!r})"

    def to_json(self) -> bytes:
        return json.dumps(
            {"kind": self.kind.value, "schema": self.schema, "v": 1}, sort_keys=True
        ).encode()


@dataclass(frozen=True, slots=True)
class SessionRetention:
    """A session's lease journal and memory owner, as :func:`open_retention` opened them."""

    journal: ArtifactRetentionJournal
    choice: RetentionChoice
    """The kind (and schema) in use; recorded in the session once it is a fact."""

    @property
    def session(self) -> Session:
        return self.journal.session

    @property
    def owner(self) -> ArtifactReferenceOwner | None:
        """The memory owner the journal is bound to (None: a local session whose owner
        database does not exist yet; the journal binds it once it does)."""
        return self.journal.owner

    def close(self) -> None:
        """Close the database connections the journal and the owner keep between
        operations (none for a local session); both stay usable."""
        self.journal.close()

    def __enter__(self) -> SessionRetention:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_retention(
    session: Session | Path | str,
    *,
    database_url: str | None = None,
    schema: str | None = None,
    owner_db: Path | str | None = None,
    create: bool = False,
    require_owner: bool = False,
    now: Callable[[], datetime] | None = None,
) -> SessionRetention:
    """Open the session's lease journal and memory owner, the same way for every caller.

    Args:
        session: the session (or its directory).
        database_url: PostgreSQL URL of the journal and the owner (default:
            ``TOOLSWAP_DATABASE_URL``); none means the session's own files.
        schema: PostgreSQL schema (default: the recorded one, else
            ``TOOLSWAP_DATABASE_SCHEMA``, else ``toolswap``).
        owner_db: a local session's SQLite owner database, if not the session's own
            (``memory.sqlite3``); it must exist unless ``create``.
        create: open for publishing: create a local session's SQLite owner database
            (its own, or ``owner_db``) when it is missing, and record the choice now.
        require_owner: refuse unless a memory owner exists (reconciliation: an empty owner
            would seal every pending lease as absent, so none is ever created for it).
        now: the journal's clock.

    Raises:
        ConfigurationError: the session records another kind or schema, a PostgreSQL
            session has no URL, ``owner_db`` is given with a URL, or psycopg is missing.
        ArtifactReferenceOwnerError: the owner database named (or required) does not exist.
        ArtifactLeaseJournalError: the PostgreSQL journal cannot be opened.
    """
    if not isinstance(session, Session):
        session = Session.at(session, create=False)
    recorded = read_retention_choice(session.root)
    choice, url = _decide(session, recorded, database_url, schema)
    owner: ArtifactReferenceOwner | None = None
    store: JournalStore = LocalJournalStore(session)
    if choice.kind is RetentionKind.POSTGRES:
        if owner_db is not None:
            raise ConfigurationError(
                "owner_db names a SQLite owner, but the session's owner is in PostgreSQL; "
                "pass one or the other (CLI: --owner-db or --database-url)"
            )
        assert url is not None and choice.schema is not None
        owner, store = _postgres(session, url, choice.schema)
    # Decided before a SQLite owner is created: a refused open leaves nothing behind.
    record = anchored = False
    if recorded is None:
        record, anchored = _may_record(session, choice, store, create)
    if choice.kind is RetentionKind.LOCAL:
        owner = _local(session, owner_db, create=create, required=require_owner)
    journal = ArtifactRetentionJournal(
        session, owner=owner if owner is not None else "default", now=now, store=store
    )
    if record and (not anchored or _reaches_anchor(journal)):
        _record(session, choice)
    return SessionRetention(journal, choice)


def _decide(
    session: Session,
    recorded: RetentionChoice | None,
    database_url: str | None,
    schema: str | None,
) -> tuple[RetentionChoice, str | None]:
    """The choice this open makes, checked against the recorded one; and the URL."""
    url = database_url or os.environ.get(DATABASE_URL_ENV, "").strip() or None
    asked_schema = schema or os.environ.get(DATABASE_SCHEMA_ENV, "").strip() or None
    where = session.root / RETENTION_CHOICE_NAME
    if recorded is not None and (url is not None) != (recorded.kind is RetentionKind.POSTGRES):
        if url is None:
            raise ConfigurationError(
                f"session {session.session_id!r} keeps its leases in {recorded.describe()} "
                f"({where}): pass its database URL (--database-url or {DATABASE_URL_ENV})"
            )
        raise ConfigurationError(
            f"session {session.session_id!r} keeps its leases in {recorded.describe()} "
            f"({where}), not in a database: open it without --database-url (unset "
            f"{DATABASE_URL_ENV}); a session never moves its leases"
        )
    if url is None:
        return RetentionChoice(RetentionKind.LOCAL), None
    if recorded is not None:
        if asked_schema is not None and asked_schema != recorded.schema:
            raise ConfigurationError(
                f"session {session.session_id!r} keeps its leases in {recorded.describe()} "
                f"({where}), not in schema {asked_schema!r}: drop --database-schema (unset "
                f"{DATABASE_SCHEMA_ENV}) or pass {recorded.schema!r}"
            )
        return recorded, url
    return RetentionChoice(RetentionKind.POSTGRES, asked_schema or DEFAULT_SCHEMA), url


def _local(
    session: Session, owner_db: Path | str | None, *, create: bool, required: bool
) -> SqliteMemoryOwner | None:
    """A local session's SQLite owner (None: the session's own, not created yet)."""
    path = Path(owner_db) if owner_db is not None else session.root / DEFAULT_OWNER_FILENAME
    if create or os.path.lexists(path):
        return SqliteMemoryOwner(path, create=create)
    if owner_db is None and not required:
        return None  # the journal binds the session's own once it exists
    raise ArtifactReferenceOwnerError(
        f"no memory owner database at {path}; pass the database the references were "
        "published to (--owner-db) (reconcile never creates one: an empty owner would seal "
        "every pending lease as absent)"
    )


def _postgres(
    session: Session, url: str, schema: str
) -> tuple[ArtifactReferenceOwner, JournalStore]:
    try:
        from ._postgres import check_schema_name
        from .owners.postgres import PostgresMemoryOwner
        from .postgres_journal import PostgresJournalStore
    except ImportError:
        raise ConfigurationError(
            "a PostgreSQL database URL (--database-url) needs psycopg: "
            "pip install 'toolswap[postgres]'"
        ) from None
    try:
        check_schema_name(schema)
    except ValueError as exc:
        raise ConfigurationError(f"database schema {schema!r}: {exc}") from None
    owner = PostgresMemoryOwner(url, schema=schema)
    return owner, PostgresJournalStore(url, session, schema=schema)


def _may_record(
    session: Session, choice: RetentionChoice, store: JournalStore, create: bool
) -> tuple[bool, bool]:
    """Whether ``choice`` may be recorded now, and whether the manifest anchors ``store``.

    It may when nothing in the session points to another store and either the caller
    publishes (``create``) or the manifest anchors this store (its leases are there). A
    session whose manifest anchors another store is left to the journal, which refuses it
    and names that store.

    Raises:
        ConfigurationError: ``create`` and the session's leases live in another store.
    """
    try:
        anchored = Manifest.of(session).journal_stores()
    except ChainLogError:
        return False, False  # the journal says what is wrong with the manifest when used
    others = [name for name in anchored if name != store.name]
    if choice.kind is RetentionKind.POSTGRES and os.path.lexists(session.journal_path):
        others.append(session.journal_path.name)
    if others:
        if create:
            raise ConfigurationError(
                f"session {session.session_id!r} already keeps leases in {others[0]}, not in "
                f"{choice.describe()}; open it the way those leases were published"
            )
        return False, False
    here = store.name in anchored
    return create or here, here


def _reaches_anchor(journal: ArtifactRetentionJournal) -> bool:
    """Whether the journal holds the head the session manifest anchored for its store.

    The anchor names a database journal by session, not by schema: the empty journal of
    a wrong schema must not be recorded as the session's.
    """
    try:
        journal.has_durable_journal()  # folds it and checks it against the anchor
    except ToolswapError:
        return False  # the caller's next operation on the journal says what is wrong
    return True


# -- retention.json --------------------------------------------------------------------


def read_retention_choice(root: Path) -> RetentionChoice | None:
    """The choice recorded in the session at ``root`` (None: none recorded yet).

    Raises:
        ConfigurationError: the file is unreadable, not ours, or malformed.
    """
    path = root / RETENTION_CHOICE_NAME
    raw = durable.read_trusted(
        path, _CHOICE_MAX + 1, error=lambda message: ConfigurationError(f"cannot read {message}")
    )
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.keys() != _CHOICE_KEYS or data["v"] != 1:
            raise ValueError("unexpected fields or version")
        schema = data["schema"]
        if schema is not None and not (isinstance(schema, str) and _SCHEMA_SHAPE.fullmatch(schema)):
            raise ValueError(f"invalid schema {schema!r}")
        return RetentionChoice(RetentionKind(data["kind"]), schema)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"{path} is not a valid retention choice ({exc}); restore it or move the session aside"
        ) from None


def _record(session: Session, choice: RetentionChoice) -> None:
    """Write ``retention.json`` once: a temporary name, fsync, link without overwriting,
    fsync of the directory. Of two concurrent writers the first link wins; the other is
    refused if it chose differently.
    """
    root = session.root
    path = root / RETENTION_CHOICE_NAME
    try:
        # Of two writers the first link wins; the other's choice is compared below.
        durable.write_atomically(root, RETENTION_CHOICE_NAME, choice.to_json(), replace=False)
    except OSError as exc:
        raise ArtifactAccessError(
            f"cannot record the retention choice in {path}: {exc.strerror}"
        ) from None
    recorded = read_retention_choice(root)
    if recorded != choice:
        assert recorded is not None
        raise ConfigurationError(
            f"session {session.session_id!r} was just tied to {recorded.describe()} by "
            f"another process ({path}); open it that way"
        )
