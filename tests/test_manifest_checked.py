"""The readiness check remembers a manifest it verified in full (``manifest.checked``) and
skips reading it again only while it is exactly as checked.

Every case that changes the manifest or its head file (appended, cut, replaced, rewritten
in place with its times put back) is made so that the full check refuses it: a remembered
"ok" trusted wrongly would let it pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import Clock
from toolswap import ChainLogError, ToolResultExternalizer, durable

MEMORY = "manifest.checked"


def _later() -> Clock:
    """A clock a minute ahead: the manifest written now has settled by its time."""
    return Clock(datetime.now(UTC) + timedelta(minutes=1))


def _three_artifacts(session_dir: Path) -> None:
    ext = ToolResultExternalizer(session_dir)
    for i in range(3):
        ext.externalize(f"output {i}\n" * 2000, "bash")


def _checked_in_full(session_dir: Path) -> None:
    ToolResultExternalizer(session_dir, now=_later()).check_ready()
    assert (session_dir / MEMORY).is_file()


class _Recording(durable.DurableIO):
    """The real I/O, noting the name of every file opened."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(
        self, path: durable.PathArg, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        self.opened.append(os.path.basename(os.fsdecode(path)))
        return super().open(path, flags, mode, dir_fd=dir_fd)


@contextmanager
def _recording() -> Iterator[_Recording]:
    io = _Recording()
    with durable.substituted(io):
        yield io


def test_an_unchanged_manifest_passes_the_readiness_check_without_being_read(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)
    _checked_in_full(session_dir)

    with _recording() as io:
        ToolResultExternalizer(session_dir, now=_later()).check_ready()

    assert "manifest.jsonl" not in io.opened
    assert "manifest.head" in io.opened  # compared byte for byte with the remembered one


def _append_a_corrupt_record(manifest: Path) -> None:
    with manifest.open("ab") as f:
        f.write(b'{"seq":4,"v":1}\n')


def _cut_the_last_record(manifest: Path) -> None:
    manifest.write_bytes(b"".join(manifest.read_bytes().splitlines(True)[:2]))


def _change_a_byte_and_put_the_times_back(manifest: Path) -> None:
    before = manifest.stat()
    data = bytearray(manifest.read_bytes())
    at = data.index(b'"bash"') + 1
    data[at] = ord("B")  # same size, another tool name: the record's hash no longer matches
    with manifest.open("r+b") as f:  # in place: the same inode
        f.write(data)
    os.utime(manifest, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = manifest.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def _replace_with_an_older_copy_under_the_same_times(manifest: Path) -> None:
    before = manifest.stat()
    older = manifest.with_name("older")
    older.write_bytes(b"".join(manifest.read_bytes().splitlines(True)[:2]))
    os.utime(older, ns=(before.st_atime_ns, before.st_mtime_ns))
    older.replace(manifest)


def _rewrite_the_head_file_ahead(manifest: Path) -> None:
    head = manifest.with_name("manifest.head")
    head.write_bytes(head.read_bytes().replace(b'"seq": 3', b'"seq": 4'))


def _delete_the_head_file_and_corrupt_a_record(manifest: Path) -> None:
    manifest.with_name("manifest.head").unlink()
    _change_a_byte_and_put_the_times_back(manifest)


@pytest.mark.parametrize(
    "change",
    [
        _append_a_corrupt_record,
        _cut_the_last_record,
        _change_a_byte_and_put_the_times_back,
        _replace_with_an_older_copy_under_the_same_times,
        _rewrite_the_head_file_ahead,
        _delete_the_head_file_and_corrupt_a_record,
    ],
    ids=lambda f: f.__name__.strip("_").replace("_", " "),
)
def test_a_manifest_changed_since_it_was_checked_is_checked_in_full_again(
    tmp_path: Path, change: object
) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)
    _checked_in_full(session_dir)
    assert callable(change)

    change(session_dir / "manifest.jsonl")

    with pytest.raises(ChainLogError):
        ToolResultExternalizer(session_dir, now=_later()).check_ready()
    with pytest.raises(ChainLogError):  # and the refusal is not remembered as anything else
        ToolResultExternalizer(session_dir, now=_later()).check_ready()


@pytest.mark.parametrize(
    "memory",
    [
        b"",
        b"not json",
        b'{"v": 1}',
        b"x" * 5000,
    ],
    ids=["empty", "not json", "incomplete", "too long"],
)
def test_a_damaged_memory_means_the_full_check(tmp_path: Path, memory: bytes) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)
    _checked_in_full(session_dir)
    (session_dir / MEMORY).write_bytes(memory)

    with _recording() as io:
        ToolResultExternalizer(session_dir).check_ready()

    assert "manifest.jsonl" in io.opened


def test_another_session_s_memory_is_not_this_one_s(tmp_path: Path) -> None:
    for name in ("s1", "s2"):
        _three_artifacts(tmp_path / name)
        _checked_in_full(tmp_path / name)
    (tmp_path / "s2" / MEMORY).replace(tmp_path / "s1" / MEMORY)

    with _recording() as io:
        ToolResultExternalizer(tmp_path / "s1").check_ready()

    assert "manifest.jsonl" in io.opened


def test_a_symlinked_memory_is_not_trusted(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)
    _checked_in_full(session_dir)
    memory = session_dir / MEMORY
    memory.replace(tmp_path / "elsewhere")
    memory.symlink_to(tmp_path / "elsewhere")

    with _recording() as io:
        ToolResultExternalizer(session_dir).check_ready()

    assert "manifest.jsonl" in io.opened


def test_a_manifest_changed_moments_ago_is_not_remembered(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)

    # The real clock: the manifest was written within the last moments.
    ToolResultExternalizer(session_dir).check_ready()

    assert not (session_dir / MEMORY).exists()


def test_a_session_without_records_remembers_nothing(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1", now=_later())

    ext.check_ready()
    ext.externalize("small\n", "bash")
    ext.check_ready()

    assert not (tmp_path / "s1" / MEMORY).exists()


def test_captures_after_a_remembered_check_verify_append_and_are_remembered_anew(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "s1"
    _three_artifacts(session_dir)
    _checked_in_full(session_dir)
    remembered = (session_dir / MEMORY).read_bytes()

    art = ToolResultExternalizer(session_dir, now=_later()).externalize("four\n" * 5000, "bash")
    with _recording() as io:
        ToolResultExternalizer(session_dir, now=_later()).check_ready()

    assert art.artifact is not None and art.artifact.filename == "tool_result_004.txt"
    assert "manifest.jsonl" in io.opened
    assert (session_dir / MEMORY).read_bytes() != remembered


class _FailingAt(durable.DurableIO):
    """The real I/O, except that durable call number ``at`` (counted from 0) fails."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def _step(self) -> None:
        self.calls += 1
        if self.calls - 1 == self.at:
            raise OSError(5, "injected I/O error")

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._step()
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._step()
        super().fsync(fd)

    def rename(
        self,
        src: durable.PathArg,
        dst: durable.PathArg,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        self._step()
        super().rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def test_an_io_error_while_remembering_leaves_no_memory_that_could_be_trusted_wrongly(
    tmp_path: Path,
) -> None:
    """The memory's write (write, fsync, rename, directory fsync) failing at each step: the
    check still passes, leaves no temporary file, and the memory it leaves (none, or a whole
    one) never lets a manifest changed afterwards pass."""
    at = 0
    while True:
        session_dir = tmp_path / f"s{at}"
        _three_artifacts(session_dir)
        failing = _FailingAt(at)
        with durable.substituted(failing):
            ToolResultExternalizer(session_dir, now=_later()).check_ready()  # never raises
        assert not [p.name for p in session_dir.iterdir() if p.name.endswith(".tmp")]
        with open(session_dir / "manifest.jsonl", "r+b") as f:
            f.truncate(os.path.getsize(session_dir / "manifest.jsonl") - 1)
        with pytest.raises(ChainLogError):
            ToolResultExternalizer(session_dir, now=_later()).check_ready()
        if failing.calls <= at:  # no call failed: every step has been tried
            break
        at += 1
    assert at >= 4  # write, fsync, rename and the directory's fsync were each made to fail
