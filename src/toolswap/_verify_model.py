"""What ``toolswap verify`` finds: one typed finding per file, object or manifest problem."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ._json_form import fields_form

__all__ = ["FindingKind", "VerifyFinding"]


class FindingKind(StrEnum):
    OK = "ok"
    """The file matches its manifest record (size and SHA-256)."""
    MISSING = "missing"
    """The manifest records the artifact but the file is gone (and no collection is recorded)."""
    DIGEST_MISMATCH = "digest_mismatch"
    """Same size as recorded, different SHA-256: the bytes changed; never trust this file."""
    SIZE_MISMATCH = "size_mismatch"
    """A different size than recorded: truncated or appended to."""
    NOT_REGULAR = "not_regular"
    """A symlink, directory, other non-regular file or another user's file under an
    artifact name (the reader refuses it)."""
    UNREADABLE = "unreadable"
    """The file could not be read to the end (an I/O error); nothing about it is known."""
    UNRECORDED = "unrecorded"
    """An artifact-named file with no manifest record (a crash between link and record)."""
    UNKNOWN_FILE = "unknown_file"
    """A file in tool-results/ whose name toolswap never writes."""
    TEMPORARY = "temporary"
    """A capture's temporary file (in progress, or left by a crash; cleanup collects it)."""
    COLLECTING = "collecting"
    """A file the manifest records as collected: a cleanup was interrupted before the
    unlink; the next cleanup removes it."""
    MANIFEST_CORRUPT = "manifest_corrupt"
    """The manifest itself fails verification; nothing else was checked."""
    MANIFEST_BEHIND = "manifest_behind"
    """The manifest lost records its head file saw (deleted, cut, or an older copy)."""
    STORE_UNREACHABLE = "store_unreachable"
    """The session's shared store could not be listed; only this host's replica was checked."""

    @property
    def is_problem(self) -> bool:
        return self not in (FindingKind.OK, FindingKind.TEMPORARY, FindingKind.COLLECTING)


@dataclass(frozen=True, slots=True)
class VerifyFinding:
    kind: FindingKind
    name: str
    """File name inside tool-results/ (or the manifest's name)."""
    detail: str = ""
    source_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind.value, "problem": self.kind.is_problem, **fields_form(self)}
