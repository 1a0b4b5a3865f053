"""Search an artifact: matching lines with 1-based numbers and context, like ``grep -n``.

Patterns come from models, so no pattern ever runs in this process. The search is GNU
``grep`` (``LC_ALL=C``, a DFA: time linear in the artifact for every pattern accepted, see
:mod:`toolswap._ere`) in a child process fed the verified artifact's open descriptor, and
killed at the caller's deadline or on cancellation. Where no GNU grep is installed, a Python
child process (:mod:`toolswap._grep_worker`) produces the same output under the same
deadline. The caller's other threads never wait: this one only reads a pipe.

A matching line longer than the width is shown as a window around its first match that
starts with the byte offset where it begins (what ``read --byte-start`` takes).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import selectors
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from ._ere import check_searchable, is_literal, translate
from ._fork import renew_in_child
from ._gc import collector_paused
from ._json_form import JsonRecord, fields_form, json_form
from ._window import CONTINUATION_MARKER, window
from .errors import ArtifactReadError, ArtifactSearchTimeoutError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_CONTEXT",
    "MAX_TIMEOUT",
    "GrepMatch",
    "GrepOptions",
    "GrepQuery",
    "GrepResult",
    "search",
]

DEFAULT_TIMEOUT = 10.0
"""Seconds a search may run unless the caller says otherwise (GNU grep reads > 1 GB/s)."""
MAX_TIMEOUT = 3600.0
MAX_CONTEXT = 50
_READ = 1 << 20
_POLL = 0.05
"""How often a search that was given a cancel event looks at it."""
_WORKER = Path(__file__).with_name("_grep_worker.py")


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line (1-based number) with its context lines."""

    line_no: int
    text: str
    """The line; a line longer than the width is a window around its first match, starting
    with ``⟨from byte N⟩`` when it begins inside the line and ending with ``⟨line
    continues⟩`` when the line goes on."""
    before: tuple[tuple[int, str], ...] = ()
    after: tuple[tuple[int, str], ...] = ()
    line_start: int = 0
    """Byte offset of the line in the artifact."""
    text_start: int = 0
    """Byte offset in the artifact where ``text`` begins (``line_start`` unless windowed)."""

    def to_dict(self) -> dict[str, object]:
        return {
            **fields_form(self, skip=("before", "after")),
            "before": json_form(self.before),
            "after": json_form(self.after),
        }


_MATCH_FIELDS = ("line_no", "text", "before", "after", "line_start", "text_start")
"""GrepMatch's fields, in order (a test holds them to its slots: a field added there is set
by ``_plain_match`` too)."""
_new_object = object.__new__
_set_line_no, _set_text, _set_before, _set_after, _set_line_start, _set_text_start = (
    getattr(GrepMatch, name).__set__ for name in _MATCH_FIELDS
)


def _plain_match(line_no: int, text: str, start: int) -> GrepMatch:
    """``GrepMatch(line_no, text, line_start=start, text_start=start)`` at half the cost:
    its slots set directly (a frozen dataclass's ``__init__`` goes through
    ``object.__setattr__`` field by field, which was most of the time a search with 178,000
    matches spent beyond grep's)."""
    match = _new_object(GrepMatch)
    _set_line_no(match, line_no)
    _set_text(match, text)
    _set_before(match, ())
    _set_after(match, ())
    _set_line_start(match, start)
    _set_text_start(match, start)
    return match


@dataclass(frozen=True, slots=True)
class GrepResult(JsonRecord):
    source_id: str
    pattern: str
    matches: tuple[GrepMatch, ...]
    truncated: bool
    """True when ``max_matches`` stopped the search before the end."""

    def render(self) -> str:
        """``grep -n`` style: ``N:line`` for matches, ``N-line`` for context, ``--`` between
        groups of lines that are not adjacent."""
        out: list[str] = []
        last = 0
        for match in self.matches:
            lines = [
                *((no, "-", text) for no, text in match.before),
                (match.line_no, ":", match.text),
                *((no, "-", text) for no, text in match.after),
            ]
            if out and lines[0][0] > last + 1:
                out.append("--")
            out.extend(f"{no}{sep}{text}" for no, sep, text in lines)
            last = lines[-1][0]
        if self.truncated:
            out.append(f"(stopped after {len(self.matches)} matches; raise max_matches for more)")
        return "\n".join(out)


# -- the search ----------------------------------------------------------------------


class GrepOptions(TypedDict, total=False):
    """How to search, as keywords of every grep call (each optional; the defaults are
    :class:`GrepQuery`'s)."""

    context: int
    """Lines shown before and after each match (0 .. :data:`MAX_CONTEXT`; default 0)."""
    max_matches: int
    """Stop after this many matching lines (default 100)."""
    ignore_case: bool
    fixed: bool
    """``pattern`` is a plain string, not a regular expression."""
    width: int
    """The longest line shown whole (default 2000)."""
    timeout: float
    """Seconds the search may run (default :data:`DEFAULT_TIMEOUT`)."""


@dataclass(frozen=True, slots=True)
class GrepQuery:
    """One search, checked when it is made (before an artifact is opened and verified).

    Raises:
        ArtifactPatternError: the pattern is invalid or cannot run in linear time.
        ArtifactReadError: an argument is out of range.
    """

    pattern: str
    context: int = 0
    max_matches: int = 100
    ignore_case: bool = False
    fixed: bool = False
    """``pattern`` is a plain string, not a regular expression."""
    width: int = 2000
    """The longest line shown whole; a longer one is a window around its first match."""
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        _check_args(self.context, self.max_matches, self.width, self.timeout)
        check_searchable(self.pattern)
        if not (self.fixed or is_literal(self.pattern)):
            translate(self.pattern, ignore_case=self.ignore_case)


def search(
    fd: int, query: GrepQuery, *, label: str, cancel: threading.Event | None = None
) -> tuple[list[GrepMatch], bool]:
    """Matches of ``query`` in the open file ``fd`` (its offset is moved), and whether
    ``max_matches`` stopped the search.

    Raises:
        ArtifactSearchTimeoutError: the search did not finish within the query's timeout.
        ArtifactReadError: the search was cancelled.
    """
    pattern, context, timeout, width = query.pattern, query.context, query.timeout, query.width
    max_matches, ignore_case = query.max_matches, query.ignore_case
    deadline = time.monotonic() + timeout
    literal = query.fixed or is_literal(pattern)
    engine = _Engine.find(pattern, literal=literal, ignore_case=ignore_case, timeout=timeout)
    collector = _Collector(context, max_matches, width)
    run = _Run(engine.argv(max_count=max_matches + 1, context=context), fd, 0, deadline, cancel)
    # Many matches are many lasting objects and no cycles: the collector ran every 700 of
    # them and rescanned the whole process every so often (178,000 matches in a process
    # holding 300,000 objects: 412-431 ms a search, 311-346 ms paused; GNU grep 191-246).
    with collector_paused():
        run.run(label, timeout, collector.feed)
    matches: list[GrepMatch] = []
    for found in collector.found:
        if isinstance(found, GrepMatch):
            matches.append(found)
            continue
        text, text_start = found.text, found.line_start
        if found.long:
            line_end = found.line_start + found.length
            if literal:
                at = _find_literal(fd, found.line_start, line_end, pattern, ignore_case)
            else:
                at = _first_match(engine, fd, found.line_start, deadline, cancel, label, timeout)
            text, text_start = window(fd, found.line_start, line_end, at, width)
        matches.append(
            GrepMatch(
                found.line_no,
                text,
                tuple(found.before),
                tuple(found.after),
                line_start=found.line_start,
                text_start=text_start,
            )
        )
    return matches, collector.truncated


def _check_args(context: int, max_matches: int, width: int, timeout: float) -> None:
    """Refuse out-of-range search arguments (before anything is opened)."""
    if not isinstance(context, int) or isinstance(context, bool) or not 0 <= context <= MAX_CONTEXT:
        raise ArtifactReadError(f"context must be an integer from 0 to {MAX_CONTEXT}")
    if not isinstance(max_matches, int) or isinstance(max_matches, bool) or max_matches < 1:
        raise ArtifactReadError("max_matches must be a positive integer")
    if not isinstance(width, int) or isinstance(width, bool) or width < 16:
        raise ArtifactReadError(f"width must be an integer >= 16, not {width!r}")
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise ArtifactReadError(
            f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, "
            f"not {timeout!r}"
        )


@dataclass(frozen=True, slots=True)
class _Engine:
    """The program that searches: GNU grep with the ERE, or the Python worker."""

    base: tuple[str | bytes, ...]
    pattern: tuple[str | bytes, ...]

    @staticmethod
    def find(pattern: str, *, literal: bool, ignore_case: bool, timeout: float) -> _Engine:
        grep = _gnu_grep()
        if grep is not None:
            if literal:
                args: tuple[str | bytes, ...] = ("-F", *(("-i",) if ignore_case else ()))
                return _Engine((grep, "-a"), (*args, "-e", pattern.encode()))
            translated = translate(pattern, ignore_case=ignore_case)
            flags = ("-E", *(("-i",) if translated.ignore_case else ()))
            return _Engine((grep, "-a"), (*flags, "-e", translated.ere))
        # No GNU grep: Python's syntax is the pattern's own, but refuse what GNU grep would.
        if not literal:
            translate(pattern, ignore_case=ignore_case)
        if not sys.executable:
            raise ArtifactReadError(
                "cannot search: no GNU grep on PATH and no Python executable to run the "
                "search in a separate process; install grep"
            )
        args = (*(("-F",) if literal else ()), *(("-i",) if ignore_case else ()))
        # A CPU limit past the deadline: the worker dies even if nobody is left to kill it.
        cpu = ("-T", str(math.ceil(timeout) + 1))
        return _Engine((sys.executable, "-I", "-S", str(_WORKER)), (*args, *cpu, "-e", pattern))

    def argv(self, *, max_count: int, context: int = 0, only: bool = False) -> list[str | bytes]:
        extra: list[str | bytes] = ["-n", "-b", "-m", str(max_count)]
        if context:
            extra += ["-C", str(context)]
        if only:
            extra.append("-o")
        return [*self.base, *extra, *self.pattern]


_GNU: dict[str, bool] = {}
_GNU_GUARD = threading.Lock()
renew_in_child(globals(), "_GNU_GUARD")  # (see _fork)


def _gnu_grep() -> str | None:
    """The path of GNU grep on PATH, or None (another grep's syntax and options differ)."""
    path = shutil.which("grep")
    if path is None:
        return None
    with _GNU_GUARD:
        known = _GNU.get(path)
    if known is None:
        try:
            done = subprocess.run(
                [path, "--version"], capture_output=True, timeout=5, env=_env(), check=False
            )
            known = done.returncode == 0 and done.stdout.startswith(b"grep (GNU grep)")
        except (OSError, subprocess.SubprocessError):
            known = False
        with _GNU_GUARD:
            _GNU[path] = known
    return path if known else None


CHILD_MEMORY = 1 << 30
"""Address space a search child may use: a pattern that would need more fails the search
(a clear error) instead of taking the machine's memory."""


def _bound_memory() -> None:
    """In the search child, before it runs: cap its address space."""
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def _env() -> dict[str, str]:
    # The C locale: bytes are characters (fast, and no encoding errors in the artifact).
    return {"LC_ALL": "C", "PATH": os.environ.get("PATH", "")}


class _Run:
    """One child process reading ``fd`` from ``offset``, its output handed to a callback
    that returns True once it has what it needs."""

    def __init__(
        self,
        argv: list[str | bytes],
        fd: int,
        offset: int,
        deadline: float,
        cancel: threading.Event | None,
    ) -> None:
        self.argv = argv
        self.fd = fd
        self.offset = offset
        self.deadline = deadline
        self.cancel = cancel

    def run(self, label: str, timeout: float, take: Callable[[bytes], bool]) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise ArtifactReadError(f"{label}: the search was cancelled")
        os.lseek(self.fd, self.offset, os.SEEK_SET)
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=self.fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_env(),
                close_fds=True,
                preexec_fn=_bound_memory,
            )
        except OSError as exc:
            raise ArtifactReadError(f"{label}: cannot start the search ({exc})") from None
        assert proc.stdout is not None and proc.stderr is not None
        errors = bytearray()
        done = False
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                selector.register(proc.stderr, selectors.EVENT_READ)
                open_pipes = 2
                while open_pipes and not done:
                    wait = self._remaining(label, timeout)
                    if self.cancel is not None:
                        wait = min(wait, _POLL)
                    for key, _ in selector.select(wait):
                        data = os.read(key.fd, _READ)
                        if not data:
                            selector.unregister(key.fileobj)
                            open_pipes -= 1
                        elif key.fileobj is proc.stderr:
                            errors += data[: 4096 - len(errors)]
                        elif take(data):
                            done = True
                            break
            if not done:
                try:
                    proc.wait(self._remaining(label, timeout))
                except subprocess.TimeoutExpired:
                    raise self._timeout(label, timeout) from None
                if proc.returncode not in (0, 1):
                    lines = errors.decode("utf-8", "replace").strip().splitlines()
                    reason = lines[-1] if lines else f"exit status {proc.returncode}"
                    raise ArtifactReadError(f"{label}: the search failed ({reason})")
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def _remaining(self, label: str, timeout: float) -> float:
        if self.cancel is not None and self.cancel.is_set():
            raise ArtifactReadError(f"{label}: the search was cancelled")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._timeout(label, timeout)
        return left

    @staticmethod
    def _timeout(label: str, timeout: float) -> ArtifactSearchTimeoutError:
        return ArtifactSearchTimeoutError(
            f"{label}: the search did not finish within {timeout:g} s and was stopped; "
            "narrow the pattern (a plain string is fastest) or allow a longer timeout"
        )


@dataclass(slots=True)
class _Found:
    line_no: int
    line_start: int
    length: int
    text: str
    long: bool
    before: list[tuple[int, str]] = field(default_factory=list)
    after: list[tuple[int, str]] = field(default_factory=list)


class _Collector:
    """Turns ``grep -n -b [-C N] -m MAX+1`` output into matches with their context: each
    line appears once (as a match, or as context of the nearest match before it when in
    reach, else of the next one); past ``max_matches`` it reads on only to finish the last
    match's context and to see whether another match follows."""

    def __init__(self, context: int, max_matches: int, width: int) -> None:
        self.context = context
        self.max_matches = max_matches
        self.width = width
        self.keep = 4 * width + 8
        self.found: list[_Found | GrepMatch] = []
        """Matches in order: finished ones, or ones still taking context or a window."""
        self.truncated = False
        self._before: deque[tuple[int, str]] = deque(maxlen=max(context, 1))
        self._carry = bytearray()
        self._dropped = 0

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of output; True when nothing more is needed."""
        start = 0
        cap = self.keep + 48
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                piece = chunk[start:]
                room = max(cap - len(self._carry), 0)
                self._carry += piece[:room]
                self._dropped += len(piece) - min(room, len(piece))
                return False
            if self._carry or self._dropped:
                room = max(cap - len(self._carry), 0)
                self._carry += chunk[start : min(end, start + room)]
                dropped = self._dropped + max(end - start - room, 0)
                record = bytes(self._carry)
                self._carry.clear()
                self._dropped = 0
            else:
                record, dropped = chunk[start:end], 0
            start = end + 1
            if self._record(record, dropped):
                return True
            if self.context == 0 and len(self.found) < self.max_matches:
                start = self._matches_only(chunk, start)

    def _matches_only(self, chunk: bytes, start: int) -> int:
        """Without context every line of output is a match (``N:B:text``): take the whole
        lines of ``chunk`` from ``start`` in one split (the common case, and the hot one
        when there are many matches) while below ``max_matches``; where they end."""
        end = chunk.rfind(b"\n") + 1
        if end <= start:
            return start
        rows = chunk[start : end - 1].split(b"\n")
        room = self.max_matches - len(self.found)
        if len(rows) > room:
            rows = rows[:room]
            end = start + sum(len(row) + 1 for row in rows)
        keep, width, append = self.keep, self.width, self.found.append
        for row in rows:
            number, offset, content = row.split(b":", 2)
            text = content[:keep].decode("utf-8", "replace")
            if len(content) > keep or len(text) > width:
                # Shown later as a window around the match: keep no text now.
                append(_Found(int(number), int(offset), len(content), "", True, [], []))
            else:
                # Finished here: one object per match (many allocations cost GC time).
                start = int(offset)
                line = text.removesuffix("\r")
                append(_plain_match(int(number), line, start))
        return end

    def _record(self, raw: bytes, dropped: int) -> bool:
        # "N:B:text" for a match, "N-B-text" for context, "--" between groups; N and B are
        # digits, so the first ':' or '-' ends N.
        colon = raw.find(b":")
        dash = raw.find(b"-", 0, colon if colon >= 0 else len(raw))
        i = dash if dash >= 0 else colon
        if i <= 0:
            return False  # "--"
        sep = raw[i : i + 1]
        j = raw.find(sep, i + 1)
        line_no, line_start = int(raw[:i]), int(raw[i + 1 : j])
        content = raw[j + 1 :]
        length = len(content) + dropped
        text = content[: self.keep].decode("utf-8", "replace")
        long = length > self.keep or len(text) > self.width
        is_match = sep == b":"
        found = self.found
        if len(found) >= self.max_matches:
            last = found[-1]
            if not isinstance(last, _Found) or line_no > last.line_no + self.context:
                self.truncated = True  # printed as context of a later match
                return True
            last.after.append((line_no, self._show(text, long)))
            self.truncated = self.truncated or is_match
            return self.truncated and line_no >= last.line_no + self.context
        if not is_match:
            previous = found[-1] if found else None
            if isinstance(previous, _Found) and line_no <= previous.line_no + self.context:
                previous.after.append((line_no, self._show(text, long)))
            else:
                self._before.append((line_no, self._show(text, long)))
            return False
        before: list[tuple[int, str]] = []
        if self._before:
            before = [item for item in self._before if item[0] >= line_no - self.context]
            self._before.clear()
        shown = "" if long else text.removesuffix("\r")  # a long line gets a window later
        found.append(_Found(line_no, line_start, length, shown, long, before))
        return False

    def _show(self, text: str, long: bool) -> str:
        if long:
            return text[: self.width] + CONTINUATION_MARKER
        return text.removesuffix("\r")


def _find_literal(fd: int, start: int, end: int, needle_text: str, ignore_case: bool) -> int:
    """Where ``needle_text`` first occurs in bytes ``[start, end)`` (``start`` if nowhere):
    ``bytes.find`` is linear, so it may run here."""
    needle = needle_text.encode()
    if ignore_case:
        needle = needle.lower()
    overlap = len(needle) - 1
    pos = start
    while pos < end:
        block = os.pread(fd, min(_READ, end - pos), pos)
        if not block:
            break
        at = (block.lower() if ignore_case else block).find(needle)
        if at >= 0:
            return pos + at
        if pos + len(block) >= end:
            break
        pos += max(len(block) - overlap, 1)
    return start


def _first_match(
    engine: _Engine,
    fd: int,
    line_start: int,
    deadline: float,
    cancel: threading.Event | None,
    label: str,
    timeout: float,
) -> int:
    """Byte offset of the first non-empty match in the line at ``line_start`` (the line
    start if the pattern only matches empty strings there), found by the same engine."""
    found: list[int] = []
    head = bytearray()

    def take(chunk: bytes) -> bool:
        head.extend(chunk[:64])
        line, sep, _ = bytes(head).partition(b"\n")
        fields = line.split(b":", 2)
        if len(fields) == 3 and fields[1].isdigit():
            if fields[0] == b"1":
                found.append(int(fields[1]))
            return True
        return bool(sep)

    _Run(engine.argv(max_count=1, only=True), fd, line_start, deadline, cancel).run(
        label, timeout, take
    )
    return line_start + found[0] if found else line_start
