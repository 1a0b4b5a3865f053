"""The failure vocabulary and how one line scores against it.

``VOCABULARY`` (compiler, linker, make, shell, test-runner, timeout and resource words) and
``LINE_PATTERNS`` (test-runner summaries such as ``1) test name``) drive both searches: the
Python scan and the system's ``grep -E`` (``BROAD_GREP_PATTERN``, then ``GREP_PATTERN`` with
the strongest words only). ``score_line`` says how strongly a line reads as the reason of a
failure; ``template`` masks its variable parts, so repeated lines count as one.
"""

from __future__ import annotations

import re

from .display import ANSI_BYTES, TIMESTAMP_BYTES

__all__ = [
    "ASCII_LOWER",
    "BROAD_GREP_PATTERN",
    "FIND_WORDS",
    "GREP_PATTERN",
    "GREP_WORDS",
    "LINE_PATTERNS",
    "LINE_SHAPES",
    "OVERLAP",
    "VOCABULARY",
    "score_line",
    "template",
]

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
FIND_WORDS: tuple[bytes, ...] = tuple(
    word for word, _ in VOCABULARY if not any(o != word and o in word for o, _ in VOCABULARY)
)
BROAD_GREP_PATTERN = "|".join(
    [_ere(word) for word in FIND_WORDS] + [pattern for pattern, _ in LINE_PATTERNS]
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

ASCII_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
"""``bytes.translate`` table: the vocabulary is matched in ASCII lower case."""
LINE_SHAPES = re.compile(b"|".join(f"(?:{p})".encode() for p, _ in LINE_PATTERNS), re.M)
"""``LINE_PATTERNS`` as one bytes pattern, over many lines at once."""
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
_MASK = re.compile(
    rb"0x[0-9a-f]+|\b[0-9a-f]{7,}\b|[\w.~-]*/[\w./~@+-]*|\d+(?:[.:,]\d+)*"
    rb"|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|\xe2\x80\x98.{1,80}?\xe2\x80\x99"
)
_TEMPLATE_BYTES = 200
OVERLAP = 32
"""Bytes carried from one searched piece to the next: longer than any word, so a word cut
between two pieces is found."""


def score_line(raw: bytes) -> float:
    """How strongly one line (its first bytes) reads as the reason of a failure; 0: not."""
    lower = raw.translate(ASCII_LOWER)
    if b"\x1b" in lower:
        lower = ANSI_BYTES.sub(b"", lower)
    lower = TIMESTAMP_BYTES.sub(b"", lower)
    kept = _NOT_A_FAILURE.sub(b" ", lower)
    best = 0
    for word, score in VOCABULARY:
        if score > best and word in kept:
            best = score
    if best < _SHAPE_SCORE and LINE_SHAPES.search(kept):
        best = _SHAPE_SCORE
    if best == 0:
        # Only names and zero counts: keep it as a weak candidate all the same.
        return 0.5 if kept != lower else 0.0
    value = float(best)
    text = raw if b"\x1b" not in raw else ANSI_BYTES.sub(b"", raw)
    if best >= 3 and (_REPORT.search(text) or _UPPER.search(text)):
        value += 1.0
    return value


def template(raw: bytes) -> bytes:
    """The line with its variable parts masked: what repeated lines have in common."""
    text = raw[:_TEMPLATE_BYTES]
    if b"\x1b" in text:
        text = ANSI_BYTES.sub(b"", text)
    text = TIMESTAMP_BYTES.sub(b"", text)
    return _MASK.sub(b"*", text.translate(ASCII_LOWER)).strip()
