"""The memory owner's side of the lease protocol: fenced observation, seal, reports.

A memory owner (the store that keeps :class:`~toolswap.ArtifactMemoryReference` records)
is the only party that can say whether a publication happened. The journal asks it under
a *fence*: :meth:`ArtifactReferenceOwner.inspect_fenced` returns a context manager that,
for as long as it is open, excludes every change to the publication with that transaction
ID, and reports what the owner holds as an :class:`ArtifactReferenceObservation`.

If the owner holds nothing, the journal may only abort the lease after the owner has
*sealed* the absence: :meth:`ArtifactReferenceFence.seal_absent` writes a tombstone that
rejects the transaction ID forever (late and replayed writes alike) and advances the
owner's generation with a compare-and-swap. A single "not found" is never enough: a
delayed commit or a lagging read view could still make the reference appear.

Journal-head acknowledgment
---------------------------
A journal truncated by whole records (a restore from an old backup, a bad copy, a file
replaced by an older one) is still a valid hash chain, so the chain alone cannot notice.
The owner therefore keeps the last journal head each journal told it about:
:meth:`ArtifactReferenceOwner.acknowledge_journal_head` stores ``(sequence, hash)`` under a
journal key (``<workspace>/<session>``) and only ever moves it forward, and
:meth:`ArtifactReferenceOwner.journal_head` returns it. A journal bound to an owner
acknowledges its head after every record it appends (after the fsync, outside the session
lock and outside any fence), and checks the owner's head before every operation: a journal
whose sequence is below the acknowledged one, or whose record at that sequence has another
hash, fails closed with :class:`~toolswap.errors.ArtifactLeaseJournalError`. The head is
acknowledged after PREPARED too, before the publisher runs, so a lost PREPARED record whose
reference reached the owner is caught. Owners that keep no heads inherit the defaults
(acknowledge nothing, report nothing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum

from .._json_form import JsonRecord
from ..errors import ArtifactReferenceOwnerError
from .lease import ArtifactLeaseTransaction

__all__ = [
    "ArtifactObservationState",
    "ArtifactReconcileReport",
    "ArtifactReconcileStatus",
    "ArtifactReferenceFence",
    "ArtifactReferenceObservation",
    "ArtifactReferenceOwner",
    "JournalHead",
]


class ArtifactObservationState(StrEnum):
    """What the owner holds under a transaction ID, as seen inside a fence."""

    PUBLISHED = "published"
    """A reference is stored under this transaction ID."""
    ABSENT = "absent"
    """Nothing is stored; see ``sealed`` for whether that is final."""
    UNKNOWN = "unknown"
    """The owner cannot tell (unreadable record, unavailable store)."""


@dataclass(frozen=True, slots=True)
class ArtifactReferenceObservation:
    """The owner's answer for one transaction ID, valid while the fence is held."""

    state: ArtifactObservationState
    generation: int | None = None
    """The owner's generation for this transaction ID (None when the owner has none)."""
    source_id: str | None = None
    """Source ID of the stored reference (PUBLISHED only)."""
    content_sha256: str | None = None
    """Full digest of the stored reference (PUBLISHED only)."""
    sealed: bool = False
    """ABSENT only: a tombstone makes the absence permanent."""

    def __post_init__(self) -> None:
        published = self.state is ArtifactObservationState.PUBLISHED
        if published and (self.source_id is None or self.content_sha256 is None):
            raise ArtifactReferenceOwnerError(
                "a PUBLISHED observation must carry the stored source ID and digest"
            )
        if self.sealed and self.state is not ArtifactObservationState.ABSENT:
            raise ArtifactReferenceOwnerError("only an ABSENT observation can be sealed")


class ArtifactReferenceFence(ABC):
    """An open fence: the observation, and the one write the journal may ask for."""

    @property
    @abstractmethod
    def observation(self) -> ArtifactReferenceObservation:
        """What the owner held when the fence was taken."""

    @abstractmethod
    def seal_absent(self) -> ArtifactReferenceObservation:
        """Seal an unsealed absence: write the tombstone and advance the generation (CAS).

        The tombstone must be durable when this returns.

        Returns:
            The sealed observation (ABSENT, ``sealed=True``, the new generation).

        Raises:
            ArtifactFenceStaleError: the generation changed since the observation; nothing
                was written.
            ArtifactReferenceOwnerError: the owner failed; the absence may or may not be
                sealed (the next observation says which).
        """


class ArtifactReferenceOwner(ABC):
    """The trusted memory store the journal reconciles against.

    Implementations must give the fence real exclusion inside the owner (a database
    transaction, a row lock, a conditional write on a generation), make the tombstone
    permanent, and use the transaction ID as the stable publication ID.
    """

    @abstractmethod
    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> AbstractContextManager[ArtifactReferenceFence]:
        """Fence the publication of ``transaction.transaction_id`` and observe it.

        Raises:
            ArtifactReferenceOwnerError: the fence could not be taken (the journal reports
                the lease as pending_unknown and keeps it PREPARED).
        """

    def journal_head(self, journal_key: str) -> JournalHead | None:
        """The last journal head acknowledged for ``journal_key`` (None if never)."""
        return None

    def close(self) -> None:  # noqa: B027 - an owner that keeps nothing open closes nothing
        """Release what the owner keeps open between operations (it stays usable)."""

    def acknowledge_journal_head(self, journal_key: str, head: JournalHead) -> None:  # noqa: B027
        """Remember ``head`` for ``journal_key`` if it is ahead of the stored one."""


@dataclass(frozen=True, slots=True)
class JournalHead(JsonRecord):
    """A journal position: the sequence number and hash of one record."""

    seq: int
    hash: str


class ArtifactReconcileStatus(StrEnum):
    """The outcome of reconciling one lease (the spec's table)."""

    COMMITTED = "committed"
    """The owner holds the matching reference: COMMITTED was appended."""
    ABORTED = "aborted"
    """The owner sealed the absence: ABORTED was appended."""
    PENDING_CONFLICT = "pending_conflict"
    """The owner holds a different reference under this ID; the lease stays PREPARED."""
    PENDING_UNKNOWN = "pending_unknown"
    """The owner could not answer; the lease stays PREPARED, retry later."""
    PENDING_STALE = "pending_stale"
    """The owner's generation moved before the seal; the lease stays PREPARED, observe again."""
    ALREADY_COMMITTED = "already_committed"
    ALREADY_ABORTED = "already_aborted"
    ALREADY_RELEASED = "already_released"

    @property
    def is_pending(self) -> bool:
        return self.value.startswith("pending_")


@dataclass(frozen=True, slots=True)
class ArtifactReconcileReport(JsonRecord):
    """One reconciliation result: no path, no memory body, no credentials."""

    transaction_id: str
    status: ArtifactReconcileStatus
    reason: str
    generation: int | None = None
    """The owner's generation the decision was made at (None if the owner gave none)."""
