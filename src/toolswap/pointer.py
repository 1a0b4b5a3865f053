"""The context pointer (what the model sees instead of a large output) and the default
summary.

The pointer is the agent-facing product surface: one template, bounded to 32 KiB, that says
plainly that the whole output is saved and exactly which call reads more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .artifact import ArtifactReference
from .capture import CaptureStats
from .errors import InvalidArgumentError
from .salience import SalientLine, clean_for_display, timestamp_prefix
from .settings import POINTER_MAX_BYTES, SUMMARY_MAX_CHARS
from .structured.hints import structured_section

__all__ = [
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
    if tail and tail_start > head_end:
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
"""Head, tail and failure lines each shown beside an outline, at most (bytes)."""
_HEAD_FLOOR = 2048
SALIENT_HEADER = (
    "--- lines in the omitted part that look like failures, the most telling "
    "(N: line, N- context) ---"
)


def _row(line: SalientLine) -> str:
    if line.context:
        return f"{line.line_no}- {line.text}"
    where = f"[from byte {line.byte_offset}] " if line.byte_offset is not None else ""
    similar = f"  (+{line.similar} similar)" if line.similar else ""
    return f"{line.line_no}: {where}{line.text}{similar}"


def _salient_section(
    lines: tuple[SalientLine, ...], cut: _Cut, first: int, last: int, *, budget: int, hard: int
) -> str:
    """The failure lines between line numbers ``first`` and ``last`` (inclusive; windows
    inside long lines: between the head and the tail bytes), chosen by rank with their
    context lines: at most ``budget`` bytes not counting leading timestamps, and at most
    ``hard`` bytes in all. Shown in line order."""
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
    used_all = used
    chosen: list[SalientLine] = []
    left_out = 0
    for rank in sorted(matched):
        rows = [(line, _row(line)) for line in groups[rank]]
        cost_all = sum(len(row.encode()) + 1 for _, row in rows)
        cost = cost_all - sum(len(timestamp_prefix(line.text).encode()) for line, _ in rows)
        if used + cost > budget or used_all + cost_all > hard:
            left_out += 1
            continue
        used += cost
        used_all += cost_all
        chosen.extend(line for line, _ in rows)
    if not chosen:
        return ""
    out = [SALIENT_HEADER, *(_row(line) for line in sorted(chosen, key=lambda x: x.line_no))]
    if left_out:
        out.append(f"(+{left_out} more failure-like lines; grep the artifact to see them all)")
    return "\n".join(out) + "\n"


def make_pointer(
    stats: CaptureStats,
    artifact: ArtifactReference,
    *,
    head_bytes: int,
    tail_bytes: int,
    salient_bytes: int,
    hint: ReadHint = "cli",
    scope: str = "",
    command: str = "toolswap",
) -> str:
    """Render the bounded context pointer for a captured output (at most 32 KiB of UTF-8).

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
        "path": str(artifact.path),
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
        return text
    size_text = f"{human_size(stats.byte_size)}, {_lines(stats.line_count)}"
    # Measure the frame first, then give the tail what is left of the 32 KiB.
    probe_read_more = _READ_MORE[hint].format(offset=stats.line_count, **fields)
    frame = POINTER_TEMPLATE.format(
        **fields, size_text=size_text, body="", read_more=probe_read_more
    )
    frame_cost = len(frame.encode()) + 400  # section markers with their numbers
    # The head never takes the whole budget, whatever the settings and the path length.
    head_budget = min(head_bytes, max(POINTER_MAX_BYTES - frame_cost - 1024, 0))
    whole = min(head_bytes + tail_bytes + salient_bytes, POINTER_MAX_BYTES - frame_cost)
    if stats.byte_size <= min(len(stats.head), whole):
        # Showing it all costs no more than a cut would: no "read more".
        body = f"--- full output ({_lines(stats.line_count)}) ---\n" + clean_for_display(
            stats.head[: stats.byte_size].decode("utf-8", "replace")
        )
        if not body.endswith("\n"):
            body += "\n"
        return POINTER_TEMPLATE.format(
            **fields, size_text=size_text, body=body, read_more="This is the whole output."
        )
    # A structured output's outline comes first and stands for most of the raw text: head,
    # tail and failure lines shrink to a glimpse of the bytes themselves.
    outline = structured_section(stats.outline, hint, fields)
    if outline:
        head_budget = min(head_budget, STRUCTURED_RAW_BYTES)
        tail_bytes = min(tail_bytes, STRUCTURED_RAW_BYTES)
        salient_bytes = min(salient_bytes, STRUCTURED_RAW_BYTES)
    limit = POINTER_MAX_BYTES - frame_cost - len(outline.encode())
    head_budget = min(head_budget, max(limit - 1024, 0))

    def salient_for(cut: _Cut, budget: int) -> str:
        if cut.tail_start <= cut.head_end:
            return ""
        tail_first = stats.newline_count - cut.tail.count(b"\n") + 1
        # The list never takes more room than the part it stands for.
        omitted = cut.tail_start - cut.head_end
        return _salient_section(
            stats.salient,
            cut,
            cut.head.count(b"\n") + 1,
            tail_first - 1,
            budget=min(salient_bytes, omitted),
            hard=min(budget, omitted),
        )

    def fit(head_budget: int, tail_budget: int) -> tuple[_Cut, str, int]:
        cut = _cut(stats, head_budget, tail_budget)
        salient = salient_for(cut, limit - len(cut.head))
        return cut, salient, len(cut.head) + len(salient.encode()) + len(cut.tail) - limit

    cut, salient, over = fit(head_budget, tail_bytes)
    if over > 0 and head_budget > _HEAD_FLOOR:
        # The failure lines take their room from the head first (down to 2 KiB): the tail
        # is where a failing run usually explains itself.
        cut, salient, over = fit(max(_HEAD_FLOOR, head_budget - over), tail_bytes)
    if over > 0:
        # Then the tail gives way; lines it no longer shows join the middle.
        room = limit - len(cut.head) - len(salient.encode())
        cut = _cut(stats, len(cut.head), max(room, 0))
        salient = salient_for(cut, limit - len(cut.head) - len(cut.tail))
    head_last_line = cut.head.count(b"\n")
    tail_first_line = stats.newline_count - cut.tail.count(b"\n") + 1
    parts: list[str] = []
    head_text = clean_for_display(cut.head.decode("utf-8", "replace"))
    if cut.tail_start <= cut.head_end and not cut.tail:
        parts.append(f"--- full output ({_lines(stats.line_count)}) ---\n{head_text}")
        offset = 0
    else:
        omitted = cut.tail_start - cut.head_end
        first_omitted = head_last_line + 1
        parts.append(f"--- head: lines 1-{max(head_last_line, 1)} ---\n{head_text}")
        if not head_text.endswith("\n"):
            parts.append("\n")
        if omitted > 0:
            last_omitted = max(tail_first_line - 1, first_omitted)
            scan_note = ""
            unscanned_to = (
                stats.byte_size if stats.tail_scan_start is None else (stats.tail_scan_start)
            )
            if max(stats.scanned_bytes, cut.head_end) < min(unscanned_to, cut.tail_start):
                scan_note = (
                    f"; failure lines were looked for only in the first "
                    f"{human_size(stats.scanned_bytes)}"
                )
                if unscanned_to < stats.byte_size:
                    scan_note += f" and the last {human_size(stats.byte_size - unscanned_to)}"
            parts.append(
                f"--- omitted: lines {first_omitted}-{last_omitted} "
                f"({human_size(omitted)}){scan_note} ---\n"
            )
            parts.append(salient)
        parts.append(
            f"--- tail: lines {tail_first_line}-{stats.line_count} ---\n"
            + clean_for_display(cut.tail.decode("utf-8", "replace"))
        )
        offset = head_last_line
    body = outline + "".join(parts)
    if not body.endswith("\n"):
        body += "\n"
    read_more = _READ_MORE[hint].format(offset=offset, **fields)
    return POINTER_TEMPLATE.format(**fields, size_text=size_text, body=body, read_more=read_more)


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
) -> str:
    """The bounded preview given when an output could not be written to an artifact."""
    status = "" if exit_code is None else f"; exit status {exit_code}"
    fields = {"reason": _clip(" ".join(reason.split()), 300), "tool": tool, "status": status}
    if stats.binary:
        size_text = f"{human_size(stats.byte_size)}, binary"
        return UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body="")
    size_text = f"{human_size(stats.byte_size)}, {_lines(stats.line_count)}"
    frame = len(UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body="").encode()) + 200
    head_budget = min(head_bytes, max(POINTER_MAX_BYTES - frame - 1024, 0))
    tail_budget = min(tail_bytes, max(POINTER_MAX_BYTES - frame - head_budget, 0))
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
    return UNSAVED_TEMPLATE.format(**fields, size_text=size_text, body=body)
