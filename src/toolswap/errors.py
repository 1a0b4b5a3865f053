"""Errors raised by toolswap.

Every error derives from :class:`ToolswapError` and from the builtin it resembles, so
callers can catch either::

    ToolswapError
    ├── InvalidArgumentError (ValueError, TypeError) an argument has the wrong type or value
    ├── ConfigurationError (ValueError)        a setting or environment variable is invalid
    │   └── ClockError (ArtifactRetentionError) a clock or ``now`` gave a naive datetime
    ├── SourceIdError (ValueError)             a source ID is malformed
    ├── ArtifactAccessError (ValueError)       outside the session, not ours, or not a regular file
    │   ├── ArtifactNotFoundError (LookupError)   no such artifact (never captured, or gone)
    │   └── ArtifactCollectedError             removed by cleanup; says when and why
    ├── ArtifactIntegrityError (ValueError)    bytes on disk do not match the recorded SHA-256
    ├── ArtifactReadError (ValueError)         a read request is out of range or malformed
    │   ├── ArtifactPatternError               a grep pattern is invalid or not linear-time
    │   └── ArtifactQueryError                 a query or record address is invalid, or no JSON/CSV
    ├── ArtifactSearchTimeoutError (TimeoutError) a grep did not finish within its deadline
    │   └── ArtifactQueryTimeoutError          a query did not finish within its deadline
    ├── ChainLogError (ValueError)             a hash-chained log is corrupt or cannot be trusted
    │   └── ArtifactLeaseJournalError          the retention journal is corrupt or behind its owner
    ├── ArtifactRetentionError (ValueError)    a claim or lease operation was refused
    │   └── ArtifactPublicationRejected        a publisher proved the reference was not written
    ├── ArtifactReferenceOwnerError (RuntimeError) the memory owner failed or refused
    │   ├── ArtifactReferenceTombstonedError   the publication ID is sealed; it can never be written
    │   ├── ArtifactPublicationConflictError   the publication ID already names another reference
    │   └── ArtifactFenceStaleError            the owner's generation moved before the seal
    ├── CleanupError (ValueError)              a cleanup plan or apply was refused
    ├── ArtifactStoreError (OSError)           the shared artifact store failed or refused a request
    └── ArtifactWriteError (OSError)           the output could not be saved; carries a preview
"""

from __future__ import annotations

__all__ = [
    "ArtifactAccessError",
    "ArtifactCollectedError",
    "ArtifactFenceStaleError",
    "ArtifactIntegrityError",
    "ArtifactLeaseJournalError",
    "ArtifactNotFoundError",
    "ArtifactPatternError",
    "ArtifactPublicationConflictError",
    "ArtifactPublicationRejected",
    "ArtifactQueryError",
    "ArtifactQueryTimeoutError",
    "ArtifactReadError",
    "ArtifactReferenceOwnerError",
    "ArtifactReferenceTombstonedError",
    "ArtifactRetentionError",
    "ArtifactSearchTimeoutError",
    "ArtifactStoreError",
    "ArtifactWriteError",
    "ChainLogError",
    "CleanupError",
    "ClockError",
    "ConfigurationError",
    "InvalidArgumentError",
    "SourceIdError",
    "ToolswapError",
]


class ToolswapError(Exception):
    """Base class of every error toolswap raises on purpose."""


class InvalidArgumentError(ToolswapError, ValueError, TypeError):
    """An argument of a public call has the wrong type or value; nothing was done."""


class ConfigurationError(ToolswapError, ValueError):
    """A setting, argument or environment variable has an invalid value."""


class SourceIdError(ToolswapError, ValueError):
    """A source ID does not have the form ``artifact:<session>:<filename>:<12 hex>``."""


class ArtifactAccessError(ToolswapError, ValueError):
    """The artifact is outside the session's ``tool-results/``, not ours, or not a regular file."""


class ArtifactNotFoundError(ArtifactAccessError, LookupError):
    """No artifact with this source ID exists in the session."""


class ArtifactCollectedError(ArtifactAccessError):
    """The artifact was removed by cleanup; the message says when and why."""


class ArtifactIntegrityError(ToolswapError, ValueError):
    """The bytes on disk do not match the SHA-256 recorded for the artifact."""


class ArtifactReadError(ToolswapError, ValueError):
    """A read request (offset, range, pattern) is invalid for this artifact."""


class ArtifactPatternError(ArtifactReadError):
    """A grep pattern is invalid, or uses a construct (backreference, lookaround) that cannot
    run in linear time."""


class ArtifactQueryError(ArtifactReadError):
    """A jq or JMESPath query or a record address is invalid (or the query failed on this
    artifact), or the artifact is not JSON, JSON Lines, CSV or TSV."""


class ArtifactSearchTimeoutError(ToolswapError, TimeoutError):
    """A grep did not finish within its deadline; it was stopped and nothing was returned."""


class ArtifactQueryTimeoutError(ArtifactSearchTimeoutError):
    """A query did not finish within its deadline; it was stopped and nothing was returned."""


class ChainLogError(ToolswapError, ValueError):
    """A hash-chained JSONL log is corrupt, truncated behind its owner, or unsafe to open."""


class ArtifactLeaseJournalError(ChainLogError):
    """The retention journal cannot be trusted; nothing may be deleted until it is repaired."""


class ArtifactRetentionError(ToolswapError, ValueError):
    """A retention claim or lease transition was refused."""


class ClockError(ConfigurationError, ArtifactRetentionError):
    """A clock, or a ``now`` argument, gave something other than a timezone-aware datetime.

    Also an :class:`ArtifactRetentionError`, which the lease journal raised for it before.
    """


class ArtifactPublicationRejected(ArtifactRetentionError):
    """Raised by a publisher that guarantees the reference was not, and will not be, written."""


class ArtifactReferenceOwnerError(ToolswapError, RuntimeError):
    """The memory owner failed, or refused an operation (for example a tombstoned ID)."""


class ArtifactReferenceTombstonedError(ArtifactReferenceOwnerError):
    """The owner sealed this publication ID (tombstone); no write under it will ever land."""


class ArtifactPublicationConflictError(ArtifactReferenceOwnerError):
    """The publication ID already names a different reference in the owner."""


class ArtifactFenceStaleError(ArtifactReferenceOwnerError):
    """The owner's generation changed between the observation and the seal; observe again."""


class CleanupError(ToolswapError, ValueError):
    """A cleanup plan or apply was refused before anything was deleted."""


class ArtifactStoreError(ToolswapError, OSError):
    """The shared artifact store could not be reached, or failed a request."""


class ArtifactWriteError(ToolswapError, OSError):
    """The output could not be written to an artifact (a full disk, an I/O error).

    Nothing partial is left on disk. ``preview`` is the bounded head and tail of the output
    (what the caller can still show), ``byte_size`` how much output there was, and
    ``exit_code`` the tool's exit status when it was known.
    """

    def __init__(
        self, message: str, *, preview: str, byte_size: int, exit_code: int | None
    ) -> None:
        super().__init__(message)
        self.preview = preview
        self.byte_size = byte_size
        self.exit_code = exit_code
