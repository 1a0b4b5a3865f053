"""The context pointer (what the model sees instead of a large output) and the default
summary.

The pointer is the agent-facing product surface: one template, within a budget (32 KiB
unless ``TOOLSWAP_POINTER_BYTES`` says otherwise), that says plainly that the whole output
is saved and exactly which call reads more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._utf8 import escaped_bytes, lone_surrogate
from .artifact import ArtifactReference
from .capture import CaptureStats
from .errors import InvalidArgumentError
from .salience import FAILURE_SCORE, SalientLine, clean_for_display
from .settings import POINTER_MAX_BYTES, SUMMARY_MAX_CHARS
from .structured.hints import lists_failures, structured_section

__all__ = [
    "COMPACT_TEMPLATE",
    "POINTER_TEMPLATE",
    "ReadHint",
    "default_summary",
    "human_size",
    "make_pointer",
    "make_unsaved_preview",
    "validate_summary",
]

ReadHint = Literal["cli", "mcp", "python"]

POINTER_TEMPLATE = """\
[Artifact: {source_id}]
Summary: {summary}
Source: {tool}; SHA-256: {sha256}
Full output: {path}
Size: {size_text}. The full output is saved; page through it instead of running the tool again.
{body}
[full output at: {path}]
{read_more}"""

_READ_MORE: dict[str, str] = {
    "cli": (
        "Read more: {command} read {source_id}{scope} --offset {offset} --limit 200 | "
        "search: {command} grep {source_id}{scope} 'PATTERN'"
    ),
    "mcp": (
        'Read more: read_artifact(source_id="{source_id}", offset={offset}, limit=200) | '
        'search: grep_artifact(source_id="{source_id}", pattern="PATTERN")'
    ),
    "python": (
        'Read more: externalizer.read_artifact("{source_id}", offset={offset}, limit=200) | '
        'search: externalizer.grep("{source_id}", "PATTERN")'
    ),
}
_READ_BYTES: dict[str, str] = {
    "cli": (
        "Read bytes: {command} read {source_id}{scope} --byte-start 0 --byte-length 65536 --json"
    ),
    "mcp": 'Read bytes: read_artifact_bytes(source_id="{source_id}", start=0, length=65536)',
    "python": 'Read bytes: externalizer.read_bytes("{source_id}", start=0, length=65536)',
}


def human_size(size: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size:,} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def validate_summary(summary: str | None) -> str | None:
    """Return a caller's summary if it is usable; ValueError otherwise (nothing written yet)."""
    if summary is None:
        return None
    if not isinstance(summary, str):
        raise InvalidArgumentError(f"summary must be a string, not {type(summary).__name__}")
    if not summary.strip():
        raise InvalidArgumentError(
            "summary is blank: pass None for the default summary, or some text"
        )
    if len(summary) > SUMMARY_MAX_CHARS:
        raise InvalidArgumentError(
            f"summary has {len(summary)} characters; at most {SUMMARY_MAX_CHARS} are allowed"
        )
    if any(ch in summary for ch in "\r\n\x00"):
        raise InvalidArgumentError("summary must be a single line (no newline or NUL characters)")
    if lone_surrogate(summary):
        raise InvalidArgumentError("summary is not UTF-8 text (it holds a surrogate)")
    return summary


def _lines(count: int) -> str:
    return "1 line" if count == 1 else f"{count:,} lines"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def default_summary(
    stats: CaptureStats, tool_name: str, media_type: str, exit_code: int | None = None
) -> str:
    """A deterministic summary of at most 240 characters: kind, size and the first line."""
    what = f"{tool_name} output" if exit_code is None else f"{tool_name} output (exit {exit_code})"
    if stats.binary:
        return _clip(
            f"{what}: binary {media_type}, {human_size(stats.byte_size)}", SUMMARY_MAX_CHARS
        )
    first = ""
    for raw in stats.head.split(b"\n"):
        # Text output is valid UTF-8; only the cut at the end of the kept head can be partial.
        candidate = clean_for_display(raw.decode("utf-8", "ignore")).strip()
        if candidate:
            first = " ".join(candidate.split())
            break
    lead = f"{what}: {_lines(stats.line_count)}, {human_size(stats.byte_size)}"
    text = f"{lead}; first line: {first}" if first else f"{lead}; starts with blank lines"
    return _clip(text, SUMMARY_MAX_CHARS)


@dataclass(frozen=True, slots=True)
class _Cut:
    head: bytes
    head_end: int
    tail: bytes
    tail_start: int


def _utf8_start(data: bytes, pos: int) -> int:
    """Move ``pos`` forward past UTF-8 continuation bytes."""
    while pos < len(data) and 0x80 <= data[pos] <= 0xBF:
        pos += 1
    return pos


def _utf8_end(data: bytes, end: int) -> int:
    """Move ``end`` back so ``data[:end]`` does not end inside a UTF-8 sequence."""
    if end >= len(data):
        return len(data)
    while end > 0 and 0x80 <= data[end] <= 0xBF:
        end -= 1
    return end


def _cut(stats: CaptureStats, head_budget: int, tail_budget: int) -> _Cut:
    size = stats.byte_size
    head = stats.head[:head_budget]
    if len(head) < size:
        newline = head.rfind(b"\n")
        if newline >= len(head) // 2:
            head = head[: newline + 1]
        else:
            head = head[: _utf8_end(stats.head, len(head))]
    head_end = len(head)
    tail_start = max(size - tail_budget, head_end)
    tail = stats.tail[tail_start - stats.tail_offset :] if tail_start < size else b""
    rel = tail_start - stats.tail_offset
    at_line_start = rel > 0 and stats.tail[rel - 1] == 0x0A
    if tail and tail_start > head_end and not at_line_start:
        newline = tail.find(b"\n")
        if 0 <= newline < len(tail) // 2 and newline + 1 < len(tail):
            skip = newline + 1
        else:
            skip = _utf8_start(tail, 0)
        tail = tail[skip:]
        tail_start += skip
    return _Cut(head=head, head_end=head_end, tail=tail, tail_start=tail_start)


_MORE_RESERVE = 80
STRUCTURED_RAW_BYTES = 512
"""Head, tail and failure lines each shown beside an outline, at most (bytes); failure
lines beside an outline that lists no failure may take what is left of
``STRUCTURED_POINTER_BYTES``."""
STRUCTURED_POINTER_BYTES = 8 * 1024
"""A structured output's pointer, at most (bytes, the outline included)."""
SALIENT_HEADER = (
    "--- lines in the omitted part that look like failures, the most telling "
    "(N: line, N- context) ---"
)
QUIET_NOTE = "no line in this output looks like a failure (error, exception, failed, ...)"


@dataclass(frozen=True, slots=True)
class _Policy:
    """How a pointer shares its budget when the output holds failure lines.

    ``failure_share`` and ``tail_share`` are the two numbers chosen from data: on the
    development corpus, ``bench/bench_pointer.py`` scores a small grid of them and reports,
    beside this choice's fit, the recall when each project's logs are scored with the
    values chosen on the other projects only (leave one project out)."""

    head_share: int = 16
    """The head keeps at least 1/head_share of the room (256 bytes to 2 KiB)."""
    tail_share: int = 10
    """The tail keeps at least 1/tail_share of the room."""
    failure_share: float = 0.8
    """The failure lines take at most this part of the room before the tail grows: the
    lines chosen by evidence, with the lines around them, say more per byte than more
    tail."""
    quiet_head_lines: int = 10
    quiet_tail_lines: int = 20


POLICY = _Policy()
_QUIET_HEAD_BYTES = 1024
_QUIET_TAIL_BYTES = 2048
_MIN_BODY = 256
# What a failing output may add to head and tail before it is shown whole rather than cut.
_WHOLE_EXTRA = 6 * 1024


def _row(line: SalientLine) -> str:
    if line.context:
        return f"{line.line_no}- {line.text}"
    where = f"[from byte {line.byte_offset}] " if line.byte_offset is not None else ""
    similar = f"  (+{line.similar} similar)" if line.similar else ""
    if line.similar and line.counted_to is not None:
        similar = f"  (+{line.similar} similar in lines {line.counted_from or 1}-{line.counted_to})"
    elif line.similar and line.counted_from is not None:
        similar = f"  (+{line.similar} similar from line {line.counted_from})"
    return f"{line.line_no}: {where}{line.text}{similar}"


def _salient_section(
    lines: tuple[SalientLine, ...],
    cut: _Cut,
    first: int,
    last: int,
    *,
    room: int,
    unlisted: int = 0,
) -> str:
    """The failure lines between line numbers ``first`` and ``last`` (inclusive; windows
    inside long lines: between the head and the tail bytes), chosen by rank with their
    context lines, in at most ``room`` bytes. A group that does not fit whole is shown
    without the lines just before and after it, then by its failure line alone. Shown in
    line order; ``unlisted`` failure-like lines were not read back and count as left out."""
    groups: dict[int, list[SalientLine]] = {}
    for line in lines:
        if (
            cut.head_end <= line.byte_offset < cut.tail_start
            if line.byte_offset is not None
            else first <= line.line_no <= last
        ):
            groups.setdefault(line.rank, []).append(line)
    matched = [rank for rank, group in groups.items() if any(not x.context for x in group)]
    if not matched:
        return ""
    used = len(SALIENT_HEADER) + 1 + _MORE_RESERVE
    chosen: list[SalientLine] = []
    left_out = unlisted
    for rank in sorted(matched):
        for detail in (2, 1, 0):
            rows = [line for line in groups[rank] if line.detail <= detail]
            cost = sum(len(_row(line).encode()) + 1 for line in rows)
            if used + cost <= room:
                used += cost
                chosen.extend(rows)
                break
        else:
            left_out += 1
    if not chosen:
        return ""
    out = [SALIENT_HEADER, *(_row(line) for line in sorted(chosen, key=lambda x: x.line_no))]
    if left_out:
        out.append(f"(+{left_out} more failure-like lines; grep the artifact to see them all)")
    return "\n".join(out) + "\n"


def _lines_bytes(data: bytes, count: int, *, from_end: bool) -> int:
    """How many bytes the first (or last) ``count`` lines of ``data`` take."""
    if from_end:
        pos = len(data) - 1 if data.endswith(b"\n") else len(data)
        for _ in range(count):
            pos = data.rfind(b"\n", 0, pos)
            if pos < 0:
                return len(data)
        return len(data) - pos - 1
    pos = -1
    for _ in range(count):
        pos = data.find(b"\n", pos + 1)
        if pos < 0:
            return len(data)
    return pos + 1


def _fit(text: str, budget: int) -> str:
    """``text`` cut to ``budget`` bytes of UTF-8 at a line boundary (the last resort when
    even the compact frame does not fit)."""
    data = text.encode()
    if len(data) <= budget:
        return text
    data = data[: _utf8_end(data, budget - 4)]
    newline = data.rfind(b"\n")
    if newline > 0:
        data = data[: newline + 1]
    return data.decode("utf-8", "ignore") + "…"


COMPACT_TEMPLATE = """\
[Artifact: {source_id}]
Size: {size_text}. The full output is saved; page through it instead of running the tool again.
{body}
{read_more}"""
"""The frame when the budget cannot hold ``POINTER_TEMPLATE``'s (a long path or summary
and a small budget): the source ID, the size and how to read more."""


def make_pointer(
    stats: CaptureStats,
    artifact: ArtifactReference,
    *,
    head_bytes: int,
    tail_bytes: int,
    salient_bytes: int = POINTER_MAX_BYTES,
    budget: int = POINTER_MAX_BYTES,
    hint: ReadHint = "cli",
    scope: str = "",
    command: str = "toolswap",
    policy: _Policy = POLICY,
) -> str:
    """Render the context pointer for a captured output, at most ``budget`` bytes of UTF-8.

    Head, failure lines and tail share the budget by what the output holds: failure lines
    first (up to 80% of the room, with the head and the tail kept at their floors), then
    the tail grows up to ``tail_bytes``, then the head up to ``head_bytes``, then lower
    ranked lines fill what is left. An output in which no line looks like a failure (of a
    command not known to have failed) gets a short head and tail and says so.

    ``scope`` is appended to the source ID in CLI commands (for example
    ``" --session-dir /path"`` when the source ID alone does not find the session);
    ``command`` is the shell words that run toolswap there (see
    :func:`toolswap._invocation.cli_command`).
    """
    fields = {
        "command": command,
        "scope": scope,
        "source_id": artifact.source_id,
        "summary": artifact.summary,
        "tool": artifact.source_tool,
        "sha256": artifact.content_sha256,
        "path": escaped_bytes(str(artifact.path)),  # (printable: a byte not UTF-8 as \xNN)
    }
    if stats.binary:
        body = (
            f"Binary output ({artifact.media_type}); it is not shown as text.\n"
            + _READ_BYTES[hint].format(**fields)
            + "\n"
        )
        size_text = f"{human_size(stats.byte_size)}, binary {artifact.media_type}"
        text = POINTER_TEMPLATE.format(
            **fields, size_text=size_text, body=body, read_more="Use the byte reader above."
        )
        if len(text.encode()) > budget:
            text = COMPACT_TEMPLATE.format(
                **fields, size_text=size_text, body=body, read_more="Use the byte reader above."
            )
        return _fit(text, budget)
    size_text = f"{human_size(stats.byte_size)}, {_lines(stats.line_count)}"
    template = POINTER_TEMPLATE
    # Measure the frame first (the read-more offset at its widest); the body gets the rest.
    probe = _READ_MORE[hint].format(offset=stats.line_count, **fields)
    frame = len(template.format(**fields, size_text=size_text, body="", read_more=probe).encode())
    if frame + _MIN_BODY > budget:
        template = COMPACT_TEMPLATE
        frame = len(
            template.format(**fields, size_text=size_text, body="", read_more=probe).encode()
        )
    room = max(budget - frame, 0)

    def finish(body: str, read_more: str) -> str:
        if body and not body.endswith("\n"):
            body += "\n"
        text = template.format(**fields, size_text=size_text, body=body, read_more=read_more)
        return _fit(text, budget)

    # A command that failed or was interrupted is never called quiet, whatever it printed.
    quiet = _quiet(stats) and not artifact.exit_code and not artifact.interrupted
    whole_cap = head_bytes + tail_bytes + min(salient_bytes, _WHOLE_EXTRA)
    whole = f"--- full output ({_lines(stats.line_count)}) ---\n"
    if quiet:
        shape = _quiet_budgets(stats, room, head_bytes, tail_bytes, policy)
        whole_cap = min(whole_cap, sum(shape) + len(whole))
    if stats.byte_size <= len(stats.head) and stats.byte_size + len(whole) + 1 <= min(
        room, whole_cap
    ):
        # Showing it all costs no more than a cut would: no "read more".
        body = whole + clean_for_display(stats.head[: stats.byte_size].decode("utf-8", "replace"))
        return finish(body, "This is the whole output.")

    # A structured output's outline comes first and stands for most of the raw text: head,
    # tail and failure lines shrink to a glimpse of the bytes themselves. Failure lines get
    # what the outline leaves of a structured pointer's bytes when it lists no failure: it
    # may have read a log for a table, or the failure may be in a field that names none.
    source = stats.outline
    outline = structured_section(source, hint, fields)
    failures_listed = bool(outline) and lists_failures(source)
    raw_salient = salient_bytes
    if outline:
        head_bytes = min(head_bytes, STRUCTURED_RAW_BYTES)
        tail_bytes = min(tail_bytes, STRUCTURED_RAW_BYTES)
        salient_bytes = min(salient_bytes, STRUCTURED_RAW_BYTES)

    def render(cut: _Cut, section: str) -> str:
        # The outline's room is measured with the section markers below.
        return outline + _body(stats, cut, section, quiet=quiet)

    def section_for(cut: _Cut, space: int) -> str:
        if cut.tail_start <= cut.head_end or quiet:
            return ""
        tail_first = stats.newline_count - cut.tail.count(b"\n") + 1
        # The list never takes more room than the part it stands for.
        omitted = cut.tail_start - cut.head_end
        return _salient_section(
            stats.salient,
            cut,
            cut.head.count(b"\n") + 1,
            tail_first - 1,
            room=min(space, salient_bytes, omitted + len(SALIENT_HEADER) + _MORE_RESERVE),
            unlisted=stats.unlisted,
        )

    if outline:
        room = min(room, max(STRUCTURED_POINTER_BYTES - frame, 0))
    markers = len(render(_cut(stats, 0, 0), "").encode()) + 64  # the section markers
    space = max(room - markers, 0)
    if outline and not failures_listed:
        left = space - head_bytes - tail_bytes
        salient_bytes = max(salient_bytes, min(raw_salient, left))
    if quiet:
        head_budget, tail_budget = _quiet_budgets(stats, space, head_bytes, tail_bytes, policy)
        cut = _cut(stats, head_budget, tail_budget)
        section = ""
    else:
        head_floor = min(head_bytes, max(256, min(2048, space // policy.head_share)))
        tail_floor = min(tail_bytes, space // policy.tail_share)
        cut = _cut(stats, head_floor, tail_floor)
        first_room = min(int(space * policy.failure_share), space - len(cut.head) - len(cut.tail))
        # Warnings and names take part too: a failure's context is often one of them.
        first = section_for(cut, first_room)
        used = len(first.encode()) + _MORE_RESERVE if first else 0
        # What the failure lines leave goes to the tail, then to the head.
        tail_budget = max(min(tail_bytes, space - len(cut.head) - used), 0)
        cut = _cut(stats, head_floor, tail_budget)
        head_budget = max(min(head_bytes, space - len(cut.tail) - used), len(cut.head))
        cut = _cut(stats, head_budget, tail_budget)
        section = section_for(cut, space - len(cut.head) - len(cut.tail))
    body = render(cut, section)
    while len(body.encode()) > room and (cut.tail or section or cut.head):
        # The markers were estimated: give back the excess, from the tail first.
        excess = len(body.encode()) - room
        if cut.tail:
            cut = _cut(stats, len(cut.head), max(len(cut.tail) - excess, 0))
        elif section:
            section = section_for(cut, len(section.encode()) - excess)
        else:
            cut = _cut(stats, max(len(cut.head) - excess, 0), 0)
        body = render(cut, section)
    offset = cut.head.count(b"\n") if cut.tail_start > cut.head_end or cut.tail else 0
    return finish(body, _READ_MORE[hint].format(offset=offset, **fields))


def _quiet(stats: CaptureStats) -> bool:
    """Whether every byte was searched and no line looks like a failure."""
    if _unscanned(stats):
        return False
    return not any(line.score >= FAILURE_SCORE for line in stats.salient if not line.context)


def _unscanned(stats: CaptureStats) -> tuple[int, int] | None:
    """The bytes no failure-line scan covered (start, end), or None."""
    end = stats.byte_size if stats.tail_scan_start is None else stats.tail_scan_start
    return (stats.scanned_bytes, end) if stats.scanned_bytes < end else None


def _quiet_budgets(
    stats: CaptureStats, space: int, head_bytes: int, tail_bytes: int, policy: _Policy
) -> tuple[int, int]:
    """Head and tail bytes that show the shape of an output without failures: a few
    lines (at most 1 KiB and 2 KiB), within the room and the settings."""
    head = min(
        head_bytes,
        space // 3,
        _QUIET_HEAD_BYTES,
        _lines_bytes(stats.head, policy.quiet_head_lines, from_end=False),
    )
    tail = min(
        tail_bytes,
        max(space - head, 0),
        _QUIET_TAIL_BYTES,
        _lines_bytes(stats.tail, policy.quiet_tail_lines, from_end=True),
    )
    return head, tail


def _body(stats: CaptureStats, cut: _Cut, section: str, *, quiet: bool) -> str:
    """The pointer's body: head, what was omitted (and where it was not searched), the
    failure lines, the tail."""
    # A head that ends inside a line shows that line's start: it is counted, and said cut
    # (the header left it out, and the omitted lines began after it).
    head_cut = not cut.head.endswith(b"\n") and cut.head_end < stats.byte_size
    head_last_line = cut.head.count(b"\n") + head_cut
    tail_first_line = stats.newline_count - cut.tail.count(b"\n") + 1
    parts: list[str] = []
    head_text = clean_for_display(cut.head.decode("utf-8", "replace"))
    if cut.tail_start <= cut.head_end and not cut.tail:
        parts.append(f"--- full output ({_lines(stats.line_count)}) ---\n{head_text}")
        return "".join(parts)
    omitted = cut.tail_start - cut.head_end
    first_omitted = head_last_line + (not head_cut)
    shown = max(head_last_line, 1)
    parts.append(
        f"--- head: lines 1-{shown}{f' (line {shown} cut)' if head_cut else ''} ---\n{head_text}"
    )
    if not head_text.endswith("\n"):
        parts.append("\n")
    if omitted > 0:
        last_omitted = max(tail_first_line - 1, first_omitted)
        note = ""
        unscanned = _unscanned(stats)
        if unscanned is not None and max(unscanned[0], cut.head_end) < min(
            unscanned[1], cut.tail_start
        ):
            note = (
                f"; failure lines were looked for only in the first "
                f"{human_size(stats.scanned_bytes)}"
            )
            if unscanned[1] < stats.byte_size:
                note += f" and the last {human_size(stats.byte_size - unscanned[1])}"
        elif quiet:
            note = f"; {QUIET_NOTE}"
        parts.append(
            f"--- omitted: lines {first_omitted}-{last_omitted} ({human_size(omitted)}){note} ---\n"
        )
        parts.append(section)
    parts.append(
        f"--- tail: lines {tail_first_line}-{stats.line_count} ---\n"
        + clean_for_display(cut.tail.decode("utf-8", "replace"))
    )
    body = "".join(parts)
    return body if body.endswith("\n") else body + "\n"


UNSAVED_TEMPLATE = """\
[Output NOT saved: {reason}]
Source: {tool}{status}
Size: {size_text}. No artifact exists: this preview is all that is left of the output; run
the tool again once the problem is fixed if you need the rest.
{body}"""


def make_unsaved_preview(
    stats: CaptureStats,
    *,
    tool: str,
    reason: str,
    exit_code: int | None,
    head_bytes: int,
    tail_bytes: int,
    budget: int = POINTER_MAX_BYTES,
) -> str:
    """The preview given when an output could not be written to an artifact: head and
    tail, at most ``budget`` bytes of UTF-8."""
    status = "" if exit_code is None else f"; exit status {exit_code}"
    fields = {"reason": _clip(" ".join(reason.split()), 300), "tool": tool, "status": status}
    if stats.binary:
        size_text = f"{human_size(stats.byte_size)}, binary"
        return _fit(UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body=""), budget)
    lines = _lines(stats.line_count) if stats.lines_known else "lines not counted"
    size_text = f"{human_size(stats.byte_size)}, {lines}"
    frame = len(UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body="").encode()) + 200
    room = max(budget - frame, 0)
    head_budget = min(head_bytes, max(room // 4, min(room, 256)))
    tail_budget = min(tail_bytes, max(room - head_budget, 0))
    cut = _cut(stats, head_budget, tail_budget)
    if cut.tail_start <= cut.head_end and not cut.tail:
        body = clean_for_display(cut.head.decode("utf-8", "replace"))
    else:
        omitted = cut.tail_start - cut.head_end
        body = clean_for_display(cut.head.decode("utf-8", "replace"))
        if body and not body.endswith("\n"):
            body += "\n"
        if omitted > 0:
            body += f"--- {human_size(omitted)} not shown and not saved ---\n"
        body += clean_for_display(cut.tail.decode("utf-8", "replace"))
    if body and not body.endswith("\n"):
        body += "\n"
    return _fit(UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body=body), budget)
