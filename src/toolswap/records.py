"""The manifest's records, typed: one encoder, one decoder, every field checked.

``manifest.jsonl`` (a :class:`~toolswap.chainlog.ChainLog`) holds three kinds of record,
told apart by ``event``:

- ``artifact`` (:class:`ArtifactRecord`): everything needed to rebuild an artifact's
  :class:`~toolswap.artifact.ArtifactReference` from its source ID after a restart;
- ``collected`` (:class:`CollectedRecord`): when and why cleanup removed a file;
- ``journal`` (:class:`JournalAnchor`): the lease journal's head, so a journal deleted or
  rolled back is noticed even without a memory owner.

:func:`encode` turns a record into the body the chain log appends; :func:`decode` turns a
verified line back into a record, accepting only the fields its kind has (the chain's own
``v``/``seq``/``session``/``prev``/``hash`` aside), each of its type. A record the decoder
refuses makes the whole manifest untrusted (the fold raises :class:`ChainLogError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .artifact import (
    ArtifactReference,
    ArtifactSource,
    format_source_id,
    parse_artifact_filename,
    parse_artifact_source_id,
)
from .errors import ChainLogError, SourceIdError

__all__ = [
    "ArtifactRecord",
    "CollectedRecord",
    "JournalAnchor",
    "ManifestRecord",
    "decode",
    "encode",
]

_CHAIN_FIELDS = frozenset({"v", "seq", "session", "prev", "hash"})


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """One artifact as captured: its name, digest, sizes and provenance."""

    filename: str
    source_id: str
    sha256: str
    tool: str
    summary: str
    byte_size: int
    line_count: int
    char_count: int
    binary: bool
    media_type: str
    captured_at: str
    """ISO 8601, in UTC."""
    argv: tuple[str, ...] | None = None
    exit_code: int | None = None
    interrupted: str | None = None
    """The signal that cut the capture short, if one did."""

    def reference(self, tool_results_dir: Path) -> ArtifactReference:
        """The artifact's reference (the path from the trusted session root)."""
        return ArtifactReference(
            source=ArtifactSource(
                source_id=self.source_id,
                source_type="tool_result",
                title=f"{self.tool} output ({self.filename})",
                captured_at=datetime.fromisoformat(self.captured_at),
            ),
            path=tool_results_dir / self.filename,
            summary=self.summary,
            source_tool=self.tool,
            content_sha256=self.sha256,
            byte_size=self.byte_size,
            line_count=self.line_count,
            char_count=self.char_count,
            binary=self.binary,
            media_type=self.media_type,
            argv=self.argv,
            exit_code=self.exit_code,
            interrupted=self.interrupted,
        )


@dataclass(frozen=True, slots=True)
class CollectedRecord:
    """Why and when cleanup removed an artifact (or a file under an artifact's name)."""

    filename: str
    source_id: str | None
    collected_at: str
    reason: str
    sha256: str | None = None
    """The digest of what was removed, when it was known."""


@dataclass(frozen=True, slots=True)
class JournalAnchor:
    """The lease journal's head as the manifest last recorded it."""

    seq: int
    hash: str
    owner_seq: int = 0
    """The highest journal record the memory owner had acknowledged when this anchor was
    written (0: no owner): the owner may never later know less."""
    journal: str = ""
    """Which journal store: the journal's file name, or the database's journal key."""


ManifestRecord = ArtifactRecord | CollectedRecord | JournalAnchor


def encode(record: ManifestRecord) -> dict[str, object]:
    """The body :meth:`ChainLog.append` writes for ``record``."""
    if isinstance(record, ArtifactRecord):
        body: dict[str, object] = {
            "event": "artifact",
            "filename": record.filename,
            "source_id": record.source_id,
            "sha256": record.sha256,
            "tool": record.tool,
            "summary": record.summary,
            "byte_size": record.byte_size,
            "line_count": record.line_count,
            "char_count": record.char_count,
            "binary": record.binary,
            "media_type": record.media_type,
            "captured_at": record.captured_at,
            "argv": list(record.argv) if record.argv is not None else None,
            "exit_code": record.exit_code,
        }
        if record.interrupted:
            body["interrupted"] = record.interrupted
        return body
    if isinstance(record, CollectedRecord):
        return {
            "event": "collected",
            "filename": record.filename,
            "source_id": record.source_id,
            "sha256": record.sha256,
            "collected_at": record.collected_at,
            "reason": record.reason,
        }
    return {
        "event": "journal",
        "journal": record.journal,
        "journal_seq": record.seq,
        "journal_hash": record.hash,
        "owner_seq": record.owner_seq,
    }


class _Refused(Exception):
    pass


def _field(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(name)
    if not _is(value, kind):
        raise _Refused(f"field {name!r} is missing or not {_name(kind)}")
    return value


def _optional(body: Mapping[str, Any], name: str, kind: type) -> Any:
    """The field's value, or None when it is absent or null."""
    value = body.get(name)
    if value is not None and not _is(value, kind):
        raise _Refused(f"field {name!r} is not {_name(kind)}")
    return value


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    # bool is an int: a count or a sequence number must not be true or false.
    return isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind))


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    return " or ".join("null" if k is type(None) else k.__name__ for k in _kinds(kind))


def _count(body: Mapping[str, Any], name: str) -> int:
    value: int = _field(body, name, int)
    if value < 0:
        raise _Refused(f"field {name!r} is negative")
    return value


def _timestamp(body: Mapping[str, Any], name: str) -> str:
    value: str = _field(body, name, str)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _Refused(f"field {name!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise _Refused(f"field {name!r} has no time zone")
    return value


def _only(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    extra = body.keys() - allowed - _CHAIN_FIELDS
    if extra:
        raise _Refused(f"unknown field(s) {sorted(extra)}")


def _artifact_name(body: Mapping[str, Any]) -> str:
    filename = body.get("filename")
    if not isinstance(filename, str) or parse_artifact_filename(filename) is None:
        raise _Refused("names no artifact file")
    return filename


_ARTIFACT_FIELDS = frozenset(
    {
        "event",
        "filename",
        "source_id",
        "sha256",
        "tool",
        "summary",
        "byte_size",
        "line_count",
        "char_count",
        "binary",
        "media_type",
        "captured_at",
        "argv",
        "exit_code",
        "interrupted",
    }
)
_COLLECTED_FIELDS = frozenset(
    {"event", "filename", "source_id", "sha256", "collected_at", "reason"}
)
_JOURNAL_FIELDS = frozenset({"event", "journal", "journal_seq", "journal_hash", "owner_seq"})


def _decode_artifact(body: Mapping[str, Any], session: str) -> ArtifactRecord:
    _only(body, _ARTIFACT_FIELDS)
    filename = _artifact_name(body)
    sha256: str = _field(body, "sha256", str)
    source_id: str = _field(body, "source_id", str)
    try:
        expected = format_source_id(session, filename, sha256)
    except SourceIdError as exc:
        raise _Refused(str(exc)) from None
    if source_id != expected:
        raise _Refused(f"source ID {source_id[:120]!r} does not name its own file and digest")
    argv = body.get("argv")
    if argv is not None and (
        not isinstance(argv, list) or not all(isinstance(a, str) for a in argv)
    ):
        raise _Refused("field 'argv' is not a list of strings")
    exit_code: int | None = _optional(body, "exit_code", int)
    interrupted: str | None = _optional(body, "interrupted", str)
    return ArtifactRecord(
        filename=filename,
        source_id=source_id,
        sha256=sha256,
        tool=_field(body, "tool", str),
        summary=_field(body, "summary", str),
        byte_size=_count(body, "byte_size"),
        line_count=_count(body, "line_count"),
        char_count=_count(body, "char_count"),
        binary=_field(body, "binary", bool),
        media_type=_field(body, "media_type", str),
        captured_at=_timestamp(body, "captured_at"),
        argv=tuple(argv) if argv is not None else None,
        exit_code=exit_code,
        interrupted=interrupted or None,
    )


def _decode_collected(body: Mapping[str, Any], session: str) -> CollectedRecord:
    _only(body, _COLLECTED_FIELDS)
    filename = _artifact_name(body)
    source_id = body.get("source_id")
    if source_id is not None:
        try:
            parsed = parse_artifact_source_id(source_id)
        except SourceIdError as exc:
            raise _Refused(str(exc)) from None
        if (parsed.session, parsed.filename) != (session, filename):
            raise _Refused("its source ID names another file or session")
    sha256: str | None = _optional(body, "sha256", str)
    return CollectedRecord(
        filename=filename,
        source_id=source_id,
        collected_at=_timestamp(body, "collected_at"),
        reason=str(body.get("reason", "")),
        sha256=sha256,
    )


def _decode_anchor(body: Mapping[str, Any]) -> JournalAnchor:
    _only(body, _JOURNAL_FIELDS)
    seq = _count(body, "journal_seq")
    if seq < 1:
        raise _Refused("field 'journal_seq' is not positive")
    return JournalAnchor(
        journal=_field(body, "journal", str),
        seq=seq,
        hash=_field(body, "journal_hash", str),
        owner_seq=_count(body, "owner_seq") if "owner_seq" in body else 0,
    )


def decode(body: Mapping[str, Any], session: str) -> ManifestRecord:
    """The record a verified manifest line holds.

    Raises:
        ChainLogError: the record is not one of the three kinds, or a field is missing,
            unknown or of the wrong type (``manifest record <seq> ...``).
    """
    event = body.get("event")
    try:
        if event == "artifact":
            return _decode_artifact(body, session)
        if event == "collected":
            return _decode_collected(body, session)
        if event == "journal":
            return _decode_anchor(body)
        raise _Refused("has unknown event" if "filename" in body else "names no artifact file")
    except _Refused as exc:
        what = str(exc)
        if event == "journal":
            what = f"is a malformed journal anchor ({what})"
        elif not what.startswith(("has ", "names ")):
            what = f"is malformed: {what}"
        raise ChainLogError(f"manifest record {body.get('seq')} {what}") from None
