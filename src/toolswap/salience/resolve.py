"""Reading the chosen lines back from the finished artifact: each with one line of context
before and after, the start and the end of a traceback block, and, for a match inside a
very long line, a window around the match with its byte offset (what ``read --byte-start``
takes). Lines that share a template are listed once, with how many others are like it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .candidates import Entry
from .display import ANSI_BYTES, SALIENT_LINE_CHARS, TIMESTAMP_BYTES, WINDOW_BEFORE, display_line
from .vocabulary import ASCII_LOWER, EXIT_FAILED, FIND_WORDS, OVERLAP, SECTION_TITLE, STEP_MARKER

__all__ = ["Pread", "SalientLine", "resolve"]

_CONTEXT_READ = 4096
_LONG_LINE_READ = 1 << 20
_LOCATE_READ = 64 << 10
_LONG_LINE_MAX = 8 << 20
_TRACEBACK_READ = 64 << 10
_OPENER_READ = 8192
_OPENER_LINES = 40
_INTRODUCERS = 4
_BODY_LINES = 3
_EXIT_WINDOW = 3
# A marker that closes a step: what lies above it belongs to another block.
_END_MARKER = re.compile(rb"##\[endgroup\]|::endgroup::|travis_fold:end|section_end:")


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
    counted_to: int | None = None
    """The last line ``similar`` covers (past it, only failure forms were searched: see
    ``salience.DENSE_GREP_PATTERN``); None: every line."""
    counted_from: int | None = None
    """The first line ``similar`` covers (None: the first line of the output)."""
    score: float = 0.0
    """How strongly the failure line of this line's group reads as the reason of a failure
    (``vocabulary.score_line``: 4 or more says something failed, under 3 is a warning or a
    name)."""
    detail: int = 0
    """What a short pointer drops first: 0 the failure line, 1 the opening line of its
    block (or a traceback's last line), 2 the line just before or after it."""


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
    """The byte offset of the first vocabulary word in the line at ``line_offset``, read
    ``_LOCATE_READ`` bytes first (most such lines are tens of kilobytes), then a megabyte
    at a time."""
    pos = line_offset
    end = min(size, line_offset + _LONG_LINE_MAX)
    carry = b""
    read = _LOCATE_READ
    while pos < end:
        block = pread(min(read, end - pos), pos)
        if not block:
            return None
        newline = block.find(b"\n")
        if newline >= 0:
            block = block[:newline]
        data = (carry + block).translate(ASCII_LOWER)
        first = _first_word(data)
        if first is not None:
            return pos - len(carry) + first
        if newline >= 0:
            return None
        carry = data[-OVERLAP:]
        pos += len(block)
        read = _LONG_LINE_READ
    return None


def _first_word(data: bytes) -> int | None:
    """Where the first vocabulary word in ``data`` starts: each word is looked for only
    before the first found so far."""
    first = len(data)
    for word in FIND_WORDS:
        found = data.find(word, 0, first + len(word) - 1)
        if found >= 0:
            first = found
    return first if first < len(data) else None


_TRACEBACK_START = b"Traceback (most recent call last)"


def _is_traceback_start(text: bytes) -> bool:
    return _TRACEBACK_START in text


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
    before = pread(line_offset - start, start)
    if _TRACEBACK_START not in before:
        # No line above can start one: the walk below would end in None, after reading
        # every line of an indented document (pretty-printed JSON) one by one.
        return None
    lines = before.split(b"\n")[:-1]
    number = line_no
    for line in reversed(lines if start == 0 else lines[1:]):
        number -= 1
        if _is_traceback_start(line):
            return number, line
        if line and not line[:1].isspace():
            return None
    return None


def _plain(raw: bytes) -> bytes:
    """A line as its shape is judged: no ANSI escapes, no leading timestamp, no CR."""
    if b"\x1b" in raw:
        raw = ANSI_BYTES.sub(b"", raw)
    raw = TIMESTAMP_BYTES.sub(b"", raw)
    if b"\r" in raw:
        raw = raw.rstrip(b"\r")
        raw = raw[raw.rfind(b"\r") + 1 :]
    return raw


def _indent(line: bytes) -> int:
    return len(line) - len(line.lstrip(b" \t"))


_SHAPE_KEY = re.compile(
    rb"^(?:\[[^\]\s]{1,24}\]|[A-Z]{1,8}[!:]?(?=\s)|[\w-]{1,16}(?:!|:(?=\s))"
    rb"|\d{1,4}[.)](?=\s)|[-*+](?=\s)|\xe2\x80\xa2(?=\s)|\xe2\x9c[\x97\x98](?=\s))"
)


def _shape_key(line: bytes) -> bytes | None:
    """What a runner starts each line of a report or a list with, once the indentation is
    removed (``[error]``, ``npm ERR!``, ``E``, ``error:``, ``12.``, ``-``, ``✗``), or None."""
    match = _SHAPE_KEY.match(line.lstrip(b" \t"))
    if match is None:
        return None
    key = match.group(0).lower()
    return b"N." if key[:1].isdigit() else key


def _run_start(rows: list[bytes], end: int, depth: int, key: bytes | None) -> int:
    """The first of the lines that, going up from ``rows[end]``, share its indentation
    ``depth`` and its shape ``key`` (more indented lines between them continue them).

    Returns:
        Its index in ``rows``.
    """
    first = end
    if key is None:
        return first
    for i in range(end - 1, max(end - _OPENER_LINES, -1), -1):
        text = _plain(rows[i])
        if not text.strip():
            if depth == 0:
                break
            continue
        indent = _indent(text)
        if indent > depth:
            continue
        if indent < depth or _shape_key(text) != key:
            break
        first = i
    return first


def _block_openers(before: list[bytes], line: bytes) -> list[int]:
    """How many lines above ``line`` the lines that open its block lie (``before`` holds
    the lines above it): the first of the lines shaped like it (``[error]``, ``npm ERR!``,
    ``E``, list items ``12.``), then the line that heads them: the nearest less indented
    line, or for lines that are not indented, those that introduce them with a ':' or ','
    (``In file included from x.h:3:,``, ``a.c: In function 'f':``), extended to the first
    of its own kind. Never past a step marker's end, nor a blank line unless indented."""
    me = _plain(line)
    if not me.strip():
        return []
    depth = _indent(me)
    rows = [*before, line]
    mine = len(rows) - 1
    first = _run_start(rows, mine, depth, _shape_key(me))
    found = [first] if first != mine else []
    head: int | None = None
    if depth:
        for i in range(first - 1, -1, -1):
            text = _plain(rows[i])
            if not text.strip():
                continue
            if _END_MARKER.match(text.lstrip()):
                break
            if _indent(text) < depth:
                head = i
                break
    else:
        # Lines that introduce the block end with ':' or ',' (a wrapped list of them).
        i = first
        while i > 0 and first - i < _INTRODUCERS:
            text = _plain(rows[i - 1]).rstrip()
            if not text.endswith((b":", b",")) or STEP_MARKER.match(text.lstrip()):
                break
            i -= 1
        head = i if i < first else None
    if head is not None:
        text = _plain(rows[head])
        found.append(_run_start(rows, head, _indent(text), _shape_key(text)))
    return sorted({mine - i for i in found if i < mine})


def _body(pread: Pread, offset: int, size: int, line: bytes) -> list[tuple[int, bytes]]:
    """The lines after a failure line (at ``offset``, where the next line starts) worth
    showing with it, each with how many lines below it lies: the next one, or, when the
    failure line heads a more indented block (``tables: FAIL`` above its diff, ``1) test``
    above ``Failure/Error:``), its first ``_BODY_LINES`` non-blank lines."""
    block = pread(_CONTEXT_READ, offset)
    rows = block.split(b"\n")
    if offset + len(block) < size or not block.endswith(b"\n"):
        rows = rows[:-1]  # the last may go on past what was read
    rows = rows[: _BODY_LINES * 3]
    if not rows:
        return []
    depth = _indent(_plain(line))
    found: list[tuple[int, bytes]] = []
    for ahead, raw in enumerate(rows, 1):
        text = _plain(raw)
        if not text.strip():
            continue
        if _indent(text) <= depth:
            break
        found.append((ahead, raw))
        if len(found) >= _BODY_LINES:
            break
    if not found and rows[0].strip():
        found = [(1, rows[0])]
    return found


def _lines_before(pread: Pread, line_offset: int) -> list[bytes]:
    """Up to ``_OPENER_LINES`` whole lines that end just before ``line_offset``."""
    if line_offset <= 0:
        return []
    start = max(line_offset - _OPENER_READ, 0)
    before = pread(line_offset - start, start).split(b"\n")[:-1]
    if start > 0:
        before = before[1:]  # its first line may have begun further back
    return before[-_OPENER_LINES:]


def _section_title(before: list[bytes]) -> int | None:
    """How many lines above lies the title of the runner's section or the CI step a line
    belongs to (``____ test_x ____``, ``---- name stdout ----``, ``##[group]Run make``),
    within the lines ``before`` it; None when there is none."""
    for back, raw in enumerate(reversed(before), 1):
        text = _plain(raw).strip()
        if _END_MARKER.match(text):
            return None
        if SECTION_TITLE.match(text):
            return back
    return None


def _exit_window(before: list[bytes]) -> list[int]:
    """For a line that says a command failed (``exited with 1``): how many lines above
    lie the last ``_EXIT_WINDOW`` non-blank lines of its output (the failure is usually
    there)."""
    found: list[int] = []
    for back, raw in enumerate(reversed(before), 1):
        text = _plain(raw).strip()
        if not text:
            continue
        if STEP_MARKER.match(text) or _END_MARKER.match(text):
            break
        found.append(back)
        if len(found) >= _EXIT_WINDOW:
            break
    return found


def resolve(
    entries: Iterable[tuple[int, Entry]], pread: Pread, size: int
) -> tuple[SalientLine, ...]:
    """Read candidates (each with its rank, 0 the most telling) back with their context
    lines.

    Returns every line once, in line order.
    """
    rows: dict[int, SalientLine] = {}

    def put(line: SalientLine) -> None:
        old = rows.get(line.line_no)
        if old is None or (old.context and not line.context) or old.rank > line.rank:
            rows[line.line_no] = line

    for rank, entry in entries:
        score = entry.score

        def context(
            line_no: int, raw: bytes, detail: int, rank: int = rank, score: float = score
        ) -> None:
            put(
                SalientLine(
                    line_no, display_line(raw), rank=rank, context=True, score=score, detail=detail
                )
            )

        line, line_end, goes_on = _line_at(pread, entry.line_offset, size)
        match_offset = entry.match_offset
        if match_offset is None and (goes_on or len(line) > SALIENT_LINE_CHARS * 2):
            found = _locate(pread, entry.line_offset, size)
            if found is not None and found - entry.line_offset > SALIENT_LINE_CHARS // 2:
                match_offset = max(found - WINDOW_BEFORE, entry.line_offset)
        window = b""
        if match_offset is not None:
            window = pread(SALIENT_LINE_CHARS * 4, match_offset).split(b"\n", 1)[0]
            text = window.decode("utf-8", "ignore")
            put(
                SalientLine(
                    entry.line_no,
                    "…" + display_line(text.encode())[: SALIENT_LINE_CHARS - 2] + "…",
                    rank=rank,
                    byte_offset=match_offset,
                    similar=entry.count - 1,
                    counted_to=entry.counted_to,
                    counted_from=entry.counted_from,
                    score=score,
                )
            )
        else:
            put(
                SalientLine(
                    entry.line_no,
                    display_line(line),
                    rank=rank,
                    similar=entry.count - 1,
                    counted_to=entry.counted_to,
                    counted_from=entry.counted_from,
                    score=score,
                )
            )
        if goes_on:
            # The lines after it start where it ends, not where its first read did (that
            # was the middle of a line of more than 4 KiB, shown as the next one).
            line_end = _skip_line(pread, entry.line_offset, size)
        before = _previous_line(pread, entry.line_offset)
        if before is not None and before.strip():
            context(entry.line_no - 1, before, 2)
        if line_end < size:
            # A line that ends with ':' introduces what follows (``Failed tests:`` above the
            # test, ``panicked at x.rs:3:5:`` above the assertion): its first line counts
            # as much as the opening line of a block.
            introduces = _plain(line).rstrip().endswith(b":")
            for n, (ahead, after) in enumerate(_body(pread, line_end, size, line)):
                context(entry.line_no + ahead, after, 1 if introduces and n == 0 else 2)
        if _is_traceback_start(line) and line_end < size:
            end = _traceback_end(pread, line_end, entry.line_no)
            if end is not None:
                context(end[0], end[1], 1)
            continue
        start = None
        if before is not None and before[:1].isspace():
            start = _traceback_start(pread, entry.line_offset, entry.line_no)
        if start is not None:
            context(start[0], start[1], 1)
        above = _lines_before(pread, entry.line_offset)
        backs: list[int] = []
        if match_offset is None:
            if start is None:
                backs.extend(_block_openers(above, line))
            title = _section_title(above)
            if title is not None:
                backs.append(title)
        if EXIT_FAILED.search(_plain(line if match_offset is None else window)):
            backs.extend(_exit_window(above))
        for back in backs:
            context(entry.line_no - back, above[len(above) - back], 1)
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
