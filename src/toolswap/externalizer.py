"""ToolResultExternalizer: thresholds, streaming capture, pointer and manifest together.

ext = ToolResultExternalizer(session_dir)
result = ext.process(output, "bash")          # inline when small, pointer when large
result = ext.externalize(output, "grep")      # always an artifact
ext.read_artifact(result.artifact, offset=40_000, limit=200)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from . import durable
from ._artifact_names import artifact_filename
from ._externalizer_cleanup import CleanupMethods
from ._externalizer_reads import PageFaults
from ._fork import expect_captures
from ._keywords import refuse_unknown
from ._output import Output, chunks, prepend
from ._results import InlineToolResult
from ._utf8 import escaped_bytes, lone_surrogate, shell_word, utf8_chars
from .durable import open_dir_nofollow
from .errors import (
    ArtifactAccessError,
    ArtifactStoreError,
    ArtifactWriteError,
    ChainLogError,
    ConfigurationError,
    InvalidArgumentError,
)
from .manifest import Manifest
from .session import Session, toolswap_home, workspace_slug
from .settings import POINTER_MAX_BYTES, SUMMARY_MAX_CHARS, ExternalizerSettings, require_aware
from .structured import inspect_output

if TYPE_CHECKING:
    from datetime import datetime

    # The spill machinery (capture, failure-line scan, pointer, and the artifact module's
    # value objects) is imported when an output is first spilled: a command whose output
    # is returned inline never loads it.
    from .artifact import ArtifactReference, ExternalizedToolResult
    from .capture import CaptureStats, StreamCapture
    from .pointer import ReadHint
    from .records import ArtifactRecord

__all__ = ["CallFacts", "Output", "ToolResultExternalizer", "head_kept"]


class CallFacts(TypedDict, total=False):
    """What a caller knows about the call that produced an output; each is optional.

    ``exit_code`` and ``interrupted`` may be callables, asked once the output has ended
    (a process's code is known only then).
    """

    summary: str | None
    """One line for the pointer, instead of the one made from the output."""
    argv: Iterable[str] | None
    """The command line, recorded with the artifact (any iterable of strings but a
    string)."""
    exit_code: int | Callable[[], int | None] | None
    media_type: str | None
    """Instead of the one detected from the head of the output."""
    interrupted: str | Callable[[], str | None] | None
    """What stopped the tool early (a signal, a timeout), said in the summary."""


_HEAD_SLACK = 8


class _Outlines:
    """This process's outline helper (``structured.outline_process.OUTLINES``), imported
    when an output first looks structured, and looked up at each call (a forked child has
    its own)."""

    def warm(self) -> None:
        from .structured import outline_process

        outline_process.OUTLINES.warm()

    def submit(self, head: bytes, fd: int, size: int) -> Callable[[], str] | None:
        from .structured import outline_process

        return outline_process.OUTLINES.submit(head, fd, size)


_OUTLINES = _Outlines()


def head_kept(settings: ExternalizerSettings, tool_name: str) -> int:
    """The bytes of an output's head a capture keeps: enough for the default summary's
    first line whatever ``head_bytes`` is, and for a pointer that shows an output whole
    when it fits (failure lines are collected from the first byte: the budget decides how
    much head shows). Its structure is recognised from these bytes."""
    return (
        max(settings.head_bytes, 1024, POINTER_MAX_BYTES, settings.pointer_bytes_for(tool_name))
        + _HEAD_SLACK
    )


_NAMES_TAKEN_MAX = 10_000
"""Names in a row a store may refuse before a capture gives up on it."""


def _utc_now() -> datetime:
    """The default clock. datetime is imported when it is first read: a capture whose
    output stays inline, in a session whose readiness check is remembered, reads none."""
    from datetime import UTC, datetime

    return datetime.now(UTC)


class ToolResultExternalizer(PageFaults, CleanupMethods):
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
        self._now = now or _utc_now
        self.read_hint: ReadHint = read_hint
        self.manifest = Manifest.of(self.session)
        expect_captures()

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
        opens. A local manifest and head file exactly as the last full check found them
        are not read again (see :meth:`Manifest.unchanged_since_checked`).

        Raises:
            ChainLogError: the manifest or its head file is corrupt or cannot be trusted.
            ArtifactAccessError: the tool-results directory cannot be opened.
        """
        manifest = self.manifest
        # A manifest and head file exactly as the last full check found them pass again
        # without reading every record (a session's every command would pay for its length).
        if not manifest.unchanged_since_checked():
            manifest.sync()  # a store that cannot be read refuses now, before the tool runs
            # The manifest and its head file both verify, and the manifest reaches every
            # name ever handed out: on a deleted or rolled-back one a new record would fork
            # the chain.
            behind = manifest.behind_head()
            if behind is not None:
                raise ChainLogError(
                    f"{behind}; restore it from a backup. Until then nothing new is recorded "
                    "in this session (a name it hands out may already be taken)"
                )
            manifest.remember_checked(self._now)
        durable.close_unwritten(open_dir_nofollow(self.session.tool_results_dir))

    def process(
        self, output: Output, tool_name: str, **facts: Unpack[CallFacts]
    ) -> ExternalizedToolResult | InlineToolResult:
        """Return small output inline (writing nothing) and externalize large output.

        The output is streamed: only up to the threshold is buffered before spilling.
        Binary output (not UTF-8, or a NUL in its first 8 KiB) is externalized whatever its
        size, unless the tool's rule is ``never``. ``facts`` are those of
        :class:`CallFacts`.
        """
        self._check_tool(tool_name)
        facts = _checked_facts(facts)
        rule = self.settings.rule_for(tool_name)

        def spill(chunks: Iterable[bytes]) -> ExternalizedToolResult:
            return self._capture(chunks, tool_name, facts)

        buffered: list[bytes] = []
        size = 0
        chars = 0
        stream = iter(chunks(output))
        for chunk in stream:
            buffered.append(chunk)
            size += len(chunk)
            if rule.max_chars is not None:
                chars += utf8_chars(chunk)
            if rule.exceeded(size, chars):
                return spill(prepend(buffered, stream))
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
        self, output: Output, tool_name: str, **facts: Unpack[CallFacts]
    ) -> ExternalizedToolResult:
        """Write ``output`` to a new immutable artifact and return the pointer for the context.

        ``facts`` are those of :class:`CallFacts`.

        Raises:
            InvalidArgumentError: a fact is unknown or invalid: the summary is blank, too
                long or not a single line, ``argv`` holds a non-string (nothing is written).
        """
        self._check_tool(tool_name)
        return self._capture(chunks(output), tool_name, _checked_facts(facts))

    @staticmethod
    def _check_tool(tool_name: str) -> None:
        if not isinstance(tool_name, str) or not tool_name.strip() or len(tool_name) > 200:
            raise InvalidArgumentError(
                "tool_name must be a non-empty string of at most 200 characters"
            )
        if any(ch in tool_name for ch in "\r\n\x00"):
            raise InvalidArgumentError("tool_name must be a single line")
        if lone_surrogate(tool_name):
            raise InvalidArgumentError("tool_name is not UTF-8 text (it holds a surrogate)")

    def _capture(
        self, chunks: Iterable[bytes], tool_name: str, facts: CallFacts
    ) -> ExternalizedToolResult:
        summary = facts.get("summary")
        argv = facts.get("argv")
        exit_code = facts.get("exit_code")
        interrupted = facts.get("interrupted")
        from datetime import UTC

        from .artifact import ExternalizedToolResult, format_source_id
        from .capture import StreamCapture, detect_media_type
        from .pointer import default_summary
        from .records import ArtifactRecord

        s = self.settings
        try:
            self.check_ready()  # before the rest of the output is consumed
            dir_fd = open_dir_nofollow(self.session.tool_results_dir)
        except (ChainLogError, ArtifactAccessError, OSError) as exc:
            # Whatever was already read (process() buffers up to the threshold) and the
            # rest still reach the caller as a bounded preview, never a bare error.
            memory = StreamCapture(-1, head_keep=s.head_bytes, tail_keep=s.tail_bytes, scan_limit=0)
            for chunk in chunks:
                memory.write(chunk)
            memory.discard()
            raise self._unsaved(memory, tool_name, exit_code, str(exc)) from exc
        capture: StreamCapture | None = None
        try:
            capture = StreamCapture(
                dir_fd,
                head_keep=head_kept(s, tool_name),
                tail_keep=s.tail_bytes,
                preview_zones=(s.head_bytes, s.tail_bytes),
                scan_limit=s.salient_scan_bytes,
                tail_scan=s.salient_tail_scan_bytes,
                inspect=inspect_output if s.structured_outline else None,
                outliner=_OUTLINES if s.outline_process else None,
            )
            for chunk in chunks:
                capture.write(chunk)
            try:
                stats = capture.finish()
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise self._unsaved(capture, tool_name, exit_code, reason) from exc
            code = exit_code() if callable(exit_code) else exit_code
            kind = facts.get("media_type") or detect_media_type(stats.head, binary=stats.binary)
            text_summary = summary or default_summary(stats, tool_name, kind, code)
            stopped = interrupted() if callable(interrupted) else interrupted
            if not stopped:
                stopped = None  # (``killed and "SIGTERM"`` answers False: not interrupted)
            else:
                # Asked only now, once the output is saved: made fit for the record (one
                # line of UTF-8 text, a byte that is not as \xNN).
                text = escaped_bytes(str(stopped)).replace("\x00", " ")
                stopped = " ".join(text.split())[:255] or None
            if stopped and summary is None:
                text_summary = _clip(f"[interrupted by {stopped}] {text_summary}")
            captured_at = require_aware(self._now())
            captured = captured_at.astimezone(UTC).isoformat()

            def record_for(filename: str) -> ArtifactRecord:
                return ArtifactRecord(
                    filename=filename,
                    source_id=format_source_id(self.session.session_id, filename, stats.sha256),
                    sha256=stats.sha256,
                    tool=tool_name,
                    summary=text_summary,
                    byte_size=stats.byte_size,
                    line_count=stats.line_count,
                    char_count=stats.char_count,
                    binary=stats.binary,
                    media_type=kind,
                    captured_at=captured,
                    argv=tuple(argv) if argv is not None else None,
                    exit_code=code,
                    interrupted=stopped or None,
                )

            with contextlib.ExitStack() as locked:
                try:
                    locked.enter_context(self.session.lock())
                except (ArtifactAccessError, OSError) as exc:
                    # The output is complete: a lock that cannot be had (EMFILE, ENOLCK on
                    # NFS, a symlink in its place) still leaves the caller its preview.
                    raise self._unsaved(capture, tool_name, code, str(exc)) from exc
                record = self._publish(
                    capture, record_for, tool_name=tool_name, exit_code=code, stats=stats
                )
        finally:
            if capture is not None:
                capture.discard()
            durable.close_unwritten(dir_fd)
        artifact = record.reference(self.session.tool_results_dir)
        return ExternalizedToolResult(
            context_text=self.make_pointer(stats, artifact), artifact=artifact
        )

    def _publish(
        self,
        capture: StreamCapture,
        record_for: Callable[[str], ArtifactRecord],
        *,
        tool_name: str,
        exit_code: int | None,
        stats: CaptureStats,
    ) -> ArtifactRecord:
        """Link the finished capture under the next free name and record it; the caller
        holds the session lock. A name that cannot be recorded is removed again: no final
        name is ever left without its manifest record by an error (a crash can leave one,
        which ``verify`` reports and cleanup collects).

        The session's backend must accept the bytes under a name first (a store confirms
        the name is free there: another host may hold the next one); then the name is
        linked here, never over an existing file."""
        filename = ""
        taken = 0
        backend = self.session.backend
        try:
            self.manifest.sync()
            number = self.manifest.high_water() + 1
            while True:
                filename = artifact_filename(number)
                number += 1
                if not backend.accept(
                    capture.dir_fd, capture.tmp_name, filename, stats.byte_size, stats.sha256
                ):
                    taken += 1
                    if taken >= _NAMES_TAKEN_MAX:
                        raise ArtifactStoreError(
                            f"{taken} names in a row are taken in {backend.location}; "
                            "is another writer looping?"
                        )
                    continue
                if capture.link_as(filename):
                    break
                # A name left by a crash before its manifest record.
            record = record_for(filename)
            self.manifest.append(record, expect=(filename, _unclaimed_name))
        except (OSError, ChainLogError, ArtifactStoreError, ArtifactAccessError) as exc:
            self._unlink_unrecorded(filename)
            reason = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            raise self._unsaved(capture, tool_name, exit_code, reason) from exc
        except BaseException:
            # A surprise (a record that cannot be encoded, an interrupt) leaves no name
            # without its record either (a review: a UnicodeEncodeError left one, and
            # verify failed from then on).
            self._unlink_unrecorded(filename)
            raise
        return record

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
            durable.unlink_synced(filename, dir_fd=dir_fd)
        except OSError:
            pass  # the same
        finally:
            durable.close_unwritten(dir_fd)

    def _unsaved(
        self,
        capture: StreamCapture,
        tool_name: str,
        exit_code: int | Callable[[], int | None] | None,
        reason: str,
    ) -> ArtifactWriteError:
        from .pointer import human_size, make_unsaved_preview

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
            budget=self.settings.pointer_bytes_for(tool_name),
        )
        return ArtifactWriteError(
            message, preview=preview, byte_size=stats.byte_size, exit_code=code
        )

    def make_pointer(self, stats: CaptureStats, artifact: ArtifactReference) -> str:
        """The bounded context pointer for a captured output."""
        from ._invocation import cli_command
        from .pointer import make_pointer

        s = self.settings
        return make_pointer(
            stats,
            artifact,
            head_bytes=s.head_bytes,
            tail_bytes=s.tail_bytes,
            salient_bytes=s.salient_bytes,
            budget=s.pointer_bytes_for(artifact.source_tool),
            hint=self.read_hint,
            scope=self._cli_scope() if self.read_hint == "cli" else "",
            command=cli_command() if self.read_hint == "cli" else "toolswap",
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
            return "" if workspace == derived else f" --workspace {shell_word(workspace)}"
        return f" --session-dir {shell_word(str(root))}"


def _checked_facts(facts: CallFacts) -> CallFacts:
    """A caller's facts, checked before anything is written: the summary made canonical,
    ``argv`` made a tuple (a generator is read once, a string refused)."""
    refuse_unknown(facts, CallFacts.__optional_keys__, "the facts of a call")
    checked = facts
    argv = facts.get("argv")
    if argv is not None:
        if isinstance(argv, (str, bytes)):
            raise InvalidArgumentError("argv must be a sequence of strings, not one string")
        try:
            argv = tuple(argv)
        except TypeError:
            raise InvalidArgumentError("argv must be a sequence of strings") from None
        if not all(isinstance(a, str) for a in argv):
            raise InvalidArgumentError("argv must be a sequence of strings")
        if any(map(lone_surrogate, argv)):
            # (Recorded as strict UTF-8: an argument os.fsdecode gave is passed through
            # _utf8.escaped_bytes first, as ``toolswap run`` does.)
            raise InvalidArgumentError(
                "argv is not UTF-8 text (an argument holds a surrogate; pass "
                "toolswap._utf8.escaped_bytes(arg) for one os.fsdecode gave)"
            )
        checked = {**checked, "argv": argv}
    for name in ("media_type", "interrupted"):
        value = facts.get(name)
        if value is None or (name == "interrupted" and callable(value)):
            continue
        if not isinstance(value, str) or len(value) > 255:
            raise InvalidArgumentError(f"{name} must be a string of at most 255 characters")
        if lone_surrogate(value) or any(ch in value for ch in "\r\n\x00"):
            # (An MCP server's mimeType of "text/\ud800" stopped the proxy for good.)
            raise InvalidArgumentError(f"{name} is not UTF-8 text on one line")
    summary = facts.get("summary")
    if summary is not None:
        from .pointer import validate_summary

        checked = {**checked, "summary": validate_summary(summary)}
    return checked


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
