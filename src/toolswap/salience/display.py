"""What the model sees of a salient line: ANSI escapes stripped, ``\\r`` progress lines
collapsed, a leading timestamp kept out of the length limit. The artifact keeps the bytes.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSI_BYTES",
    "SALIENT_LINE_CHARS",
    "TIMESTAMP_BYTES",
    "WINDOW_BEFORE",
    "clean_for_display",
    "display_line",
    "timestamp_prefix",
]

SALIENT_LINE_CHARS = 240
"""Longest salient line shown, in characters (a leading timestamp not counted)."""
WINDOW_BEFORE = 80
"""Bytes shown before a match when a long line is shown as a window around it."""

_TIMESTAMP = re.compile(
    r"^\ufeff?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
TIMESTAMP_BYTES = re.compile(
    rb"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
ANSI_BYTES = re.compile(
    rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
)


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


def display_line(raw: bytes) -> str:
    """A line as the pointer lists it: decoded, cleaned and clipped."""
    text = clean_for_display(raw[: SALIENT_LINE_CHARS * 8].decode("utf-8", "replace"))
    return _clip(text.rstrip("\r\n"))
