"""Session IDs, artifact file names and capture temporary names (private; the public
home of these functions is :mod:`toolswap.artifact`, which re-exports them).

They live apart from the artifact module's value objects so that what every capture needs
(a session ID checked, a name made) creates none of those dataclasses: a capture whose
output stays inline never uses them, and making each costs start-up time.
"""

from __future__ import annotations

import re

from .errors import InvalidArgumentError, SourceIdError

__all__ = [
    "SESSION_ID_RE",
    "TMP_PREFIX",
    "TMP_SUFFIX",
    "artifact_filename",
    "parse_artifact_filename",
    "parse_temporary_filename",
    "temporary_filename",
    "validate_session_id",
]

SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Compiled on first use (by re's cache): a capture whose output stays inline matches none.
# Canonical numbering only: at least three digits, no extra leading zeros beyond the padding.
_FILENAME = r"tool_result_([0-9]{3,18})\.txt"


def validate_session_id(session: str) -> str:
    """Return ``session`` if it is a safe single path component, else raise SourceIdError."""
    if not isinstance(session, str) or not SESSION_ID_RE.fullmatch(session) or ".." in session:
        raise SourceIdError(
            f"invalid session id {session!r}: use 1-128 characters of letters, digits, '_', "
            "'.', '-', starting with a letter or digit, without '..'"
        )
    return session


def artifact_filename(number: int) -> str:
    """Return the canonical artifact filename for ``number`` (1 -> ``tool_result_001.txt``)."""
    if number < 1:
        raise InvalidArgumentError("artifact numbers start at 1")
    return f"tool_result_{number:03d}.txt"


def parse_artifact_filename(filename: str) -> int | None:
    """Return the number of a canonical artifact filename, or None if the name is not ours."""
    match = re.fullmatch(_FILENAME, filename)
    if match is None:
        return None
    number = int(match.group(1))
    if number < 1 or artifact_filename(number) != filename:
        return None
    return number


TMP_PREFIX = ".tmp-"
TMP_SUFFIX = ".partial"
# The writer's pid (Linux allows at most 2**22; 10 digits bound any system) and 16 hex.
_TMP = re.escape(TMP_PREFIX) + r"([1-9][0-9]{0,9})-[0-9a-f]{16}" + re.escape(TMP_SUFFIX)
_PID_MAX = 2**31 - 1


def temporary_filename(pid: int, token: str) -> str:
    """The temporary name a capture by process ``pid`` writes to (``token``: 16 hex)."""
    return f"{TMP_PREFIX}{pid}-{token}{TMP_SUFFIX}"


def parse_temporary_filename(filename: str) -> int | None:
    """The writer's pid of a capture's temporary file name, or None if the name is not one
    toolswap writes (a planted name with an impossible pid included)."""
    match = re.fullmatch(_TMP, filename)
    if match is None:
        return None
    pid = int(match.group(1))
    return pid if pid <= _PID_MAX else None
