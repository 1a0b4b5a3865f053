"""The page-fault half of :class:`~toolswap.ToolResultExternalizer`: reads, grep and
listing, each handed to the session's :class:`~toolswap.reader.ArtifactReader` (made, and
the reader and grep modules imported, on the first read: a capture never needs them)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Unpack

from .manifest import Manifest
from .session import Session

if TYPE_CHECKING:
    from .artifact import ArtifactReference
    from .grep import GrepOptions
    from .reader import ArtifactReader, ByteRange, GrepResult, LinePage
    from .structured.query import Language, QueryResult
    from .structured.record import RecordResult

__all__ = ["PageFaults"]


class PageFaults:
    """Reading a session's artifacts (mixed into the externalizer)."""

    session: Session
    manifest: Manifest

    @cached_property
    def reader(self) -> ArtifactReader:
        """The session's reader (digest verification, line index, grep)."""
        from .reader import ArtifactReader

        return ArtifactReader(self.session, self.manifest)

    def get_artifact(self, source_id: str) -> ArtifactReference:
        """Rebuild an artifact's reference from its source ID (after a restart too)."""
        return self.reader.reference(source_id)

    def list_artifacts(self) -> list[ArtifactReference]:
        """Every live artifact of the session, oldest first."""
        return [self.manifest.reference(r) for r in self.manifest.records()]

    def read_artifact(
        self, artifact: ArtifactReference | str, offset: int = 0, limit: int = 2000
    ) -> str:
        """The spec's page fault: lines ``offset`` .. ``offset + limit`` (0-based), verified."""
        return self.reader.read_artifact(artifact, offset, limit)

    def read_lines(
        self,
        artifact: ArtifactReference | str,
        offset: int = 0,
        limit: int = 2000,
        *,
        width: int = 2000,
    ) -> LinePage:
        return self.reader.read_lines(artifact, offset, limit, width=width)

    def read_bytes(
        self, artifact: ArtifactReference | str, start: int = 0, length: int = 65536
    ) -> ByteRange:
        return self.reader.read_bytes(artifact, start, length)

    def grep(
        self, artifact: ArtifactReference | str, pattern: str, **options: Unpack[GrepOptions]
    ) -> GrepResult:
        """See :meth:`ArtifactReader.grep`: a linear-time search stopped at ``timeout`` s
        (default :data:`toolswap.grep.DEFAULT_TIMEOUT`, 10)."""
        return self.reader.grep(artifact, pattern, **options)

    def query(
        self,
        artifact: ArtifactReference | str,
        expression: str,
        *,
        language: Language = "jq",
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> QueryResult:
        """A jq (or JMESPath) query over a structured artifact, in a child process stopped
        at ``timeout`` s; results past ``max_bytes`` are left out (``truncated``). This is
        the call the pointer's ``python`` query line names."""
        from .structured.query import DEFAULT_QUERY_BYTES, DEFAULT_QUERY_TIMEOUT, query_artifact

        return query_artifact(
            self.reader,
            artifact,
            expression,
            language=language,
            timeout=DEFAULT_QUERY_TIMEOUT if timeout is None else timeout,
            max_bytes=DEFAULT_QUERY_BYTES if max_bytes is None else max_bytes,
        )

    def read_record(
        self, artifact: ArtifactReference | str, address: str, *, max_bytes: int | None = None
    ) -> RecordResult:
        """One record of a structured artifact by the path its outline prints
        (``items[3777]``; ``5120`` for record 5120, 0-based, of JSON Lines or a table), as
        indented JSON of at most ``max_bytes`` characters (more: ``truncated``). This is
        the call the pointer's ``python`` record line names."""
        from .structured.query import DEFAULT_QUERY_BYTES
        from .structured.record import read_record

        return read_record(
            self.reader,
            artifact,
            address,
            max_bytes=DEFAULT_QUERY_BYTES if max_bytes is None else max_bytes,
        )
