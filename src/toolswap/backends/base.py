"""The session backend: where a session's artifacts and manifest records really live.

A session directory always holds ``tool-results/`` and ``manifest.jsonl``; the backend says
whether that directory is the authority (:class:`~toolswap.backends.base.LocalBackend`) or
a verified replica of a shared store (:class:`~toolswap.backends.replica.ReplicaBackend`).
It is chosen once, when the session opens (:meth:`toolswap.session.Session.at`); nothing
above this package asks which one it got.

What a backend owns:

- **names**: whether the authority takes a finished capture under a name (the local link
  decides alone; a store must first accept the bytes under a name it confirms is free);
- **manifest records**: offering record ``seq`` to the authority (a store writes it only if
  that sequence number is free) and pulling the records other hosts wrote;
- **reading**: an artifact missing here is fetched, verified and linked (a replica), or is
  simply missing (local);
- **listing and deleting** the versions the authority holds beyond this directory, each
  delete naming the exact version it verified;
- **auditing** what :func:`toolswap.verify.verify_session` cannot see in the directory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ArtifactNotFoundError

if TYPE_CHECKING:
    from .._verify_model import VerifyFinding
    from ..records import ArtifactRecord
    from .store import StoreObject

__all__ = ["LocalBackend", "SessionBackend"]


class SessionBackend:
    """One session's authority for names, records and artifact bytes.

    The methods' own bodies are the answers of a directory that is the whole truth (the
    local backend); a backend that keeps versions elsewhere overrides them.
    """

    location: str = "this directory"
    """Where the session lives, for messages: ``this directory`` or the store's URL."""
    record_crash_prefix: str = "manifest"
    """The crash-point prefix of a manifest append (``manifest`` or ``store.replica``)."""
    pull_interval: float = math.inf
    """Seconds reads may lag the authority (``inf``: the directory is the authority)."""
    authority_here: bool = True
    """Whether this directory's manifest is the session's whole truth (nothing to pull), so
    that a full check of it stays valid while the file is unchanged
    (:mod:`toolswap.readiness_memory`)."""
    copies_only: bool = False
    """Whether the files in ``tool-results/`` are copies of versions held elsewhere, so
    that a recorded file missing there may be the only copy (cleanup keeps it)."""

    def key(self, workspace: str, session_id: str) -> str:
        """The name shared services (a memory owner, a database journal) know the session
        by: ``<workspace>/<session>``, after its store's URL when it lives in one."""
        return f"{workspace}/{session_id}"

    def local_retention_refused(self) -> str | None:
        """Why a host-local lease journal or caller-supplied claims cannot protect this
        session's artifacts (other hosts reference them), or None when they can."""
        return None

    # -- manifest records ----------------------------------------------------------------

    def pull(self, after_seq: int, *, snapshot: bool = True) -> list[bytes]:
        """The authority's records after ``after_seq``, each one line (none for local).

        Raises:
            ArtifactStoreError: the store cannot be read.
        """
        return []

    def offer(self, seq: int, line: bytes) -> bool:
        """Write record ``seq`` to the authority only if that number is free.

        Raises:
            ArtifactStoreError: the store failed (nothing is known to be written).
        """
        return True  # the session lock already makes this process the only appender

    def keep_snapshot(self, seq: int, data: Callable[[], bytes]) -> None:
        """Keep records 1..``seq`` (``data()`` reads their lines) as one object, best effort
        (a no-op locally)."""
        return None

    # -- names and bytes -----------------------------------------------------------------

    def accept(self, dir_fd: int, tmp_name: str, filename: str, size: int, sha256: str) -> bool:
        """Give the finished capture ``tmp_name`` the name ``filename`` at the authority,
        only if that name is free there (the caller then links it here).

        Raises:
            ArtifactStoreError: the store failed (nothing is known to be written).
        """
        return True  # the link into tool-results/ decides

    def fetch(
        self,
        tool_results_dir: Path,
        filename: str,
        size: int,
        check: Callable[[int], None],
    ) -> os.stat_result | None:
        """Copy an artifact this directory lacks from the authority, verified by ``check``
        before it is linked; None when another process here linked its copy first.

        Raises:
            ArtifactNotFoundError: the authority has no such artifact (always, locally).
            ArtifactIntegrityError: ``check`` refused the bytes (nothing is linked).
            ArtifactStoreError: the store failed.
        """
        from .._invocation import cli_command

        raise ArtifactNotFoundError(
            "the file is missing from tool-results/ although the manifest records it; "
            f"run `{cli_command()} verify`"
        )

    def objects(self) -> list[StoreObject]:
        """Every artifact version the authority holds beyond this directory (none locally).

        Raises:
            ArtifactStoreError: the store cannot be listed.
        """
        return []

    def stat_object(self, filename: str) -> StoreObject | None:
        """The authority's current version of ``filename`` beyond this directory, or None.

        Raises:
            ArtifactStoreError: the store failed.
        """
        return None

    def delete_object(self, obj: StoreObject) -> bool:
        """Delete exactly the version ``obj`` names; False if it was replaced or is gone.

        Raises:
            ArtifactStoreError: the store failed.
        """
        return False

    def audit(
        self,
        tool_results_dir: Path,
        records: Mapping[str, ArtifactRecord],
        collected: Callable[[str], bool],
        check: Callable[[ArtifactRecord], Callable[[int], None]],
    ) -> tuple[list[VerifyFinding], set[str]]:
        """Findings about the authority beyond this directory, and the names they decided
        (the directory pass skips those). Nothing locally."""
        return [], set()


class LocalBackend(SessionBackend):
    """The session directory is the authority for everything: names are decided by the
    link into ``tool-results/`` alone (a taken name is never overwritten), records by the
    append to ``manifest.jsonl`` under the session lock, and an artifact missing from the
    directory is missing."""
