"""Hypothesis properties: exact round trips, bounded pointers, non-overlapping previews."""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolswap import ExternalizerSettings, ToolResultExternalizer, parse_artifact_source_id
from toolswap.artifact import artifact_filename, format_source_id
from toolswap.capture import StreamCapture
from toolswap.pointer import _cut

POINTER_MAX = 32 * 1024
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@contextmanager
def _session(**overrides: int) -> Iterator[ToolResultExternalizer]:
    with tempfile.TemporaryDirectory() as tmp:
        yield ToolResultExternalizer(Path(tmp) / "s1", settings=ExternalizerSettings(**overrides))


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@PROPERTY
@given(data=st.binary(max_size=300_000), cuts=st.lists(st.integers(0, 1 << 20), max_size=8))
def test_any_bytes_round_trip_exactly(data: bytes, cuts: list[int]) -> None:
    with _session() as ext:
        result = ext.externalize(_chunked(data, cuts), "tool")
        art = result.artifact

        assert art.path.read_bytes() == data
        assert art.content_sha256 == hashlib.sha256(data).hexdigest()
        assert art.byte_size == len(data)
        assert parse_artifact_source_id(art.source_id).digest_prefix == art.content_sha256[:12]
        if data:
            read = ext.read_bytes(art.source_id, 0, len(data))
            assert read.data == data
            assert read.next_offset is None


@PROPERTY
@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=3_000))
def test_any_text_without_nul_pages_back_as_the_spec_splits_it(text: str) -> None:
    with _session() as ext:
        art = ext.externalize(text, "bash").artifact
        lines: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = ext.read_lines(art, offset, 7, width=10_000)
            lines.extend(page.lines)
            offset = page.next_offset

        assert lines == text.split("\n")
        assert art.char_count == len(text)
        assert not art.binary
        ends_open = text != "" and not text.endswith("\n")
        assert art.line_count == text.count("\n") + ends_open


_line = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=120
) | st.sampled_from(["error: boom", "Traceback (most recent call last):", "FAILED x", ""])


@PROPERTY
@given(
    lines=st.lists(_line, min_size=1, max_size=40),
    repeat=st.integers(1, 600),
    head=st.integers(0, 16_000),
    tail=st.integers(0, 15_000),
    salient=st.integers(0, 40_000),
    trailing=st.booleans(),
)
def test_the_pointer_is_bounded_whatever_the_output_and_settings(
    lines: list[str], repeat: int, head: int, tail: int, salient: int, trailing: bool
) -> None:
    text = "\n".join(lines * repeat) + ("\n" if trailing else "")
    with _session(head_bytes=head, tail_bytes=tail, salient_bytes=salient) as ext:
        result = ext.externalize(text, "tool")

        assert len(result.context_text.encode()) <= POINTER_MAX
        assert result.context_text.startswith(f"[Artifact: {result.artifact.source_id}]\n")
        assert "\ufffd" not in result.context_text or "\ufffd" in text


@PROPERTY
@given(
    data=st.one_of(
        st.text(max_size=4_000).map(str.encode),
        st.lists(_line, max_size=200).map(lambda ls: "\n".join(ls).encode()),
        st.binary(max_size=4_000),
    ),
    head=st.integers(0, 2_000),
    tail=st.integers(0, 2_000),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=5),
)
def test_head_and_tail_never_overlap_and_never_split_utf8(
    data: bytes, head: int, tail: int, cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            capture = StreamCapture(fd, head_keep=head + 8, tail_keep=tail, scan_limit=1 << 20)
            for chunk in _chunked(data, cuts):
                capture.write(chunk)
            stats = capture.finish()
            capture.discard()
        finally:
            os.close(fd)

    cut = _cut(stats, head, tail)

    assert cut.head == data[: cut.head_end]
    assert cut.tail == data[cut.tail_start :] or not cut.tail
    assert cut.head_end <= cut.tail_start or not cut.tail
    assert len(cut.head) <= head
    assert len(cut.tail) <= tail
    if not stats.binary:
        cut.head.decode("utf-8")  # strict: no cut inside a sequence
        cut.tail.decode("utf-8")


@settings(max_examples=200, deadline=None)
@given(
    session=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", fullmatch=True).filter(
        lambda s: ".." not in s
    ),
    number=st.integers(1, 10**7),
    digest=st.binary(min_size=1, max_size=64).map(lambda b: hashlib.sha256(b).hexdigest()),
)
def test_source_ids_round_trip_through_the_strict_parser(
    session: str, number: int, digest: str
) -> None:
    source_id = format_source_id(session, artifact_filename(number), digest)
    parsed = parse_artifact_source_id(source_id)

    assert (parsed.session, parsed.number, parsed.digest_prefix) == (session, number, digest[:12])
    assert str(parsed) == source_id


_FRAGMENTS = st.sampled_from(
    [
        b"error",
        b"Error:",
        b" ",
        b"  ",
        b"\t",
        b"0x1f3a",
        b"0xdeadbeef",
        b"deadbee",
        b"abcdef12",
        b"1234567",
        b"12",
        b"3.14",
        b"10:20:30",
        b"1,000",
        b"/usr/lib/x86_64/libc.so.6",
        b"src/mod_9.py:42:7",
        b"./a-b~c",
        b"'quoted 5 here'",
        b'"double 77"',
        b"\xe2\x80\x98curly 8\xe2\x80\x99",
        b"\x1b[31m",
        b"\x1b[0m",
        b"2026-01-02T03:04:05.678Z ",
        b"2026-01-02 03:04:05,6 ",
        b"v2",
        b"item-3",
        b"a_b9",
        b"@",
        b"+",
        b"(",
        b")",
        b"=",
        b"-",
        b".",
        b"~",
    ]
)


@PROPERTY
@given(
    st.lists(st.one_of(_FRAGMENTS, st.binary(max_size=6)), max_size=40),
    st.integers(min_value=1, max_value=9),
)
def test_a_template_is_the_line_masked_whatever_its_nonzero_digits(
    parts: list[bytes], digit: int
) -> None:
    """Lines that differ only in their digits from 1 to 9 share a template (computed once,
    by a mask without the path patterns when there is no slash): the same as masking each
    line itself with the whole mask."""
    from toolswap.salience.display import ANSI_BYTES, TIMESTAMP_BYTES
    from toolswap.salience.vocabulary import _MASK, _TEMPLATE_BYTES, ASCII_LOWER, template

    def masked(raw: bytes) -> bytes:
        text = ANSI_BYTES.sub(b"", raw[:_TEMPLATE_BYTES])
        text = TIMESTAMP_BYTES.sub(b"", text)
        return _MASK.sub(b"*", text.translate(ASCII_LOWER)).strip()

    line = b"".join(parts)
    other = line.translate(bytes.maketrans(b"123456789", bytes([48 + digit]) * 9))
    assert template(line) == masked(line)
    assert template(other) == masked(other) == template(line)
