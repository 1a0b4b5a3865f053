"""What the pointer shows: real failures of real programs, ranking, de-duplication,
context, long-line windows, terminal noise and honest sizes."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from real_outputs import REAL_CASES, RealCase
from real_outputs_more import TUNING_CASES
from toolswap import ExternalizerSettings, ToolResultExternalizer
from toolswap.salience import (
    FAILURE_SCORE,
    Candidates,
    clean_for_display,
    resolve,
    score_line,
    template,
)
from toolswap.salience.candidates import Entry
from toolswap.salience.middle_scan import GrepStream
from toolswap.salience.vocabulary import (
    BROAD_GREP_PATTERN,
    DENSE_GREP_PATTERN,
    LINE_SHAPES,
    SECTION_TITLE,
)

POINTER_MAX = 32 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _normalise(text: str) -> str:
    return " ".join(_ANSI.sub("", text).replace("\r", "").split())


@pytest.mark.parametrize(
    "case", REAL_CASES + TUNING_CASES, ids=[case.name for case in REAL_CASES + TUNING_CASES]
)
def test_the_pointer_shows_the_failure_of_a_real_program(
    case: RealCase, externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    produced = case.produce(tmp_path / "work")
    if produced is None:
        pytest.skip(f"{case.programs} not on this machine")

    result = externalizer.process(produced.output, "bash")

    assert result.artifact is not None  # over the bash threshold: a pointer
    pointer = "\n".join(_normalise(line) for line in result.context_text.splitlines())
    for wanted in produced.wanted:
        assert _normalise(wanted)[:60] in pointer, wanted
    assert len(result.context_text.encode()) <= POINTER_MAX


def test_templates_mask_numbers_hex_paths_and_quoted_names() -> None:
    one = b"src/a/mod_12.c:40:5: warning: unused variable 'v12' at 0x7ffd1234 [-Wunused]"
    two = b"lib/b/mod_9.c:7:13: warning: unused variable 'tmp' at 0xdeadbeef [-Wunused]"

    assert template(one) == template(two)
    assert template(b"error: x undeclared") != template(b"warning: x undeclared")


def test_failures_rank_above_warnings_and_names_or_zero_counts_barely_count() -> None:
    error = score_line(b"main.c:3:5: error: 'x' undeclared")
    warning = score_line(b"main.c:3:5: warning: unused variable 'y'")
    deprecation = score_line(b"DeprecationWarning: the imp module is deprecated")

    assert error > warning and error > deprecation
    assert score_line(b"summary: 0 errors, 0 failures, 12 passed") < 1
    assert score_line(b"gcc -Wall -Werror=implicit -c src/error_handling.c") < 1
    assert score_line(b"GET https://github.com/x/S.C.P-Asylum-Fail 200") < 1
    assert score_line(b"display_errors => STDOUT => STDOUT") < 1  # an identifier
    assert score_line(b"tests/test_x.py::test_failure_case PASSED") < 1
    assert score_line(b"compiling module 12 ok") == 0


def test_a_rare_failure_ranks_above_a_repeated_one() -> None:
    store = Candidates()
    for i in range(150):
        store.add(i + 1, i * 100, b"error: retrying connection to host %d" % i)
    store.add(500, 50_000, b"error: checksum mismatch in layer 3")

    best = store.ranked()[0]
    assert best.raw == b"error: checksum mismatch in layer 3"
    assert [entry.count for entry in store.ranked()] == [1, 150]


def test_the_candidate_store_stays_bounded_and_keeps_the_strongest() -> None:
    store = Candidates()
    store.add(1, 0, b"FATAL: the one that matters")
    for i in range(20_000):
        store.add(i + 2, i * 10, b"warning: distinct template " + bytes([65 + i % 26]) * (i % 90))

    assert len(store.entries) <= 2048
    assert store.ranked()[0].raw == b"FATAL: the one that matters"


def test_a_failure_line_comes_with_the_lines_before_and_after_it(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"step {i} ok" for i in range(20_000)]
    lines[9_999] = "test_parse_header (tests.test_http.HeaderTests) ..."
    lines[10_000] = "AssertionError: 'content-length' != 'content-type'"
    lines[10_001] = "make: *** [Makefile:12: check] Error 1"

    text = externalizer.externalize("\n".join(lines), "t").context_text

    assert "10000- test_parse_header (tests.test_http.HeaderTests) ..." in text
    assert "10001: AssertionError: 'content-length' != 'content-type'" in text
    assert "10002: make: *** [Makefile:12: check] Error 1" in text


def test_a_traceback_shows_its_first_and_its_last_line(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"step {i} ok" for i in range(20_000)]
    frames = [f'  File "job.py", line {n}, in f{n}\n    f{n + 1}()' for n in range(30)]
    lines[10_000:10_001] = ["Traceback (most recent call last):", *frames, "KeyboardInterrupt"]

    text = externalizer.externalize("\n".join(lines), "t").context_text

    assert "10001: Traceback (most recent call last):" in text
    assert "10062- KeyboardInterrupt" in text  # no failure word, but it ends the block


def test_a_match_inside_a_huge_line_is_shown_as_a_window_that_read_bytes_finds(
    externalizer: ToolResultExternalizer,
) -> None:
    line = ('{"id": %d, "status": "ok"}, ' * 40_000) % tuple(range(40_000))
    cut = len(line) // 2
    text = line[:cut] + '{"status": "error", "detail": "quota exceeded"}, ' + line[cut:]

    result = externalizer.externalize(text + "\n", "t")

    found = re.search(r"^1: \[from byte (\d+)\] …(.*)…$", result.context_text, re.M)
    assert found is not None, result.context_text[-3000:]
    assert '"status": "error", "detail": "quota exceeded"' in found.group(2)
    start = int(found.group(1))
    assert start > 4096  # not the start of the line
    assert result.artifact is not None
    data = externalizer.read_bytes(result.artifact, start, 400).data
    assert b'"status": "error", "detail": "quota exceeded"' in data


def test_ansi_colours_are_stripped_from_the_pointer_but_kept_in_the_artifact(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"\x1b[32mPASS\x1b[0m test {i}" for i in range(5_000)]
    lines[2_500] = "\x1b[01;31m\x1b[Kerror:\x1b[m\x1b[K build failed in stage 3"

    result = externalizer.externalize("\n".join(lines), "t")

    assert "\x1b" not in result.context_text
    assert "2501: error: build failed in stage 3" in result.context_text
    assert result.artifact is not None
    assert b"\x1b[01;31m" in result.artifact.path.read_bytes()


def test_progress_redrawn_with_carriage_returns_shows_its_last_state() -> None:
    progress = "".join(f"\rdownloading: {p}%" for p in range(0, 101, 10))

    assert clean_for_display(f"before\n{progress}\nafter") == "before\ndownloading: 100%\nafter"
    # A line that is not a progress bar only loses its carriage returns.
    assert clean_for_display("error: a\rb: c") == "error: ab: c"


def test_timestamps_are_kept_but_not_counted_against_the_line_budget(
    externalizer: ToolResultExternalizer,
) -> None:
    stamp = "2024-03-01T10:11:12.1234567Z "
    lines = [f"{stamp}step {i} ok" for i in range(20_000)]
    lines[10_000] = f"{stamp}error: " + "x" * 500

    text = externalizer.externalize("\n".join(lines), "t").context_text

    (row,) = [row for row in text.splitlines() if row.startswith("10001: ")]
    assert row.startswith(f"10001: {stamp}error: ")
    assert len(row) == len("10001: ") + len(stamp) + 240


def test_a_failing_output_just_over_the_threshold_is_shown_whole_without_read_more(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"line {i:05d} of a build log\n" for i in range(1_200)]
    lines[600] = "error: line 00600 failed\n"
    output = "".join(lines)  # 31,200 bytes
    assert len(output) > 30_000

    result = externalizer.process(output, "bash")

    assert result.artifact is not None
    assert f"--- full output (1,200 lines) ---\n{output}" in result.context_text
    assert "Read more" not in result.context_text
    assert len(result.context_text.encode()) <= POINTER_MAX


def test_an_output_with_nothing_like_a_failure_gets_a_pointer_that_shows_its_shape(
    externalizer: ToolResultExternalizer,
) -> None:
    output = "".join(f"{i}\n" for i in range(1, 100_001))  # seq 1 100000

    text = externalizer.process(output, "bash").context_text

    assert "no line in this output looks like a failure" in text
    assert "--- head: lines 1-10 ---\n1\n2\n" in text
    assert "--- tail: lines 99981-100000 ---\n99981\n" in text
    assert "Size: 575.1 KiB, 100,000 lines." in text
    assert len(text.encode()) < 2048


@pytest.mark.parametrize("size", [30_001, 31_500, 33_000, 40_000, 64_000])
def test_the_pointer_body_is_never_larger_than_the_output_it_replaces(
    externalizer: ToolResultExternalizer, size: int
) -> None:
    line = "error: retry %05d failed with code 0x%04x\n"
    output = "".join(line % (i, i) for i in range(size // 40 + 1))[:size]

    result = externalizer.process(output, "bash")

    body = result.context_text.split("tool again.\n", 1)[1].split("\n[full output at: ")[0]
    shown = [line for line in body.splitlines(keepends=True) if not line.startswith("--- ")]
    assert len("".join(shown).encode()) <= size + 1  # + the newline that ends the body


def test_line_ranges_have_no_thousands_separators(
    externalizer: ToolResultExternalizer,
) -> None:
    text = externalizer.externalize("".join(f"{i}\n" for i in range(200_000)), "t").context_text

    ranges = re.findall(r"--- (?:head|omitted|tail): lines ([^ ]+)", text)
    assert len(ranges) == 3
    assert all(re.fullmatch(r"\d+-\d+", r) for r in ranges), ranges


def test_grep_searches_the_whole_vocabulary_first_then_the_strongest_words(
    tmp_path: Path,
) -> None:
    path = tmp_path / "out.txt"
    before = b"ok\n" * 50_000 + b"ls: cannot access 'x': Permission denied\n"
    after = b"ok\n" * 50_000 + b"hook: Permission denied\n" + b"ok\n" * 10 + b"fatal: late\n"
    path.write_bytes(before + after)
    fd = os.open(path, os.O_RDONLY)
    try:
        grep = GrepStream(broad_bytes=len(before))
        for offset in range(0, len(before + after), 65536):
            grep.copy_from(fd, offset, min(65536, len(before + after) - offset))
        found = grep.finish()
    finally:
        os.close(fd)

    assert found is not None
    # Each stage's grep counted the newlines it was fed: together, every one.
    assert grep.counted() == (0, len(before + after), (before + after).count(b"\n"))
    hits = sorted((e.line_no, e.line_offset, e.raw) for e in found.entries.values())
    # "denied" is in the broad vocabulary only; "fatal" in both. Numbers count from byte 0.
    assert hits[0] == (50_001, 150_000, b"ls: cannot access 'x': Permission denied")
    assert hits[-1][0] == 100_001 + 1 + 10 + 1
    assert hits[-1][2] == b"fatal: late"
    assert b"hook: Permission denied" not in [raw for _, _, raw in hits]
    assert before + after == path.read_bytes()


def _stages(data: bytes, path: Path, blocks: list[int], **options: Any) -> list[tuple[str, int]]:
    """The stages a structured output's search went through, fed in ``blocks``: each one's
    pattern and where it started."""
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        grep = GrepStream(structured=True, **options)
        offset = 0
        for size in blocks:
            grep.copy_from(fd, offset, size)
            offset += size
        assert offset == len(data)
        assert grep.finish() is not None
    finally:
        os.close(fd)
    return [(stage.pattern, start) for stage, start in grep._stages]


def test_a_search_switched_by_grep_s_count_is_not_switched_again_by_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolswap.salience import middle_scan

    # grep's count says dense before the first 256 KiB are judged (a slow producer): the
    # sample, dense too, adds no second stage for failure forms (whose start would cut
    # the counts of the first).
    monkeypatch.setattr(middle_scan, "_dense", lambda grep: grep.pattern != DENSE_GREP_PATTERN)
    data = b'{"severity": "error", "n": 1}\n' * 40_000
    stages = _stages(data, tmp_path / "out", [64 << 10] * 16 + [len(data) - (1 << 20)])
    assert [pattern for pattern, _ in stages] == [BROAD_GREP_PATTERN, DENSE_GREP_PATTERN]


def test_a_sample_judged_dense_switches_at_the_end_of_a_line_that_crosses_it(
    tmp_path: Path,
) -> None:
    # Lines of 500 bytes that all hold "error" (fewer than grep's own count needs), then a
    # line of 100 KiB across the sample's end, fed as a block of its own: the switch waits
    # for that line's end.
    dense = (b'{"severity": "error", "note": "' + b"n" * 464 + b'"}\n') * 500
    long = b'{"severity": "ok", "note": "' + b"x" * (100 << 10) + b'"}\n'
    data = dense + long + dense
    blocks = [len(dense), len(long) - 1, 1 + len(dense)]
    stages = _stages(data, tmp_path / "out", blocks)
    assert stages == [(BROAD_GREP_PATTERN, 0), (DENSE_GREP_PATTERN, len(dense) + len(long))]


def test_a_pointer_for_the_default_settings_stays_within_32_kib_with_many_failures(
    tmp_path: Path,
) -> None:
    ext = ToolResultExternalizer(tmp_path / "s", settings=ExternalizerSettings())

    def name(i: int) -> str:
        return "".join(chr(97 + (i // 26**k) % 26) for k in range(3))

    lines = [f"error: {name(i)} failed to build {name(i + 7)}" for i in range(9000)]

    text = ext.externalize("\n".join(lines), "t").context_text

    assert len(text.encode()) <= POINTER_MAX
    assert "more failure-like lines; grep the artifact to see them all" in text


@pytest.mark.parametrize(
    ("line", "reads_as_failure"),
    [
        (b"collect2: error: ld returned 1 exit status", True),
        (b"ZeroDivisionError: division by zero", True),
        (b'The command "make test" exited with 2.', True),
        (b"inet_SUITE:t_gethostnative failed on line 696", True),
        (b"Allow some information gathering to give useful error messages", False),
        (b"added verror@1.10.0 and http-errors@1.7.3", False),
        (b"Configure options: --with-timeout=15 --with-fail-on-warn", False),
        (b"Dependency exceptions ==0.10.0: using exceptions-0.10.0", False),
        (b"log_errors_max_len => 1024 => 1024", False),
        (b"tests/test_a.py::test_raises[ERROR: bad input] PASSED", False),
        (b"  \xe2\x9c\x93 triggers the error callback", False),
        (b"$ grep -q 'error' build.log", False),
        (b"Compiling ErrorRenderer and FailoverProxy", False),
        (b"WARNING: Retrying (Retry(total=4)) after connection broken by 'ConnectionError'", False),
        (b"2019-06-11 22:05:23 INFO  LoggerTest:162 - firstLine : ERROR", False),
        (b"npm WARN optional dep failed, continuing fsevents@1.0.17", False),
        (b"error: request failed after 3 retries", True),
        (b"An error occurred while loading ./spec/requests/users_spec.rb.", True),
        (b"==== 1 failed, 199 passed in 0.50s ====", True),
        (b"> Task :app:compileJava FAILED", True),
    ],
)
def test_a_line_reads_as_a_failure_by_its_shape_not_by_a_word_it_contains(
    line: bytes, reads_as_failure: bool
) -> None:
    assert (score_line(line) >= 4) is reads_as_failure, score_line(line)


def test_a_failure_line_is_shown_with_the_lines_that_open_its_block(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"step {i} ok" for i in range(20_000)]
    lines[5_000:5_003] = [
        "In file included from vis-lua.h:14:0,",
        "                 from main.c:15:",
        "vis-subprocess.h:21:29: error: unknown type name 'fd_set'",
    ]
    lines[9_000:9_006] = [
        "____________________ test_readme ____________________",
        "",
        "    def test_readme():",
        ">       assert render() == expected",
        "E       AssertionError: assert 'a' == 'b'",
        "tests/test_readme.py:12: AssertionError",
    ]
    lines[14_000:14_004] = [
        "travis_time:start:0a1b2c3d$ flake8",
        "./app/rules.py:8:9: E128 continuation line under-indented for visual indent",
        "./app/rules.py:9:5: E124 closing bracket does not match visual indentation",
        'The command "flake8" exited with 1.',
    ]

    text = externalizer.externalize("\n".join(lines), "t").context_text

    assert "5001- In file included from vis-lua.h:14:0," in text
    assert "5003: vis-subprocess.h:21:29: error: unknown type name 'fd_set'" in text
    assert re.search(r"^9001[:-] _+ test_readme _+$", text, re.M)
    assert re.search(r"^14002[:-] \./app/rules\.py:8:9: E128 continuation line", text, re.M)
    assert '14004: The command "flake8" exited with 1.' in text


def test_a_failure_line_that_heads_an_indented_block_comes_with_its_first_lines(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"  case {i}: OK (0.01s)" for i in range(20_000)]
    lines[9_000:9_006] = [
        "  tables:                                  FAIL (0.06s)",
        "",
        "    ----------------------------------------",
        "    --- tables.custom",
        "    +++ out/tables.custom",
        "    -  29 </table",
    ]

    text = externalizer.externalize("\n".join(lines), "t").context_text

    assert "9001: tables:" in " ".join(text.split())
    assert "9004-     --- tables.custom" in text


def test_an_output_of_a_failed_command_is_never_called_quiet(
    externalizer: ToolResultExternalizer,
) -> None:
    output = "".join(f"{i}\n" for i in range(1, 100_001))

    text = externalizer.process(output, "bash", exit_code=2).context_text

    assert "looks like a failure" not in text
    assert "--- tail: lines " in text and "\n100000\n" in text
    assert len(text.encode()) > 20_000  # head and tail share the budget


def test_a_shell_error_without_a_failure_word_is_found() -> None:
    assert score_line(b"deploy.sh: line 3: DEPLOY_TARGET: unbound variable") >= 3
    assert score_line(b"publish.sh: 3: BUCKET_NAME: parameter not set") >= 3


def test_a_programs_diagnostic_about_its_input_reads_as_a_failure_by_its_shape() -> None:
    assert score_line(b"gzip: stdin: not in gzip format") >= 3
    assert score_line(b"sort: -:3: disorder: 12") >= 3
    # A progress line and a notice name no single subject.
    assert score_line(b"remote: Counting objects: 100% (5/5), done.") < FAILURE_SCORE
    assert score_line(b"tar: Removing leading `/' from member names") < FAILURE_SCORE


@pytest.mark.parametrize(
    "line",
    [
        b"rm: cannot remove 'build/cache': Directory not empty",
        b"mv: build.log: Operation not permitted",
        b"write error: No space left on device",
        b"curl: (56) Recv failure: Connection reset by peer",
        b"terminate called after throwing an instance of 'std::runtime_error'",
        b"make: *** No targets specified and no makefile found.  Stop.",
        b"sqlite3.OperationalError: no such table: invoices",
    ],
)
def test_errno_messages_and_fatal_markers_read_as_failures(line: bytes) -> None:
    assert score_line(line) >= 3


def test_a_warning_after_the_program_or_location_it_is_about_is_only_a_warning() -> None:
    assert score_line(b"ld: warning: creating DT_TEXTREL in a PIE") < FAILURE_SCORE
    assert score_line(b"foo.c:3:5: warning: unused variable 'x'") < FAILURE_SCORE
    assert score_line(b"dpkg: warning: files list file for package 'x' missing") < FAILURE_SCORE
    assert score_line(b"foo.c:3:5: error: 'x' undeclared") >= 4


def test_a_passed_test_marked_plus_is_no_failure_whatever_its_name_says() -> None:
    assert score_line(b"    [+] fails if value is in the collection 50ms") < FAILURE_SCORE
    assert score_line(b"    [-] fails if value is in the collection 50ms") >= 4


def test_the_line_after_a_failure_line_ending_with_a_colon_counts_as_an_opener() -> None:
    data = (
        b"step 1\nFailed tests: \n"
        b"  FlagTest.testIsDirty:45 expected: <false> but was: <true>\n\nstep 2\n"
    )
    entry = Entry(2, data.index(b"Failed"), b"Failed tests: ", 5.0)

    rows = {
        row.line_no: row
        for row in resolve([(0, entry)], lambda n, at: data[at : at + n], len(data))
    }

    assert rows[3].context and rows[3].detail == 1  # kept when a short pointer drops detail 2
    assert rows[1].detail == 2


def test_the_lines_before_a_linker_or_child_exit_report_count_as_openers() -> None:
    data = (
        b"step 1\n/usr/bin/ld: b.o: in function `f':\n"
        b"b.c:(.text+0x0): multiple definition of `f'; a.o:a.c:(.text+0x0): first defined here\n"
        b"collect2: error: ld returned 1 exit status\nstep 2\n"
    )
    entry = Entry(4, data.index(b"collect2"), b"collect2: error: ld returned 1 exit status", 5.0)

    rows = {
        row.line_no: row
        for row in resolve([(0, entry)], lambda n, at: data[at : at + n], len(data))
    }

    assert rows[3].context and rows[2].detail == 1  # kept when a short pointer drops detail 2


def test_memory_lost_is_a_failure_and_none_lost_is_not() -> None:
    assert score_line(b"==41== definitely lost: 40 bytes in 1 blocks") >= 3
    assert score_line(b"==41== indirectly lost: 0 bytes in 0 blocks") < FAILURE_SCORE
    assert score_line(b"drwx------ 2 root root 16384 Jan  1  2024 lost+found") < FAILURE_SCORE


def test_a_few_failures_alike_are_each_listed_and_many_are_listed_once(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"step {i} ok" for i in range(20_000)]
    lines[9_000] = "thread 'tests::clamp_negative' (41) panicked at src/lib.rs:608:27:"
    lines[9_010] = "thread 'tests::ratio_of_halves' (42) panicked at src/lib.rs:606:28:"
    for i in range(50):
        lines[11_000 + i * 3] = f"error: connection reset by peer, attempt {i}"

    text = externalizer.externalize("\n".join(lines), "t").context_text

    assert "9001: thread 'tests::clamp_negative'" in text
    assert "9011: thread 'tests::ratio_of_halves'" in text
    assert "11001: error: connection reset by peer, attempt 0  (+49 similar)" in text
    assert "attempt 1\n" not in text


_PIECES = st.sampled_from(
    [" ", "\t", ":", ".", "7", "x", "c", "E", "1) ", "___ ", " ___", "---- ", " ----"]
)
_SHAPED = st.sampled_from([".c:3: ", ":12:5: ", ": line 3: ", ": 3: ", "gz: in: "])


@given(st.lists(st.lists(_PIECES | _SHAPED, max_size=8).map("".join), min_size=1, max_size=12))
@example(["foo", "bar.c:3: x"])
@example(["1) ", "x"])
def test_line_shapes_over_many_lines_find_what_each_line_finds_alone(lines: list[str]) -> None:
    # The forward scan searches many lines at once, grep one at a time: both must find the
    # same lines. A pattern that reads on past a newline matches the wrong line, and tries
    # every following line from every line start (seq 1 100000 took 68 s of CPU).
    data = "\n".join(lines).encode() + b"\n"
    found = []
    for match in LINE_SHAPES.finditer(data):
        assert b"\n" not in match.group(), match
        found.append(data.count(b"\n", 0, match.start()))

    assert found == [i for i, line in enumerate(lines) if LINE_SHAPES.search(line.encode())]


@pytest.mark.parametrize(
    ("line", "title"),
    [
        (b"____ test_x ____", True),
        (b"---- tests::parse stdout ----", True),
        (b"=== FAILURES ===", True),
        (b"___ x ______", True),
        (b"##[group]Run make check", True),
        (b"___ " + b"-" * 8000 + b"x", False),
        (b"-" * 8000, True),
        (b"--- a/x.c", False),
    ],
)
def test_a_section_title_is_ruled_on_both_sides(line: bytes, title: bool) -> None:
    assert bool(SECTION_TITLE.match(line)) is title


_WORDY = st.lists(
    st.sampled_from([b"x", b" ", b"err", b"error", b"fail", b"warn", b"missing", b"\xff"]),
    max_size=40,
).map(b"".join)


@given(_WORDY)
@example(b"warn then error")  # the last word looked for comes first
@example(b"errorfail")
def test_the_first_word_of_a_long_line_is_where_the_earliest_word_starts(data: bytes) -> None:
    from toolswap.salience.resolve import _first_word
    from toolswap.salience.vocabulary import FIND_WORDS

    starts = [found for word in FIND_WORDS if (found := data.find(word)) >= 0]
    assert _first_word(data) == (min(starts) if starts else None)


@pytest.mark.parametrize("at", [2_000, 100_000, 1_500_000])
def test_a_word_deep_in_a_long_line_grep_found_is_shown_where_it_is(
    externalizer: ToolResultExternalizer, at: int
) -> None:
    # grep keeps a matching line's first 1 KiB: the word further on is looked for in the
    # artifact, a first read of 64 KiB, then a megabyte at a time.
    filler = "ok " * 100_000 + "\n"  # past the Python scan: grep finds the long line
    line = "x" * at + " disk quota exceeded: could not write the cache " + "y" * 1000
    result = externalizer.externalize(filler * 3 + line + "\n" + filler, "t")

    found = re.search(r"^\d+: \[from byte (\d+)\] …(.*)…$", result.context_text, re.M)
    assert found is not None, result.context_text[-3000:]
    assert "could not write the cache" in found.group(2)
    assert result.artifact is not None
    start = int(found.group(1))
    assert externalizer.read_bytes(result.artifact, start, 400).data.find(b"could not") >= 0


def test_a_giant_line_yields_a_bounded_number_of_windows_of_its_strongest_words() -> None:
    from toolswap.salience.display import WINDOW_BEFORE
    from toolswap.salience.scan import _LONG_WINDOWS, ForwardScan

    # A megabyte of JSON on one line with thousands of failure words: a few windows a
    # piece, a few dozen in all; the whole vocabulary is looked for in its first 64 KiB
    # only (the note that a value is missing is found there, not past them).
    records = b", ".join(b'{"id": %d, "status": "error %d"}' % (i, i) for i in range(60_000))
    note = b'"note": "a value is missing",'
    pad = b'"pad": "' + b"x" * (200 << 10) + b'",'
    line = b"{" + note + pad + note + b'"items": [' + records + b"]}\n"
    windows: list[tuple[int, bytes]] = []

    class Recorded(Candidates):
        def add(self, *args: Any, match_offset: int | None = None, **kwargs: Any) -> None:
            assert match_offset is not None
            windows.append((match_offset, args[2]))
            super().add(*args, match_offset=match_offset, **kwargs)

    scan = ForwardScan(Recorded())
    piece = 64 << 10
    for start in range(0, len(line), piece):
        scan.feed(line[start : start + piece])
    scan.finish()

    assert len(windows) == _LONG_WINDOWS
    # The first note's window, and none around the second (past the first 64 KiB).
    assert windows[0][0] == 0 and b"missing" in windows[0][1]
    assert line.index(b"missing", 1000) - WINDOW_BEFORE not in dict(windows)
    # A few a piece: the last of them some pieces into the items.
    items = line.index(b'"items"')
    assert windows[-1][0] > items + (_LONG_WINDOWS // 4 - 2) * piece  # (4 a piece)
    assert scan.newlines == 1 and scan.lines_end == len(line)


def test_a_word_in_the_overlap_of_two_pieces_of_a_giant_line_is_recorded_once() -> None:
    from toolswap.salience.scan import ForwardScan

    line = b"x" * 8172 + b" error " + b"y" * 9000 + b"\n"  # ends 13 bytes before 8 KiB
    candidates = Candidates()
    scan = ForwardScan(candidates)
    for start in range(0, len(line), 8192):
        scan.feed(line[start : start + 8192])

    assert sum(entry.count for entry in candidates.entries.values()) == 1


def test_a_giant_line_is_looked_at_for_weak_words_in_its_first_64_kib_whatever_its_pieces() -> None:
    from toolswap.salience.scan import ForwardScan

    # Read back from the file a megabyte at a time, or fed as it streamed: a weak word is
    # found 10 KB into the line, not 200 KB into it.
    line = b"x" * 10_000 + b" a value is missing " + b"x" * 200_000
    line += b" another value is missing " + b"x" * 1_300_000 + b"\n"
    for piece in (1 << 20, 4096):
        candidates = Candidates()
        scan = ForwardScan(candidates)
        for start in range(0, len(line), piece):
            scan.feed(line[start : start + piece])
        windows = sorted(entry.match_offset or 0 for entry in candidates.entries.values())
        assert len(windows) == 1 and windows[0] < 10_020, piece


def _timeout_document(records: int) -> bytes:
    """A one-line JSON document: a "timeout" field in every record, and one Traceback
    300 KB in."""
    joined = b",".join(b'{"id": %d, "timeout": 30}' % i for i in range(records))
    at = joined.index(b"},", 300_000) + 1
    return joined[:at] + b', {"log": "Traceback (most recent call last):"}' + joined[at:]


def test_weak_words_early_in_a_piece_of_a_giant_line_leave_room_for_a_strong_one() -> None:
    from toolswap.salience.scan import ForwardScan

    # A "timeout" field in every record of a one-line document, and one Traceback 300 KB
    # in: read back in one piece, the piece's few windows go to the strong word first.
    line = _timeout_document(40_000)
    candidates = Candidates()
    scan = ForwardScan(candidates)
    for start in range(0, len(line), 1 << 20):
        scan.feed(line[start : start + (1 << 20)])

    assert any(b"Traceback (most recent" in entry.raw for entry in candidates.entries.values())


def test_a_giant_line_read_back_whole_gets_windows_as_one_streamed_in_pieces() -> None:
    from toolswap.salience.scan import ForwardScan

    # A one-line document with a Traceback 300 KB in, fed whole with its newline (as a
    # read back of the file gives it): not its first match alone.
    line = _timeout_document(30_000)
    candidates = Candidates()
    scan = ForwardScan(candidates)
    scan.feed(line + b"\n")

    windows = [entry for entry in candidates.entries.values() if entry.match_offset is not None]
    assert any(b"Traceback (most recent" in entry.raw for entry in windows)
    assert scan.newlines == 1 and scan.lines_end == len(line) + 1


_LOOKAHEADS = (
    rb"(?=[\w./-]*\.\w)",
    rb"(?=[\w.]*[_.][efawp])",
    rb"(?=[\w.-]*@)",
    rb"(?=[\w-]*-\d+\.\d)",
    rb"(?=\w+\s*[=<>~^])",
)
_NAME_TOKENS = st.sampled_from(
    [
        "error",
        "errors",
        "failed",
        "fail_fast",
        "warn",
        "timeout",
        "exceptions",
        "assert",
        "abort",
        "panic",
        "lost",
        "no",
        "0",
        "11",
        "=",
        "==",
        ">=",
        "^",
        "@",
        "-",
        "--",
        ".",
        "_",
        "/",
        "x",
        "foo",
        "c",
        "py",
        "1.7.3",
        "-0.10.0",
        ":",
        "exit",
        "code",
        "exited",
        "with",
        "http-errors@1.7.3",
        "x_warn",
        "y.panic",
        "conf.fatal",
        "exceptions-0.10.0",
        "errors>=1",
        "fail~2",
        "warn^3",
        "panic.py",
        "abort.o",
        "dep=exceptions",
        "--with-timeout=15",
        "assert@2",
        "fatal@x",
        "errors@^1.2",
        "exceptions-0.1",
        "log_errors",
        "assert.active",
        "a/b/error.c",
        " ",
        "'",
    ]
)


@given(st.lists(_NAME_TOKENS, max_size=30), st.lists(st.sampled_from(["", " ", "  "]), max_size=30))
def test_the_lookaheads_of_the_names_pattern_only_skip_what_cannot_match(
    tokens: list[str], gaps: list[str]
) -> None:
    """``_NOT_A_FAILURE``'s costliest alternatives first look ahead for what they need
    further on: without those lookaheads it blanks the same names (checked on 1.1 million
    lines of logs and outputs when they were added; here on lines made of its pieces)."""
    from toolswap.salience import vocabulary

    pattern = vocabulary._NOT_A_FAILURE.pattern
    assert all(look in pattern for look in _LOOKAHEADS)
    for look in _LOOKAHEADS:
        pattern = pattern.replace(look, b"")
    plain = re.compile(pattern)
    line = "".join(t + g for t, g in zip(tokens, gaps + [""] * len(tokens), strict=False))
    data = line.encode()
    assert vocabulary._NOT_A_FAILURE.sub(b"#", data) == plain.sub(b"#", data)
