"""The artifact tools an agent calls to page a saved output: read, read bytes, grep, list.

One implementation, two front ends: the MCP server (``toolswap mcp serve`` and the proxy)
registers these as MCP tools, and a Python harness registers :func:`artifact_tools` with its
agent framework. What the model reads about them (names, descriptions, parameter texts, the
bounds their schemas state) lives in :mod:`toolswap._tool_descriptions`; this module is the
logic, and re-exports those names.

Every method returns text bounded to about 64 KiB, so a page never becomes the oversized
tool result it replaces, and raises a :class:`~toolswap.errors.ToolswapError` whose message
tells the model what to do next.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ._fork import track
from ._tool_descriptions import (
    GREP_ARTIFACT_DESCRIPTION,
    GREP_WIDTH,
    LIST_ARTIFACTS_DESCRIPTION,
    MAX_GREP_TIMEOUT,
    PARAMETER_DESCRIPTIONS,
    QUERY_ARTIFACT_DESCRIPTION,
    READ_ARTIFACT_BYTES_DESCRIPTION,
    READ_ARTIFACT_DESCRIPTION,
    TOOL_NAMES,
    tool_docstring,
)
from ._tool_descriptions import MAX_BYTES_LENGTH as MAX_BYTES_LENGTH
from ._tool_descriptions import MAX_LIMIT as MAX_LIMIT
from ._tool_descriptions import MAX_MATCHES as MAX_MATCHES
from .artifact import ArtifactReference, parse_artifact_source_id
from .errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactQueryError,
    ArtifactReadError,
    SourceIdError,
    ToolswapError,
)
from .externalizer import ToolResultExternalizer
from .grep import DEFAULT_TIMEOUT
from .pointer import human_size
from .reader import CONTINUATION_MARKER, LIST_TIP, ArtifactReader, ByteRange
from .session import Session
from .structured.query import DEFAULT_QUERY_TIMEOUT, Language
from .workspaces import find_session, holds

__all__ = [
    "GREP_ARTIFACT_DESCRIPTION",
    "LIST_ARTIFACTS_DESCRIPTION",
    "MAX_GREP_TIMEOUT",
    "PARAMETER_DESCRIPTIONS",
    "QUERY_ARTIFACT_DESCRIPTION",
    "READ_ARTIFACT_BYTES_DESCRIPTION",
    "READ_ARTIFACT_DESCRIPTION",
    "TOOL_NAMES",
    "ArtifactBytes",
    "ArtifactTools",
    "artifact_tools",
]

_T = TypeVar("_T")

MAX_OUTPUT_BYTES = 64 * 1024
"""Upper bound on one tool answer (well under the ~25,000-token cap MCP hosts apply)."""


@dataclass(frozen=True, slots=True)
class ArtifactBytes:
    """A byte range read for a model: the text to show, and the raw bytes for an image."""

    text: str
    """Header, body (text or base64) and the note on how to continue."""
    data: bytes
    artifact: ArtifactReference
    start: int
    whole: bool
    """True when the range is the whole artifact (an image can then be shown as one)."""


_UTF8_WIDTH = 4
"""The longest UTF-8 character, in bytes."""


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _utf8_width(lead: int) -> int:
    """Bytes in the character that starts with ``lead`` (1 for a byte that cannot start one)."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def _text_page(
    reader: ArtifactReader, ref: ArtifactReference, start: int, length: int
) -> ByteRange:
    """Bytes near ``start .. start + length`` that begin and end on UTF-8 character boundaries.

    A start inside a character moves back to that character's first byte; an end inside a
    character moves back before it (or forward past it, when the page would otherwise be
    empty). So a page never decodes a split character into U+FFFD, and following each
    page's next offset reads every byte exactly once. Bytes that are not UTF-8 at all are
    left where they are.
    """
    back = min(start, _UTF8_WIDTH - 1)
    chunk = reader.read_bytes(ref, start - back, length + back + _UTF8_WIDTH - 1)
    data = chunk.data
    first = back
    if first < len(data) and _is_continuation(data[first]):
        lead = first
        while lead > 0 and _is_continuation(data[lead]):
            lead -= 1
        if not _is_continuation(data[lead]) and lead + _utf8_width(data[lead]) > first:
            first = lead
    end = min(len(data), back + length)
    if end < len(data) and _is_continuation(data[end]):
        lead = end - 1
        while lead > max(first, end - _UTF8_WIDTH) and _is_continuation(data[lead]):
            lead -= 1
        if not _is_continuation(data[lead]) and lead + _utf8_width(data[lead]) > end:
            end = lead if lead > first else min(len(data), lead + _utf8_width(data[lead]))
    return ByteRange(
        source_id=chunk.source_id,
        start=chunk.start + first,
        data=data[first:end],
        size=chunk.size,
    )


def _text_reference(reader: ArtifactReader, source_id: str, tool: str) -> ArtifactReference:
    """The reference of a text artifact; a binary one is refused with the call that reads it."""
    ref = reader.reference(source_id)
    if ref.binary:
        raise ArtifactReadError(
            f"{ref.source_id} is binary ({ref.media_type}, {human_size(ref.byte_size)}); "
            f'{tool} reads text artifacts: read it with read_artifact_bytes(source_id="'
            f'{ref.source_id}", start=0, length=65536)'
        )
    return ref


def _hint(exc: ToolswapError) -> ToolswapError:
    """The same error, with what a model should do next appended."""
    if isinstance(exc, ArtifactCollectedError):
        return exc
    if isinstance(exc, ArtifactNotFoundError):
        # The model calls tools here: list_artifacts() replaces the CLI's list command.
        message = str(exc).partition("; " + LIST_TIP)[0]
        return ArtifactNotFoundError(
            f"{message}. Call list_artifacts() to see the saved outputs of this session; if "
            "the one you need is gone, run the tool again."
        )
    if isinstance(exc, ArtifactIntegrityError):
        return ArtifactIntegrityError(
            f"{exc}. Do not rely on this artifact; run the tool again for a fresh copy."
        )
    return exc


class ArtifactTools:
    """The five artifact tools over one session, returning bounded text for a model.

    Args:
        externalizer: the session whose artifacts are listed; source IDs of sibling
            sessions (same workspace directory) are read from those sessions.
        max_output_bytes: upper bound on one answer.
    """

    def __init__(
        self, externalizer: ToolResultExternalizer, *, max_output_bytes: int = MAX_OUTPUT_BYTES
    ) -> None:
        self.externalizer = externalizer
        self.max_output_bytes = max_output_bytes
        # Readers of our own, so a tool's reads never wait on the externalizer's appends.
        self._own = ArtifactReader(externalizer.session)
        self._readers: dict[str, ArtifactReader] = {externalizer.session.session_id: self._own}
        self._lock = threading.Lock()
        track(self)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # (see _fork)

    # -- resolving -------------------------------------------------------------------

    def _reader(self, source_id: str) -> ArtifactReader:
        if not isinstance(source_id, str):
            raise ArtifactAccessError("source_id must be a string such as 'artifact:<session>:...'")
        try:
            parsed = parse_artifact_source_id(source_id.strip())
        except SourceIdError as exc:
            raise ArtifactAccessError(
                f"{exc}. Copy the source ID exactly from the [Artifact: ...] line of the pointer, "
                "or call list_artifacts()"
            ) from None
        reader = self._readers.get(parsed.session)
        if reader is None:
            sibling = self.externalizer.session.root.parent / parsed.session
            if sibling.is_dir() and not sibling.is_symlink():
                session = Session.at(sibling, create=False)
                self._readers[parsed.session] = reader = ArtifactReader(session)
        if reader is not None and holds(reader.session, str(parsed)):
            return reader
        # Another workspace's session of the same name (every workspace has a `default`):
        # the source ID's file name and digest find it.
        if reader is None:
            return ArtifactReader(find_session(str(parsed)))
        try:
            return ArtifactReader(find_session(str(parsed), prefer=reader.session.root))
        except SourceIdError:
            return reader  # no such session elsewhere: its own reader says what is missing

    def _call(self, source_id: str, fn: Callable[[ArtifactReader, str], _T]) -> _T:
        try:
            with self._lock:  # guards the reader cache only; reads run in parallel
                reader = self._reader(source_id)
            return fn(reader, source_id.strip())
        except ToolswapError as exc:
            raise _hint(exc) from None

    # -- tools -----------------------------------------------------------------------

    def read_artifact(
        self, source_id: str, offset: int = 0, limit: int = 200, record: str = ""
    ) -> str:
        """Lines ``offset`` .. ``offset + limit - 1`` with 1-based numbers and a next-page
        note; or, with ``record``, that record of a structured artifact as indented JSON (a
        record larger than one answer shows its first lines and the query that saves it whole)."""
        if record:
            return self._read_record(source_id, record)
        if isinstance(limit, int) and limit > MAX_LIMIT:
            limit = MAX_LIMIT

        def run(reader: ArtifactReader, sid: str) -> str:
            ref = _text_reference(reader, sid, "read_artifact")
            page = reader.read_lines(ref, offset, limit, max_bytes=self.max_output_bytes - 1024)
            lines = list(page.lines)
            if (
                page.next_offset is None
                and lines
                and lines[-1] == ""
                and ref.line_count < (page.total_lines)
            ):
                # The empty "line" after a final newline is not a line of the output.
                lines.pop()
            out: list[str] = []
            number = offset + 1
            for line in lines:
                out.append(f"{number:>6}\t{line}")
                if not line.endswith(CONTINUATION_MARKER):
                    number += 1
            shown_last = offset + sum(1 for x in lines if not x.endswith(CONTINUATION_MARKER))
            # No thousands separators: "lines 1,001-1,200" reads as a list.
            span = (
                f"lines {offset + 1}-{shown_last}"
                if shown_last > offset
                else f"line {offset + 1}"
                if lines
                else "no lines"
            )
            head = (
                f"[{ref.source_id}: {span} of {ref.line_count}; {ref.source_tool} output, "
                f"{human_size(ref.byte_size)}]"
            )
            if page.continue_byte is not None:
                tail = (
                    f"[line {number} is longer than one page; read the rest of it with "
                    f'read_artifact_bytes(source_id="{ref.source_id}", start={page.continue_byte}, '
                    "length=65536)"
                )
                if page.next_offset is not None:
                    tail += f", or skip to the next line with offset={page.next_offset}"
                tail += "]"
            elif page.next_offset is not None:
                tail = (
                    f'[more: read_artifact(source_id="{ref.source_id}", '
                    f"offset={page.next_offset}, limit={limit})]"
                )
            else:
                tail = "[end of artifact]"
            return "\n".join([head, *out, tail])

        return self._call(source_id, run)

    def read_artifact_bytes(
        self, source_id: str, start: int = 0, length: int = 65536
    ) -> ArtifactBytes:
        """Bytes ``start`` .. ``start + length - 1``: text as text, binary as base64."""
        if isinstance(length, int) and length > MAX_BYTES_LENGTH:
            raise ArtifactReadError(
                f"length may be at most {MAX_BYTES_LENGTH} (1 MiB) per call; read in steps"
            )

        def run(reader: ArtifactReader, sid: str) -> ArtifactBytes:
            nonlocal start
            ref = reader.reference(sid)
            # Base64 grows by a third: keep the answer under the output bound.
            cap = self.max_output_bytes * 3 // 4 - 1024 if ref.binary else None
            if ref.binary:
                chunk = reader.read_bytes(ref, start, length)
            else:
                chunk = _text_page(reader, ref, start, length)
                start = chunk.start
            data = chunk.data
            whole = start == 0 and len(data) == chunk.size
            end = start + len(data)
            head = (
                f"[{ref.source_id}: bytes {start:,}-{max(end - 1, start):,} of {chunk.size:,}; "
                f"{ref.media_type}{', base64' if ref.binary else ''}]"
            )
            if chunk.next_offset is not None:
                tail = (
                    f'[more: read_artifact_bytes(source_id="{ref.source_id}", '
                    f"start={chunk.next_offset}, length={length})]"
                )
            else:
                tail = "[end of artifact]"
            if ref.binary:
                if (
                    cap is not None
                    and len(data) > cap
                    and not (whole and ref.media_type.startswith("image/"))
                ):
                    data = data[:cap]
                    end = start + len(data)
                    head = (
                        f"[{ref.source_id}: bytes {start:,}-{end - 1:,} of {chunk.size:,}; "
                        f"{ref.media_type}, base64; cut to fit one answer]"
                    )
                    tail = (
                        f'[more: read_artifact_bytes(source_id="{ref.source_id}", start={end}, '
                        f"length={len(data)})]"
                    )
                body = base64.b64encode(data).decode("ascii")
            else:
                body = chunk.text()
            return ArtifactBytes(
                text=f"{head}\n{body}\n{tail}", data=data, artifact=ref, start=start, whole=whole
            )

        return self._call(source_id, run)

    def grep_artifact(
        self,
        source_id: str,
        pattern: str,
        context: int = 0,
        max_matches: int = 50,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        cancel: threading.Event | None = None,
    ) -> str:
        """Matching lines (1-based numbers) with context, bounded to one answer.

        Args:
            timeout: seconds the search may run (at most :data:`MAX_GREP_TIMEOUT`).
            cancel: set it from another thread to stop the search (its child is killed).
        """
        if isinstance(max_matches, int) and max_matches > MAX_MATCHES:
            max_matches = MAX_MATCHES
        if isinstance(timeout, (int, float)) and timeout > MAX_GREP_TIMEOUT:
            timeout = MAX_GREP_TIMEOUT

        def run(reader: ArtifactReader, sid: str) -> str:
            ref = _text_reference(reader, sid, "grep_artifact")
            result = reader.grep(
                ref,
                pattern,
                context=context,
                max_matches=max_matches,
                width=GREP_WIDTH,
                timeout=timeout,
                cancel=cancel,
            )
            if not result.matches:
                return f"[{ref.source_id}: no line matches {pattern!r} in {ref.line_count} lines]"
            rendered = result.render()
            budget = self.max_output_bytes - 1024
            cut = False
            if len(rendered.encode()) > budget:
                rendered = rendered.encode()[:budget].decode("utf-8", "ignore")
                rendered = rendered[: rendered.rfind("\n")] if "\n" in rendered else rendered
                cut = True
            count = len(result.matches)
            head = (
                f"[{ref.source_id}: {count} matching line{'s' if count != 1 else ''} for "
                f"{pattern!r} (1-based line numbers; read around one with "
                "read_artifact(offset=line_number-1))]"
            )
            notes = []  # render() already says when max_matches stopped the search
            if cut:
                notes.append(
                    "[output cut at 64 KB; lower context or max_matches, or narrow the pattern]"
                )
            return "\n".join([head, rendered, *notes])

        return self._call(source_id, run)

    def query_artifact(
        self,
        source_id: str,
        expression: str,
        language: str = "jq",
        timeout: float = DEFAULT_QUERY_TIMEOUT,
    ) -> str:
        """The results of a jq or JMESPath query, one compact JSON value per line; a result
        larger than one answer is saved as a new artifact and its pointer returned."""
        from .structured.query import check_expression, query_artifact

        if language not in ("jq", "jmespath"):
            raise ArtifactQueryError(f"language must be 'jq' or 'jmespath', not {language!r}")
        lang: Language = "jq" if language == "jq" else "jmespath"
        check_expression(expression, lang)  # refused before any artifact is opened
        if isinstance(timeout, (int, float)) and timeout > MAX_GREP_TIMEOUT:
            timeout = MAX_GREP_TIMEOUT

        def run(reader: ArtifactReader, sid: str) -> str:
            result = query_artifact(reader, sid, expression, language=lang, timeout=timeout)
            plural = "s" if result.count != 1 else ""
            return self._answer_or_save(
                f"[{result.source_id}: {result.count:,} result{plural} of {expression!r}]",
                result.text,
                truncated=result.truncated,
                tool="query_artifact",
                summary=f"{result.count:,} results of {expression} on {sid}",
                narrow="of the results were kept: narrow the query to see the rest",
            )

        return self._call(source_id, run)

    def _read_record(self, source_id: str, record: str) -> str:
        from .structured.address import parse_address
        from .structured.record import read_record

        address = parse_address(record)  # refused before any artifact is opened

        def run(reader: ArtifactReader, sid: str) -> str:
            found = read_record(reader, sid, address)
            where = f", line {found.line}" if found.line is not None else ""
            head = f"[{found.source_id}: record {found.address} ({_FORMATS[found.format]}{where})]"
            size = len(found.text.encode())
            room = self.max_output_bytes - 512
            if size <= room and not found.truncated:
                return f"{head}\n{found.text}"
            # Reading never writes (read_artifact stays read-only): the answer shows the
            # record's first lines and names the query that saves it whole.
            shown = _first_lines(found.text, room)
            whole = f"at least {human_size(size)}" if found.truncated else human_size(size)
            return (
                f"{head}\n{shown}\n[the record is {whole} of indented JSON; its first "
                f"{human_size(len(shown.encode()))} are shown. Read a part of it with a longer "
                f"address (such as {found.address}.<field> or {found.address}[0]), or save it "
                f'whole as a new artifact with query_artifact(source_id="{sid}", '
                f"expression={json.dumps(found.address)})]"
            )

        return self._call(source_id, run)

    def _answer_or_save(
        self, head: str, text: str, *, truncated: bool, tool: str, summary: str, narrow: str
    ) -> str:
        """``head`` and ``text`` as one answer; or, when that is larger than one answer (or
        ``text`` was cut), ``text`` saved as a new artifact and its pointer."""
        answer = f"{head}\n{text}"
        if len(answer.encode()) <= self.max_output_bytes - 256 and not truncated:
            return answer
        cut = f" (only the first {human_size(len(text.encode()))} {narrow})" if truncated else ""
        saved = self.externalizer.externalize(text, tool, summary=_clip_summary(summary))
        return f"{head}: too large to show, saved as a new artifact{cut}\n" + saved.context_text

    def list_artifacts(self, limit: int = 100) -> str:
        """One line per artifact of the session, newest last (at most ``limit``)."""
        try:
            with self._lock:
                manifest = self._own.manifest
                artifacts = [manifest.reference(r) for r in manifest.records()]
        except ToolswapError as exc:
            raise _hint(exc) from None
        session = self.externalizer.session.session_id
        if not artifacts:
            return f"[session {session!r} has no saved tool outputs]"
        shown = artifacts[-limit:]
        out = [
            f"[session {session!r}: {len(artifacts)} saved tool output"
            f"{'s' if len(artifacts) != 1 else ''}"
            + (f"; the newest {len(shown)} are listed" if len(shown) < len(artifacts) else "")
            + "]"
        ]
        used = len(out[0])
        for a in shown:
            when = (
                a.source.captured_at.isoformat(timespec="seconds") if a.source.captured_at else ""
            )
            kind = f"binary {a.media_type}" if a.binary else f"{a.line_count:,} lines"
            row = (
                f"{a.source_id} | {a.source_tool} | {human_size(a.byte_size)}, {kind} | "
                f"{when} | {a.summary}"
            )
            if used + len(row.encode()) + 1 > self.max_output_bytes - 256:
                out.append("[more artifacts not shown]")
                break
            out.append(row)
            used += len(row.encode()) + 1
        return "\n".join(out)


_FORMATS = {"json": "JSON", "jsonl": "JSON Lines", "csv": "CSV", "tsv": "TSV"}


def _first_lines(text: str, limit: int) -> str:
    """The whole lines of ``text`` that fit in ``limit`` UTF-8 bytes (at least a part of
    the first one, cut at a character)."""
    data = text.encode()[:limit]
    end = data.rfind(b"\n")
    return data[: end if end > 0 else len(data)].decode("utf-8", "ignore")


def _clip_summary(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 240 else text[:239] + "…"


def artifact_tools(
    externalizer: ToolResultExternalizer | Path | str | None = None,
) -> list[Callable[..., str]]:
    """Plain functions ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact``,
    ``query_artifact`` and ``list_artifacts`` for an agent framework to register as tools.

    They carry the model-facing descriptions as docstrings and typed parameters, so
    frameworks that build a tool schema from a function (OpenAI Agents SDK
    ``function_tool``, LangChain ``@tool``, ...) can take them as they are. Errors are
    raised as :class:`~toolswap.errors.ToolswapError` with an actionable message.

    Args:
        externalizer: the session to read; a session directory; or None for the session
            :func:`~toolswap.wrap.externalize_tool` uses by default.
    """
    if isinstance(externalizer, ToolResultExternalizer):
        ext = externalizer
    elif externalizer is not None:
        ext = ToolResultExternalizer(externalizer, read_hint="mcp")
    else:
        from .wrap import default_externalizer

        ext = default_externalizer()
    tools = ArtifactTools(ext)

    def read_artifact(source_id: str, offset: int = 0, limit: int = 200, record: str = "") -> str:
        return tools.read_artifact(source_id, offset, limit, record)

    def read_artifact_bytes(source_id: str, start: int = 0, length: int = 65536) -> str:
        return tools.read_artifact_bytes(source_id, start, length).text

    def grep_artifact(
        source_id: str,
        pattern: str,
        context: int = 0,
        max_matches: int = 50,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> str:
        return tools.grep_artifact(source_id, pattern, context, max_matches, timeout)

    def query_artifact(
        source_id: str,
        expression: str,
        language: str = "jq",
        timeout: float = DEFAULT_QUERY_TIMEOUT,
    ) -> str:
        return tools.query_artifact(source_id, expression, language, timeout)

    def list_artifacts() -> str:
        return tools.list_artifacts()

    read_artifact.__doc__ = tool_docstring(
        READ_ARTIFACT_DESCRIPTION, "source_id", "offset", "limit", "record"
    )
    read_artifact_bytes.__doc__ = tool_docstring(
        READ_ARTIFACT_BYTES_DESCRIPTION, "source_id", "start", "length"
    )
    grep_artifact.__doc__ = tool_docstring(
        GREP_ARTIFACT_DESCRIPTION, "source_id", "pattern", "context", "max_matches", "timeout"
    )
    query_artifact.__doc__ = tool_docstring(
        QUERY_ARTIFACT_DESCRIPTION, "source_id", "expression", "language", "timeout"
    )
    list_artifacts.__doc__ = tool_docstring(LIST_ARTIFACTS_DESCRIPTION)
    return [read_artifact, read_artifact_bytes, grep_artifact, query_artifact, list_artifacts]
