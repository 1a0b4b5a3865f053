"""Page faults: lines, long lines, byte ranges, grep, integrity and access checks."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

from toolswap import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactReader,
    ArtifactReadError,
    ArtifactReference,
    InvalidArgumentError,
    ToolResultExternalizer,
)
from toolswap.reader import CONTINUATION_MARKER
from toolswap.records import CollectedRecord
from toolswap.session import Session

MIB = 1 << 20


def _text(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(n))


@pytest.fixture
def artifact(externalizer: ToolResultExternalizer) -> ArtifactReference:
    return externalizer.externalize(_text(100_000), "bash").artifact


# -- lines ---------------------------------------------------------------------------


def test_read_artifact_returns_lines_as_the_spec_slices_them(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    expected = _text(100_000).split("\n")

    assert externalizer.read_artifact(artifact) == "\n".join(expected[:2000])
    assert externalizer.read_artifact(artifact, 40_000, 3) == "line 40000\nline 40001\nline 40002"
    assert externalizer.read_artifact(artifact, 99_998, 10) == "line 99998\nline 99999\n"


def test_read_artifact_accepts_a_source_id(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    assert externalizer.read_artifact(artifact.source_id, 5, 1) == "line 5"


def test_line_pages_say_where_the_next_page_starts(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    page = externalizer.read_lines(artifact, 10, 5)

    assert page.offset == 10
    assert page.lines == ("line 10", "line 11", "line 12", "line 13", "line 14")
    assert page.next_offset == 15
    assert page.total_lines == 100_001  # the empty string after the final newline
    last = externalizer.read_lines(artifact, 99_990, 100)
    assert last.next_offset is None


def test_paging_through_every_line_reassembles_the_output(
    externalizer: ToolResultExternalizer,
) -> None:
    text = _text(30_000) + "no newline at the end"
    art = externalizer.externalize(text, "t").artifact
    lines: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = externalizer.read_lines(art, offset, 7_000)
        lines.extend(page.lines)
        offset = page.next_offset

    assert "\n".join(lines) == text


def test_a_read_past_the_end_says_how_many_lines_there_are(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    with pytest.raises(ArtifactReadError, match="has 100000 lines; read offsets 0-99999"):
        externalizer.read_lines(artifact, 100_001, 10)


@pytest.mark.parametrize(
    ("offset", "limit", "width"),
    [(-1, 10, 2000), (0, 0, 2000), (0, 10, 5), (True, 10, 2000), (0, 1.5, 2000)],
)
def test_invalid_line_requests_are_refused(
    externalizer: ToolResultExternalizer,
    artifact: ArtifactReference,
    offset: int,
    limit: int,
    width: int,
) -> None:
    with pytest.raises(ArtifactReadError):
        externalizer.read_lines(artifact, offset, limit, width=width)


def test_a_line_longer_than_the_width_is_split_with_a_continuation_marker(
    externalizer: ToolResultExternalizer,
) -> None:
    long_line = "".join(chr(0x4E00 + i % 500) for i in range(5_000))
    art = externalizer.externalize(f"before\n{long_line}\nafter\n", "t").artifact

    page = externalizer.read_lines(art, 0, 3, width=2_000)

    assert page.lines[0] == "before"
    assert page.lines[1] == long_line[:2000] + CONTINUATION_MARKER
    assert page.lines[2] == long_line[2000:4000] + CONTINUATION_MARKER
    assert page.lines[3] == long_line[4000:]
    assert page.lines[4] == "after"
    assert page.next_offset is None  # "after" is the last line: offset 3 is past the end


def test_single_line_json_is_pageable(externalizer: ToolResultExternalizer) -> None:
    doc = "[" + ",".join(f'{{"id":{i},"name":"item-{i}"}}' for i in range(40_000)) + "]"
    art = externalizer.externalize(doc, "fetch").artifact

    page = externalizer.read_lines(art, 0, 1, width=4_000)
    pieces = [p.removesuffix(CONTINUATION_MARKER) for p in page.lines]
    assert all(p.endswith(CONTINUATION_MARKER) for p in page.lines[:-1])
    assert "".join(pieces) == doc[: len("".join(pieces))]
    assert page.continue_byte == len("".join(pieces).encode())

    rest = b""
    start: int | None = page.continue_byte
    while start is not None:
        chunk = externalizer.read_bytes(art, start, 200_000)
        rest += chunk.data
        start = chunk.next_offset
    assert "".join(pieces) + rest.decode() == doc


def test_a_page_stops_before_a_huge_line_that_would_not_fit(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("short\n" + "x" * 3 * MIB + "\nend\n", "t").artifact

    page = externalizer.read_lines(art, 0, 10)

    assert page.lines == ("short",)
    assert page.next_offset == 1
    huge = externalizer.read_lines(art, 1, 10)
    assert huge.continue_byte is not None
    assert huge.continue_byte < 3 * MIB
    assert huge.next_offset == 2


# -- byte ranges ---------------------------------------------------------------------


def test_byte_ranges_return_exact_bytes_and_the_next_offset(
    externalizer: ToolResultExternalizer,
) -> None:
    data = os.urandom(300_000)
    art = externalizer.externalize(data, "t").artifact

    first = externalizer.read_bytes(art, 0, 100_000)
    middle = externalizer.read_bytes(art.source_id, 100_000, 150_000)
    end = externalizer.read_bytes(art, 250_000, 100_000)

    assert first.data + middle.data + end.data == data
    assert (first.next_offset, middle.next_offset, end.next_offset) == (100_000, 250_000, None)
    assert end.size == 300_000
    assert end.to_dict(encoding="base64")["length"] == 50_000


def test_byte_reads_past_the_end_or_too_large_are_refused(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    with pytest.raises(ArtifactReadError, match="past the end"):
        externalizer.read_bytes(artifact, artifact.byte_size, 10)
    with pytest.raises(ArtifactReadError):
        externalizer.read_bytes(artifact, -1, 10)
    with pytest.raises(ArtifactReadError):
        externalizer.read_bytes(artifact, 0, 0)
    with pytest.raises(ArtifactReadError, match="16 MiB"):
        externalizer.read_bytes(artifact, 0, 17 * MIB)


def test_binary_artifacts_are_read_by_bytes_not_lines(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(b"\x00\x01binary", "t").artifact

    with pytest.raises(ArtifactReadError, match="binary"):
        externalizer.read_lines(art)
    with pytest.raises(ArtifactReadError, match="binary"):
        externalizer.grep(art, "x")
    assert externalizer.read_bytes(art).data == b"\x00\x01binary"


# -- grep ----------------------------------------------------------------------------


def test_grep_returns_matching_lines_with_line_numbers(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    result = externalizer.grep(artifact, r"^line 4000\d$")

    assert [(m.line_no, m.text) for m in result.matches] == [
        (40_001 + i, f"line 4000{i}") for i in range(10)
    ]
    assert not result.truncated


def test_grep_shows_context_lines_around_each_match(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    result = externalizer.grep(artifact, "^line 500$", context=2)

    (match,) = result.matches
    assert match.line_no == 501
    assert match.before == ((499, "line 498"), (500, "line 499"))
    assert match.after == ((502, "line 501"), (503, "line 502"))
    assert result.render() == (
        "499-line 498\n500-line 499\n501:line 500\n502-line 501\n503-line 502"
    )


def test_grep_stops_at_max_matches_and_says_so(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    result = externalizer.grep(artifact, "line 7", max_matches=3)

    assert [m.line_no for m in result.matches] == [8, 71, 72]
    assert result.truncated
    assert "(stopped after 3 matches" in result.render()
    exact = externalizer.grep(artifact, "^line 99999$", max_matches=1)
    assert not exact.truncated


def test_grep_options_ignore_case_and_fixed_strings(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("a.b\naxb\nA.B\n", "t").artifact

    assert [m.line_no for m in externalizer.grep(art, "a.b").matches] == [1, 2]
    assert [m.line_no for m in externalizer.grep(art, "a.b", fixed=True).matches] == [1]
    assert [
        m.line_no for m in externalizer.grep(art, "a.b", fixed=True, ignore_case=True).matches
    ] == [1, 3]


def test_an_empty_pattern_match_never_invents_a_line_after_the_last_newline(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("a\n\nb\n", "t").artifact

    assert [m.line_no for m in externalizer.grep(art, "^$").matches] == [2]
    assert [m.line_no for m in externalizer.grep(art, "x*").matches] == [1, 2, 3]


@pytest.mark.parametrize(
    ("pattern", "context", "max_matches"),
    [("[", 0, 10), ("x", -1, 10), ("x", 51, 10), ("x", 0, 0), ("", 0, 10)],
)
def test_invalid_grep_requests_are_refused(
    externalizer: ToolResultExternalizer,
    artifact: ArtifactReference,
    pattern: str,
    context: int,
    max_matches: int,
) -> None:
    with pytest.raises(ArtifactReadError):
        externalizer.grep(artifact, pattern, context=context, max_matches=max_matches)


def _naive_grep(
    lines: list[str], pattern: str, context: int, max_matches: int
) -> list[tuple[int, str, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]]:
    """grep -n -C semantics: each line shown once; a match's after-context stops at the next
    reported match, and after the last one allowed it runs on regardless (as GNU grep -m)."""
    out: list[tuple[int, str, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]] = []
    last_shown = 0
    for no, line in enumerate(lines, 1):
        if no <= last_shown or not re.search(pattern, line):
            continue
        before = tuple((n, lines[n - 1]) for n in range(max(1, no - context), no))
        before = tuple(item for item in before if item[0] > last_shown)
        after: list[tuple[int, str]] = []
        for n in range(no + 1, min(no + context, len(lines)) + 1):
            if len(out) + 1 < max_matches and re.search(pattern, lines[n - 1]):
                break
            after.append((n, lines[n - 1]))
        out.append((no, line, before, tuple(after)))
        last_shown = after[-1][0] if after else no
        if len(out) >= max_matches:
            break
    return out


@pytest.mark.parametrize("seed", range(4))
def test_grep_agrees_with_a_line_by_line_search_across_1_mib_blocks(
    externalizer: ToolResultExternalizer, seed: int
) -> None:
    rnd = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < 2 * MIB + 5000:
        line = "".join(rnd.choice("abcdefgh ") for _ in range(rnd.choice([0, 3, 40, 120])))
        if rnd.random() < 0.002:
            line += " NEEDLE"
        lines.append(line)
        size += len(line) + 1
    # Put needles on the lines that straddle each 1 MiB block boundary and their neighbours.
    offset = 0
    for i, line in enumerate(lines):
        if any(offset <= k * MIB < offset + len(line) + 1 for k in (1, 2)):
            for j in range(max(0, i - 2), min(len(lines), i + 3)):
                if rnd.random() < 0.6:
                    lines[j] += " EDGE"
        offset += len(line) + 1
    text = "\n".join(lines) + ("\n" if seed % 2 else "")
    art = externalizer.externalize(text, "t").artifact

    cases = [("NEEDLE|EDGE", n) for n in (3, 10_000)] + [("EDGE", n) for n in (1, 2, 3)]
    for pattern, max_matches in cases:
        for context in (0, 1, 3):
            result = externalizer.grep(art, pattern, context=context, max_matches=max_matches)
            got = [(m.line_no, m.text, m.before, m.after) for m in result.matches]
            expected = _naive_grep(lines, pattern, context, max_matches)
            assert got == expected, (pattern, context, max_matches)


# -- integrity -----------------------------------------------------------------------


def _tamper_same_size(path: Path) -> None:
    """Change one byte in place and put the modification time back."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert os.stat(path).st_size == st.st_size


def test_a_tampered_artifact_is_refused_and_nothing_is_returned(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    with open(artifact.path, "ab") as f:
        f.write(b"injected\n")

    with pytest.raises(ArtifactIntegrityError, match="SHA-256 mismatch"):
        externalizer.read_artifact(artifact)
    with pytest.raises(ArtifactIntegrityError):
        externalizer.read_bytes(artifact)
    with pytest.raises(ArtifactIntegrityError):
        externalizer.grep(artifact, "line")


def test_a_same_size_tamper_with_restored_mtime_is_caught_after_a_cached_read(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    assert externalizer.read_artifact(artifact, 0, 1) == "line 0"  # verified and cached

    _tamper_same_size(artifact.path)

    with pytest.raises(ArtifactIntegrityError):
        externalizer.read_artifact(artifact, 0, 1)


def test_a_tamper_before_the_first_read_is_caught(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    _tamper_same_size(artifact.path)

    with pytest.raises(ArtifactIntegrityError):
        ArtifactReader(Session.at(externalizer.session_dir)).read_bytes(artifact.source_id, 0, 10)


def test_verify_rehashes_even_when_the_identity_is_cached(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    externalizer.read_artifact(artifact, 0, 1)

    assert externalizer.reader.verify(artifact.source_id) == artifact


def test_a_reference_whose_digest_differs_from_the_manifest_is_refused(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    forged = ArtifactReference(
        source=artifact.source,
        path=artifact.path,
        summary=artifact.summary,
        source_tool=artifact.source_tool,
        content_sha256=artifact.content_sha256[:12] + "0" * 52,
    )

    with pytest.raises(ArtifactIntegrityError):
        externalizer.read_artifact(forged)


# -- access --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source_id",
    [
        "artifact:s1:../manifest.jsonl:abcdef012345",
        "artifact:s1:tool_result_001.txt",
        "artifact:s1:/etc/passwd:abcdef012345",
        "/etc/passwd",
        "artifact:s1:tool_result_1.txt:abcdef012345",
    ],
)
def test_malformed_source_ids_are_access_errors(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference, source_id: str
) -> None:
    with pytest.raises(ArtifactAccessError):
        externalizer.read_artifact(source_id)


def test_an_artifact_of_another_session_is_refused(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    other = ToolResultExternalizer(tmp_path / "sessions" / "s2")
    foreign = other.externalize("theirs\n" * 10_000, "t").artifact

    with pytest.raises(ArtifactAccessError, match="belongs to session 's2'"):
        externalizer.read_artifact(foreign.source_id)
    with pytest.raises(ArtifactAccessError):
        externalizer.read_artifact(foreign)


def test_an_unknown_source_id_is_not_found(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    with pytest.raises(ArtifactNotFoundError, match="toolswap ls"):
        externalizer.read_artifact("artifact:s1:tool_result_002.txt:abcdef012345")
    wrong_digest = artifact.source_id[:-12] + "0" * 12
    with pytest.raises(ArtifactNotFoundError):
        externalizer.read_artifact(wrong_digest)


def test_a_missing_file_with_a_manifest_record_is_not_found(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    artifact.path.unlink()

    with pytest.raises(ArtifactNotFoundError, match="toolswap verify"):
        externalizer.read_artifact(artifact)


def test_an_artifact_replaced_by_a_symlink_is_refused_even_to_identical_bytes(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.txt"
    copy.write_bytes(artifact.path.read_bytes())
    artifact.path.unlink()
    artifact.path.symlink_to(copy)

    with pytest.raises(ArtifactAccessError, match="symlink"):
        externalizer.read_artifact(artifact)


def test_a_symlinked_tool_results_directory_is_refused_on_read(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference, tmp_path: Path
) -> None:
    moved = tmp_path / "moved"
    externalizer.tool_results_dir.rename(moved)
    externalizer.tool_results_dir.symlink_to(moved)

    with pytest.raises(ArtifactAccessError, match="symlink"):
        externalizer.read_artifact(artifact)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_non_regular_file_under_an_artifact_name_is_refused(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference, kind: str
) -> None:
    artifact.path.unlink()
    if kind == "fifo":
        os.mkfifo(artifact.path, 0o600)
    else:
        artifact.path.mkdir()

    with pytest.raises(ArtifactAccessError, match="not a regular file"):
        externalizer.read_artifact(artifact)


def test_a_collected_artifact_says_when_and_why_it_was_removed(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    with externalizer.session.lock():
        artifact.path.unlink()
        externalizer.manifest.append(
            CollectedRecord(
                filename=artifact.filename,
                source_id=artifact.source_id,
                collected_at="2026-01-03T00:00:00+00:00",
                reason="orphan TTL expired",
            )
        )

    with pytest.raises(
        ArtifactCollectedError,
        match=r"collected by cleanup at 2026-01-03T00:00:00\+00:00 \(orphan TTL expired\)",
    ):
        externalizer.read_artifact(artifact.source_id)
    with pytest.raises(ArtifactAccessError):
        ToolResultExternalizer(externalizer.session_dir).read_artifact(artifact.source_id)


def test_a_large_artifact_is_verified_and_indexed_in_one_pass(
    externalizer: ToolResultExternalizer,
) -> None:
    text = _text(1_000_000)  # about 7 MiB: hashed on a second thread while lines are counted
    art = externalizer.externalize(text, "t").artifact

    assert externalizer.read_artifact(art, 654_321, 2) == "line 654321\nline 654322"
    _tamper_same_size(art.path)
    with pytest.raises(ArtifactIntegrityError):
        externalizer.read_artifact(art, 0, 1)


def test_grep_numbers_lines_after_a_line_longer_than_a_read_block(
    externalizer: ToolResultExternalizer,
) -> None:
    text = "first\n" + "x" * (9 * MIB) + " needle inside\nneedle after\nlast\n"
    art = externalizer.externalize(text, "t").artifact

    result = externalizer.grep(art, "needle", context=1)

    assert [m.line_no for m in result.matches] == [2, 3]
    long = result.matches[0]
    assert long.text.endswith(" needle inside")  # a window around the match, to the line's end
    assert long.text.startswith(f"⟨from byte {long.text_start}⟩ x")
    assert long.line_start == 6 and long.after == ()  # line 3 is shown as a match
    window = long.text.removeprefix(f"⟨from byte {long.text_start}⟩ ")
    assert externalizer.read_bytes(art, long.text_start, len(window)).text() == window
    assert result.matches[1].before == ()
    assert result.matches[1].after == ((4, "last"),)


def test_an_offset_at_or_past_the_line_count_is_refused_as_documented(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    assert artifact.line_count == 100_000
    assert externalizer.read_lines(artifact, 99_999, 5).lines[0] == "line 99999"

    with pytest.raises(ArtifactReadError, match=r"offset 100000 is past the end.*0-99999"):
        externalizer.read_lines(artifact, 100_000, 5)
    empty = externalizer.externalize("", "t").artifact
    assert externalizer.read_lines(empty, 0, 5).lines == ("",)


def test_a_byte_range_says_which_line_it_starts_in(
    externalizer: ToolResultExternalizer, artifact: ArtifactReference
) -> None:
    text = _text(100_000).encode()
    for line in (1, 2, 40_001, 99_999, 100_000):
        start = text.index(b"line %d\n" % (line - 1))
        for byte in (start, start + 3):
            assert externalizer.read_bytes(artifact, byte, 4).line_no == line


def test_an_unknown_grep_option_is_refused_with_the_known_ones(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize(b"a\nb\n", "t").artifact
    with pytest.raises(InvalidArgumentError, match=r"unknown argument\(s\) contxt; grep's"):
        externalizer.grep(art, "a", contxt=2)  # type: ignore[call-arg]
