"""The journal's guards against loss: the owner's acknowledged head and the manifest anchor.

A journal that lost whole trailing records is still a valid hash chain, so the chain alone
cannot notice. Two witnesses outside the journal can:

- the memory owner, which keeps the last head each journal acknowledged to it (see
  :mod:`toolswap.retention.owner`);
- the session's hash-chained manifest, where every append anchors the journal's head and
  the highest record the owner had acknowledged by then. It catches a journal deleted,
  emptied or rolled back, and an owner database deleted, emptied or swapped, even when no
  owner holds the journal's head.

Both checks compare a witness with the fold (:class:`~toolswap.retention._fold.LeaseFold`);
a journal behind either one fails closed with the error the journal's ``fail`` builds.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

from ..errors import ArtifactLeaseJournalError, ChainLogError
from ..manifest import JournalAnchor, Manifest
from ._fold import LeaseFold
from .owner import JournalHead

__all__ = ["LossGuard"]


class LossGuard:
    """Checks one journal's fold against its owner's head and its manifest anchor.

    Args:
        manifest: the session's manifest (where the anchors live).
        store: the journal store's name, which its anchors are recorded under.
        fold: the journal's fold.
        fail: builds the error a journal behind a witness raises.
    """

    def __init__(
        self,
        manifest: Manifest,
        store: str,
        fold: LeaseFold,
        fail: Callable[[str], ArtifactLeaseJournalError],
    ) -> None:
        self._manifest = manifest
        self._store = store
        self._fold = fold
        self._fail = fail

    def check_owner_head(self, head: JournalHead | None, seq: int) -> None:
        """Refuse a journal ending at ``seq`` that lacks the head its owner acknowledged."""
        if head is None or head.seq <= 0:
            return
        self._check_witness(
            seq,
            head,
            held="the memory owner acknowledged",
            behind=(
                f"is behind its memory owner: the owner acknowledged record {head.seq} but "
                f"the journal ends at record {seq}, so records were lost (truncated, or "
                "restored from an older copy)"
            ),
        )

    def _check_witness(
        self, seq: int, witness: JournalHead | JournalAnchor, *, held: str, behind: str
    ) -> None:
        """Refuse a journal ending at ``seq`` without the record a witness holds.

        Args:
            held: how the witness came to hold its record, for the message.
            behind: what the journal is when it ends before the witness's record.
        """
        if witness.seq > seq:
            raise self._fail(behind)
        if self._fold.hash_at(witness.seq) != witness.hash:
            raise self._fail(
                f"record {witness.seq} is not the record {held} (the journal was rewritten)"
            )

    def read_anchor(self) -> JournalAnchor | None:
        """The journal's anchor in the session manifest (None: never anchored)."""
        try:
            return self._manifest.journal_anchor(self._store)
        except ChainLogError as exc:
            raise self._fail(f"its anchor in the session manifest cannot be read ({exc})") from exc

    def check_anchor(self, head: JournalHead | None, seen: JournalAnchor | None, seq: int) -> None:
        """Check the journal (ending at ``seq``) and the owner's head against the anchor.

        ``seen`` is the anchor read before the owner's head was (None: the owner is not
        checked): the owner cannot know less than the anchor it had acknowledged by then.
        The owner's head is never read under the lock, so a newer anchor may name a head
        the owner acknowledged after that read.
        """
        anchor = self.read_anchor()
        # A session's leases live in one store: a manifest that anchors another store means
        # this one (empty or not) does not hold every claim; reading it alone could make
        # referenced artifacts look like orphans.
        others = [name for name in self._manifest.journal_stores() if name != self._store]
        if others:
            raise self._fail(
                f"is not the only lease journal of this session: the session manifest also "
                f"anchors {others[0]}; open the session's journal there (--database-url)"
            )
        if anchor is None:
            return
        self._check_witness(
            seq,
            anchor,
            held="the session manifest anchored",
            behind=(
                f"ends at record {seq} but the session manifest anchored record {anchor.seq}: "
                "the journal was deleted, emptied or restored from an older copy"
            ),
        )
        if seen is not None and seen.owner_seq > (head.seq if head is not None else 0):
            known = "no memory owner is bound" if head is None else f"it knows {head.seq}"
            raise self._fail(
                f"its memory owner had acknowledged record {seen.owner_seq} but {known}: "
                "the owner database was deleted, emptied or replaced by another session's"
            )

    def anchor(self, head: tuple[int, str], owner_seq: int) -> None:
        """Record the journal's new head in the session manifest (hold the journal's lock).

        Best effort: a missing anchor only leaves an older one, which is still a valid
        lower bound; the journal record itself is already durable.
        """
        seq, digest = head
        with suppress(ChainLogError, OSError):
            self._manifest.append(
                JournalAnchor(journal=self._store, seq=seq, hash=digest, owner_seq=owner_seq)
            )
