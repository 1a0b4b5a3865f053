"""The candidate store: matching lines kept by template while the output streams in, in
bounded memory, and ranked once it is complete."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .vocabulary import score_line, template

__all__ = ["RAW_KEEP", "Candidates", "Entry"]

RAW_KEEP = 512
"""Bytes kept of each candidate line (enough for its shown part and its template)."""
_MAX_TEMPLATES = 2048
_KEEP_TEMPLATES = 1536
REPEATS_KEPT = 2
"""Later occurrences of a template kept beside its first (line number, line offset), when
they say something else than it does (more than numbers differ): a template that only a
few lines share may stand for a few distinct failures (two failing tests whose panic lines
differ only in the test's quoted name)."""
_DIGITS = re.compile(rb"\d+")


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
    repeats: list[tuple[int, int]] = field(default_factory=list)
    """The next ``REPEATS_KEPT`` occurrences after the first, (line number, line offset);
    whole lines only."""
    counted_to: int | None = None
    """The last line ``count`` covers, when the lines past it were searched only for
    failure forms this line's template lacks (a dense output); None: every line."""
    counted_from: int | None = None
    """The first line ``count`` covers, when it counts only where failure forms were
    searched; None: from the first line."""


class Candidates:
    """Matching lines by template, in bounded memory: per template, the first occurrence,
    its score and how many lines share it."""

    def __init__(self) -> None:
        self.entries: dict[bytes, Entry] = {}
        self.most = 0
        """The most lines one template holds (as ``add`` counted them)."""

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
            if entry.counted_to is not None and line_no > entry.counted_to:
                return  # its count says which lines it covers: this one is past them
            entry.count += 1
            if entry.count > self.most:
                self.most = entry.count
            if (
                entry.count <= 1 + REPEATS_KEPT
                and match_offset is None
                and not long_line
                and _differs(raw, entry.raw)
            ):
                entry.repeats.append((line_no, line_offset))
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
            entry.repeats = [(n + lines, o + offset) for n, o in entry.repeats]
            if entry.counted_to is not None:
                entry.counted_to += lines
            if entry.counted_from is not None:
                entry.counted_from += lines
            mine = self.entries.get(key)
            if mine is None:
                self.entries[key] = entry
                continue
            first, later = (entry, mine) if entry.line_no < mine.line_no else (mine, entry)
            if later.match_offset is None and _differs(later.raw, first.raw):
                first.repeats.append((later.line_no, later.line_offset))
            first.repeats = sorted({*first.repeats, *later.repeats})[:REPEATS_KEPT]
            first.count = mine.count + entry.count
            ends = [e.counted_to for e in (mine, entry) if e.counted_to is not None]
            first.counted_to = min(ends) if ends else None
            self.entries[key] = first
        if len(self.entries) > _MAX_TEMPLATES:
            self._prune()

    def ranked(self) -> list[Entry]:
        """Best first: score, then rarity, then position (earlier first)."""
        return sorted(self.entries.values(), key=lambda e: (_priority(e), -e.line_no), reverse=True)


def _priority(entry: Entry) -> float:
    rarity = 1.0 if entry.count == 1 else 0.5 if entry.count <= 3 else 0.0
    return entry.score + rarity


def _differs(raw: bytes, first: bytes) -> bool:
    """Whether a line says something else than the first of its template: more than its
    numbers differ (a name, a path, a quoted word)."""
    return raw != first and _DIGITS.sub(b"0", raw) != _DIGITS.sub(b"0", first)
