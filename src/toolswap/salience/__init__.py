"""What matters in an output: the lines that explain a failure, found while it streams in
and ranked once it is complete. The capture writes; this module decides what the pointer
lists from the omitted middle.

Finding. One vocabulary (``VOCABULARY``: compiler, linker, make, shell, test-runner,
timeout and resource words, plus ``LINE_PATTERNS`` for test-runner summaries such as
``1) test name`` or ``[-] test name``) drives the Python scan of the first MiB
(``ForwardScan``); the system's ``grep -E`` searches the next 16 MiB for the same
vocabulary and the rest for the strongest words (``GREP_WORDS``), as fast as the artifact
is written (run by ``middle_scan``). Every
matching line goes to a ``Candidates`` store, keyed by its template: the line with
numbers, hex, paths, quoted names and timestamps masked (the idea of template miners such
as Drain). The store keeps, per template, the first occurrence, a count and the next two
occurrences that say something else (more than numbers differ), in bounded memory.

Ranking. A line scores by its strongest word (failure words above ``Deprecat``/``Warning``),
gains when it is shaped like a report (``error:`` after a location, ``FAILED``, ``[ERROR]``),
loses when the word is only a name or a zero count (``0 errors``, ``-Werror``,
``error_handling.c``), and a rare template ranks above a repeated one: 150 copies of one
warning count once and never crowd out the one error, while two or three failure lines
that share a template but name different things (two tests that panicked) are each listed.

Showing. ``resolve`` reads each chosen line back from the artifact with one line of context
before and after, the start and the end of a traceback block, and, for a match inside a very
long line, a window around the match with its byte offset (what ``read --byte-start``
takes). ``clean_for_display`` strips ANSI escapes and collapses ``\\r`` progress lines in
what the model sees; the artifact keeps the bytes.

The modules, one concept each: ``vocabulary`` (the words, the patterns, scoring a line and
its template), ``candidates`` (the bounded store), ``scan`` (feeding the bytes in),
``middle_scan`` (grep over the middle, imported by the capture only), ``resolve`` (reading
the chosen lines back) and ``display`` (what the model sees of a line).
"""

from __future__ import annotations

from .candidates import Candidates
from .display import SALIENT_LINE_CHARS, clean_for_display, timestamp_prefix
from .resolve import SalientLine, resolve
from .scan import ForwardScan
from .scan import Scanner as Scanner
from .vocabulary import (
    BROAD_GREP_PATTERN,
    FAILURE_SCORE,
    GREP_PATTERN,
    GREP_WORDS,
    LINE_PATTERNS,
    VOCABULARY,
)
from .vocabulary import score_line as score_line
from .vocabulary import template as template

__all__ = [
    "BROAD_GREP_PATTERN",
    "FAILURE_SCORE",
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
