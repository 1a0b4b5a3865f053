"""Where a lease journal keeps its records, its lock and its checkpoint.

The journal's protocol and fold are the same on every store; a store supplies:

- the hash-chained log (a :class:`~toolswap.chainlog.ChainLog`, or a subclass that keeps
  the same records elsewhere);
- the lock that ``prepare()``, every append and gc share;
- the checkpoint of the fold (see :mod:`toolswap.retention.checkpoint`).

:class:`LocalJournalStore` is the default: ``<session>/retention-leases.jsonl``, the
session's ``flock`` and the checkpoint file beside the journal. The PostgreSQL store
(:mod:`toolswap.retention.postgres_journal`) keeps the same records in a table, for
sessions that several hosts share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

from ..chainlog import ChainLog
from ..errors import ArtifactLeaseJournalError
from ..session import Session
from . import checkpoint as _checkpoint
from .lease import ArtifactLeaseTransaction

__all__ = ["JournalStore", "LocalJournalStore"]


class JournalStore(ABC):
    """The storage of one session's lease journal."""

    session: Session
    shared: bool = False
    """Whether every host sees this journal (a session kept in a shared store needs one)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """How errors name the journal (a file name, or the database's journal key)."""

    @abstractmethod
    def open_log(self) -> ChainLog:
        """The journal's hash-chained log (called once per journal object)."""

    @abstractmethod
    def lock(self) -> AbstractContextManager[None]:
        """The lock that prepare(), appends and gc share (re-entrant in one thread)."""

    @abstractmethod
    def load_checkpoint(self) -> _checkpoint.FoldCheckpoint | None:
        """The checkpoint, checked against the log (None: none usable; fold it all).

        Raises:
            ArtifactLeaseJournalError: an intact checkpoint names records the log lost.
        """

    @abstractmethod
    def write_checkpoint(
        self, log: ChainLog, leases: list[ArtifactLeaseTransaction], hashes: bytes
    ) -> bool:
        """Write the checkpoint of the fold as of ``log.head`` (hold the lock)."""

    @abstractmethod
    def check_checkpoint(self, hashes: bytes) -> None:
        """Refuse an intact checkpoint that names a record the log does not hold."""

    def close(self) -> None:  # noqa: B027 - a store that keeps nothing open closes nothing
        """Release what the store keeps open between operations (it stays usable)."""


class LocalJournalStore(JournalStore):
    """The journal file of a local session directory, its flock and its checkpoint file."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.path = session.journal_path

    @property
    def name(self) -> str:
        return self.path.name

    def open_log(self) -> ChainLog:
        return ChainLog(self.path, self.session.session_id, error=ArtifactLeaseJournalError)

    def lock(self) -> AbstractContextManager[None]:
        return self.session.lock()

    def load_checkpoint(self) -> _checkpoint.FoldCheckpoint | None:
        return _checkpoint.load_checkpoint(self.path, self.session.session_id)

    def write_checkpoint(
        self, log: ChainLog, leases: list[ArtifactLeaseTransaction], hashes: bytes
    ) -> bool:
        seq, digest = log.head
        return seq > 0 and _checkpoint.write_checkpoint(
            self.path,
            self.session.session_id,
            seq=seq,
            digest=digest,
            offset=log.offset,
            identity=log.identity,
            leases=leases,
            hashes=hashes,
        )

    def check_checkpoint(self, hashes: bytes) -> None:
        _checkpoint.check_against(self.path, self.session.session_id, hashes)
