"""Memory owners that implement :class:`~toolswap.ArtifactReferenceOwner`."""

from __future__ import annotations

from .sqlite import DEFAULT_OWNER_FILENAME, SqliteMemoryOwner, StoredMemoryReference

__all__ = ["DEFAULT_OWNER_FILENAME", "SqliteMemoryOwner", "StoredMemoryReference"]
