"""toolswap: virtual memory for LLM context.

Large tool output goes to an immutable, digest-verified artifact; the model gets a small
pointer and pages the rest in on demand.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .artifact import (
    ArtifactMemoryReference,
    ArtifactReference,
    ArtifactSource,
    ExternalizedToolResult,
    InlineToolResult,
    ParsedSourceId,
    parse_artifact_source_id,
)
from .crashpoints import CRASH_POINTS
from .errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactNotFoundError,
    ArtifactPublicationRejected,
    ArtifactReadError,
    ArtifactReferenceOwnerError,
    ArtifactRetentionError,
    ChainLogError,
    CleanupError,
    ConfigurationError,
    SourceIdError,
    ToolswapError,
)
from .externalizer import Output, ToolResultExternalizer
from .pointer import POINTER_TEMPLATE
from .reader import ArtifactReader, ByteRange, GrepMatch, GrepResult, LinePage
from .session import Session
from .settings import ExternalizerSettings, ToolThreshold

try:
    __version__ = version("toolswap")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "CRASH_POINTS",
    "POINTER_TEMPLATE",
    "ArtifactAccessError",
    "ArtifactCollectedError",
    "ArtifactIntegrityError",
    "ArtifactLeaseJournalError",
    "ArtifactMemoryReference",
    "ArtifactNotFoundError",
    "ArtifactPublicationRejected",
    "ArtifactReadError",
    "ArtifactReader",
    "ArtifactReference",
    "ArtifactReferenceOwnerError",
    "ArtifactRetentionError",
    "ArtifactSource",
    "ByteRange",
    "ChainLogError",
    "CleanupError",
    "ConfigurationError",
    "ExternalizedToolResult",
    "ExternalizerSettings",
    "GrepMatch",
    "GrepResult",
    "InlineToolResult",
    "LinePage",
    "Output",
    "ParsedSourceId",
    "Session",
    "SourceIdError",
    "ToolResultExternalizer",
    "ToolThreshold",
    "ToolswapError",
    "__version__",
    "parse_artifact_source_id",
]
