"""The states libfiu's run (``test_libfiu.py``) found toolswap breaking an invariant in,
kept without libfiu: the same system call results, given by the durable-I/O seam or by
the file system itself.

- A ``close`` that reports EIO after a read (a FUSE or network file system's flush) made
  every read-only command die with a traceback.
- A short ``pwrite`` of ``manifest.head`` (POSIX allows one) left a head whose new hash
  sat beside its old sequence number: the session was refused for good.
- A short ``pread`` made ``read --byte-start`` return less than asked and count lines
  wrongly.
- A workspace directory that cannot be listed (EMFILE) raised a raw OSError.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from toolswap import ToolResultExternalizer
from toolswap.cli import main
from toolswap.testing import DurableIO, substituted

from .scenarios import SESSION, WORKSPACE, clock, text_output


class _CloseAfterReadFails(DurableIO):
    """``close`` of a descriptor opened read-only releases it, then reports EIO."""

    def __init__(self) -> None:
        self.read_only: set[int] = set()
        self.failed = 0

    def open(
        self, path: str | Path, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        fd = super().open(path, flags, mode, dir_fd=dir_fd)
        if flags & os.O_ACCMODE == os.O_RDONLY:
            self.read_only.add(fd)
        else:
            self.read_only.discard(fd)
        return fd

    def close(self, fd: int) -> None:
        super().close(fd)
        if fd in self.read_only:
            self.read_only.discard(fd)
            self.failed += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))


class _Short(DurableIO):
    """Every read and write moves a few bytes at most (as POSIX allows)."""

    def pread(self, fd: int, count: int, offset: int) -> bytes:
        return super().pread(fd, min(count, 7), offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return super().write(fd, data[:5])

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return super().pwrite(fd, data[:5], offset)


def _session() -> list[str]:
    ext = ToolResultExternalizer.open(SESSION, workspace=WORKSPACE)
    return [
        ext.externalize(text_output(i, 1500 + 400 * i), "bash").artifact.source_id  # type: ignore[union-attr]
        for i in range(3)
    ]


def _commands(ids: list[str]) -> list[list[str]]:
    return [
        ["read", ids[1], "--offset", "700", "--limit", "5"],
        ["read", ids[1], "--byte-start", "20000", "--byte-length", "3000"],
        ["grep", ids[2], "ERROR", "-C", "1", "--json"],
        ["show", ids[0], "--json"],
        ["ls", "--session", SESSION, "--json"],
        ["verify", "--session", SESSION, "--json"],
    ]


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, catch_exceptions=True)


def test_a_close_that_reports_eio_after_a_read_changes_no_command_s_output() -> None:
    ids = _session()
    io = _CloseAfterReadFails()

    for args in _commands(ids):
        expected = _invoke(args)
        with substituted(io):
            got = _invoke(args)
        assert got.exception is None or isinstance(got.exception, SystemExit), got.exception
        assert (got.exit_code, got.stdout) == (expected.exit_code, expected.stdout), args
    assert io.failed


def test_run_whose_read_descriptors_report_eio_at_close_still_saves_the_output() -> None:
    _session()
    io = _CloseAfterReadFails()

    with substituted(io):
        got = _invoke(["run", "--json", "--session", SESSION, "--", "seq", "1", "9000"])

    assert got.exit_code == 0, got.stderr
    assert '"externalized": true' in got.stdout
    assert io.failed


def test_short_reads_and_writes_change_no_command_s_output() -> None:
    ids = _session()

    for args in _commands(ids):
        expected = _invoke(args)
        with substituted(_Short()):
            got = _invoke(args)
        assert (got.exit_code, got.stdout) == (expected.exit_code, expected.stdout), args


def test_a_head_file_written_in_short_pieces_is_whole_and_the_session_goes_on() -> None:
    ids = _session()

    with substituted(_Short()):
        ext = ToolResultExternalizer.open(SESSION, workspace=WORKSPACE)
        ids.append(ext.externalize(text_output(9, 1200), "bash").artifact.source_id)  # type: ignore[union-attr]

    again = ToolResultExternalizer.open(SESSION, workspace=WORKSPACE)  # a new process
    later = again.externalize(text_output(10, 1200), "bash").artifact
    assert later is not None and later.path.name == "tool_result_005.txt"
    for args in (["verify", "--session", SESSION], ["gc", "plan", "--session", SESSION]):
        done = _invoke(args)
        assert done.exit_code == 0, done.stderr


@pytest.mark.parametrize("command", ["sessions", "grep"])
def test_workspaces_that_cannot_be_listed_are_a_one_line_typed_error(
    toolswap_home: Path, command: str
) -> None:
    ext = ToolResultExternalizer(toolswap_home / "elsewhere" / SESSION, now=clock)
    sid = ext.externalize(text_output(1, 1200), "bash").artifact.source_id  # type: ignore[union-attr]
    projects = toolswap_home / "projects"
    projects.symlink_to(projects)  # ELOOP when listed: as EMFILE or EIO would

    done = _invoke(["sessions"] if command == "sessions" else ["grep", sid, "ERROR"])

    assert done.exit_code == 1
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    (line,) = done.stderr.splitlines()
    assert line.startswith("toolswap: ArtifactAccessError: cannot list")


def test_sessions_whose_artifacts_cannot_be_listed_is_a_typed_error_not_zero_artifacts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libfiu failed the opendir of tool-results/ with EMFILE: 'sessions' said the session
    # held 0 artifacts of 0 bytes. The same system call result, for that directory only.
    _session()
    scandir = os.scandir

    def scandir_out_of_descriptors(path: Any) -> Any:
        if os.fspath(path).endswith("tool-results"):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_out_of_descriptors)

    done = _invoke(["sessions", "--json"])

    assert done.exit_code == 1
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("toolswap: ArtifactAccessError: cannot list")
    assert "Too many open files" in line
