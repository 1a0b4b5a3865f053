"""What matters in an output: the lines that explain a failure, found while it streams in
and ranked once it is complete. The capture writes; this module decides what the pointer
lists from the omitted middle.

Finding. One vocabulary (``VOCABULARY``: compiler, linker, make, shell, test-runner,
timeout and resource words, plus ``LINE_PATTERNS`` for test-runner summaries such as
``1) test name`` or ``[-] test name``) drives the Python scan of the first MiB
(``ForwardScan``); the system's ``grep -E`` searches the next 16 MiB for the same
vocabulary and the rest for the strongest words (``GREP_WORDS``), as fast as the artifact
is written (run by ``_middle_scan``). Every
matching line goes to a ``Candidates`` store, keyed by its template: the line with
numbers, hex, paths, quoted names and timestamps masked (the idea of template miners such
as Drain). The store keeps, per template, the first occurrence and a count, in bounded
memory.

Ranking. A line scores by its strongest word (failure words above ``Deprecat``/``Warning``),
gains when it is shaped like a report (``error:`` after a location, ``FAILED``, ``[ERROR]``),
loses when the word is only a name or a zero count (``0 errors``, ``-Werror``,
``error_handling.c``), and a rare template ranks above a repeated one: 150 copies of one
warning count once and never crowd out the one error.

Showing. ``resolve`` reads each chosen line back from the artifact with one line of context
before and after, the start and the end of a traceback block, and, for a match inside a very
long line, a window around the match with its byte offset (what ``read --byte-start``
takes). ``clean_for_display`` strips ANSI escapes and collapses ``\\r`` progress lines in
what the model sees; the artifact keeps the bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "BROAD_GREP_PATTERN",
    "GREP_PATTERN",
    "GREP_WORDS",
    "LINE_PATTERNS",
    "SALIENT_LINE_CHARS",
    "VOCABULARY",
    "Candidates",
    "ForwardScan",
    "SalientLine",
    "clean_for_display",
    "resolve",
    "timestamp_prefix",
]

SALIENT_LINE_CHARS = 240

# (lowercase literal, score). 4: the word says something failed; 3: it says what is wrong;
# 1: a warning or a deprecation (shown when there is room).
VOCABULARY: tuple[tuple[bytes, int], ...] = (
    (b"error", 4),
    (b"exception", 4),
    (b"traceback", 4),
    (b"fail", 4),
    (b"fatal", 4),
    (b"panic", 4),
    (b"assert", 4),
    (b"segmentation fault", 4),
    (b"core dumped", 4),
    (b"abort", 4),
    (b"undefined reference", 4),
    (b"no rule to make target", 4),
    (b"command not found", 4),
    (b"permission denied", 4),
    (b"timed out", 4),
    (b"deadline exceeded", 4),
    (b"out of memory", 4),
    (b"killed", 4),
    (b"dubious", 4),
    (b"not ok ", 4),
    (b"[-] ", 4),
    (b"illegal", 4),
    (b"mismatch", 4),
    (b"non-matching", 4),
    (b"refused", 4),
    (b"denied", 4),
    (b"conflict", 3),
    (b"cannot", 3),
    (b"can't", 3),
    (b"could not", 3),
    (b"couldn't", 3),
    (b"unable to", 3),
    (b"no such file", 3),
    (b"not found", 3),
    (b"does not exist", 3),
    (b"doesn't exist", 3),
    (b"unresolved", 3),
    (b"invalid", 3),
    (b"unexpected", 3),
    (b"violation", 3),
    (b"timeout", 3),
    (b"exit code", 3),
    (b"exit status", 3),
    (b"exited with", 3),
    (b"non-zero", 3),
    (b"nonzero", 3),
    (b"missing", 3),
    (b"expected", 2),
    (b"detected", 2),
    (b"severity", 2),
    (b"undefined", 2),
    (b"deprecat", 1),
    (b"warn", 1),
)
# Line shapes of test-runner summaries, valid both as Python ``re`` and as POSIX ERE
# (grep -E): ``  1) test name`` (mocha, RSpec, PHPUnit, ExUnit), pytest's
# ``____ test_name ____`` and Rust's ``---- name stdout ----`` section headers.
LINE_PATTERNS: tuple[tuple[str, int], ...] = (
    (r"^[ \t]*[0-9]+\) [^ ]", 3),
    (r"^_{3,} .* _{3,}$", 3),
    (r"^-{4} .* -{4}$", 3),
)


def _ere(word: bytes) -> str:
    return re.sub(r"([\[\]().*+?{}|^$\\])", r"\\\1", word.decode())


# What grep looks for past the Python scan: the whole vocabulary for the next 16 MiB, then
# the words that name most failures. GNU grep slows down with every word it adds (nine
# words: over 2 GB/s; the whole vocabulary: about 600 MB/s, slower than writing the
# artifact), and a huge output must not wait for it.
# The words a search must look for: a line with "permission denied" has "denied" too.
_FIND_WORDS: tuple[bytes, ...] = tuple(
    word for word, _ in VOCABULARY if not any(o != word and o in word for o, _ in VOCABULARY)
)
BROAD_GREP_PATTERN = "|".join(
    [_ere(word) for word in _FIND_WORDS] + [pattern for pattern, _ in LINE_PATTERNS]
)
GREP_WORDS: tuple[bytes, ...] = (
    b"error",
    b"exception",
    b"traceback",
    b"fail",
    b"fatal",
    b"panic",
    b"assert",
    b"segmentation fault",
    b"abort",
)
GREP_PATTERN = "|".join(_ere(word) for word in GREP_WORDS)

_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_SHAPES = re.compile(b"|".join(f"(?:{p})".encode() for p, _ in LINE_PATTERNS), re.M)
_SHAPE_SCORE = max(score for _, score in LINE_PATTERNS)
# Words that only name something or count zero of it.
_NOT_A_FAILURE = re.compile(
    rb"\b(?:0|no|zero)\s+(?:errors?|failures?|failed|warnings?|tests? failed)\b"
    rb"|\b(?:errors?|failures?|failed|warnings?|failing)\s*[:=]\s*0\b"
    rb"|-w(?:no-)?error\S*|-wall|\bwarn(?:ing)?s?_?as_?errors?"
    rb"|[\w./-]*(?:error|fail|warn|assert|exception|abort|panic)[\w./-]*"
    rb"\.(?:c|h|cc|cpp|hpp|go|py|pyc|rs|js|ts|java|class|rb|php|o|so|a|html|xml|json|log|txt)\b"
    rb"|\b(?:on|ignore|allow|expect|handle|raise|throw|catch|log|set|get)_?(?:errors?|fail\w*)\b"
    rb"|\bfail[_-]?fast\b|\bfailover\b|\bwarn_only\b"
    # A word joined to others by ``_`` or ``.`` is an identifier (``display_errors``,
    # ``assert.active``, ``TRAVIS_ALLOW_FAILURE``, ``test_failure_case``), not a report.
    rb"|[\w.]*[_.](?:errors?|fail\w*|assert\w*|exceptions?|warn\w*|fatal|panic|abort\w*)\b[\w.]*"
    rb"|\b(?:errors?|fail\w*|assert\w*|exceptions?|warn\w*|fatal|panic|abort\w*)[_.]\w[\w.]*"
    # A word inside a path or a URL names a file, not a failure.
    rb"|[^\s'\"]*/[^\s'\"]*"
)
# Shapes of a report: a location before ``error:``, a bracketed or upper-case level word.
_REPORT = re.compile(
    rb"(?:^|[\s:\]])(?:error|fatal|fail(?:ed|ure)?|panic)\b\s*(?:\[[^\]]*\])?\s*[:!]"
    rb"|\[(?:error|fatal|fail(?:ed|ure)?)\]"
    rb"|^\s*(?:error|fatal|fail(?:ed|ure)?|e )\b"
    rb"|\bnpm err"
    rb"|\w(?:error|exception)\b:",
    re.I,
)
_UPPER = re.compile(rb"\b(?:ERROR|FAILED|FAILURE|FAIL|FATAL|PANIC)\b")

_TIMESTAMP = re.compile(
    r"^\ufeff?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
_TIMESTAMP_B = re.compile(
    rb"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_MASK = re.compile(
    rb"0x[0-9a-f]+|\b[0-9a-f]{7,}\b|[\w.~-]*/[\w./~@+-]*|\d+(?:[.:,]\d+)*"
    rb"|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|\xe2\x80\x98.{1,80}?\xe2\x80\x99"
)
_TEMPLATE_BYTES = 200
_RAW_KEEP = 512
_MAX_TEMPLATES = 2048
_KEEP_TEMPLATES = 1536
_CONTEXT_READ = 4096
_LONG_LINE_READ = 1 << 20
_LONG_LINE_MAX = 8 << 20
_WINDOW_BEFORE = 80
_TRACEBACK_READ = 64 << 10
_CARRY_MAX = 4096
_SCAN_PIECE = 256 << 10
_OVERLAP = 32


def timestamp_prefix(text: str) -> str:
    """A leading ISO timestamp (as GitHub Actions prints before every line), or ''."""
    match = _TIMESTAMP.match(text)
    return match.group(0) if match else ""


def _collapse(line: str) -> str:
    """A line with carriage returns: a progress line redrawn in place becomes its last
    state; any other loses only the CRs (its text may be the failure itself)."""
    states = [state for state in line.split("\r") if state.strip()]
    if not states:
        return ""
    last = states[-1]
    first = states[0]
    redrawn = len(states) > 1 and (
        first.lstrip()[:3] == last.lstrip()[:3] or "%" in last or "\u2588" in last
    )
    return last if redrawn else "".join(states)


def clean_for_display(text: str) -> str:
    """Text as the model should see it: ANSI escapes removed, each ``\\r``-redrawn
    progress line reduced to its last state (line numbers are unchanged: no newline is
    removed)."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if "\r" in line:
                lines[i] = _collapse(line)
        text = "\n".join(lines)
    return text


def _clip(text: str) -> str:
    """At most SALIENT_LINE_CHARS characters, a leading timestamp not counted."""
    stamp = timestamp_prefix(text)
    body = text[len(stamp) :]
    if len(body) > SALIENT_LINE_CHARS:
        body = body[: SALIENT_LINE_CHARS - 1] + "…"
    return stamp + body


def _display(raw: bytes) -> str:
    text = clean_for_display(raw[: SALIENT_LINE_CHARS * 8].decode("utf-8", "replace"))
    return _clip(text.rstrip("\r\n"))


def score_line(raw: bytes) -> float:
    """How strongly one line (its first bytes) reads as the reason of a failure; 0: not."""
    lower = raw.translate(_LOWER)
    if b"\x1b" in lower:
        lower = _ANSI_B.sub(b"", lower)
    lower = _TIMESTAMP_B.sub(b"", lower)
    kept = _NOT_A_FAILURE.sub(b" ", lower)
    best = 0
    for word, score in VOCABULARY:
        if score > best and word in kept:
            best = score
    if best < _SHAPE_SCORE and _SHAPES.search(kept):
        best = _SHAPE_SCORE
    if best == 0:
        # Only names and zero counts: keep it as a weak candidate all the same.
        return 0.5 if kept != lower else 0.0
    value = float(best)
    text = raw if b"\x1b" not in raw else _ANSI_B.sub(b"", raw)
    if best >= 3 and (_REPORT.search(text) or _UPPER.search(text)):
        value += 1.0
    return value


def template(raw: bytes) -> bytes:
    """The line with its variable parts masked: what repeated lines have in common."""
    text = raw[:_TEMPLATE_BYTES]
    if b"\x1b" in text:
        text = _ANSI_B.sub(b"", text)
    text = _TIMESTAMP_B.sub(b"", text)
    return _MASK.sub(b"*", text.translate(_LOWER)).strip()


@dataclass(slots=True)
class _Entry:
    line_no: int
    line_offset: int
    raw: bytes
    score: float
    count: int = 1
    match_offset: int | None = None
    """Where the matched word is, when the line is longer than ``raw`` (None: in ``raw``)."""


@dataclass(frozen=True, slots=True)
class SalientLine:
    """A line the pointer may list, with its 1-based line number."""

    line_no: int
    text: str
    rank: int = 0
    """0 is the most telling; context lines share their failure line's rank."""
    context: bool = False
    """A line shown for meaning (the one before or after a failure line, a traceback's
    first or last line), not a match itself."""
    byte_offset: int | None = None
    """When ``text`` is a window inside a long line: the artifact byte it starts at."""
    similar: int = 0
    """How many other lines share this line's template (they are not listed)."""


class Candidates:
    """Matching lines by template, in bounded memory: per template, the first occurrence,
    its score and how many lines share it."""

    def __init__(self) -> None:
        self.entries: dict[bytes, _Entry] = {}

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
        raw = raw[:_RAW_KEEP]
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
        self.entries[key] = _Entry(
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

    def ranked(self) -> list[_Entry]:
        """Best first: score, then rarity, then position (earlier first)."""
        return sorted(self.entries.values(), key=lambda e: (_priority(e), -e.line_no), reverse=True)


def _priority(entry: _Entry) -> float:
    rarity = 1.0 if entry.count == 1 else 0.5 if entry.count <= 3 else 0.0
    return entry.score + rarity


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
        self._long_seen = 0
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
            self._long_seen = 0
            self._overlap = b""
            self._carry = b""
            self._scan_long(rest, data_offset + cut)
        else:
            self._carry = rest

    def finish(self) -> None:
        """The last line, when the output does not end with a newline."""
        if self._carry:
            data = self._carry + b"\n"
            self.scan_lines(data, 0, len(data), self.size - len(self._carry), self.newlines)
            self._carry = b""

    def _scan_long(self, part: bytes, offset: int) -> None:
        """Record matches in a piece of a giant line, with their byte offsets."""
        assert self._long is not None
        line_no, line_offset = self._long
        data = self._overlap + part
        base = offset - len(self._overlap)
        lower = data.translate(_LOWER)
        found: set[int] = set()
        for word in _FIND_WORDS:
            pos = lower.find(word)
            count = 0
            while pos >= 0 and count < 4:
                found.add(pos)
                pos = lower.find(word, pos + len(word))
                count += 1
        for pos in sorted(found):
            if base + pos < line_offset + self._long_seen:
                continue  # seen in the previous piece's overlap
            begin = max(pos - _WINDOW_BEFORE, 0)
            window = data[begin : pos + SALIENT_LINE_CHARS]
            self.candidates.add(line_no, line_offset, window, match_offset=base + begin)
        self._overlap = data[-_OVERLAP:]
        self._long_seen = base + len(data) - line_offset - len(self._overlap) + 1

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
        lower = data[begin:end].translate(_LOWER)
        starts: dict[int, int] = {}
        for word in _FIND_WORDS:
            pos = lower.find(word)
            while pos >= 0:
                line_start = lower.rfind(b"\n", 0, pos) + 1
                if pos < starts.get(line_start, pos + 1):
                    starts[line_start] = pos
                pos = lower.find(b"\n", pos)
                if pos < 0:
                    break
                pos = lower.find(word, pos)
        for match in _SHAPES.finditer(lower):
            starts.setdefault(match.start(), match.start())
        if not starts:
            return
        counted_to = 0
        line_no = newlines_before + 1
        for start in sorted(starts):
            line_no += lower.count(b"\n", counted_to, start)
            counted_to = start
            pos = starts[start]
            if pos - start > _RAW_KEEP - SALIENT_LINE_CHARS:
                # The match lies deep in a long line: keep a window around it.
                window = max(pos - _WINDOW_BEFORE, start)
                self.candidates.add(
                    line_no,
                    data_offset + begin + start,
                    data[begin + window : begin + pos + SALIENT_LINE_CHARS],
                    match_offset=data_offset + begin + window,
                )
                continue
            stop = lower.find(b"\n", start)
            stop = stop if stop >= 0 else len(lower)
            self.candidates.add(
                line_no, data_offset + begin + start, data[begin + start : begin + stop]
            )


# -- reading the chosen lines back -----------------------------------------------------


Pread = Callable[[int, int], bytes]
"""``pread(count, offset)`` on the finished artifact."""


def _line_at(pread: Pread, offset: int, size: int) -> tuple[bytes, int, bool]:
    """(the line starting at ``offset``: at most _CONTEXT_READ bytes, its end, whether it
    goes on)."""
    block = pread(_CONTEXT_READ, offset)
    newline = block.find(b"\n")
    if newline >= 0:
        return block[:newline], offset + newline + 1, False
    return block, min(offset + len(block), size), offset + len(block) < size


def _previous_line(pread: Pread, line_offset: int) -> bytes | None:
    if line_offset <= 0:
        return None
    start = max(line_offset - _CONTEXT_READ, 0)
    block = pread(line_offset - start, start)
    if not block.endswith(b"\n"):
        return None
    body = block[:-1]
    newline = body.rfind(b"\n")
    if newline < 0 and start > 0:
        return b"\xe2\x80\xa6" + body[-SALIENT_LINE_CHARS:]  # its start lies further back
    return body[newline + 1 :]


def _locate(pread: Pread, line_offset: int, size: int) -> int | None:
    """The byte offset of the first vocabulary word in the line at ``line_offset``."""
    pos = line_offset
    end = min(size, line_offset + _LONG_LINE_MAX)
    carry = b""
    while pos < end:
        block = pread(min(_LONG_LINE_READ, end - pos), pos)
        if not block:
            return None
        newline = block.find(b"\n")
        if newline >= 0:
            block = block[:newline]
        data = (carry + block).translate(_LOWER)
        hits = [i for i in (data.find(word) for word in _FIND_WORDS) if i >= 0]
        if hits:
            return pos - len(carry) + min(hits)
        if newline >= 0:
            return None
        carry = data[-_OVERLAP:]
        pos += len(block)
    return None


def _is_traceback_start(text: bytes) -> bool:
    return b"Traceback (most recent call last)" in text


def _traceback_end(pread: Pread, after: int, line_no: int) -> tuple[int, bytes] | None:
    """The last line of the traceback whose first line ends at ``after``."""
    block = pread(_TRACEBACK_READ, after)
    number = line_no
    for line in block.split(b"\n")[:-1]:
        number += 1
        if line and not line[:1].isspace():
            return number, line
    return None


def _traceback_start(pread: Pread, line_offset: int, line_no: int) -> tuple[int, bytes] | None:
    """The first line of the traceback that the line at ``line_offset`` ends."""
    start = max(line_offset - _TRACEBACK_READ, 0)
    lines = pread(line_offset - start, start).split(b"\n")[:-1]
    number = line_no
    for line in reversed(lines if start == 0 else lines[1:]):
        number -= 1
        if _is_traceback_start(line):
            return number, line
        if line and not line[:1].isspace():
            return None
    return None


def resolve(
    entries: Iterable[_Entry], pread: Pread, size: int, *, limit: int = 64
) -> tuple[SalientLine, ...]:
    """Read the best ``limit`` candidates back with their context lines.

    Returns every line once, in line order; ``rank`` says how telling each one is.
    """
    rows: dict[int, SalientLine] = {}

    def put(line: SalientLine) -> None:
        old = rows.get(line.line_no)
        if old is None or (old.context and not line.context) or old.rank > line.rank:
            rows[line.line_no] = line

    for rank, entry in enumerate(entries):
        if rank >= limit:
            break
        line, line_end, goes_on = _line_at(pread, entry.line_offset, size)
        match_offset = entry.match_offset
        if match_offset is None and (goes_on or len(line) > SALIENT_LINE_CHARS * 2):
            found = _locate(pread, entry.line_offset, size)
            if found is not None and found - entry.line_offset > SALIENT_LINE_CHARS // 2:
                match_offset = max(found - _WINDOW_BEFORE, entry.line_offset)
        if match_offset is not None:
            window = pread(SALIENT_LINE_CHARS * 4, match_offset)
            text = window.split(b"\n", 1)[0].decode("utf-8", "ignore")
            put(
                SalientLine(
                    entry.line_no,
                    "…" + _display(text.encode())[: SALIENT_LINE_CHARS - 2] + "…",
                    rank=rank,
                    byte_offset=match_offset,
                    similar=entry.count - 1,
                )
            )
            if goes_on:
                line_end = _skip_line(pread, entry.line_offset, size)
        else:
            put(SalientLine(entry.line_no, _display(line), rank=rank, similar=entry.count - 1))
        before = _previous_line(pread, entry.line_offset)
        if before is not None and before.strip():
            put(SalientLine(entry.line_no - 1, _display(before), rank=rank, context=True))
        if line_end < size:
            after, _, _ = _line_at(pread, line_end, size)
            if after.strip():
                put(SalientLine(entry.line_no + 1, _display(after), rank=rank, context=True))
        if _is_traceback_start(line) and line_end < size:
            end = _traceback_end(pread, line_end, entry.line_no)
            if end is not None:
                put(SalientLine(end[0], _display(end[1]), rank=rank, context=True))
        elif before is not None and before[:1].isspace():
            start = _traceback_start(pread, entry.line_offset, entry.line_no)
            if start is not None:
                put(SalientLine(start[0], _display(start[1]), rank=rank, context=True))
    return tuple(rows[number] for number in sorted(rows))


def _skip_line(pread: Pread, line_offset: int, size: int) -> int:
    """Where the line at ``line_offset`` ends (past its newline), looking 8 MiB ahead."""
    pos = line_offset
    end = min(size, line_offset + _LONG_LINE_MAX)
    while pos < end:
        block = pread(min(_LONG_LINE_READ, end - pos), pos)
        if not block:
            break
        newline = block.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(block)
    return size


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

    def salient_lines(self, pread: Pread, size: int) -> tuple[SalientLine, ...]:
        """The best candidates read back with their context, in line order."""
        return resolve(self.candidates.ranked(), pread, size)
