"""The cleanup half of :class:`~toolswap.ToolResultExternalizer`: plans and applies, handed
to :mod:`toolswap.cleanup` (imported on first use: a capture never needs it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .errors import CleanupError
from .session import Session

if TYPE_CHECKING:
    from datetime import datetime

    from .cleanup import (
        ArtifactCleanupPlan,
        ArtifactCleanupPolicy,
        ArtifactCleanupReport,
        CleanupClaim,
        JournalLike,
    )

__all__ = ["CleanupMethods"]


class CleanupMethods:
    """Collecting a session's artifacts (mixed into the externalizer)."""

    session: Session

    def plan_cleanup(
        self,
        claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim],
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan from caller-supplied claims; refused once the session has a durable journal."""
        from . import cleanup

        return cleanup.plan_cleanup(self.session, claims, policy=policy, now=now)

    def apply_cleanup(
        self,
        plan: ArtifactCleanupPlan,
        claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim] | None,
        *,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Apply a plan against the current caller-supplied claims."""
        from . import cleanup

        return cleanup.apply_cleanup(self.session, plan, claims, now=now)

    def plan_cleanup_from_journal(
        self,
        journal: JournalLike,
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan from the retention journal's current claims (read-only)."""
        self._same_session(journal)
        from . import cleanup

        return cleanup.plan_cleanup_from_journal(journal, policy=policy, now=now)

    def apply_cleanup_from_journal(
        self, plan: ArtifactCleanupPlan, journal: JournalLike, *, now: datetime | None = None
    ) -> ArtifactCleanupReport:
        """Apply a plan under the session lock, re-folding the journal's claims first."""
        self._same_session(journal)
        from . import cleanup

        return cleanup.apply_cleanup_from_journal(plan, journal, now=now)

    def _same_session(self, journal: JournalLike) -> None:
        if journal.session.root != self.session.root:
            raise CleanupError(
                f"the journal belongs to session {journal.session.session_id!r} at "
                f"{journal.session.root}, not to this externalizer's session"
            )
