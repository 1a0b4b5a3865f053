"""The context pointer: template, bounds, cuts, failure lines, binary output, summaries."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolswap import (
    POINTER_TEMPLATE,
    ExternalizedToolResult,
    ExternalizerSettings,
    ToolResultExternalizer,
)
from toolswap._invocation import cli_command
from toolswap.capture import CaptureStats
from toolswap.pointer import default_summary, human_size

POINTER_MAX = 32 * 1024
FIXED_NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _pytest_output() -> str:
    lines = [f"tests/test_mod.py::test_{i:03d} PASSED" for i in range(1, 201)]
    lines[99] = "tests/test_mod.py::test_100 FAILED - AssertionError: assert 1 == 2"
    lines[149] = "E   Traceback: ValueError raised in helper"
    lines.append("==== 1 failed, 199 passed in 0.50s ====")
    return "\n".join(lines) + "\n"


SNAPSHOTS = Path(__file__).parent / "snapshots"


def _snapshot(name: str, actual: str) -> str:
    """The stored snapshot; ``TOOLSWAP_UPDATE_SNAPSHOTS=1`` rewrites it from ``actual``."""
    path = SNAPSHOTS / name
    if os.environ.get("TOOLSWAP_UPDATE_SNAPSHOTS") == "1":
        path.write_text(actual + "\n", encoding="utf-8")
    return path.read_text(encoding="utf-8").removesuffix("\n")


def _small(read_hint: str = "cli") -> ToolResultExternalizer:
    """A session under $TOOLSWAP_HOME (so the source ID alone finds it), small previews."""
    ext = ToolResultExternalizer.open(
        "s1",
        settings=ExternalizerSettings(head_bytes=120, tail_bytes=240),
        read_hint=read_hint,  # type: ignore[arg-type]
    )
    ext._now = lambda: FIXED_NOW
    return ext


def _anonymize(ext: ToolResultExternalizer, text: str) -> str:
    """The pointer with its session directory and its command (which depend on where the
    tests run, see :func:`cli_command`) as placeholders."""
    text = text.replace(str(ext.session_dir), "<session>")
    return text.replace(f"{cli_command()} read ", "toolswap read ").replace(
        f"{cli_command()} grep ", "toolswap grep "
    )


def _sections(pointer: str) -> tuple[str, str]:
    """(head text, tail text) of a text pointer that omits a middle."""
    head = re.search(
        r"--- head: lines [\d,-]+(?: \(line \d+ cut\))? ---\n(.*?)--- omitted", pointer, re.S
    )
    tail = re.search(r"--- tail: lines [\d,-]+ ---\n(.*)\n\[full output at: ", pointer, re.S)
    assert head is not None and tail is not None, pointer[:2000]
    return head.group(1), tail.group(1)


def test_pointer_text_matches_the_snapshot() -> None:
    ext = _small()

    result = ext.externalize(_pytest_output(), "pytest", exit_code=1)

    actual = _anonymize(ext, result.context_text)
    assert actual == _snapshot("pointer_text.txt", actual)


def test_binary_pointer_matches_the_snapshot_and_shows_no_bytes() -> None:
    ext = _small()
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8

    result = ext.externalize(png, "screenshot")

    actual = _anonymize(ext, result.context_text)
    assert actual == _snapshot("pointer_binary.txt", actual)
    assert "\ufffd" not in actual


def test_pointer_template_has_the_spec_header_fields() -> None:
    for field in ("[Artifact: {source_id}]", "Summary: {summary}", "{tool}; SHA-256: {sha256}"):
        assert field in POINTER_TEMPLATE
    assert "Full output: {path}" in POINTER_TEMPLATE
    assert "[full output at: {path}]" in POINTER_TEMPLATE


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("mcp", 'Read more: read_artifact(source_id="{sid}", offset=3, limit=200)'),
        ("python", 'Read more: externalizer.read_artifact("{sid}", offset=3, limit=200)'),
    ],
)
def test_pointer_names_the_read_call_for_its_audience(hint: str, expected: str) -> None:
    ext = _small(hint)

    result = ext.externalize(_pytest_output(), "pytest")

    last = result.context_text.splitlines()[-1]
    assert last.startswith(expected.format(sid=result.artifact.source_id))


def test_cli_pointer_names_the_session_directory_when_the_id_alone_cannot_find_it(
    session_dir: Path,
) -> None:
    ext = ToolResultExternalizer(session_dir)

    result = ext.externalize("x\n" * 40_000, "bash")

    sid = result.artifact.source_id
    assert f"toolswap read {sid} --session-dir {session_dir} --offset" in result.context_text
    assert f"toolswap grep {sid} --session-dir {session_dir} 'PATTERN'" in result.context_text


def test_read_more_offset_is_the_first_omitted_line() -> None:
    ext = _small()
    result = ext.externalize(_pytest_output(), "pytest")
    offset = int(re.findall(r"--offset (\d+)", result.context_text)[0])

    first_omitted = ext.read_artifact(result.artifact, offset, 1)

    assert first_omitted == "tests/test_mod.py::test_004 PASSED"


def test_a_small_artifact_is_shown_whole() -> None:
    ext = _small()

    result = ext.externalize("one\ntwo\n", "t")

    assert "--- full output (2 lines) ---\none\ntwo\n" in result.context_text
    assert "omitted" not in result.context_text


def test_head_and_tail_prefer_line_boundaries(externalizer: ToolResultExternalizer) -> None:
    text = "".join(f"line {i:05d} of the output\n" for i in range(10_000))

    result = externalizer.externalize(text, "t")

    head, tail = _sections(result.context_text)
    assert head.endswith("\n")
    assert text.startswith(head)
    assert re.fullmatch(r"(line \d{5} of the output\n)+", tail)
    assert text.endswith(tail)


def test_cuts_never_split_a_utf8_sequence(externalizer: ToolResultExternalizer) -> None:
    text = "😀" * 100_000  # one line, 4 bytes per character

    result = externalizer.externalize(text, "t")

    head, tail = (part.rstrip("\n") for part in _sections(result.context_text))
    assert "\ufffd" not in result.context_text
    assert head == "😀" * len(head)
    assert tail == "😀" * len(tail)
    assert len(head) > 200 and len(tail) > 200  # a quiet output: a short head and tail


def test_head_and_tail_never_overlap(externalizer: ToolResultExternalizer) -> None:
    text = "".join(f"{i}\n" for i in range(8_000))  # a little over 30 KiB

    result = externalizer.externalize(text, "t")

    head, tail = _sections(result.context_text)
    head_lines = head.splitlines()
    tail_lines = tail.splitlines()
    assert int(head_lines[-1]) < int(tail_lines[0])
    assert len(head.encode()) + len(tail.encode()) < len(text)


def test_pointer_is_at_most_32_kib_for_hostile_outputs(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["d" * 100] * 20)) / "s1"
    ext = ToolResultExternalizer(deep, settings=ExternalizerSettings(salient_bytes=1 << 20))
    summary = "汇总" * 120  # 240 characters, 720 bytes
    outputs: list[str | bytes] = [
        "x" * 5_000_000,
        "error: something\n" * 200_000,
        "".join(f"line {i}: 🎉 error {'é' * (i % 300)}\n" for i in range(20_000)),
        os.urandom(1 << 20),
        "\n" * 1_000_000,
        "日本語" * 500_000,
    ]
    for output in outputs:
        result = ext.externalize(output, "tool", summary=summary)
        assert len(result.context_text.encode()) <= POINTER_MAX


def test_pointer_is_at_most_32_kib_with_the_largest_allowed_previews(session_dir: Path) -> None:
    text = "".join(f"error at step {i}: {'x' * 180}\n" for i in range(20_000))
    for head, tail in ((30 * 1024, 1024), (1024, 30 * 1024), (15 * 1024, 16 * 1024)):
        ext = ToolResultExternalizer(
            session_dir, settings=ExternalizerSettings(head_bytes=head, tail_bytes=tail)
        )
        result = ext.externalize(text, "t")
        assert len(result.context_text.encode()) <= POINTER_MAX


def test_failure_lines_from_the_middle_are_listed_with_line_numbers(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = ["ok"] * 100_000
    lines[1] = "error: in the head, shown there"
    lines[40_000] = "Traceback (most recent call last):"
    lines[40_001] = "    x = 1 / 0"  # no keyword: not listed
    lines[70_000] = "panic: runtime error: index out of range"
    lines[99_999] = "FAILED in the tail, shown there"

    result = externalizer.externalize("\n".join(lines), "t")

    section = result.context_text.split("(N: line, N- context) ---\n")[1]
    listed = section.split("--- tail")[0].splitlines()
    assert listed == [
        "40000- ok",
        "40001: Traceback (most recent call last):",
        "40002-     x = 1 / 0",
        "40003- ok",  # where the traceback block ends
        "70000- ok",
        "70001: panic: runtime error: index out of range",
        "70002- ok",
    ]
    assert result.context_text.count("error: in the head, shown there") == 1
    assert result.context_text.count("FAILED in the tail, shown there") == 1


def test_listed_line_numbers_match_what_the_reader_returns(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"row {i}" for i in range(50_000)]
    lines[12_345] = "AssertionError: mismatch in row 12345"
    result = externalizer.externalize("\n".join(lines), "t")

    (number,) = re.findall(r"^(\d+): AssertionError", result.context_text, re.M)

    assert externalizer.read_artifact(result.artifact, int(number) - 1, 1) == lines[12_345]


def test_repeated_failure_lines_are_listed_once_and_never_crowd_out_a_rare_one(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [f"ok {i}" + "." * 100 for i in range(4_000)]
    for i in range(1_000, 1_150):
        lines[i] = f"src/mod_{i}.c:{i}:5: warning: unused variable 'v{i}' [-Wunused-variable]"
    lines[1_070] = "src/main.c:12:3: error: 'cfg' undeclared (first use in this function)"
    for i in range(2_000, 2_300):
        lines[i] = f"error: middle failure {i} at 0x{i * 4096:x} " + "y" * 60
    lines[3_700] = "FATAL: the last failure before the tail"

    result = externalizer.externalize("\n".join(lines) + "\n", "t")

    text = result.context_text
    assert "1071: src/main.c:12:3: error: 'cfg' undeclared (first use in this function)" in text
    assert "1001: src/mod_1000.c:1000:5: warning: unused variable 'v1000'" in text
    assert "(+148 similar)" in text and "(+299 similar)" in text
    assert "3701: FATAL: the last failure before the tail" in text
    assert text.count("warning: unused variable") <= 4  # one listed, the rest context
    assert len(text.encode()) <= POINTER_MAX


def _three_scans(session_dir: Path) -> tuple[ToolResultExternalizer, str]:
    ext = ToolResultExternalizer(
        session_dir,
        settings=ExternalizerSettings(
            salient_scan_bytes=64 * 1024, salient_tail_scan_bytes=128 * 1024
        ),
    )
    lines = ["ok"] * 2_000_000
    lines[1_000_000] = "error: in the middle, found by grep"
    lines[-30_000] = "error: found by the tail scan"
    return ext, "\n".join(lines)


def test_pointer_says_where_failure_lines_were_not_looked_for(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ext, output = _three_scans(session_dir)
    monkeypatch.setenv("PATH", "")  # no grep: the middle goes unscanned

    result = ext.externalize(output, "t")

    assert re.search(
        r"; failure lines were looked for only in the first [\d.]+ (KiB|MiB) and the last "
        r"[\d.]+ KiB ---",
        result.context_text,
    )
    assert "error: in the middle" not in result.context_text
    assert "1970001: error: found by the tail scan" in result.context_text


def test_pointer_lists_middle_failures_found_by_grep_without_a_scan_note(
    session_dir: Path,
) -> None:
    ext, output = _three_scans(session_dir)

    result = ext.externalize(output, "t")

    assert "looked for only" not in result.context_text
    assert "1000001: error: in the middle, found by grep" in result.context_text
    assert "1970001: error: found by the tail scan" in result.context_text


def test_pointer_has_no_scan_note_when_everything_was_scanned(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize("ok\n" * 500_000, "t")

    assert "looked for only" not in result.context_text


def test_binary_output_is_never_decoded_into_the_pointer(
    externalizer: ToolResultExternalizer,
) -> None:
    data = b"looks like text\n" * 100 + b"\x00\xff" + os.urandom(200_000)

    result = externalizer.externalize(data, "t")

    assert result.artifact.binary
    assert result.artifact.media_type == "application/octet-stream"
    assert "looks like text" not in result.context_text
    assert "\ufffd" not in result.context_text
    assert "binary application/octet-stream" in result.context_text
    assert human_size(len(data)) in result.context_text
    assert "--byte-start 0" in result.context_text


def test_pointer_says_plainly_that_the_output_is_saved(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize("x\n" * 40_000, "bash")

    assert "The full output is saved; page through it instead of running the tool again." in (
        result.context_text
    )
    assert result.context_text.splitlines()[-1].startswith(f"Read more: {cli_command()} read ")


# -- summaries -----------------------------------------------------------------------


def _stats(head: bytes, *, size: int | None = None, binary: bool = False) -> CaptureStats:
    return CaptureStats(
        byte_size=len(head) if size is None else size,
        newline_count=head.count(b"\n"),
        char_count=len(head),
        sha256="0" * 64,
        binary=binary,
        head=head,
        tail=head[-100:],
        salient=(),
        scanned_bytes=len(head),
    )


@pytest.mark.parametrize(
    "head",
    [
        b"y" * 10_000,
        "漢".encode() * 3000,
        b"\n\n\n   \n",
        b"",
        b"\t first\tline  with   spaces \r\nsecond",
        b"x" * 6144 + b"\xe6",
    ],
)
def test_default_summary_is_at_most_240_characters_and_one_line(head: bytes) -> None:
    summary = default_summary(_stats(head), "bash", "text/plain", exit_code=2)

    assert 0 < len(summary) <= 240
    assert "\n" not in summary and "\r" not in summary
    assert summary == default_summary(_stats(head), "bash", "text/plain", exit_code=2)


def test_default_summary_collapses_whitespace_in_the_first_line() -> None:
    summary = default_summary(_stats(b"\n\t first\tline  here \r\nsecond\n"), "t", "text/plain")

    assert summary == "t output: 3 lines, 29 bytes; first line: first line here"


def test_default_summary_of_a_tool_with_a_very_long_name_is_still_bounded() -> None:
    summary = default_summary(_stats(b"abc"), "t" * 200, "text/plain", exit_code=1)

    assert len(summary) == 240
    assert summary.endswith("…")


def test_externalized_result_pointer_and_artifact_agree(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize("x\n" * 40_000, "bash")

    assert isinstance(result, ExternalizedToolResult)
    assert result.context_text.startswith(f"[Artifact: {result.artifact.source_id}]\n")
    assert f"SHA-256: {result.artifact.content_sha256}" in result.context_text
    assert f"Full output: {result.artifact.path}" in result.context_text


# -- the budget ----------------------------------------------------------------------

_LINE = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\n\x00"), max_size=80),
    st.sampled_from(
        [
            "",
            "error: boom",
            "src/a.c:3:5: error: 'x' undeclared",
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in <module>',
            "ValueError: bad",
            "FAILED tests/test_a.py::test_b - assert 1 == 2",
            "warning: unused variable",
            "##[group]Run make check",
            "##[error]Process completed with exit code 2.",
            "    at com.example.Foo.bar(Foo.java:12)",
            "[error] x" * 40,
            "ok",
            "汇总 ✓ done",
        ]
    ),
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lines=st.lists(_LINE, min_size=1, max_size=30),
    repeat=st.integers(1, 2_000),
    budget=st.integers(1024, 64 * 1024),
    head=st.integers(0, 8 * 1024),
    tail=st.integers(0, 23 * 1024),
    deep=st.booleans(),
    cjk_summary=st.booleans(),
)
def test_a_pointer_never_exceeds_its_budget(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    repeat: int,
    budget: int,
    head: int,
    tail: int,
    deep: bool,
    cjk_summary: bool,
) -> None:
    root = tmp_path_factory.mktemp("budget")
    if deep:
        root = root.joinpath(*(["d" * 100] * 8))
    text = "\n".join(lines * repeat)
    ext = ToolResultExternalizer(
        root / "s1",
        settings=ExternalizerSettings(head_bytes=head, tail_bytes=tail, pointer_bytes=budget),
    )

    result = ext.externalize(text, "tool", summary="汇总" * 120 if cjk_summary else None)

    pointer = result.context_text
    assert len(pointer.encode()) <= budget
    assert pointer.startswith(f"[Artifact: {result.artifact.source_id}]\n")
    if budget >= 4096 and not deep:
        assert f"Full output: {result.artifact.path}" in pointer  # the whole frame fits
        assert pointer.splitlines()[-1].startswith(("Read more: ", "This is the whole output."))


@pytest.mark.parametrize("budget", [1024, 2048, 4096, 8192, 16384])
def test_a_binary_or_hostile_output_fits_any_budget(tmp_path: Path, budget: int) -> None:
    deep = tmp_path.joinpath(*(["d" * 100] * 20)) / "s1"
    ext = ToolResultExternalizer(deep, settings=ExternalizerSettings(pointer_bytes=budget))
    outputs: list[str | bytes] = [
        os.urandom(1 << 16),
        "x" * 2_000_000,
        "error: something\n" * 100_000,
        "日本語" * 300_000,
    ]
    for output in outputs:
        result = ext.externalize(output, "tool", summary="汇总" * 120)
        assert len(result.context_text.encode()) <= budget
        assert result.artifact.source_id in result.context_text


def test_a_per_tool_budget_applies_to_that_tool_only(session_dir: Path) -> None:
    ext = ToolResultExternalizer(
        session_dir,
        settings=ExternalizerSettings(tool_pointer_bytes={"pytest": 4096}, pointer_bytes=8192),
    )
    output = "".join(f"step {i}: error {i % 7} in module {i}\n" for i in range(20_000))

    small = ext.externalize(output, "pytest").context_text
    large = ext.externalize(output, "make").context_text

    assert 3500 < len(small.encode()) <= 4096
    assert 7500 < len(large.encode()) <= 8192


def test_a_count_that_stopped_where_only_failure_forms_were_searched_says_so(
    externalizer: ToolResultExternalizer,
) -> None:
    # Every line holds "error" (a severity field): past the first few thousand, the middle
    # is searched only for failure forms, and the count of the lines like the first one
    # names the lines it covers rather than pass for all of them.
    lines = [f"step {i} ok" for i in range(10_000)]
    lines += [f"step {i} severity=error request=GET /items/{i}" for i in range(290_000)]
    lines[200_000] = "Traceback (most recent call last):"
    text = externalizer.externalize("\n".join(lines) + "\n", "t").context_text
    pattern = r"^10001: step 0 severity=error .*\(\+(\d+) similar in lines 1-(\d+)\)$"
    (count, last) = re.findall(pattern, text, re.M)[0]
    assert int(count) == int(last) - 10_001 and int(last) < 200_000
    assert "200001: Traceback (most recent call last):" in text


def test_the_line_after_a_failure_line_of_more_than_4_kib_is_the_next_line(
    tmp_path: Path,
) -> None:
    """The failure word in the first bytes of a 5 KB line: the context after it was read
    from where the line's first 4 KiB read stopped, the middle of the line, and shown as
    the next line (found by a review)."""
    from toolswap import ToolResultExternalizer

    data = b"".join(b"ok %06d\n" % i for i in range(10000))
    data += b"exception: something broke " + b"k" * 5000 + b"\n"
    data += b"the real next line\n"
    data += b"".join(b"ok %06d\n" % i for i in range(10000))
    text = ToolResultExternalizer(tmp_path / "s").externalize([data], "tool").context_text
    assert "10001: exception: something broke kkk" in text
    assert "10002- the real next line" in text
    assert "10002- kkk" not in text


def test_a_head_that_ends_inside_a_line_counts_that_line_and_says_it_is_cut(
    externalizer: ToolResultExternalizer,
) -> None:
    """``--- head: lines 1-3 ---`` was followed by the first bytes of line 4, unmarked,
    and the omitted lines began at 4: the model read a line the header said was not
    shown as if it were whole (a review)."""
    text = "first\nsecond\nthird\nFOURTH-" + "x" * 20_000 + "\n"
    text += "".join(f"line {i}\n" for i in range(3000))

    pointer = externalizer.externalize(text, "t").context_text

    assert "--- head: lines 1-4 (line 4 cut) ---\nfirst\nsecond\nthird\nFOURTH-xxx" in pointer
    assert "--- omitted: lines 4-" in pointer
