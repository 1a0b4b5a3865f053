"""Streaming capture: temporary file, statistics, head/tail, failure lines, publishing."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolswap import durable
from toolswap.capture import TMP_PREFIX, CaptureStats, Inspect, StreamCapture, detect_media_type


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    results = tmp_path / "tool-results"
    results.mkdir(mode=0o700)
    fd = os.open(results, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def _capture(
    dir_fd: int,
    chunks: list[bytes],
    *,
    head_keep: int = 6144,
    head_shown: int | None = None,
    tail_keep: int = 24576,
    scan_limit: int = 1 << 30,
    tail_scan: int = 0,
    inspect: Inspect | None = None,
) -> tuple[StreamCapture, CaptureStats]:
    capture = StreamCapture(
        dir_fd,
        head_keep=head_keep,
        head_shown=head_shown,
        tail_keep=tail_keep,
        scan_limit=scan_limit,
        tail_scan=tail_scan,
        inspect=inspect,
    )
    for chunk in chunks:
        capture.write(chunk)
    return capture, capture.finish()


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _outlining(
    dir_fd: int, inspect: Inspect | None, *, scan_limit: int, tail_scan: int
) -> StreamCapture:
    """A capture that outlines structured output with ``inspect``."""
    return StreamCapture(
        dir_fd,
        head_keep=32 << 10,
        tail_keep=4096,
        scan_limit=scan_limit,
        tail_scan=tail_scan,
        inspect=inspect,
    )


def test_capture_writes_a_private_temporary_file_and_publishing_removes_it(
    dir_fd: int,
) -> None:
    capture = StreamCapture(dir_fd, head_keep=10, tail_keep=10, scan_limit=1 << 20)
    capture.write(b"hello\n")

    st = os.stat(capture.tmp_name, dir_fd=dir_fd, follow_symlinks=False)
    assert capture.tmp_name.startswith(TMP_PREFIX)
    assert stat.S_IMODE(st.st_mode) == 0o600
    capture.finish()
    assert capture.link_as("tool_result_001.txt")
    capture.discard()

    assert os.listdir(dir_fd) == ["tool_result_001.txt"]
    with open(f"/proc/self/fd/{dir_fd}/tool_result_001.txt", "rb") as f:
        assert f.read() == b"hello\n"


def test_linking_never_overwrites_an_existing_name(dir_fd: int) -> None:
    fd = os.open("tool_result_001.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd)
    os.write(fd, b"earlier evidence")
    os.close(fd)
    capture, _ = _capture(dir_fd, [b"new output"])

    assert not capture.link_as("tool_result_001.txt")
    assert capture.link_as("tool_result_002.txt")
    capture.discard()

    with open(f"/proc/self/fd/{dir_fd}/tool_result_001.txt", "rb") as f:
        assert f.read() == b"earlier evidence"


def test_linking_does_not_follow_a_dangling_symlink_at_the_final_name(
    dir_fd: int, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.txt"
    os.symlink(target, "tool_result_001.txt", dir_fd=dir_fd)
    capture, _ = _capture(dir_fd, [b"output"])

    assert not capture.link_as("tool_result_001.txt")
    capture.discard()

    assert not target.exists()


def test_discarding_an_unfinished_capture_leaves_no_file(dir_fd: int) -> None:
    capture = StreamCapture(dir_fd, head_keep=10, tail_keep=10, scan_limit=1 << 20)
    capture.write(b"x" * 200_000)  # starts the worker thread

    capture.discard()

    assert os.listdir(dir_fd) == []


def test_statistics_match_the_bytes_whatever_the_chunking(dir_fd: int) -> None:
    data = ("première ligne\nzweite Zeile 🎉\n" * 5000 + "no newline at the end").encode()
    for size in (1, 7, 4096, 65536, 300_000, len(data)):
        capture, stats = _capture(dir_fd, _split(data, size), head_keep=100, tail_keep=100)
        capture.discard()

        assert stats.byte_size == len(data)
        assert stats.sha256 == hashlib.sha256(data).hexdigest()
        assert stats.newline_count == data.count(b"\n")
        assert stats.line_count == data.count(b"\n") + 1
        assert stats.char_count == len(data.decode())
        assert stats.head == data[:100]
        assert stats.tail == data[-100:]
        assert stats.tail_offset == len(data) - 100
        assert not stats.binary


def test_temporary_file_holds_exactly_the_bytes_written_through_the_worker(
    dir_fd: int,
) -> None:
    data = os.urandom(3 << 20)
    chunks = [data[:100], data[100:70_000], data[70_000:2_000_000], data[2_000_000:]]
    capture, stats = _capture(dir_fd, chunks)

    with open(f"/proc/self/fd/{dir_fd}/{capture.tmp_name}", "rb") as f:
        assert f.read() == data
    capture.discard()
    assert stats.sha256 == hashlib.sha256(data).hexdigest()


class _WritebackRecording(durable.DurableIO):
    """The real I/O, noting each writeback started and each fsync, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def start_writeback(self, fd: int, offset: int, length: int) -> None:
        self.calls.append(("writeback", offset, length))
        super().start_writeback(fd, offset, length)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", 0, 0))
        super().fsync(fd)


def test_a_large_output_is_written_back_while_it_is_produced_and_fsynced_at_the_end(
    dir_fd: int,
) -> None:
    """Every 8 MiB written, the writer asks the kernel to start writing them to the device,
    so that the fsync at the end waits for the last few megabytes only; the fsync still
    comes last, and the file holds every byte."""
    data = os.urandom(1 << 20) * 20
    io = _WritebackRecording()
    with durable.substituted(io):
        capture, stats = _capture(dir_fd, _split(data, 1 << 20))
    step = 8 << 20
    assert io.calls == [("writeback", 0, step), ("writeback", step, step), ("fsync", 0, 0)]
    with open(f"/proc/self/fd/{dir_fd}/{capture.tmp_name}", "rb") as f:
        assert f.read() == data
    capture.discard()
    assert stats.sha256 == hashlib.sha256(data).hexdigest()


def test_writeback_ranges_are_file_offsets_when_small_chunks_came_first(dir_fd: int) -> None:
    """Small chunks are written inline before the writer thread starts: the ranges it asks
    to write back count from the start of the file, not from its own first chunk."""
    data = os.urandom(1000) + os.urandom(1 << 20) * 9
    io = _WritebackRecording()
    with durable.substituted(io):
        capture, _ = _capture(dir_fd, [data[:1000], *_split(data[1000:], 1 << 20)])
    assert io.calls[0] == ("writeback", 0, 1000 + (8 << 20))
    capture.discard()


def test_a_small_output_asks_for_no_early_writeback(dir_fd: int) -> None:
    io = _WritebackRecording()
    with durable.substituted(io):
        capture, _ = _capture(dir_fd, _split(os.urandom(3 << 20), 1 << 20))
    assert io.calls == [("fsync", 0, 0)]
    capture.discard()


def test_a_trailing_newline_does_not_count_as_an_extra_line(dir_fd: int) -> None:
    for data, lines in ((b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)):
        capture, stats = _capture(dir_fd, [data])
        capture.discard()
        assert stats.line_count == lines, data


def test_a_nul_byte_in_the_first_8_kib_makes_the_output_binary(dir_fd: int) -> None:
    capture, stats = _capture(dir_fd, [b"text\n" * 1000, b"\x00" + b"more"])
    capture.discard()

    assert stats.binary
    assert stats.char_count == stats.byte_size
    assert stats.salient == ()


def test_binary_output_reports_nothing_scanned_for_failure_lines(dir_fd: int) -> None:
    """The first bytes go to the failure-line scan as they arrive; when the output turns
    out binary, the statistics still say that none of it was scanned."""
    for size in (100_000, 3 << 20):
        data = b"\x00" + os.urandom(size - 1)
        capture, stats = _capture(dir_fd, _split(data, 1 << 16))
        assert stats.binary
        assert stats.scanned_bytes == 0
        capture.discard()


def test_invalid_utf8_anywhere_makes_the_output_binary(dir_fd: int) -> None:
    data = b"error: fine so far\n" * 200_000 + b"\xff\xfe" + b"error: after\n"
    capture, stats = _capture(dir_fd, _split(data, 1 << 20))
    capture.discard()

    assert stats.binary
    assert stats.salient == ()


def test_a_utf8_sequence_split_across_chunks_is_still_text(dir_fd: int) -> None:
    data = "日本語のテキスト\n".encode() * 10
    chunks = [data[:1], data[1:2], data[2:5], data[5:]]
    capture, stats = _capture(dir_fd, chunks)
    capture.discard()

    assert not stats.binary
    assert stats.char_count == len(data.decode())


def test_an_output_ending_inside_a_utf8_sequence_is_binary(dir_fd: int) -> None:
    capture, stats = _capture(dir_fd, ["abc é".encode()[:-1]])
    capture.discard()

    assert stats.binary


@pytest.mark.parametrize(
    ("head", "binary", "media_type"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", True, "image/png"),
        (b"\xff\xd8\xff\xe0", True, "image/jpeg"),
        (b"GIF89a...", True, "image/gif"),
        (b"%PDF-1.7", True, "application/pdf"),
        (b"\x1f\x8b\x08", True, "application/gzip"),
        (b"PK\x03\x04", True, "application/zip"),
        (b"\x7fELF\x02", True, "application/x-elf"),
        (b"\x00\x01\x02", True, "application/octet-stream"),
        (b"plain text", False, "text/plain"),
    ],
)
def test_media_type_comes_from_magic_numbers(head: bytes, binary: bool, media_type: str) -> None:
    assert detect_media_type(head, binary=binary) == media_type


def test_failure_lines_are_found_with_line_numbers_across_chunks(dir_fd: int) -> None:
    lines = [f"step {i} ok" for i in range(200_000)]
    lines[100] = "Traceback (most recent call last):"
    lines[150_000] = "AssertionError: expected 1"
    lines[199_000] = "FATAL: out of memory"
    data = "\n".join(lines).encode()
    capture, stats = _capture(dir_fd, _split(data, 1 << 16))
    capture.discard()

    assert [(s.line_no, s.text) for s in stats.salient if not s.context] == [
        (101, "Traceback (most recent call last):"),
        (150_001, "AssertionError: expected 1"),
        (199_001, "FATAL: out of memory"),
    ]


def test_failure_keywords_match_any_case(dir_fd: int) -> None:
    words = ["error", "Exception", "TRACEBACK", "failed", "Fatal", "panic", "assertion"]
    data = "".join(f"line {w} here\nok\n" for w in words).encode()
    capture, stats = _capture(dir_fd, [data])
    capture.discard()

    assert [s.text for s in stats.salient if not s.context] == [f"line {w} here" for w in words]


def test_failure_lines_shown_whole_by_the_head_are_skipped(dir_fd: int) -> None:
    line = b"a" * 99 + b"\n"
    data = b"error: inside the head\n" + line * 60
    data += b"error: crosses the head boundary " + b"b" * 100 + b"\n" + line * 5000
    capture, stats = _capture(dir_fd, [data], head_keep=6152, head_shown=6144)
    capture.discard()

    assert [s.text[:32] for s in stats.salient if not s.context] == [
        "error: crosses the head boundary"
    ]


def test_a_middle_failure_survives_noisy_head_and_tail(dir_fd: int) -> None:
    lines = ["ok"] * 400_000
    for i in range(50):
        lines[i] = f"error: noise at the start {i}"
    lines[200_000] = "panic: the failure that matters"
    for i in range(399_900, 400_000):
        lines[i] = f"error: noise at the end {i}"
    data = "\n".join(lines).encode()
    capture, stats = _capture(dir_fd, _split(data, 1 << 20), head_keep=6144, head_shown=6144)
    capture.discard()

    assert "panic: the failure that matters" in [s.text for s in stats.salient if not s.context]


def test_failure_lines_are_clipped_to_240_characters(dir_fd: int) -> None:
    data = b"ok\nerror: " + b"x" * 5000 + b"\nok\n"
    capture, stats = _capture(dir_fd, [data])
    capture.discard()

    (line,) = [s for s in stats.salient if not s.context]
    assert line.line_no == 2
    assert len(line.text) == 240
    assert line.text.endswith("…")


def test_the_failure_scan_stops_at_its_limit_and_says_how_far_it_read(dir_fd: int) -> None:
    data = b"ok\n" * 100_000 + b"error: past the scan limit\n"
    capture, stats = _capture(dir_fd, _split(data, 4096), scan_limit=8192)
    capture.discard()

    assert stats.salient == ()
    assert 8000 < stats.scanned_bytes < len(data)
    assert stats.scanned_bytes % 3 == 0  # the end of the last whole line it scanned
    assert stats.tail_scan_start is None


def _three_region_output() -> bytes:
    lines = [b"ok %06d" % i for i in range(300_000)]
    lines[1_000] = b"error: early, inside the forward scan"
    lines[150_000] = b"error: in the middle, between the two Python scans"
    lines[299_000] = b"panic: near the end, inside the tail scan"
    lines[-1] = b"FATAL: the last line, without a newline"
    return b"\n".join(lines)


def test_the_middle_is_searched_by_grep_between_the_forward_and_tail_scans(
    dir_fd: int,
) -> None:
    data = _three_region_output()
    capture, stats = _capture(
        dir_fd, _split(data, 50_000), scan_limit=64 * 1024, tail_scan=256 * 1024
    )
    capture.discard()

    assert [(s.line_no, s.text) for s in stats.salient if not s.context] == [
        (1_001, "error: early, inside the forward scan"),
        (150_001, "error: in the middle, between the two Python scans"),
        (299_001, "panic: near the end, inside the tail scan"),
        (300_000, "FATAL: the last line, without a newline"),
    ]
    assert stats.scanned_bytes == len(data)
    assert stats.tail_scan_start is None


def test_without_grep_the_middle_stays_unscanned_and_the_stats_say_where(
    dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    data = _three_region_output()
    capture, stats = _capture(
        dir_fd, _split(data, 50_000), scan_limit=64 * 1024, tail_scan=256 * 1024
    )
    capture.discard()

    assert [s.line_no for s in stats.salient if not s.context] == [1_001, 299_001, 300_000]
    assert stats.scanned_bytes < stats.tail_scan_start  # type: ignore[operator]
    assert len(data) - stats.tail_scan_start <= 256 * 1024  # type: ignore[operator]
    assert data[stats.tail_scan_start - 1] == ord("\n")  # type: ignore[operator]


def test_no_tail_scan_is_needed_when_the_forward_scan_covered_everything(dir_fd: int) -> None:
    data = b"ok\n" * 1000 + b"error: at the end"
    capture, stats = _capture(dir_fd, [data], scan_limit=1 << 20, tail_scan=1 << 20)
    capture.discard()

    assert [s.line_no for s in stats.salient if not s.context] == [1001]
    assert stats.scanned_bytes == len(data)
    assert stats.tail_scan_start is None


def test_memory_kept_for_the_preview_is_bounded_by_head_and_tail(dir_fd: int) -> None:
    data = os.urandom(1 << 20).hex().encode()  # 2 MiB of text, no newlines
    capture, stats = _capture(dir_fd, _split(data, 1000), head_keep=50, tail_keep=70)
    capture.discard()

    assert stats.head == data[:50]
    assert stats.tail == data[-70:]


def test_a_grep_that_fails_falls_back_to_the_python_tail_scan(
    dir_fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "bin"
    broken.mkdir()
    fake = broken / "grep"
    fake.write_text("#!/bin/sh\ncat >/dev/null\nexit 2\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}:/usr/bin:/bin")
    data = _three_region_output()
    capture, stats = _capture(
        dir_fd, _split(data, 50_000), scan_limit=64 * 1024, tail_scan=256 * 1024
    )
    capture.discard()

    assert [s.line_no for s in stats.salient if not s.context] == [1_001, 299_001, 300_000]
    assert stats.tail_scan_start is not None


def test_lines_of_one_template_are_listed_once_with_their_count(dir_fd: int) -> None:
    lines = [
        b"error %07d at 0x%08x" % (i, i * 7) if i % 3 == 0 else b"step %07d done" % i
        for i in range(400_000)
    ]
    lines[300_000] = b"fatal: the one different line"
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=128 * 1024
    )
    capture.discard()

    hits = [(s.line_no, s.text, s.similar, s.rank) for s in stats.salient if not s.context]
    assert hits == [
        (1, "error 0000000 at 0x00000000", hits[0][2], 1),
        (300_001, "fatal: the one different line", 0, 0),
    ]
    # Past a few thousand lines of the one template, only failure forms are looked for
    # (it is most of what matches): its count says which lines it covers.
    first = next(s for s in stats.salient if s.line_no == 1)
    assert first.counted_to is not None and first.counted_to < 300_000
    assert first.similar == (first.counted_to - 1) // 3
    assert stats.scanned_bytes == len(data)


def _lines(template: bytes, count: int) -> list[bytes]:
    return [template % (i, i * 7) for i in range(count)]


def test_where_most_lines_hold_a_failure_word_the_rest_is_searched_for_failure_forms(
    dir_fd: int,
) -> None:
    # A severity field on every line: each holds "error", and sorting 400,000 of them
    # would cost several times the capture. Past the first few thousand, only failure
    # forms are looked for; the line that says "fatal:" is still found, and the count of
    # the lines like the first says which lines it covers.
    lines = _lines(b'{"severity": "error", "n": %07d, "at": "0x%08x"}', 400_000)
    lines[300_000] = b'{"severity": "error", "message": "fatal: the one different line"}'
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=128 * 1024
    )
    capture.discard()

    hits = [s for s in stats.salient if not s.context]
    assert [s.line_no for s in hits] == [1, 300_001]
    first = hits[0]
    assert first.counted_to is not None and first.counted_to < 300_000
    assert first.similar == first.counted_to - 1  # every line up to it is one like it
    assert hits[1].similar == 0 and hits[1].counted_to is None
    assert stats.scanned_bytes == len(data)


@pytest.mark.parametrize("chunk", [48 << 10, 4 << 20])
def test_where_most_of_the_first_lines_hold_a_strong_word_the_switch_comes_after_them(
    dir_fd: int, chunk: int
) -> None:
    # Every record of JSON Lines holds "error": grep's own count of its matches would come
    # megabytes late (its output is read in Python), so the first 256 KiB it is fed are
    # judged from their bytes and the search for failure forms starts right after them.
    from toolswap.salience.middle_scan import SAMPLE_BYTES
    from toolswap.structured import inspect_output

    lines = _lines(b'{"severity": "error", "n": %07d, "at": "0x%08x"}', 100_000)
    lines[90_000] = b'{"severity": "error", "message": "fatal: the one different line"}'
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd,
        _split(data, chunk),
        scan_limit=16 << 20,
        tail_scan=128 << 10,
        inspect=inspect_output,
    )
    capture.discard()

    hits = {s.line_no: s for s in stats.salient if not s.context}
    assert hits[90_001].similar == 0 and hits[90_001].counted_to is None
    first = hits[1]
    # The Python scan's lines and the sample's whole lines, and no more (fed in small
    # chunks, grep's own count may come first, at the end of an earlier chunk).
    sample_end = data.count(b"\n", 0, capture._grep_from + SAMPLE_BYTES)
    assert first.counted_to is not None
    assert (
        first.counted_to == sample_end if chunk > SAMPLE_BYTES else first.counted_to <= sample_end
    )
    assert first.similar == first.counted_to - 1
    assert stats.scanned_bytes == len(data)


def test_the_first_lines_of_a_text_log_are_not_judged_from_their_bytes(dir_fd: int) -> None:
    # One line in twenty is the same retry: in a log, that is a flood worth counting, and
    # a different failure after it that holds no failure form is still looked for (the
    # lines of JSON or a table are judged from the first 256 KiB; a log's only from grep's
    # count, past 2,000 of them).
    lines = [
        b"ERROR: retry %d: upstream returned 503" % i if i % 20 == 0 else b"request %d ok" % i
        for i in range(30_000)
    ]
    lines[25_000] = b"ERROR tests/test_x.py::test_y - KeyError: 'y'"
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=16 << 20, tail_scan=128 << 10
    )
    capture.discard()

    hits = {s.line_no: s for s in stats.salient if not s.context}
    assert hits[25_001].text == "ERROR tests/test_x.py::test_y - KeyError: 'y'"
    assert hits[1].similar == 1_499 - 1 and hits[1].counted_to is None


def test_a_sample_is_dense_by_its_lines_not_by_its_words() -> None:
    from toolswap.salience.middle_scan import _dense_sample

    # A quarter of the lines hold three of the strongest words each, each its own line:
    # more words than half the lines, yet most lines hold none and no one line is most of
    # those that do.
    def name(i: int) -> bytes:
        return bytes(97 + (i // 26**k) % 26 for k in range(3))

    lines = [b"checked %s: 0 errors, 0 failures, 0 assertions" % name(i) for i in range(2_000)]
    few = b"".join(line + b"\nstep ok\nstep ok\nstep ok\n" for line in lines)
    assert not _dense_sample(few)
    assert _dense_sample(b"".join(line + b"\nstep ok\n" + line + b"\n" for line in lines))
    # One line, its numbers aside, most of those that hold a word.
    assert _dense_sample(b"".join(b"x %d error\nstep ok\nstep ok\n" % i for i in range(2_000)))
    assert not _dense_sample(b"x error\n" * 199)  # (fewer than 200 such lines)


def test_where_one_line_repeats_in_every_record_the_rest_is_searched_for_failure_forms(
    dir_fd: int,
) -> None:
    # A pretty-printed document: one line in ten is the same severity field, so most lines
    # match nothing, yet most matches are that one line. Past the first 256 KiB grep is
    # fed, only failure forms are looked for: the "fatal:" line is found, the count of the
    # severity lines says which lines it covers, and a warning past the switch is not
    # looked for.
    from toolswap.salience.middle_scan import SAMPLE_BYTES
    from toolswap.structured import inspect_output

    lines: list[bytes] = [b"["]
    for i in range(40_000):
        lines += [b"  {", b'    "n": %d,' % i, b'    "at": "0x%08x",' % (i * 7)]
        lines += [b'    "name": "item %d",' % i, b'    "severity": "error",']
        lines += [b'    "size": %d,' % (i * 3), b'    "kind": "plain",', b'    "ok": true,']
        lines += [b'    "tags": []', b"  },"]
    lines[300_005] = b'    "message": "fatal: the one different line",'
    lines[350_005] = b'    "note": "a warning nobody asked about",'
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd,
        _split(data, 1 << 20),
        scan_limit=16 << 20,
        tail_scan=128 << 10,
        inspect=inspect_output,
    )
    capture.discard()

    hits = {s.line_no: s for s in stats.salient if not s.context}
    assert hits[300_006].text.strip() == '"message": "fatal: the one different line",'
    assert 350_006 not in hits
    first = hits[6]
    assert first.text.strip() == '"severity": "error",'
    assert first.counted_to == data.count(b"\n", 0, capture._grep_from + SAMPLE_BYTES)
    # One line in ten up to the last counted is one like it.
    assert first.similar == (first.counted_to - 6) // 10
    assert stats.scanned_bytes == len(data)


def test_where_most_lines_are_failure_forms_the_search_stops_and_keeps_what_it_found(
    dir_fd: int,
) -> None:
    lines = [b"plain step %d ok, compiling module" % i for i in range(30_000)]
    lines[20_000] = b"Traceback (most recent call last):"
    lines[20_002] = b"ModuleNotFoundError: No module named 'numpy'"
    lines += _lines(b"src/f%d.c:12:5: error: implicit declaration of function 'f%d'", 200_000)
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=1 << 20
    )
    capture.discard()

    # Past a few thousand of the lines that all say "error:", grep stops: the failures it
    # found before stand, the last 256 KiB (not all of tail_scan) are read in Python, and
    # the pointer is told which bytes neither search reached.
    hits = {s.line_no: s for s in stats.salient if not s.context}
    assert hits[20_001].text == "Traceback (most recent call last):"
    assert hits[20_003].text == "ModuleNotFoundError: No module named 'numpy'"
    first = hits[30_001]
    assert first.counted_to is not None and first.similar == first.counted_to - 30_001
    assert 30_001 < first.counted_to < 230_000
    assert 64 * 1024 < stats.scanned_bytes < len(data)
    assert stats.tail_scan_start is not None
    assert stats.scanned_bytes < stats.tail_scan_start
    assert len(data) - stats.tail_scan_start <= 256 * 1024
    # grep counted the lines up to the stop, the rest were read back.
    assert stats.newline_count == data.count(b"\n")


def test_a_failure_form_past_the_switch_is_listed_apart_from_the_count_before_it(
    dir_fd: int,
) -> None:
    # The same template before the switch to failure forms and after it: the line after is
    # listed on its own, not counted as one more "similar" line of the count that stopped.
    lines = _lines(b"step %d severity=error at 0x%08x", 300_000)
    lines[5] = b"Traceback (most recent call last): in worker 5"
    lines[250_000] = b"Traceback (most recent call last): in worker 6"
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=128 * 1024
    )
    capture.discard()

    hits = {s.line_no: s for s in stats.salient if not s.context}
    assert hits[6].similar == 0
    assert hits[250_001].text == "Traceback (most recent call last): in worker 6"
    assert hits[250_001].similar == 0 and hits[250_001].counted_to is None


def test_a_line_that_starts_where_the_search_stopped_is_read_by_the_tail_scan(
    dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolswap.salience.middle_scan import GrepStream

    # The stop is forced at the first check, after grep's second feed (the second 1 MiB
    # chunk), so it falls on a known line boundary; the line that starts there is the tail
    # scan's first.
    monkeypatch.setattr(GrepStream, "dense", property(lambda self: self._fed > 0))
    lines = [(b"step %07d ok" % i).ljust(63, b".") for i in range(34_000)]  # 64 bytes a line
    lines[32_768] = b"FATAL: disk quota exceeded".ljust(63, b".")  # at byte 2 MiB
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(dir_fd, _split(data, 1 << 20), scan_limit=64 << 10, tail_scan=8 << 20)
    capture.discard()

    assert stats.scanned_bytes == 2 << 20 and stats.tail_scan_start == 2 << 20
    hits = {s.line_no: s.text for s in stats.salient if not s.context}
    assert hits[32_769].startswith("FATAL: disk quota exceeded")


def test_a_count_of_failure_forms_names_the_lines_it_covers(dir_fd: int) -> None:
    lines = [b"plain step %d ok, compiling module" % i for i in range(30_000)]
    lines += _lines(b"src/f%d.c:12:5: error: implicit declaration of function 'f%d'", 200_000)
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=1 << 20
    )
    capture.discard()

    counted = [s for s in stats.salient if not s.context and s.counted_to is not None]
    assert counted[0].line_no == 30_001 and counted[0].counted_from is None
    forms = [s for s in counted if s.counted_from is not None and s.similar]
    assert forms, "the search switched to failure forms"
    for line in forms:
        # Every line from the stage's first to the last counted is one like it.
        assert line.counted_from == line.line_no
        assert line.similar == line.counted_to - line.line_no


def test_structured_output_leaves_the_text_scan_to_grep_after_its_first_bytes(
    dir_fd: int,
) -> None:
    from toolswap.structured import inspect_output

    records = [b'{"id": %d, "status": "ok", "note": "served"}' % i for i in range(20_000)]
    records[3_000] = b'{"id": 3000, "status": "ok", "note": "Traceback (most recent call last):"}'
    data = b"\n".join(records) + b"\n"
    for inspect, handoff in ((inspect_output, 4 << 10), (None, 256 << 10)):
        capture = _outlining(dir_fd, inspect, scan_limit=16 << 20, tail_scan=8 << 20)
        for chunk in _split(data, 1 << 16):
            capture.write(chunk)
        stats = capture.finish()
        capture.discard()
        # The outline looks at every record in Python: the text scan of all but the first
        # 4 KiB runs in grep, on the other core (text output: the first 256 KiB in Python).
        assert capture._grep_limit == handoff
        hits = [(s.line_no, s.text) for s in stats.salient if not s.context]
        assert (3_001, records[3_000].decode()) in hits
        assert stats.scanned_bytes == len(data)


def test_grep_is_fed_through_user_space_where_splice_does_not_exist(
    dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "splice", raising=False)
    data = _three_region_output()
    capture, stats = _capture(
        dir_fd, _split(data, 50_000), scan_limit=64 * 1024, tail_scan=256 * 1024
    )
    capture.discard()

    assert 150_001 in [s.line_no for s in stats.salient if not s.context]
    assert stats.scanned_bytes == len(data)


def _children() -> list[str]:
    """Process IDs whose parent is this process (from /proc)."""
    me = str(os.getpid())
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                found.append(pid)
    return found


def test_long_matching_lines_near_the_end_do_not_hide_the_last_matches(dir_fd: int) -> None:
    lines = [b"ok %06d" % i for i in range(100_000)]
    for i in range(50_000, 50_100):
        lines[i] = b"error %d" % i
    lines[99_000] = b"ERROR: " + b"x" * 300_000  # one huge matching line after them
    data = b"\n".join(lines) + b"\n"
    capture, stats = _capture(dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=1)
    capture.discard()

    numbers = {s.line_no for s in stats.salient if not s.context}
    assert {50_001, 99_001} <= numbers  # the run (one template) and the huge line
    assert stats.scanned_bytes == len(data)


@pytest.mark.parametrize("chunk", [1 << 10, 48 << 10, 1 << 20])
def test_a_long_line_at_the_scan_limit_is_scanned_on_and_grep_starts_after_it(
    dir_fd: int, chunk: int
) -> None:
    # A package's README as one JSON string, across the Python scan's limit with no line
    # end in the 64 KiB before it: the scan reads on to its end and grep searches the rest
    # (before, grep was turned off and the Python scan read as far as it could).
    long = b'  "description": "' + b"lorem ipsum " * 66_000 + b'",'
    assert len(long) > 256 << 10  # the Python scan's limit, where grep takes over
    data = long + b"\n"  # (it starts more than 64 KiB before the limit: no line ends there)
    data += b'  "k": "v",\n' * 200_000 + b'  "message": "fatal: deep in the middle",\n'
    data += b'  "k": "v",\n' * 200_000 + b"}\n"
    read: list[int] = []

    class Counted(durable.DurableIO):
        def pread(self, fd: int, count: int, offset: int) -> bytes:
            data = super().pread(fd, count, offset)
            read.append(len(data))
            return data

    with durable.substituted(Counted()):
        capture, stats = _capture(
            dir_fd, _split(data, chunk), scan_limit=1 << 20, tail_scan=128 << 10
        )
    capture.discard()
    # The bytes after the limit are looked at once for the line's end, however small the
    # chunks that bring it (and once more by the Python scan, and for the tail).
    assert sum(read) < 4 * len(long) + (256 << 10)

    hits = [s.text.strip() for s in stats.salient if not s.context]
    assert hits == ['"message": "fatal: deep in the middle",']
    assert stats.scanned_bytes == len(data) and stats.tail_scan_start is None
    assert stats.newline_count == data.count(b"\n")


def test_a_giant_line_stops_grep_and_the_python_scans_take_over(dir_fd: int) -> None:
    before = _children()  # servers other tests' fixtures keep running
    data = b"ok\n" * 400_000 + b"x" * (10 << 20) + b"\nerror: after the giant line\n"
    capture, stats = _capture(
        dir_fd, _split(data, 1 << 20), scan_limit=64 * 1024, tail_scan=256 * 1024
    )
    capture.discard()

    assert [s.text for s in stats.salient if not s.context] == ["error: after the giant line"]
    assert stats.tail_scan_start is not None  # grep gave up: the pointer will say so
    assert stats.newline_count == data.count(b"\n")  # read back, grep's count being lost
    assert _children() == before


def test_an_interrupted_scan_leaves_no_grep_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolswap import ToolResultExternalizer, salience

    def interrupted(self: object, chunk: bytes) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(salience.Scanner, "feed", interrupted)
    ext = ToolResultExternalizer(tmp_path / "s1")
    before = _children()  # servers other tests' fixtures keep running
    with pytest.raises(KeyboardInterrupt):
        ext.process(b"x" * 99 + b"\n" * 1 + b"y\n" * 2_000_000, "t")
    assert _children() == before
    assert list(ext.tool_results_dir.iterdir()) == []


_NOISY = (b"error: something failed here, a line of a noisy log\nok\n-\n" * 19000)[: 1 << 20]
"""Many lines match (a third: not most, which would make grep look for failure forms
only): grep's matches are read in Python, so it falls behind the writer."""


def test_grep_may_fall_behind_the_writer_only_so_far(
    dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer hands grep what it wrote without waiting, until grep is ``_GREP_LAG``
    bytes behind: then the writer (and a pipe producing the output) waits for it."""
    from toolswap import capture as capture_module

    monkeypatch.setattr(capture_module, "_GREP_LAG", 2 << 20)
    lags: list[int] = []
    hand = StreamCapture._to_grep

    def recording(self: StreamCapture, chunk: bytes) -> None:
        hand(self, chunk)
        lags.append(self._lag)

    monkeypatch.setattr(StreamCapture, "_to_grep", recording)
    capture, stats = _capture(dir_fd, [_NOISY] * 12, scan_limit=64 << 10, tail_scan=1 << 20)
    capture.discard()
    assert max(lags) <= (2 << 20) + len(_NOISY)
    assert max(lags) > len(_NOISY)  # grep did fall behind, and the bound was what held it
    assert stats.salient  # and the search still completed


def test_discarding_a_capture_feeds_grep_nothing_more(dir_fd: int) -> None:
    """An interrupted capture does not wait for grep to search what it lags behind (with
    many matching lines that was minutes for a large output): grep is fed nothing more and
    killed."""
    capture = StreamCapture(
        dir_fd, head_keep=6144, tail_keep=24576, scan_limit=64 << 10, tail_scan=1 << 20
    )
    for _ in range(16):
        capture.write(_NOISY)
    capture.discard()
    assert capture._bytes_written < 16 * len(_NOISY)  # bytes handed to grep
    assert os.listdir(f"/proc/self/fd/{dir_fd}") == []


class _DiskFullAfter(durable.DurableIO):
    """The real I/O until ``writes`` writes have been made; then ENOSPC."""

    def __init__(self, writes: int) -> None:
        self.left = writes

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.left -= 1
        if self.left < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)


def test_a_write_error_feeds_grep_nothing_more(dir_fd: int) -> None:
    """Once a write failed, grep's results will not be used: what it lags behind is not fed
    to it, so the error reaches the caller at once."""
    capture = StreamCapture(
        dir_fd, head_keep=6144, tail_keep=24576, scan_limit=64 << 10, tail_scan=1 << 20
    )
    with durable.substituted(_DiskFullAfter(40)), pytest.raises(OSError) as raised:
        for _ in range(64):
            capture.write(_NOISY)
        capture.finish()
    capture.discard()
    assert raised.value.errno == errno.ENOSPC
    assert capture._bytes_written < 32 * len(_NOISY)  # bytes handed to grep, of 40 written


class _ReadBackRecording(durable.DurableIO):
    """The real I/O, recording how many bytes are read back (``pread``)."""

    def __init__(self) -> None:
        self.read_back = 0

    def pread(self, fd: int, count: int, offset: int) -> bytes:
        data = super().pread(fd, count, offset)
        self.read_back += len(data)
        return data


_END_LINE = b"\x01toolswap-end-of-input\x01"
"""What grep is fed after the output to learn its line count: the output may hold it too."""


@pytest.mark.parametrize("chunk", [1 << 20, 65536, 4096, 1 << 30])
@pytest.mark.parametrize("ending", [b"\n", b"", b"\n" + _END_LINE, b"\n" + _END_LINE + b"\n"])
def test_grep_counts_the_lines_it_searches_exactly(dir_fd: int, chunk: int, ending: bytes) -> None:
    """Past the Python scan, the newlines are counted by the grep that searches those
    bytes: the count is exact whatever the chunks, the last line, or a line of the output
    that reads like grep's end-of-input marker; nothing is read back to count them."""
    lines = [b"[%07d] compiling module %d -> ok" % (i, i) for i in range(200_000)]
    lines[1000] = lines[150_000] = _END_LINE
    data = b"\n".join(lines) + ending
    io = _ReadBackRecording()
    with durable.substituted(io):
        capture, stats = _capture(
            dir_fd, _split(data, chunk), scan_limit=64 << 10, tail_scan=256 << 10
        )
    capture.discard()

    assert stats.newline_count == data.count(b"\n")
    assert stats.line_count == len(data.splitlines())
    # Only the bytes between grep's start (a line boundary) and the end of the Python
    # scan, the failure lines' context and the last 256 KiB (no failure line in them)
    # could be read back: not the 7 MB that grep counted.
    assert io.read_back < 1 << 20


def test_without_grep_the_lines_are_counted_from_the_file(
    dir_fd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no grep there: the Python scans do it all
    data = b"line of output\n" * 300_000 + b"error: the last line"
    io = _ReadBackRecording()
    with durable.substituted(io):
        capture, stats = _capture(
            dir_fd, _split(data, 1 << 20), scan_limit=64 << 10, tail_scan=256 << 10
        )
    capture.discard()

    assert stats.newline_count == data.count(b"\n")
    assert io.read_back >= len(data) - (64 << 10)  # counted by reading back what was written
    assert [s.text for s in stats.salient if not s.context] == ["error: the last line"]


def test_output_that_turns_binary_late_has_its_lines_counted_exactly(dir_fd: int) -> None:
    text = b"text line\n" * 100_000  # 1 MB of text, then bytes that are not UTF-8
    data = text + b"\xff\xfe\n" * 1000 + b"more\n" * 100_000
    for size in (1 << 20, 300_000):
        capture, stats = _capture(
            dir_fd, _split(data, size), scan_limit=64 << 10, tail_scan=256 << 10
        )
        capture.discard()

        assert stats.binary
        assert stats.newline_count == data.count(b"\n")


def test_a_capture_that_fails_to_write_still_counts_every_line(dir_fd: int) -> None:
    """An output whose file fills up midway: its preview's line count covers the bytes
    written (read back), the chunk that failed and those queued behind it, and the rest."""
    data = b"x" * 99 + b"\n" + _NOISY * 12
    capture = StreamCapture(
        dir_fd, head_keep=6144, tail_keep=24576, scan_limit=64 << 10, tail_scan=1 << 20
    )
    with durable.substituted(_DiskFullAfter(6)):
        with pytest.raises(OSError):
            for part in _split(data, 1 << 20):
                capture.write(part)
            capture.finish()
        stats = capture.partial_stats()  # grep's count of what it was fed, the rest read back
    capture.discard()

    assert stats.byte_size == len(data)
    assert stats.lines_known
    assert stats.newline_count == data.count(b"\n")


class _DiskFullUnreadable(_DiskFullAfter):
    """ENOSPC after a number of writes, and nothing written can be read back (EIO)."""

    def pread(self, fd: int, count: int, offset: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")


def test_lines_that_cannot_be_read_back_are_not_counted_and_the_preview_says_so(
    tmp_path: Path,
) -> None:
    from toolswap import ArtifactWriteError, ToolResultExternalizer

    ext = ToolResultExternalizer(tmp_path / "s1")
    data = (b"a line of a long log\n" * 100_000).decode()
    with durable.substituted(_DiskFullUnreadable(20)), pytest.raises(ArtifactWriteError) as err:
        ext.externalize(data, "build")

    assert "lines not counted" in err.value.preview
    assert f"{data.count(chr(10)):,} lines" not in err.value.preview


class _SlowDisk(durable.DurableIO):
    """The real I/O, each write a little late (a slow disk): the writer is still writing
    when the caller finishes feeding. With ``fail_after``, writes past that many raise
    ENOSPC."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.writes = 0
        self.fail_after = fail_after

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.writes += 1
        if self.fail_after is not None and self.writes > self.fail_after:
            raise OSError(errno.ENOSPC, "No space left on device")
        time.sleep(0.01)
        return super().write(fd, data)


def _json_records(count: int, indent: int | None = None) -> bytes:
    return json.dumps(
        {"total": count, "items": [{"id": i, "status": "ok"} for i in range(count)]},
        indent=indent,
    ).encode()


def test_an_outline_starts_once_every_byte_is_written_and_reads_them_all(dir_fd: int) -> None:
    """The outline starts after the last write and the failure-line scan, beside the
    fsync (earlier, it held the GIL the scan needed): it outlines the whole document."""
    from toolswap.structured import inspect_output

    data = _json_records(60_000)
    expected = inspect_output(data[: 32 << 10], lambda n, o: data[o : o + n], len(data))
    io = _SlowDisk()
    writes_at_start: list[int] = []

    def inspect(head: bytes, read: Callable[[int, int], bytes], size: int) -> str:
        writes_at_start.append(io.writes)
        return inspect_output(head, read, size)

    with durable.substituted(io):
        capture = _outlining(dir_fd, inspect, scan_limit=1 << 20, tail_scan=1 << 20)
        for chunk in _split(data, 1 << 17):
            capture.write(chunk)
        stats = capture.finish()
    capture.discard()

    assert writes_at_start == [io.writes]  # it began after the last chunk was written
    assert "60,000" in expected
    assert stats.outline == expected


def test_a_failed_writer_leaves_no_outline_thread_behind(dir_fd: int) -> None:
    from toolswap.structured import inspect_output

    data = _json_records(60_000)
    before = threading.active_count()
    with durable.substituted(_SlowDisk(fail_after=3)):
        capture = _outlining(dir_fd, inspect_output, scan_limit=1 << 20, tail_scan=1 << 20)
        for chunk in _split(data, 1 << 17):
            capture.write(chunk)
        with pytest.raises(OSError) as raised:
            capture.finish()
    capture.discard()

    assert raised.value.errno == errno.ENOSPC
    deadline = time.monotonic() + 30
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before  # the outline thread did not wait forever


class _FailingFsync(durable.DurableIO):
    def fsync(self, fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")


def test_an_outline_stops_reading_once_the_capture_s_own_fsync_failed(dir_fd: int) -> None:
    """A small output is written and fsynced by the caller's thread: when that fsync fails,
    the outline's next read raises (it would hold the discarded file open), as it does
    when the writer thread's fsync fails."""
    reads: list[str] = []
    may_read = threading.Event()

    def inspect(head: bytes, read: Callable[[int, int], bytes], size: int) -> str:
        may_read.wait(30)
        try:
            read(1024, 0)
        except OSError:
            reads.append("refused")
        else:
            reads.append("read")
        return ""

    data = _json_records(2_000)
    assert len(data) < 65536  # written inline, not by the writer thread
    with durable.substituted(_FailingFsync()):
        capture = _outlining(dir_fd, inspect, scan_limit=1 << 20, tail_scan=1 << 20)
        capture.write(data)
        with pytest.raises(OSError) as raised:
            capture.finish()
    may_read.set()
    capture.discard()
    deadline = time.monotonic() + 30
    while not reads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert raised.value.errno == errno.EIO
    assert reads == ["refused"]


def test_no_descriptor_for_the_outline_costs_only_the_outline(
    dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outline reads a duplicate of the file's descriptor: where none is left
    (EMFILE), the capture goes on without an outline, every line counted."""
    from toolswap.structured import inspect_output

    def no_descriptor(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    data = _json_records(60_000, indent=1)
    with durable.substituted(_SlowDisk()):
        capture = _outlining(dir_fd, inspect_output, scan_limit=64 << 10, tail_scan=1 << 20)
        for chunk in _split(data, 1 << 17):
            capture.write(chunk)
        monkeypatch.setattr(os, "dup", no_descriptor)
        stats = capture.finish()
        monkeypatch.undo()
    capture.discard()

    assert stats.outline == ""
    assert stats.byte_size == len(data)
    assert stats.newline_count == data.count(b"\n")
    assert stats.sha256 == hashlib.sha256(data).hexdigest()


def _grep_children() -> list[int]:
    """This process's children that are grep (running or not yet reaped)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                name, rest = f.read().split(" (", 1)[1].rsplit(")", 1)
        except OSError:
            continue
        if name == "grep" and int(rest.split()[1]) == os.getpid():
            found.append(int(pid))
    return found


@pytest.mark.parametrize("step", [4096, 1 << 20])
def test_a_read_back_error_while_grep_starts_is_a_write_error_with_a_preview(
    tmp_path: Path, step: int
) -> None:
    """grep starts where the output passes the Python scan's limit, at a line boundary it
    reads back from the file. Chunks under 64 KiB are written (and grep fed) by the caller:
    a read error there escaped ``write`` as a bare OSError, the rest of the output unread
    (found by a review); it fails the capture as a write error does, with the preview."""
    from toolswap import ArtifactWriteError, ToolResultExternalizer

    class Unreadable(durable.DurableIO):
        def pread(self, fd: int, count: int, offset: int) -> bytes:
            raise OSError(errno.EIO, "Input/output error")

    class Pipe:  # an unbuffered pipe: what is there, ``step`` bytes at a time
        def __init__(self, data: bytes) -> None:
            self.data, self.pos = data, 0

        def read(self, size: int = -1) -> bytes:
            out = self.data[self.pos : self.pos + step]
            self.pos += len(out)
            return out

    data = b"".join(b"build step %06d ok\n" % i for i in range(100_000))
    ext = ToolResultExternalizer(tmp_path / "s")
    with durable.substituted(Unreadable()), pytest.raises(ArtifactWriteError) as caught:
        ext.externalize(Pipe(data), "build")  # type: ignore[arg-type]
    assert "Input/output error" in str(caught.value)
    assert "build step 099999 ok" in caught.value.preview  # the whole output was read
    assert not _grep_children()


@pytest.mark.parametrize("step", [4096, 1 << 20])
def test_no_thread_for_grep_s_output_leaves_the_python_scans_and_no_grep(
    tmp_path: Path, step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread that cannot be started for grep's reader failed the capture with a bare
    RuntimeError and left grep running (found by a review): grep is stopped and reaped,
    and the Python scans do without it (the failure line in the last bytes is found)."""
    from toolswap import ToolResultExternalizer
    from toolswap.salience import middle_scan

    def refuse(target: Callable[[], None], name: str) -> threading.Thread:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(middle_scan, "start_helper_thread", refuse)
    data = b"".join(b"build step %06d ok\n" % i for i in range(100_000)) + b"error: the end\n"
    ext = ToolResultExternalizer(tmp_path / "s")
    result = ext.externalize(iter(_split(data, step)), "build")
    assert "error: the end" in result.context_text
    assert not _grep_children()


@pytest.mark.parametrize("end", [b"\n", b""])
def test_the_line_count_does_not_need_a_kept_tail(tmp_path: Path, end: bytes) -> None:
    """Whether the last line ends in a newline was read from the kept tail: with
    ``tail_bytes=0`` every output counted one line too many (found by a review)."""
    from toolswap import ToolResultExternalizer
    from toolswap.settings import ExternalizerSettings

    data = b"".join(b"line %06d\n" % i for i in range(10_000)).rstrip(b"\n") + end
    for tail in (0, 24576):
        ext = ToolResultExternalizer(
            tmp_path / f"s{tail}", settings=ExternalizerSettings(tail_bytes=tail)
        )
        assert ext.externalize(data, "bash").artifact.line_count == 10_000


def test_a_long_line_the_forward_scan_stopped_in_is_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without grep, a 100 KB line across the 16 MiB forward scan's limit: the scan of the
    last bytes began at that line's start, so its failure was listed twice, as one line
    with "+1 similar" (found by a review). The forward scan reads on to the line's end."""
    from toolswap import ToolResultExternalizer

    monkeypatch.setenv("PATH", str(tmp_path / "no-grep-here"))
    mib = 1 << 20
    data = b"".join(b"plain progress line %08d\n" % i for i in range((16 * mib - 50_000) // 29))
    data += b"z" * 1000 + b" Traceback: the only failure " + b"q" * 100_000 + b"\n"
    data += b"".join(b"tail line %06d\n" % i for i in range(100_000))
    text = ToolResultExternalizer(tmp_path / "s").externalize(data, "tool").context_text
    listed = [line for line in text.splitlines() if "Traceback" in line]
    assert len(listed) == 1 and "similar" not in listed[0]
