"""The hash-chained log refuses, and keeps refusing, a log cut or replaced behind it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from toolswap.chainlog import ChainLog
from toolswap.errors import ChainLogError


def _log(tmp_path: Path, records: int = 3) -> ChainLog:
    log = ChainLog(tmp_path / "log.jsonl", "s1")
    for i in range(records):
        log.append({"n": i}, crash_prefix="manifest")
    return log


def _refused_twice(log: ChainLog) -> None:
    for _ in range(2):
        with pytest.raises(ChainLogError):
            log.refresh()


def test_a_log_cut_behind_verified_records_stays_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    data = log.path.read_bytes()
    log.path.write_bytes(data[: data.index(b"\n") + 1])
    _refused_twice(log)
    with pytest.raises(ChainLogError):
        log.append({"n": "late"}, crash_prefix="manifest")
    log.reset()  # even re-reading from the start does not accept it
    _refused_twice(log)


def test_a_deleted_log_stays_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    os.unlink(log.path)
    _refused_twice(log)
    log.reset()
    _refused_twice(log)


def test_a_log_replaced_by_an_older_copy_stays_refused(tmp_path: Path) -> None:
    log = _log(tmp_path, records=1)
    older = tmp_path / "older.jsonl"
    shutil.copyfile(log.path, older)
    log.append({"n": 1}, crash_prefix="manifest")
    log.append({"n": 2}, crash_prefix="manifest")
    os.replace(older, log.path)
    _refused_twice(log)


def test_a_log_replaced_by_a_longer_copy_with_the_same_history_is_accepted(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, records=2)
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(log.path, copy)
    other = ChainLog(copy, "s1")
    other.refresh()
    other.append({"n": 2}, crash_prefix="manifest")
    os.replace(copy, log.path)
    reset, records = log.refresh()
    assert reset is True
    assert [r["seq"] for r in records] == [1, 2, 3]


def test_a_corrupt_record_is_reported_again_on_every_refresh(tmp_path: Path) -> None:
    log = _log(tmp_path)
    fresh = ChainLog(log.path, "s1")
    data = bytearray(log.path.read_bytes())
    data[data.index(b'"n":1') + 4] = ord("7")
    log.path.write_bytes(bytes(data))
    for _ in range(2):
        with pytest.raises(ChainLogError, match="does not match its hash"):
            fresh.refresh()


def test_a_log_vouches_for_its_whole_file_only_after_reading_it_from_the_first_byte(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    writer = ChainLog(path, "s1")
    for i in range(3):
        writer.append({"n": i}, crash_prefix="manifest")
    reader = ChainLog(path, "s1")

    reader.refresh()
    whole = reader.read_whole
    reader.refresh()  # nothing changed: still whole
    assert whole is not None and reader.read_whole == whole
    assert whole[2] == path.stat().st_size

    writer.append({"n": 3}, crash_prefix="manifest")
    assert writer.read_whole is None  # its own append: it read none of it back
    reader.refresh()  # read only the new record: says nothing of the bytes before it
    assert reader.read_whole is None

    fresh = ChainLog(path, "s1")
    fresh.refresh()
    assert fresh.read_whole is not None
    with path.open("ab") as f:
        f.write(b'{"torn')
    torn = ChainLog(path, "s1")
    torn.refresh()
    assert torn.torn_tail is not None and torn.read_whole is None
