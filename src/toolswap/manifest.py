"""The session manifest: one durable record per artifact and per collection.

``<session>/manifest.jsonl`` is a :class:`~toolswap.chainlog.ChainLog`. An ``artifact``
record carries everything needed to rebuild an :class:`ArtifactReference` from its source
ID after a restart; a ``collected`` record says when and why cleanup removed a file. The
highest number ever recorded is the high-water mark: a name is never handed out twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .artifact import ArtifactReference, ArtifactSource, parse_artifact_filename
from .chainlog import ChainLog
from .errors import ChainLogError

__all__ = ["CollectedRecord", "Manifest"]


@dataclass(frozen=True, slots=True)
class CollectedRecord:
    """Why and when cleanup removed an artifact."""

    filename: str
    source_id: str | None
    collected_at: str
    reason: str


class Manifest:
    """Folded view of the manifest log; refreshed incrementally on every access."""

    def __init__(self, path: Path, session: str, tool_results_dir: Path) -> None:
        self._log = ChainLog(path, session)
        self._dir = tool_results_dir
        self._artifacts: dict[str, dict[str, Any]] = {}
        self._collected: dict[str, CollectedRecord] = {}
        self._high_water = 0

    @property
    def log(self) -> ChainLog:
        return self._log

    def _fold(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            event = record.get("event")
            filename = record.get("filename")
            number = parse_artifact_filename(filename) if isinstance(filename, str) else None
            if number is None:
                raise ChainLogError(f"manifest record {record.get('seq')} names no artifact file")
            self._high_water = max(self._high_water, number)
            assert isinstance(filename, str)
            if event == "artifact":
                self._artifacts[filename] = record
                self._collected.pop(filename, None)
            elif event == "collected":
                self._artifacts.pop(filename, None)
                self._collected[filename] = CollectedRecord(
                    filename=filename,
                    source_id=record.get("source_id"),
                    collected_at=str(record.get("collected_at")),
                    reason=str(record.get("reason")),
                )
            else:
                raise ChainLogError(f"manifest record {record.get('seq')} has unknown event")

    def refresh(self) -> None:
        with self._log.lock:
            # A replaced manifest must still hold every record this process read (the log
            # refuses it otherwise), so no name is handed out twice.
            reset, records = self._log.refresh()
            if reset:
                self._artifacts.clear()
                self._collected.clear()
                self._high_water = 0
            self._fold(records)

    def high_water(self) -> int:
        self.refresh()
        return self._high_water

    def append(self, body: dict[str, Any]) -> dict[str, Any]:
        """Append a record durably; the caller holds the session lock."""
        with self._log.lock:
            before, record = self._log.append(body, crash_prefix="manifest")
            self._fold([*before, record])
            return record

    def record_for(self, filename: str) -> dict[str, Any] | None:
        self.refresh()
        return self._artifacts.get(filename)

    def collected(self, filename: str) -> CollectedRecord | None:
        self.refresh()
        return self._collected.get(filename)

    def records(self) -> list[dict[str, Any]]:
        """Current artifact records, in file-number order."""
        self.refresh()
        return sorted(
            self._artifacts.values(), key=lambda r: parse_artifact_filename(r["filename"]) or 0
        )

    def collected_records(self) -> list[CollectedRecord]:
        self.refresh()
        return list(self._collected.values())

    def reference(self, record: dict[str, Any]) -> ArtifactReference:
        """Rebuild the reference of an ``artifact`` record (the path from the trusted root)."""
        argv = record.get("argv")
        return ArtifactReference(
            source=ArtifactSource(
                source_id=record["source_id"],
                source_type="tool_result",
                title=f"{record['tool']} output ({record['filename']})",
                captured_at=datetime.fromisoformat(record["captured_at"]),
            ),
            path=self._dir / record["filename"],
            summary=record["summary"],
            source_tool=record["tool"],
            content_sha256=record["sha256"],
            byte_size=record["byte_size"],
            line_count=record["line_count"],
            char_count=record["char_count"],
            binary=record["binary"],
            media_type=record["media_type"],
            argv=tuple(argv) if isinstance(argv, list) else None,
            exit_code=record.get("exit_code"),
            interrupted=record.get("interrupted"),
        )
