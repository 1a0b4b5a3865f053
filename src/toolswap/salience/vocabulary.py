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
    "DENSE_GREP_PATTERN",
    "EXIT_FAILED",
    "FAILURE_SCORE",
    "FIND_WORDS",
    "GREP_PATTERN",
    "GREP_WORDS",
    "LINE_PATTERNS",
    "LINE_SHAPES",
    "OVERLAP",
    "SECTION_TITLE",
    "STEP_MARKER",
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
    (b"terminate", 4),
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
    (b"no such", 3),
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
    (b"lost", 3),
    # What the C library says an errno means (strerror), as most command-line tools report
    # it after the file or host they were working on, often with no failure word.
    (b"not permitted", 3),
    (b"no space left", 3),
    (b"read-only file system", 3),
    (b"is a directory", 3),
    (b"not a directory", 3),
    (b"directory not empty", 3),
    (b"too many open files", 3),
    (b"connection reset", 3),
    (b"broken pipe", 3),
    (b"resource busy", 3),
    (b"temporarily unavailable", 3),
    (b"unreachable", 3),
    (b"no route to host", 3),
    (b"bad file descriptor", 3),
    (b"expected", 2),
    (b"detected", 2),
    (b"severity", 2),
    (b"undefined", 2),
    (b"deprecat", 1),
    (b"warn", 1),
)
FAILURE_SCORE = 2.0
"""A line scored at least this (``score_line``) looks like a failure; below it, a warning,
a deprecation or only a name."""
# Line shapes of test-runner summaries, valid both as Python ``re`` and as POSIX ERE
# (grep -E): ``  1) test name`` (mocha, RSpec, PHPUnit, ExUnit), pytest's
# ``____ test_name ____`` and Rust's ``---- name stdout ----`` section headers, a
# diagnostic's location (``lib/a.js:12:5: Extra semicolon``, ``./x.py:8:9: E128 ...``,
# a shell's ``deploy.sh: line 3: X: unbound variable`` or ``x.sh: 3: X: parameter not
# set``), a program's diagnostic about what it was working on (``prog: subject:
# message``, the subject one word: a file, ``stdin``, ``file.txt:12``) and a fatal one
# marked ``prog: *** message`` (``make: *** No targets specified``): linters, shells and
# command-line tools report without a failure word.
# A tab is written as itself: inside a bracket expression, ERE reads ``\t`` as a backslash
# and a ``t``.
_TAB = "\t"
LINE_PATTERNS: tuple[tuple[str, int], ...] = (
    (rf"^[ {_TAB}]*[0-9]+\) [^ ]", 3),
    (r"^_{3,} .* _{3,}$", 3),
    (r"^-{4} .* -{4}$", 3),
    (rf"^[ {_TAB}]*[^ {_TAB}:]*\.[A-Za-z0-9]+:[0-9]+(:[0-9]+)?:? [^ ]", 3),
    (rf"^[^ {_TAB}:]+: (line )?[0-9]+: [^ ]", 3),
    (rf"^[A-Za-z][A-Za-z0-9_.+-]*: [^ {_TAB}]+: [^ ]", 3),
    (rf"^[^ {_TAB}:]+: \*\*\* [^ ]", 3),
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
DENSE_GREP_PATTERN = "|".join(
    (
        r"error:",  # error: ..., SyntaxError: ... (not a JSON key "error": or -Werror=)
        r"error\[",  # rustc's error[E0308]
        r"exception:",
        r"exception in thread",
        r"traceback \(most recent call last\)",
        r"\bfailed\b",
        r"\bfatal\b",
        r"panic:",
        r"panicked at",
        r"segmentation fault",
        r"core dumped",
        r"\*\*\* ",  # make: *** [target] Error 2
        r"^not ok ",
        r"exit (code|status) [1-9]",
    )
)
"""Failure forms rather than words, for the middle of an output where a failure word is on
most lines (a ``"severity": "error"`` field in every record, ``-Werror`` in every compiler
command): the line that says ``error:`` still stands out there."""

ASCII_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
"""``bytes.translate`` table: the vocabulary is matched in ASCII lower case."""
LINE_SHAPES = re.compile(
    b"|".join(f"(?:{p})".encode().replace(b"[^", b"[^\n") for p, _ in LINE_PATTERNS), re.M
)
"""``LINE_PATTERNS`` as one bytes pattern, over many lines at once (a negated class never
crosses a newline, as in grep, which sees one line at a time)."""
_SHAPE_SCORE = max(score for _, score in LINE_PATTERNS)
# Words that only name something or count zero of it.
_WHOLE = rb"(?:errors?|exceptions?|fatal|timeout|refused|denied|killed)"
_STEMS = rb"(?:fail|warn|assert|abort|panic)"  # with any ending: ``failing``, ``warnings``
_WORDS = rb"(?:" + _WHOLE + rb"|" + _STEMS + rb"\w*)"
# The cost stays linear in the line: a pattern that spans a run of characters starts where
# the run starts (a lookbehind) and commits to the run's first failure word (an atomic
# group); else a long word is searched again from each of its letters (11 ms a line). The
# costliest first look ahead, cheaply, for what they need further on (a '.' and a letter,
# a '_' or '.' before a stem, an '@', '-' and a version, a comparison): a third less time on
# lines of JSON or prose, the same matches.
_NOT_A_FAILURE = re.compile(
    # Each name below starts at a '-', a '/' or where no word character precedes: one test
    # rules out every other place (most of a line) before the alternatives are tried.
    rb"(?=\S)(?:(?<!\w)|(?=[-/]))(?:"
    rb"\b(?:0|no|zero)\s+(?:errors?|failures?|failed|warnings?|tests? failed)\b"
    rb"|\b(?:errors?|failures?|failed|warnings?|failing|lost)\s*[:=]\s*0\b"
    rb"|-w(?:no-)?error\S*|-wall|\bwarn(?:ing)?s?_?as_?errors?"
    rb"|(?<![\w./-])(?=[\w./-]*\.\w)(?>[\w./-]*?(?:error|fail|warn|assert|exception|abort|panic))"
    rb"[\w./-]*"
    rb"\.(?:c|h|cc|cpp|hpp|go|py|pyc|rs|js|ts|java|class|rb|php|o|so|a|html|xml|json|log|txt|erl)\b"
    rb"|\b(?:on|ignore|allow|expect|handle|raise|throw|catch|log|set|get)_?(?:errors?|fail\w*)\b"
    rb"|\bfail[_-]?fast\b|\bfailover\b|\bwarn_only\b|\blost\+found\b"
    # A word joined to others by ``_`` or ``.`` is an identifier (``display_errors``,
    # ``log_errors_max_len``, ``assert.active``, ``TRAVIS_ALLOW_FAILURE``), not a report.
    rb"|(?<![\w.])(?=[\w.]*[_.][efawp])(?>[\w.]*?[_.]"
    rb"(?:errors?|fail\w*|assert\w*|exceptions?|warn\w*|fatal|panic|abort\w*))[\w.]*"
    rb"|\b(?:errors?|fail\w*|assert\w*|exceptions?|warn\w*|fatal|panic|abort\w*)[_.]\w[\w.]*"
    # A word inside a path or a URL names a file, not a failure.
    rb"|(?<![^\s'\"])[^\s'\"]*/[^\s'\"]*|/[^\s'\"]*"
    # A command-line flag (``--with-timeout=15``), a package and its version
    # (``http-errors@1.7.3``, ``exceptions-0.10.0``, ``exceptions ==0.10``), a setting
    # (``dependency=exceptions``), a count of assertions (``11 assertions``).
    rb"|(?<![\w-])--?[\w-]*" + _WORDS + rb"[\w=.-]*"
    rb"|(?<![\w.-])(?=[\w.-]*@)(?>[\w.-]*?" + _WORDS + rb")[\w.-]*@[\^~]?\d[\w.-]*"
    rb"|(?<![\w-])(?=[\w-]*-\d+\.\d)(?:[\w-]*-)?(?:\w*" + _WHOLE + rb"|(?>\w*?" + _STEMS + rb")\w*)"
    rb"-\d+(?:\.\d+)+\b"
    rb"|\b(?=\w+\s*[=<>~^])" + _WORDS + rb"\s*(?:[=<>]=|[<>~^])\s*\d"
    rb"|\b\d+\s+assert\w*"
    rb"|(?<![\w.-])[\w.-]+=" + _WORDS + rb"[\w.-]*"
    # A success (``exited with 0``) and a setting (``timeout: 15 minutes``).
    rb"|\bexit(?:ed with| code| status)(?: code)?:? \(?0\b|\btimeout\s*[:=]\s*\d"
    rb")"
)
# Shapes of a report: a location before ``error:``, a bracketed or upper-case level word,
# a test framework's ``failed on line N``, a sanitizer's header.
_REPORT = re.compile(
    rb"(?:^|[\s:\]])(?:error|fatal|fail(?:ed|ure)?|panic)\b\s*(?:\[[^\]]*\])?\s*[:!]"
    rb"|\[(?:error|fatal|fail(?:ed|ure)?)\]"
    rb"|^\s*(?:error|fatal|fail(?:ed|ure)?|e )\b"
    rb"|\bnpm err"
    rb"|\w(?:error|exception)\b:"
    rb"|\bfailed on line \d+|\[compilation failed\]|^==\d+==\s*error: \w*sanitizer"
    rb"|\bexit(?:ed with| code| status)(?: code)?:? \(?[1-9]",
    re.I,
)
# A line that reports a success (``PASSED``, ``... ok``, a check mark, a ``[+]`` beside the
# ``[-]`` of a failed test; not ``1 failed, 9 passed``) or echoes a command (``$ make``,
# ``+ make``) is no failure, whatever words it holds.
_SUCCESS = re.compile(
    rb"\bPASS(?:ED)?\b|\bSUCCESS\b|\[\s*OK\s*\]|^\s*OK\b|\.\.\.\s*ok\b|\bok\s*$|^\s*\[\+\] "
    rb"|\xe2\x9c\x93|\xe2\x9c\x94",
    re.I,
)
_COUNTED = re.compile(rb"\b[1-9]\d* (?:failed|failures?|errors?)\b|\bnot ok\b", re.I)
_ECHO = re.compile(rb"^\s*(?:\$|\+{1,3}) \S")
# A line logged at a level under error (``INFO``, ``[WARNING]``, ``npm WARN``, ``note:``),
# also after the program or the location it is about (``ld: warning:``, ``a.c:3:5:
# warning:``), reports no failure, whatever it quotes; nor does a retry that may yet
# succeed.
_LEVEL = re.compile(
    rb"^\W{0,3}(?:\d[\d:.,T-]*\s+){0,2}(?:\[[^\]]{0,40}\]\s*){0,3}(?:npm\s+)?"
    rb"(?:[^\s:]{1,200}:(?:\d+:){0,2} ?)?\[?"
    rb"(info|debug|trace|notice|verbose|warn(?:ing)?|deprecat\w*|note|hint)\b",
    re.I,
)
_RETRY = re.compile(rb"\bretr(?:y|ying|ied)\b|\bwill retry\b|\battempt \d+ (?:of|/)", re.I)
_GAVE_UP = re.compile(rb"gave up|giving up|after \d+ (?:retries|attempts)|exhausted", re.I)
_WARN_CAP = 1.5
# A failure noun between two words of a sentence (``give useful error messages``, ``License
# Exception TSU``) describes; it does not report (``an error occurred while`` does). Two
# letters before it say as much as a whole word, and are not searched again from each letter.
_PROSE = re.compile(
    rb"[a-z]{2} (?:error|exception|failure|fault)s? "
    rb"(?!occur|happen|while|during|in |at |on |was |has |when|raised|thrown|encounter)[a-z]"
)
_VERBS = tuple(w for w, s in VOCABULARY if s >= 4 and w not in (b"error", b"exception", b"assert"))
_UPPER = re.compile(rb"\b(?:ERROR|FAILED|FAILURE|FAIL|FATAL|PANIC)\b")
# A path is masked from the start of its word (or from its first '/', after another mask).
_MASK = re.compile(
    rb"0x[0-9a-f]+|\b[0-9a-f]{7,}\b|(?<![\w.~-])[\w.~-]*/[\w./~@+-]*|/[\w./~@+-]*|\d+(?:[.:,]\d+)*"
    rb"|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|\xe2\x80\x98.{1,80}?\xe2\x80\x99"
)
_MASK_NO_PATH = re.compile(
    rb"0x[0-9a-f]+|\b[0-9a-f]{7,}\b|\d+(?:[.:,]\d+)*"
    rb"|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|\xe2\x80\x98.{1,80}?\xe2\x80\x99"
)
"""``_MASK`` without its two path alternatives, for text with no ``/`` (where they cannot
match)."""
STEP_MARKER = re.compile(
    rb"##\[(?:end)?group\]|::(?:end)?group::|travis_fold:|section_(?:start|end):"
    rb"|\$ \S|\+ \S|={3,} ?\S|-{3,} ?\S|\*{3,} ?\S|#{3,} ?\S|_{3,} ?\S"
)
"""The start of a line (its indentation, ANSI escapes and timestamp removed) that opens a
CI step or a runner's section: GitHub Actions ``##[group]``/``::group::``, Travis folds,
GitLab sections, a shell prompt or trace (``$ make``, ``+ make``), a ruled title."""
# The closing rule is its last three characters: a longer one would be measured again from
# every character of a long line (quadratic).
SECTION_TITLE = re.compile(
    rb"(?:_{3,}|-{3,}|={3,}|\*{3,}|#{3,}) ?\S.*\S ?(?:_{3}|-{3}|={3}|\*{3}|#{3})$"
    rb"|##\[group\]|::group::"
)
"""A line (stripped) that titles a runner's section or a CI step: ``____ test_x ____``,
``---- name stdout ----``, ``=== FAILURES ===``, ``##[group]Run make check``."""
EXIT_FAILED = re.compile(
    rb"\bexit(?:ed with| code| status)(?: code)?:? \(?[1-9]\d*"
    rb"|returned (?:a )?non-?zero exit|\breturned (?:[1-9]\d* exit status|status [1-9])"
    rb"|\bError [1-9]\d*$",
    re.I,
)
"""What a runner says when a command failed: ``The command "make" exited with 2.``,
``Process completed with exit code 1.``, ``make: *** [all] Error 2``, ``ld returned 1 exit
status``, ``Child returned status 2``."""
_TEMPLATE_BYTES = 200
OVERLAP = 32
"""Bytes carried from one searched piece to the next: longer than any word, so a word cut
between two pieces is found."""


def score_line(raw: bytes) -> float:
    """How strongly one line (its first bytes) reads as the reason of a failure; 0: not.

    A word counts where a word starts (``verror`` is none; ``TypeError`` is, and
    ``ErrorRenderer`` is a name); a report's shape adds one, a failure noun in a sentence
    takes one and a half; a line that reports a success, echoes a command or is logged at
    ``INFO`` counts at most 1, a warning or a retry at most 1.5.
    """
    text = raw if b"\x1b" not in raw else ANSI_BYTES.sub(b"", raw)
    if b"\r" in text:
        # A line redrawn in place: what it says last.
        states = [state for state in text.split(b"\r") if state.strip()]
        text = states[-1] if states else b""
    text = TIMESTAMP_BYTES.sub(b"", text)
    lower = text.translate(ASCII_LOWER)
    kept = _NOT_A_FAILURE.sub(lambda m: b" " * len(m.group()), lower)
    best = 0
    for word, score in VOCABULARY:
        if score > best and word in kept and _word_at_start(text, kept, word):
            best = score
    if best < _SHAPE_SCORE and LINE_SHAPES.search(kept):
        best = _SHAPE_SCORE
    if best == 0:
        # Only names and zero counts: keep it as a weak candidate all the same.
        return 0.5 if kept != lower else 0.0
    value = float(best)
    if best >= 3 and (_REPORT.search(text) or _UPPER.search(text)):
        value += 1.0
    elif _PROSE.search(kept) and not any(verb in kept for verb in _VERBS):
        value -= 1.5
    if (_SUCCESS.search(text) and not _COUNTED.search(text)) or _ECHO.match(text):
        value = min(value, 1.0)
    level = _LEVEL.match(text)
    if level is not None:
        below = level.group(1)[:1].lower() in b"idtv"  # info, debug, trace, verbose
        value = min(value, 1.0 if below else _WARN_CAP)
    elif _RETRY.search(text) and not _GAVE_UP.search(text):
        value = min(value, _WARN_CAP)
    return value


def _word_at_start(text: bytes, kept: bytes, word: bytes) -> bool:
    """Whether ``word`` occurs in ``kept`` (``text`` lower-cased, names blanked) where a
    word starts: after a non-letter, or as the capitalised end of a compound
    (``TypeError``), but not as the capitalised head of one (``ErrorRenderer``)."""
    pos = kept.find(word)
    while pos >= 0:
        starts = pos == 0 or not kept[pos - 1 : pos].isalpha()
        if not starts:
            starts = text[pos - 1 : pos].islower() and text[pos : pos + 1].isupper()
        if not starts:
            pos = kept.find(word, pos + 1)
            continue
        end = pos + len(word)
        while text[end : end + 1].islower():
            end += 1  # the rest of the capitalised word: ``Failover`` in ``FailoverProxy``
        head = (
            text[pos : pos + 1].isupper()
            and text[pos + 1 : pos + 2].islower()
            and text[end : end + 1].isupper()
            and text[end + 1 : end + 2].islower()
        )
        if not head:
            return True
        pos = kept.find(word, pos + 1)
    return False


def template(raw: bytes) -> bytes:
    """The line with its variable parts masked: what repeated lines have in common.

    Every digit is masked, and a digit from 1 to 9 in place of another matches the same
    patterns (only ``0x`` names one), so lines that differ only in those digits (a flood of
    one error with its counters and timestamps) have one template, computed once and
    remembered (``_TEMPLATES``)."""
    shape = raw[:_TEMPLATE_BYTES].translate(_NONZERO_AS_ONE)
    found = _TEMPLATES.get(shape)
    if found is None:
        found = _template(shape)
        if len(_TEMPLATES) >= _TEMPLATES_KEPT:
            _TEMPLATES.clear()
        _TEMPLATES[shape] = found
    return found


def _template(text: bytes) -> bytes:
    if b"\x1b" in text:
        text = ANSI_BYTES.sub(b"", text)
    text = TIMESTAMP_BYTES.sub(b"", text)
    # Without a slash the path alternatives never match: dropping them changes nothing and
    # halves the time (they are tried at every position).
    mask = _MASK if b"/" in text else _MASK_NO_PATH
    return mask.sub(b"*", text.translate(ASCII_LOWER)).strip()


_NONZERO_AS_ONE = bytes.maketrans(b"23456789", b"11111111")
_TEMPLATES: dict[bytes, bytes] = {}
_TEMPLATES_KEPT = 4096
