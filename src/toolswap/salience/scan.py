"""Scanning: the output's bytes fed in as they arrive, every matching line handed to the
candidate store; ``Scanner`` is the whole search over one output, from the first byte to the
lines the pointer lists."""

from __future__ import annotations

import dataclasses

from .candidates import RAW_KEEP, REPEATS_KEPT, Candidates, Entry
from .display import SALIENT_LINE_CHARS, WINDOW_BEFORE
from .resolve import Pread, SalientLine, resolve
from .vocabulary import (
    ASCII_LOWER,
    FAILURE_SCORE,
    FIND_WORDS,
    GREP_WORDS,
    LINE_SHAPES,
    OVERLAP,
)

__all__ = ["ForwardScan", "Scanner"]

_CARRY_MAX = 4096
_MIDDLE_LIMIT = 64
_EDGE_LIMIT = 32
# A template that says something failed and that only a few lines share: each of its lines
# is listed (two tests failing alike are two failures); more of them are one kind, listed
# once with how many share it.
_REPEAT_SCORE = 4.0
_SCAN_PIECE = 256 << 10
_LONG_WINDOWS = 32
"""Windows recorded in one giant line, at most (the pointer lists 64 lines of the middle in
all)..."""
_PIECE_WINDOWS = 4
"""... and in each piece of it (so they are not all in the head the pointer shows): the
strongest words' first, the earliest of each kind."""
_WHOLE_GIANT = 64 << 10
"""A whole line longer than this is looked at as a giant line (``_scan_giant``); a shorter
one keeps its first match."""
_LONG_BROAD = 64 << 10
"""The first bytes of a giant line looked at for the whole vocabulary; the strongest words
only past them."""


class ForwardScan:
    """The Python scan: feeds every matching line of the output's first bytes to a
    ``Candidates`` store, chunk by chunk; matches inside a giant line are recorded with
    their byte offsets.

    Args:
        head_skip: lines that end within these first bytes are shown whole by the head
            preview and are not collected.
    """

    def __init__(self, candidates: Candidates, *, head_skip: int = 0) -> None:
        self.candidates = candidates
        self._head_skip = head_skip
        self.size = 0
        self.newlines = 0
        """Newlines in the bytes fed so far."""
        self.lines_end = 0
        """Offset just past the last newline fed."""
        self._carry = b""
        # A line longer than _CARRY_MAX: its number and start, scanned piece by piece.
        self._long: tuple[int, int] | None = None
        self._long_windows = 0
        """Windows recorded in the giant line (see ``_LONG_WINDOWS``)."""
        self._overlap = b""

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        chunk_offset = self.size
        self.size += len(chunk)
        if self._long is not None:
            newline = chunk.find(b"\n")
            part = chunk if newline < 0 else chunk[:newline]
            self._scan_long(part, chunk_offset)
            if newline < 0:
                return
            self._long = None
            self.newlines += 1
            self.lines_end = chunk_offset + newline + 1
            chunk = chunk[newline + 1 :]
            chunk_offset += newline + 1
        data_offset = chunk_offset - len(self._carry)
        data = self._carry + chunk if self._carry else chunk
        cut = data.rfind(b"\n") + 1
        start = 0
        while start < cut:
            end = data.find(b"\n", min(start + _SCAN_PIECE, cut) - 1) + 1 or cut
            self.scan_lines(data, start, end, data_offset, self.newlines)
            self.newlines += data.count(b"\n", start, end)
            start = end
        if cut:
            self.lines_end = data_offset + cut
        rest = data[cut:]
        if len(rest) > _CARRY_MAX:
            # A giant line: look for matches in it as it goes, keep none of it.
            self._long = (self.newlines + 1, data_offset + cut)
            self._long_windows = 0
            self._overlap = b""
            self._carry = b""
            self._scan_long(rest, data_offset + cut)
        else:
            self._carry = rest

    @property
    def in_long_line(self) -> bool:
        """The last bytes fed are in a line too long to keep, scanned as it goes."""
        return self._long is not None

    def finish(self) -> None:
        """The last line, when the output does not end with a newline."""
        if self._carry:
            data = self._carry + b"\n"
            self.scan_lines(data, 0, len(data), self.size - len(self._carry), self.newlines)
            self._carry = b""

    def _scan_long(self, part: bytes, offset: int) -> None:
        """Record matches in a piece of a giant line, with their byte offsets: at most
        ``_PIECE_WINDOWS`` a piece and ``_LONG_WINDOWS`` a line, of the whole vocabulary in
        the line's first ``_LONG_BROAD`` bytes and of the strongest words past them (a
        megabyte of JSON on one line holds thousands of failure words: looking for all 65
        words in it, and scoring a window around each, cost 40 ms a megabyte)."""
        assert self._long is not None
        line_no, line_offset = self._long
        data = self._overlap + part
        base = offset - len(self._overlap)
        room = min(_LONG_WINDOWS - self._long_windows, _PIECE_WINDOWS)
        if room > 0:
            lower = data.translate(ASCII_LOWER)
            broad = max(line_offset + _LONG_BROAD - base, 0)
            """The bytes of ``data`` within the line's first ``_LONG_BROAD``."""
            found: dict[int, bool] = {}
            """Where a match starts -> whether a strongest word does."""
            for word in FIND_WORDS if broad else GREP_WORDS:
                strong = word in GREP_WORDS
                stop = len(lower) if strong else broad + len(word) - 1
                pos = lower.find(word, 0, stop)
                count = 0
                while pos >= 0 and count < room:
                    # One wholly in the last piece's overlap was recorded with that piece.
                    if base + pos + len(word) > offset:
                        found[pos] = found.get(pos, False) or strong
                        count += 1
                    pos = lower.find(word, pos + len(word), stop)
            # The strongest words' first, then the rest (a "timeout" in every record of a
            # JSON document must not crowd out its one Traceback), in order of position.
            for pos in sorted(sorted(found, key=lambda at: (not found[at], at))[:room]):
                begin = max(pos - WINDOW_BEFORE, 0)
                window = data[begin : pos + SALIENT_LINE_CHARS]
                self.candidates.add(line_no, line_offset, window, match_offset=base + begin)
                self._long_windows += 1
        self._overlap = data[-OVERLAP:]

    def scan_lines(
        self, data: bytes, begin: int, end: int, data_offset: int, newlines_before: int
    ) -> None:
        """Collect the matching lines of ``data[begin:end]`` (whole lines); ``data`` starts
        at byte ``data_offset`` of the output, after ``newlines_before`` newlines."""
        if data_offset + begin < self._head_skip:
            skip = data.rfind(b"\n", begin, self._head_skip - data_offset) + 1
            if skip > begin:
                newlines_before += data.count(b"\n", begin, skip)
                begin = skip
            if begin >= end:
                return
        lower = data[begin:end].translate(ASCII_LOWER)
        starts: dict[int, int] = {}
        for word in FIND_WORDS:
            pos = lower.find(word)
            while pos >= 0:
                line_start = lower.rfind(b"\n", 0, pos) + 1
                if pos < starts.get(line_start, pos + 1):
                    starts[line_start] = pos
                pos = lower.find(b"\n", pos)
                if pos < 0:
                    break
                pos = lower.find(word, pos)
        for match in LINE_SHAPES.finditer(lower):
            starts.setdefault(match.start(), match.start())
        if not starts:
            return
        counted_to = 0
        line_no = newlines_before + 1
        for start in sorted(starts):
            line_no += lower.count(b"\n", counted_to, start)
            counted_to = start
            pos = starts[start]
            stop = lower.find(b"\n", start)
            stop = stop if stop >= 0 else len(lower)
            if stop - start > _WHOLE_GIANT:
                # A giant line that came whole (read back in one piece): windows as when it
                # streams in pieces, not its first match alone.
                self._scan_giant(
                    data[begin + start : begin + stop], line_no, data_offset + begin + start
                )
                continue
            if pos - start > RAW_KEEP - SALIENT_LINE_CHARS:
                # The match lies deep in a long line: keep a window around it.
                window = max(pos - WINDOW_BEFORE, start)
                self.candidates.add(
                    line_no,
                    data_offset + begin + start,
                    data[begin + window : begin + pos + SALIENT_LINE_CHARS],
                    match_offset=data_offset + begin + window,
                )
                continue
            self.candidates.add(
                line_no, data_offset + begin + start, data[begin + start : begin + stop]
            )

    def _scan_giant(self, line: bytes, line_no: int, offset: int) -> None:
        """Record windows in a whole giant line as ``_scan_long`` does in a streaming one
        (the state of a giant line streaming in, if any, is kept)."""
        kept = self._long, self._long_windows, self._overlap
        self._long, self._long_windows, self._overlap = (line_no, offset), 0, b""
        try:
            self._scan_long(line, offset)
        finally:
            self._long, self._long_windows, self._overlap = kept


class Scanner:
    """The whole search over one output: the Python scan forward up to ``scan_limit``,
    grep's matches past it (``add_middle``), or, without them, a Python scan of the last
    bytes (``finish``); then ``salient_lines`` ranks and reads back what the pointer lists.

    Args:
        scan_limit: how far the forward scan reads.
        head_skip: lines that end within these first bytes are not collected (the head
            preview shows them whole).
    """

    def __init__(self, scan_limit: int, *, head_skip: int = 0) -> None:
        self.candidates = Candidates()
        self._forward = ForwardScan(self.candidates, head_skip=head_skip)
        self._scan_limit = scan_limit
        self.size = 0
        self.scanned = 0
        """How many leading bytes the forward scan was fed."""
        self.unlisted = 0
        """Failure-like lines of the middle that ``salient_lines`` did not read back."""

    @property
    def newlines(self) -> int:
        """Newlines before ``scanned``."""
        return self._forward.newlines

    @property
    def lines_end(self) -> int:
        """Offset just past the last newline the forward scan reached."""
        return self._forward.lines_end

    def feed(self, chunk: bytes) -> None:
        if self.scanned == self.size and self.size < self._scan_limit:
            self._forward.feed(chunk)
            self.scanned += len(chunk)
        self.size += len(chunk)

    def finish(
        self, *, binary: bool, total: int, newlines: int, window: bytes = b"", tail_scan: int = 0
    ) -> int | None:
        """Scan what is left once every byte was fed (``total`` bytes, ``newlines`` in all).

        ``window`` holds the output's last bytes (at least ``tail_scan`` of them, or all
        that follow the forward scan), scanned when the forward scan stopped before the end.

        Returns:
            Where the scan of ``window`` began, or None when there was no such scan.
        """
        if binary:
            self.candidates.entries.clear()
            return None
        if self.scanned >= total:
            self._forward.finish()
            return None
        if not window:
            return None
        start = total - len(window)
        if self._forward.in_long_line and start <= self.scanned:
            # The forward scan stopped inside a line too long to keep: it reads on to that
            # line's end (the window scanned from the line's start listed it twice).
            rel = self.scanned - start
            newline = window.find(b"\n", rel)
            piece = window[rel:] if newline < 0 else window[rel : newline + 1]
            self._forward.feed(piece)
            self.scanned += len(piece)
            if newline < 0:
                return start + rel  # the window ends in that line
        begin = max(self.lines_end, total - tail_scan, start)
        rel = begin - start
        if begin > self.lines_end and not (rel > 0 and window[rel - 1] == 0x0A):
            newline = window.find(b"\n", rel)
            if newline < 0:
                return total  # one partial line fills the window: nothing to scan
            rel = newline + 1
        if rel >= len(window):
            return total
        data = window if window.endswith(b"\n") else window + b"\n"
        before = newlines - window.count(b"\n") + window.count(b"\n", 0, rel)
        self._forward.scan_lines(data, rel, len(data), start, before)
        return start + rel

    def add_middle(self, found: Candidates, *, newlines_before: int, offset: int) -> None:
        """Take grep's matches, counted from byte ``offset`` after ``newlines_before``
        newlines."""
        self.candidates.merge(found, lines=newlines_before, offset=offset)

    def salient_lines(
        self, pread: Pread, size: int, *, head_zone: int = 0, tail_zone: int = 0
    ) -> tuple[SalientLine, ...]:
        """The best candidates read back with their context, in line order.

        The pointer's head and tail may show lines within the first ``head_zone`` and the
        last ``tail_zone`` bytes (how much depends on the budget): the best 64 candidates
        outside them are read back, and the best 32 inside them, so lines the head or the
        tail will show never crowd out the middle."""
        middle: list[tuple[int, Entry]] = []
        edges: list[tuple[int, Entry]] = []
        self.unlisted = 0
        for rank, entry in enumerate(_with_repeats(self.candidates.ranked())):
            inside = entry.line_offset < head_zone or entry.line_offset >= size - tail_zone
            chosen = edges if inside else middle
            if len(chosen) < (_EDGE_LIMIT if inside else _MIDDLE_LIMIT):
                chosen.append((rank, entry))
            elif not inside and entry.score >= FAILURE_SCORE:
                self.unlisted += entry.count
        return resolve(sorted(middle + edges, key=lambda pair: pair[0]), pread, size)


def _with_repeats(ranked: list[Entry]) -> list[Entry]:
    """The ranked entries, each template that says something failed and that at most
    ``1 + REPEATS_KEPT`` lines share followed by its later lines, as entries of their own."""
    out: list[Entry] = []
    for entry in ranked:
        if (
            not entry.repeats
            or entry.score < _REPEAT_SCORE
            or entry.count > 1 + REPEATS_KEPT
            or entry.match_offset is not None
        ):
            out.append(entry)
            continue
        out.append(dataclasses.replace(entry, count=entry.count - len(entry.repeats), repeats=[]))
        out.extend(
            Entry(line_no, line_offset, b"", entry.score) for line_no, line_offset in entry.repeats
        )
    return out
