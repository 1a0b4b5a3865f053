"""ToolResultExternalizer: thresholds, streaming capture, pointer and manifest together.

ext = ToolResultExternalizer(session_dir)
result = ext.process(output, "bash")          # inline when small, pointer when large
result = ext.externalize(output, "grep")      # always an artifact
ext.read_artifact(result.artifact, offset=40_000, limit=200)
"""

from __future__ import annotations

import fcntl
import io
import os
import shlex
import stat
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from . import cleanup
from ._fs import open_dir_nofollow
from ._utf8 import encode_output as _encode
from ._utf8 import utf8_chars as _utf8_chars
from .artifact import (
    ArtifactReference,
    ArtifactSource,
    ExternalizedToolResult,
    InlineToolResult,
    artifact_filename,
    format_source_id,
)
from .capture import CaptureStats, StreamCapture, detect_media_type
from .cleanup import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    CleanupClaim,
    JournalLike,
)
from .errors import (
    ArtifactAccessError,
    ArtifactStoreError,
    ArtifactWriteError,
    ChainLogError,
    CleanupError,
    ConfigurationError,
)
from .grep import DEFAULT_TIMEOUT
from .manifest import Manifest
from .pointer import (
    ReadHint,
    default_summary,
    human_size,
    make_pointer,
    make_unsaved_preview,
    validate_summary,
)
from .reader import ArtifactReader, ByteRange, GrepResult, LinePage
from .replica import put_from_replica
from .session import Session, toolswap_home, workspace_slug
from .settings import POINTER_MAX_BYTES, SUMMARY_MAX_CHARS, ExternalizerSettings, require_aware

__all__ = ["Output", "ToolResultExternalizer"]

_NAMES_TAKEN_MAX = 10_000
"""Names in a row a store may refuse before a capture gives up on it."""

Output = str | bytes | bytearray | memoryview | BinaryIO | Iterable[bytes]
"""What a tool may return: text, bytes, a binary file object or an iterable of byte chunks."""

_READ_CHUNK = 1 << 20
_COALESCE = 256 << 10
_HEAD_SLACK = 8


def _chunks(output: Output) -> Iterable[bytes]:
    if isinstance(output, str):
        data = _encode(output)
        for i in range(0, len(data), _READ_CHUNK):
            yield data[i : i + _READ_CHUNK]
        return
    if isinstance(output, (bytes, bytearray, memoryview)):
        view = memoryview(output).cast("B")
        for i in range(0, len(view), _READ_CHUNK):
            yield bytes(view[i : i + _READ_CHUNK])
        return
    read = getattr(output, "read", None)
    if callable(read):
        _widen_pipe(output)
        # A full read(): a pipe hands over 64 KiB at a time, and per-chunk work (queue,
        # scan, bookkeeping) is cheaper on 1 MiB chunks. The capture waits for EOF anyway.
        while True:
            chunk = read(_READ_CHUNK)
            if not chunk:
                return
            if not isinstance(chunk, (bytes, bytearray)):
                raise TypeError("file objects passed as output must be opened in binary mode")
            yield bytes(chunk)
    pending: list[bytes] = []
    size = 0
    for chunk in output:
        if isinstance(chunk, str):
            raise TypeError("an iterable output must yield bytes, not str")
        if not chunk:
            continue
        if not pending and len(chunk) >= _COALESCE:
            yield bytes(chunk)
            continue
        # Many small chunks (lines from a generator) are joined into larger ones.
        pending.append(bytes(chunk))
        size += len(chunk)
        if size >= _COALESCE:
            yield b"".join(pending)
            pending.clear()
            size = 0
    if pending:
        yield b"".join(pending)


def _widen_pipe(output: object) -> None:
    """Give a pipe a 1 MiB buffer (Linux): a 64 KiB pipe makes reader and writer take turns
    sleeping every 64 KiB, which costs more than hashing the bytes."""
    fileno = getattr(output, "fileno", None)
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if not callable(fileno) or set_size is None:
        return
    try:
        fd = fileno()
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, set_size, _READ_CHUNK)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file, or the system refuses: the default buffer works too


class ToolResultExternalizer:
    """Turns tool outputs into inline text or immutable artifacts in one session.

    Args:
        session_dir: the session root (trusted); its last component is the session ID.
        settings: thresholds and pointer sizes (default: the spec's, with environment
            overrides from :meth:`ExternalizerSettings.from_env`).
        now: clock for ``captured_at`` (timezone-aware UTC), injectable for tests.
        read_hint: which call the pointer tells the model to use to read more.
    """

    def __init__(
        self,
        session_dir: Path | str | Session,
        *,
        settings: ExternalizerSettings | None = None,
        now: Callable[[], datetime] | None = None,
        read_hint: ReadHint = "cli",
    ) -> None:
        self.session = session_dir if isinstance(session_dir, Session) else Session.at(session_dir)
        self.settings = settings if settings is not None else ExternalizerSettings.from_env()
        self._now = now or (lambda: datetime.now(UTC))
        self.read_hint: ReadHint = read_hint
        self.manifest = Manifest.of(self.session)
        self.reader = ArtifactReader(self.session, self.manifest)

    @classmethod
    def open(
        cls,
        session_id: str,
        *,
        workspace: str | None = None,
        home: Path | None = None,
        settings: ExternalizerSettings | None = None,
        read_hint: ReadHint = "cli",
    ) -> ToolResultExternalizer:
        """Open (creating if needed) ``$TOOLSWAP_HOME/projects/<workspace>/<session_id>``."""
        return cls(
            Session.open(session_id, workspace=workspace, home=home),
            settings=settings,
            read_hint=read_hint,
        )

    @property
    def session_dir(self) -> Path:
        return self.session.root

    @property
    def tool_results_dir(self) -> Path:
        return self.session.tool_results_dir

    # -- thresholds ------------------------------------------------------------------

    def should_externalize(self, output: str | bytes, tool_name: str) -> bool:
        """The spec's threshold check for an output already in memory."""
        return self.settings.rule_for(tool_name).exceeded_by(output)

    # -- capture ---------------------------------------------------------------------

    def check_ready(self) -> None:
        """Check what can be checked before a tool runs, so its output is never lost to a
        problem known in advance: the manifest verifies and the tool-results directory
        opens.

        Raises:
            ChainLogError: the manifest or its head file is corrupt or cannot be trusted.
            ArtifactAccessError: the tool-results directory cannot be opened.
        """
        if self.session.binding is not None:
            self.manifest.sync()  # a store that cannot be read refuses now, before the tool runs
        self.manifest.high_water()  # the manifest and its head file both verify
        os.close(open_dir_nofollow(self.session.tool_results_dir))

    def process(
        self,
        output: Output,
        tool_name: str,
        *,
        summary: str | None = None,
        argv: list[str] | tuple[str, ...] | None = None,
        exit_code: int | Callable[[], int | None] | None = None,
        media_type: str | None = None,
        interrupted: str | Callable[[], str | None] | None = None,
    ) -> ExternalizedToolResult | InlineToolResult:
        """Return small output inline (writing nothing) and externalize large output.

        The output is streamed: only up to the threshold is buffered before spilling.
        Binary output (not UTF-8, or a NUL in its first 8 KiB) is externalized whatever its
        size, unless the tool's rule is ``never``.
        """
        self._check_tool(tool_name)
        summary = validate_summary(summary)
        rule = self.settings.rule_for(tool_name)

        def spill(chunks: Iterable[bytes]) -> ExternalizedToolResult:
            return self._capture(
                chunks,
                tool_name,
                summary=summary,
                argv=argv,
                exit_code=exit_code,
                media_type=media_type,
                interrupted=interrupted,
            )

        buffered: list[bytes] = []
        size = 0
        chars = 0
        stream = iter(_chunks(output))
        for chunk in stream:
            buffered.append(chunk)
            size += len(chunk)
            if rule.max_chars is not None:
                chars += _utf8_chars(chunk)
            if rule.exceeded(size, chars):
                return spill(_prepend(buffered, stream))
        if isinstance(output, str):
            return InlineToolResult(context_text=output)
        data = b"".join(buffered)
        text: str | None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        binary = text is None or "\x00" in text[:8192]
        if binary and not rule.never:
            # Binary output never goes into the context, however small: it gets an artifact
            # and a pointer that says its size and kind.
            return spill(iter([data]))
        return InlineToolResult(
            context_text=text if text is not None else data.decode("utf-8", "replace")
        )

    def externalize(
        self,
        output: Output,
        tool_name: str,
        *,
        summary: str | None = None,
        argv: list[str] | tuple[str, ...] | None = None,
        exit_code: int | Callable[[], int | None] | None = None,
        media_type: str | None = None,
        interrupted: str | Callable[[], str | None] | None = None,
    ) -> ExternalizedToolResult:
        """Write ``output`` to a new immutable artifact and return the pointer for the context.

        Raises:
            ValueError: the summary is blank, too long or not a single line (nothing is
                written).
        """
        self._check_tool(tool_name)
        summary = validate_summary(summary)
        return self._capture(
            _chunks(output),
            tool_name,
            summary=summary,
            argv=argv,
            exit_code=exit_code,
            media_type=media_type,
            interrupted=interrupted,
        )

    @staticmethod
    def _check_tool(tool_name: str) -> None:
        if not isinstance(tool_name, str) or not tool_name.strip() or len(tool_name) > 200:
            raise ValueError("tool_name must be a non-empty string of at most 200 characters")
        if any(ch in tool_name for ch in "\r\n\x00"):
            raise ValueError("tool_name must be a single line")

    def _capture(
        self,
        chunks: Iterable[bytes],
        tool_name: str,
        *,
        summary: str | None,
        argv: list[str] | tuple[str, ...] | None,
        exit_code: int | Callable[[], int | None] | None,
        media_type: str | None,
        interrupted: str | Callable[[], str | None] | None = None,
    ) -> ExternalizedToolResult:
        if argv is not None and not all(isinstance(a, str) for a in argv):
            raise TypeError("argv must be a sequence of strings")
        s = self.settings
        try:
            self.check_ready()  # before the rest of the output is consumed
        except (ChainLogError, ArtifactAccessError) as exc:
            # Whatever was already read (process() buffers up to the threshold) and the
            # rest still reach the caller as a bounded preview, never a bare error.
            memory = StreamCapture(-1, head_keep=s.head_bytes, tail_keep=s.tail_bytes, scan_limit=0)
            for chunk in chunks:
                memory.write(chunk)
            memory.discard()
            raise self._unsaved(memory, tool_name, exit_code, str(exc)) from exc
        dir_fd = open_dir_nofollow(self.session.tool_results_dir)
        capture: StreamCapture | None = None
        try:
            capture = StreamCapture(
                dir_fd,
                # Enough head for the default summary's first line whatever head_bytes is,
                # and for a pointer that shows an output whole when it fits.
                head_keep=max(s.head_bytes, 1024, POINTER_MAX_BYTES) + _HEAD_SLACK,
                head_shown=s.head_bytes,
                tail_keep=s.tail_bytes,
                scan_limit=s.salient_scan_bytes,
                tail_scan=s.salient_tail_scan_bytes,
            )
            for chunk in chunks:
                capture.write(chunk)
            try:
                stats = capture.finish()
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise self._unsaved(capture, tool_name, exit_code, reason) from exc
            code = exit_code() if callable(exit_code) else exit_code
            kind = media_type or detect_media_type(stats.head, binary=stats.binary)
            text_summary = summary or default_summary(stats, tool_name, kind, code)
            stopped = interrupted() if callable(interrupted) else interrupted
            if stopped and summary is None:
                text_summary = _clip(f"[interrupted by {stopped}] {text_summary}")
            captured_at = require_aware(self._now())
            with self.session.lock():
                filename = self._publish(
                    capture,
                    lambda filename: {
                        "event": "artifact",
                        "source_id": format_source_id(
                            self.session.session_id, filename, stats.sha256
                        ),
                        "filename": filename,
                        "tool": tool_name,
                        "summary": text_summary,
                        "byte_size": stats.byte_size,
                        "line_count": stats.line_count,
                        "char_count": stats.char_count,
                        "sha256": stats.sha256,
                        "binary": stats.binary,
                        "media_type": kind,
                        "captured_at": captured_at.astimezone(UTC).isoformat(),
                        "argv": list(argv) if argv is not None else None,
                        "exit_code": code,
                        **({"interrupted": stopped} if stopped else {}),
                    },
                    tool_name=tool_name,
                    exit_code=code,
                    stats=stats,
                )
                source_id = format_source_id(self.session.session_id, filename, stats.sha256)
        finally:
            if capture is not None:
                capture.discard()
            os.close(dir_fd)
        artifact = ArtifactReference(
            source=ArtifactSource(
                source_id=source_id,
                source_type="tool_result",
                title=f"{tool_name} output ({filename})",
                captured_at=datetime.fromisoformat(captured_at.astimezone(UTC).isoformat()),
            ),
            path=self.session.tool_results_dir / filename,
            summary=text_summary,
            source_tool=tool_name,
            content_sha256=stats.sha256,
            byte_size=stats.byte_size,
            line_count=stats.line_count,
            char_count=stats.char_count,
            binary=stats.binary,
            media_type=kind,
            argv=tuple(argv) if argv is not None else None,
            exit_code=code,
            interrupted=stopped or None,
        )
        return ExternalizedToolResult(
            context_text=self.make_pointer(stats, artifact), artifact=artifact
        )

    def _publish(
        self,
        capture: StreamCapture,
        record_for: Callable[[str], dict[str, object]],
        *,
        tool_name: str,
        exit_code: int | None,
        stats: CaptureStats,
    ) -> str:
        """Link the finished capture under the next free name and record it; the caller
        holds the session lock. A name that cannot be recorded is removed again: no final
        name is ever left without its manifest record by an error (a crash can leave one,
        which ``verify`` reports and cleanup collects).

        A session kept in a store writes the bytes there first, under a name the store
        confirms is free (another host may hold the next one), then links the replica."""
        filename = ""
        taken = 0
        binding = self.session.binding
        try:
            if binding is not None:
                self.manifest.sync()
            number = self.manifest.high_water() + 1
            while True:
                filename = artifact_filename(number)
                number += 1
                if binding is not None and not self._put_under(capture, filename, stats):
                    taken += 1
                    if taken >= _NAMES_TAKEN_MAX:
                        raise ArtifactStoreError(
                            f"{taken} names in a row are taken in the store; "
                            "is another writer looping?"
                        )
                    continue
                if capture.link_as(filename):
                    break
                # A name left by a crash before its manifest record.
        except (OSError, ChainLogError) as exc:
            self._unlink_unrecorded(filename)
            reason = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            raise self._unsaved(capture, tool_name, exit_code, reason) from exc
        try:
            self.manifest.append(record_for(filename), expect=(filename, _unclaimed_name))
        except (OSError, ChainLogError) as exc:
            self._unlink_unrecorded(filename)
            reason = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            raise self._unsaved(capture, tool_name, exit_code, reason) from exc
        return filename

    def _put_under(self, capture: StreamCapture, filename: str, stats: CaptureStats) -> bool:
        """Put the capture in the session's store as ``filename``, only if that name is
        free here and there (a HEAD first: a taken name costs no upload)."""
        binding = self.session.binding
        assert binding is not None
        if os.path.lexists(self.session.tool_results_dir / filename):
            return False  # a local leftover: the name is not ours to give
        if binding.store.stat_artifact(binding.workspace, binding.session, filename) is not None:
            return False
        stored = put_from_replica(
            self.session, capture.dir_fd, capture.tmp_name, filename, stats.byte_size, stats.sha256
        )
        return stored is not None

    def _unlink_unrecorded(self, filename: str) -> None:
        """Remove ``filename`` unless the manifest records it (the lock is held).

        A copy this capture put in a shared store stays there: the put or the record may
        still land after a lost reply, so only cleanup, which records the collection
        first and refuses once a record exists, may delete it (as an unrecorded object).
        """
        if not filename:
            return
        try:
            self.manifest.sync()  # a store may hold the record although the append failed
            if self.manifest.record_for(filename) is not None:
                return
        except ChainLogError:
            return  # cannot prove it is unrecorded: keep it (verify reports it)
        try:
            dir_fd = open_dir_nofollow(self.session.tool_results_dir)
        except ArtifactAccessError:
            return  # left for verify and cleanup; it has no record, so nothing trusts it
        try:
            os.unlink(filename, dir_fd=dir_fd)
            os.fsync(dir_fd)
        except OSError:
            pass  # the same
        finally:
            os.close(dir_fd)

    def _unsaved(
        self,
        capture: StreamCapture,
        tool_name: str,
        exit_code: int | Callable[[], int | None] | None,
        reason: str,
    ) -> ArtifactWriteError:
        stats = capture.partial_stats()
        code = exit_code() if callable(exit_code) else exit_code
        message = f"the output ({human_size(stats.byte_size)}) could not be saved: {reason}"
        preview = make_unsaved_preview(
            stats,
            tool=tool_name,
            reason=message,
            exit_code=code,
            head_bytes=self.settings.head_bytes,
            tail_bytes=self.settings.tail_bytes,
        )
        return ArtifactWriteError(
            message, preview=preview, byte_size=stats.byte_size, exit_code=code
        )

    def make_pointer(self, stats: CaptureStats, artifact: ArtifactReference) -> str:
        """The bounded context pointer for a captured output."""
        s = self.settings
        return make_pointer(
            stats,
            artifact,
            head_bytes=s.head_bytes,
            tail_bytes=s.tail_bytes,
            salient_bytes=s.salient_bytes,
            hint=self.read_hint,
            scope=self._cli_scope() if self.read_hint == "cli" else "",
        )

    def _cli_scope(self) -> str:
        """What ``toolswap read`` needs beside the source ID to find this session."""
        root = self.session.root
        try:
            projects = (toolswap_home() / "projects").absolute()
        except ConfigurationError:
            projects = None
        if root.parent.parent == projects:
            # Found from the source ID anywhere under $TOOLSWAP_HOME; a workspace that is
            # not this directory's is named too, so the hint works as printed.
            workspace = root.parent.name
            try:
                derived = workspace_slug()
            except (ValueError, OSError):
                derived = None
            return "" if workspace == derived else f" --workspace {shlex.quote(workspace)}"
        return f" --session-dir {shlex.quote(str(root))}"

    # -- page faults -----------------------------------------------------------------

    def get_artifact(self, source_id: str) -> ArtifactReference:
        """Rebuild an artifact's reference from its source ID (after a restart too)."""
        return self.reader.reference(source_id)

    def list_artifacts(self) -> list[ArtifactReference]:
        """Every live artifact of the session, oldest first."""
        return [self.manifest.reference(r) for r in self.manifest.records()]

    def read_artifact(
        self, artifact: ArtifactReference | str, offset: int = 0, limit: int = 2000
    ) -> str:
        """The spec's page fault: lines ``offset`` .. ``offset + limit`` (0-based), verified."""
        return self.reader.read_artifact(artifact, offset, limit)

    def read_lines(
        self,
        artifact: ArtifactReference | str,
        offset: int = 0,
        limit: int = 2000,
        *,
        width: int = 2000,
    ) -> LinePage:
        return self.reader.read_lines(artifact, offset, limit, width=width)

    def read_bytes(
        self, artifact: ArtifactReference | str, start: int = 0, length: int = 65536
    ) -> ByteRange:
        return self.reader.read_bytes(artifact, start, length)

    def grep(
        self,
        artifact: ArtifactReference | str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        ignore_case: bool = False,
        fixed: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> GrepResult:
        """See :meth:`ArtifactReader.grep`: a linear-time search stopped at ``timeout`` s."""
        return self.reader.grep(
            artifact,
            pattern,
            context=context,
            max_matches=max_matches,
            ignore_case=ignore_case,
            fixed=fixed,
            timeout=timeout,
        )

    # -- cleanup (see toolswap.cleanup) ----------------------------------------------

    def plan_cleanup(
        self,
        claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim],
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan from caller-supplied claims; refused once the session has a durable journal."""
        return cleanup.plan_cleanup(self.session, claims, policy=policy, now=now)

    def apply_cleanup(
        self,
        plan: ArtifactCleanupPlan,
        claims: Iterable[CleanupClaim] | Mapping[str, CleanupClaim] | None,
        *,
        now: datetime | None = None,
    ) -> ArtifactCleanupReport:
        """Apply a plan against the current caller-supplied claims."""
        return cleanup.apply_cleanup(self.session, plan, claims, now=now)

    def plan_cleanup_from_journal(
        self,
        journal: JournalLike,
        *,
        policy: ArtifactCleanupPolicy | None = None,
        now: datetime | None = None,
    ) -> ArtifactCleanupPlan:
        """Plan from the retention journal's current claims (read-only)."""
        self._same_session(journal)
        return cleanup.plan_cleanup_from_journal(journal, policy=policy, now=now)

    def apply_cleanup_from_journal(
        self, plan: ArtifactCleanupPlan, journal: JournalLike, *, now: datetime | None = None
    ) -> ArtifactCleanupReport:
        """Apply a plan under the session lock, re-folding the journal's claims first."""
        self._same_session(journal)
        return cleanup.apply_cleanup_from_journal(plan, journal, now=now)

    def _same_session(self, journal: JournalLike) -> None:
        if journal.session.root != self.session.root:
            raise CleanupError(
                f"the journal belongs to session {journal.session.session_id!r} at "
                f"{journal.session.root}, not to this externalizer's session"
            )


def _unclaimed_name(record: object, collected: object) -> str | None:
    """A capture's record goes only onto a chain where its name is still unused."""
    if collected is not None:
        return (
            "cleanup on another host collected the stored copy before its record was "
            "written (an orphan TTL shorter than the upload?)"
        )
    if record is not None:
        return "the name was recorded by another writer"
    return None


def _clip(text: str) -> str:
    return text if len(text) <= SUMMARY_MAX_CHARS else text[: SUMMARY_MAX_CHARS - 1] + "…"


def _prepend(first: list[bytes], rest: Iterable[bytes]) -> Iterable[bytes]:
    yield from first
    yield from rest
