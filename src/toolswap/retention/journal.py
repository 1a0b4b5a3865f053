"""The crash-recoverable lease journal: ``<session>/retention-leases.jsonl``.

Every lease goes through ``PREPARED -> COMMITTED | ABORTED`` and ``COMMITTED -> RELEASED``,
one durable record per transition, on a :class:`~toolswap.chainlog.ChainLog` (canonical
JSON, hash chain, one ``O_APPEND`` write, fsync of the file and of the directory, appends
under the session lock). A record's fields::

    v, seq, session, prev, hash          the chain (see toolswap.chainlog)
    transaction_id                       the stable ID, also the owner's publication ID
    phase                                PREPARED | COMMITTED | ABORTED | RELEASED
    recorded_at                          UTC, ISO 8601
    intent_hash                          SHA-256 of the canonical intent
    intent                               the claim (PREPARED only)

Publishing follows the spec's order exactly: verify the artifact and append PREPARED
(fsync) under the session lock, run the publisher, append COMMITTED (fsync). Only
:class:`~toolswap.errors.ArtifactPublicationRejected` appends ABORTED; any other exception
propagates unchanged and the lease stays PREPARED, protecting its artifact with no
deadline until :meth:`ArtifactRetentionJournal.reconcile_reference` settles it with the
memory owner. Removing runs the remover first and appends RELEASED only after it returns.

The folded view is cached: later operations verify and fold only the records appended
since (the chain log keeps its verified position), so one operation costs the same on a
journal of a hundred records as on one of a hundred thousand. A cold start loads the
verified checkpoint of the fold beside the journal and folds only the records after it
(see :mod:`toolswap.retention.checkpoint`); the journal writes a new checkpoint every
``checkpoint_every`` records.

A journal bound to a memory owner acknowledges its head (sequence, hash) to the owner
after each append and checks it before each operation, so a journal that lost whole
trailing records fails closed (see :mod:`toolswap.retention.owner`). Lock order: the
owner's fence may be held while the session lock is taken, never the reverse: the journal
writes to the owner only outside the session lock, and the head it reads under a caller's
lock (cleanup) is a read that a fence does not block (SQLite WAL).

The journal is built in layers, one module each (none imports a layer above it):

- :mod:`~toolswap.retention._fold`: records in, leases and the claim view out (pure);
- :mod:`~toolswap.retention._guards`: the owner's acknowledged head and the manifest
  anchor, the two witnesses that catch a journal which lost records;
- :mod:`~toolswap.retention._core`: the fold kept current under the lock, and appends;
- :mod:`~toolswap.retention._protocol`: prepare, commit, abort, release,
  publish_reference, remove_reference, recover and the other views;
- :mod:`~toolswap.retention._reconcile`: reconcile_reference and reconcile_pending;
- this module: :class:`ArtifactRetentionJournal`, which opens a journal on its store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from ..errors import InvalidArgumentError
from ..manifest import Manifest
from ..reader import ArtifactReader
from ..session import Session
from . import checkpoint as _checkpoint
from ._fold import LeaseFold
from ._fold import intent_hash as intent_hash  # importable from here, as before the split
from ._guards import LossGuard
from ._protocol import ArtifactJournalSummary
from ._reconcile import LeaseReconciliation
from .journal_store import JournalStore, LocalJournalStore
from .lease import ArtifactLeasePhase, ArtifactLeaseTransaction, validate_transaction_id
from .owner import ArtifactReferenceOwner

__all__ = [
    "ArtifactJournalSummary",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactRetentionJournal",
    "validate_transaction_id",
]


class ArtifactRetentionJournal(LeaseReconciliation):
    """The lease journal of one session.

    Args:
        session_dir: the trusted session root (or an open :class:`~toolswap.Session`).
        owner: the memory owner the journal acknowledges its head to and checks it
            against (see :mod:`toolswap.retention.owner`). The default, ``"default"``,
            binds the embedded :class:`~toolswap.SqliteMemoryOwner` at
            ``<session>/memory.sqlite3`` whenever that database exists; pass ``None`` to
            bind nothing, or the owner you publish to.
        now: clock for ``recorded_at`` and for deadlines (timezone-aware UTC).
        checkpoint_every: write a checkpoint of the fold once this many records were
            appended after the last one (0: never write one; an existing one is still
            used).
        store: where the records, the lock and the checkpoint live (default: the
            session's journal file and flock; see :mod:`toolswap.retention.journal_store`).
    """

    def __init__(
        self,
        session_dir: Path | str | Session,
        *,
        owner: ArtifactReferenceOwner | Literal["default"] | None = "default",
        now: Callable[[], datetime] | None = None,
        checkpoint_every: int = _checkpoint.CHECKPOINT_INTERVAL,
        store: JournalStore | None = None,
    ) -> None:
        if not isinstance(checkpoint_every, int) or checkpoint_every < 0:
            raise InvalidArgumentError("checkpoint_every must be a non-negative number of records")
        self.session = (
            session_dir
            if isinstance(session_dir, Session)
            else Session.at(session_dir, create=False)
        )
        self.path = self.session.journal_path
        if store is not None and (
            not isinstance(store, JournalStore)
            or store.session.session_id != self.session.session_id
        ):
            raise InvalidArgumentError("store must be a JournalStore of this session")
        self._store = store if store is not None else LocalJournalStore(self.session)
        self._refuse_unshared_store()
        self._log = self._store.open_log()
        self._manifest = Manifest.of(self.session)
        self._reader = ArtifactReader(self.session, self._manifest)
        self._owner_seq = 0
        self._now = now or (lambda: datetime.now(UTC))
        if (
            owner is not None
            and owner != "default"
            and not isinstance(owner, ArtifactReferenceOwner)
        ):
            raise InvalidArgumentError("owner must be an ArtifactReferenceOwner, 'default' or None")
        self._owner_spec = owner
        self._owner = owner if isinstance(owner, ArtifactReferenceOwner) else None
        self._fold = LeaseFold(self.session.session_id, self._fail)
        self._guard = LossGuard(self._manifest, self._store.name, self._fold, self._fail)
        self._checkpoint_every = checkpoint_every
        self._checkpoint_seq = 0
