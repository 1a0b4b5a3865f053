"""The states libfiu's run (``test_libfiu.py``) found toolswap breaking an invariant in,
kept without libfiu: the same system call results, given by the durable-I/O seam or by
the file system itself.

- A ``close`` that reports EIO after a read (a FUSE or network file system's flush) made
  every read-only command die with a traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from click.testing import CliRunner, Result

from toolswap import ToolResultExternalizer
from toolswap.cli import main
from toolswap.testing import DurableIO, substituted

from .scenarios import SESSION, WORKSPACE, text_output


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
