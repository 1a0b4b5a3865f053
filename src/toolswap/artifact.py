"""Value objects: source IDs, artifact sources, references and memory references.

A source ID names an artifact without a path: ``artifact:<session>:<filename>:<12 hex>``.
It is always parsed, never joined onto a directory; the physical location comes only from
the trusted session root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._artifact_names import SESSION_ID_RE as SESSION_ID_RE
from ._artifact_names import TMP_PREFIX as TMP_PREFIX
from ._artifact_names import TMP_SUFFIX as TMP_SUFFIX
from ._artifact_names import (
    artifact_filename,
    parse_artifact_filename,
    parse_temporary_filename,
    temporary_filename,
    validate_session_id,
)
from ._json_form import JsonRecord, fields_form
from ._results import InlineToolResult
from .errors import SourceIdError

if TYPE_CHECKING:
    SHA256_RE: re.Pattern[str]

__all__ = [
    "ArtifactMemoryReference",
    "ArtifactReference",
    "ArtifactSource",
    "ExternalizedToolResult",
    "InlineToolResult",
    "ParsedSourceId",
    "artifact_filename",
    "format_source_id",
    "parse_artifact_filename",
    "parse_artifact_source_id",
    "parse_temporary_filename",
    "temporary_filename",
    "validate_session_id",
]

# The patterns below are compiled on first use (by re's cache), not at every start-up.
_SHA256 = r"[0-9a-f]{64}"
_PREFIX = r"[0-9a-f]{12}"


def __getattr__(name: str) -> Any:
    if name == "SHA256_RE":  # a compiled pattern, for the modules that import it
        return re.compile(_SHA256)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class ParsedSourceId:
    """The three parts of a source ID, each validated."""

    session: str
    filename: str
    digest_prefix: str
    """First 12 lowercase hex digits of the artifact's SHA-256."""

    @property
    def number(self) -> int:
        number = parse_artifact_filename(self.filename)
        assert number is not None  # guaranteed by parse_artifact_source_id
        return number

    def __str__(self) -> str:
        return f"artifact:{self.session}:{self.filename}:{self.digest_prefix}"


def parse_artifact_source_id(source_id: str) -> ParsedSourceId:
    """Parse ``artifact:<session>:<filename>:<12 hex>`` strictly.

    Raises:
        SourceIdError: the ID is not exactly of that form (path separators, ``..``,
            non-canonical file names and upper-case hex are all refused).
    """
    if not isinstance(source_id, str):
        raise SourceIdError(f"source ID must be a string, not {type(source_id).__name__}")
    parts = source_id.split(":")
    if len(parts) != 4 or parts[0] != "artifact":
        raise SourceIdError(
            f"invalid source ID {source_id[:200]!r}: expected "
            "'artifact:<session>:tool_result_NNN.txt:<12 hex of sha256>'"
        )
    _, session, filename, prefix = parts
    validate_session_id(session)
    if parse_artifact_filename(filename) is None:
        raise SourceIdError(
            f"invalid source ID {source_id[:200]!r}: {filename[:80]!r} is not an artifact "
            "file name (tool_result_NNN.txt)"
        )
    if not re.fullmatch(_PREFIX, prefix):
        raise SourceIdError(
            f"invalid source ID {source_id[:200]!r}: the last part must be 12 lowercase hex digits"
        )
    return ParsedSourceId(session=session, filename=filename, digest_prefix=prefix)


def format_source_id(session: str, filename: str, sha256: str) -> str:
    """Build a source ID and check that it parses back."""
    if not re.fullmatch(_SHA256, sha256):
        raise SourceIdError("sha256 must be 64 lowercase hex digits")
    source_id = f"artifact:{session}:{filename}:{sha256[:12]}"
    parse_artifact_source_id(source_id)
    return source_id


@dataclass(frozen=True, slots=True)
class ArtifactSource(JsonRecord):
    """Provenance fields shared with the memory layers (spec s09/s12)."""

    source_id: str
    source_type: str = "tool_result"
    title: str = ""
    """Human-readable title: the tool name and the artifact file name."""
    captured_at: datetime | None = None
    """Timezone-aware UTC time the output finished."""

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ArtifactSource:
        captured = data.get("captured_at")
        return cls(
            source_id=str(data["source_id"]),
            source_type=str(data.get("source_type", "tool_result")),
            title=str(data.get("title", "")),
            captured_at=datetime.fromisoformat(captured) if isinstance(captured, str) else None,
        )


@dataclass(frozen=True, slots=True)
class ArtifactMemoryReference(JsonRecord):
    """What memory may keep of an artifact: no body, no preview.

    ``artifact_path`` is informational only; nothing that deletes or trusts a file ever
    reads it back. The source ID and digest are the identity.
    """

    summary: str
    artifact_path: str
    content_sha256: str
    source_tool: str
    source: ArtifactSource

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ArtifactMemoryReference:
        source = data.get("source")
        if not isinstance(source, dict):
            raise SourceIdError("memory reference has no 'source' object")
        sha = str(data.get("content_sha256", ""))
        ref = cls(
            summary=str(data.get("summary", "")),
            artifact_path=str(data.get("artifact_path", "")),
            content_sha256=sha,
            source_tool=str(data.get("source_tool", "")),
            source=ArtifactSource.from_dict(source),
        )
        parsed = parse_artifact_source_id(ref.source.source_id)
        if not re.fullmatch(_SHA256, sha) or not sha.startswith(parsed.digest_prefix):
            raise SourceIdError("memory reference digest does not match its source ID")
        return ref


@dataclass(frozen=True, slots=True)
class ArtifactReference:
    """Everything known about one immutable artifact (the body stays on disk)."""

    source: ArtifactSource
    path: Path
    """Trusted location, derived from the session root and the parsed file name."""
    summary: str
    source_tool: str
    content_sha256: str
    byte_size: int = 0
    line_count: int = 0
    char_count: int = 0
    """Unicode characters for text; equal to ``byte_size`` for binary."""
    binary: bool = False
    media_type: str = "text/plain"
    argv: tuple[str, ...] | None = None
    exit_code: int | None = None
    interrupted: str | None = None
    """The signal that interrupted the capture (``"SIGTERM"``...): the output is incomplete."""

    @property
    def source_id(self) -> str:
        return self.source.source_id

    @property
    def filename(self) -> str:
        return self.path.name

    def for_memory(self) -> ArtifactMemoryReference:
        """Return the thin reference memory may store: summary, path, digest, provenance."""
        return ArtifactMemoryReference(
            summary=self.summary,
            artifact_path=str(self.path),
            content_sha256=self.content_sha256,
            source_tool=self.source_tool,
            source=self.source,
        )

    def to_dict(self) -> dict[str, object]:
        return {"source_id": self.source_id, **fields_form(self)}


@dataclass(frozen=True, slots=True)
class ExternalizedToolResult:
    """A large output: the bounded pointer for the context, and the artifact on disk."""

    context_text: str
    artifact: ArtifactReference
    externalized: bool = field(default=True, init=False)
