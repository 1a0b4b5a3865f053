"""The candidate store: matching lines kept by template while the output streams in, in
bounded memory, and ranked once it is complete."""

from __future__ import annotations

from dataclasses import dataclass

from .vocabulary import score_line, template

__all__ = ["RAW_KEEP", "Candidates", "Entry"]

RAW_KEEP = 512
"""Bytes kept of each candidate line (enough for its shown part and its template)."""
_MAX_TEMPLATES = 2048
_KEEP_TEMPLATES = 1536


@dataclass(slots=True)
class Entry:
    """One template's first matching line, its score and how many lines share it."""

    line_no: int
    line_offset: int
    raw: bytes
    score: float
    count: int = 1
    match_offset: int | None = None
    """Where the matched word is, when the line is longer than ``raw`` (None: in ``raw``)."""


class Candidates:
    """Matching lines by template, in bounded memory: per template, the first occurrence,
    its score and how many lines share it."""

    def __init__(self) -> None:
        self.entries: dict[bytes, Entry] = {}

    def add(
        self,
        line_no: int,
        line_offset: int,
        raw: bytes,
        match_offset: int | None = None,
        *,
        long_line: bool = False,
    ) -> None:
        """Count one matching line. ``raw`` is its start, or, with ``match_offset``, a
        window of it from that byte; ``long_line``: the match may lie past ``raw``."""
        raw = raw[:RAW_KEEP]
        key = template(raw)
        entry = self.entries.get(key)
        if entry is not None:
            entry.count += 1
            return
        score = score_line(raw)
        if score <= 0 and long_line:
            score = 2.0  # the word is further on; the window read back will show it
        elif score <= 0 and match_offset is None:
            return
        self.entries[key] = Entry(
            line_no, line_offset, raw, max(score, 0.5), match_offset=match_offset
        )
        if len(self.entries) > _MAX_TEMPLATES:
            self._prune()

    def _prune(self) -> None:
        ranked = sorted(self.entries.items(), key=lambda kv: _priority(kv[1]), reverse=True)
        self.entries = dict(ranked[:_KEEP_TEMPLATES])

    def merge(self, other: Candidates, *, lines: int = 0, offset: int = 0) -> None:
        """Take ``other``'s entries, their line numbers shifted by ``lines`` and their byte
        offsets by ``offset`` (grep counts from where it started)."""
        for key, entry in other.entries.items():
            entry.line_no += lines
            entry.line_offset += offset
            if entry.match_offset is not None:
                entry.match_offset += offset
            mine = self.entries.get(key)
            if mine is None:
                self.entries[key] = entry
            elif entry.line_no < mine.line_no:
                entry.count += mine.count
                self.entries[key] = entry
            else:
                mine.count += entry.count
        if len(self.entries) > _MAX_TEMPLATES:
            self._prune()

    def ranked(self) -> list[Entry]:
        """Best first: score, then rarity, then position (earlier first)."""
        return sorted(self.entries.values(), key=lambda e: (_priority(e), -e.line_no), reverse=True)


def _priority(entry: Entry) -> float:
    rarity = 1.0 if entry.count == 1 else 0.5 if entry.count <= 3 else 0.0
    return entry.score + rarity
