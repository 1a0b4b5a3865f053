"""msgspec decodes structured output where it takes the text, json where it does not: the
outline is the same either way, whatever the numbers and strings in it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from toolswap.structured import _decode
from toolswap.structured.detect import Format
from toolswap.structured.outline import outline

# What json takes and msgspec refuses: NaN, a number past a double's range, a lone
# surrogate; and what both take: an integer past 64 bits, a duplicate key.
AWKWARD = [
    '{"id": 1, "status": "ok", "score": NaN}',
    '{"id": 2, "status": "ok", "score": 1.5e400}',
    '{"id": 3, "status": "ok", "name": "\\ud800"}',
    '{"id": 4, "status": "ok", "big": 123456789012345678901234567890}',
    '{"id": 5, "status": "failed", "id": 6}',
]


def _records(count: int, extra: list[str]) -> list[str]:
    plain = [
        json.dumps({"id": i, "status": "ok", "tags": ["a", "b"], "price": i / 3})
        for i in range(count)
    ]
    return plain[: count // 2] + extra + plain[count // 2 :]


def _outline(fmt: Format, data: bytes) -> tuple[str, int]:
    found = outline(fmt, lambda count, offset: data[offset : offset + count], len(data))
    assert found is not None
    return found.text, found.records


@pytest.fixture
def without_msgspec(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec raises ImportError
    monkeypatch.setattr(_decode, "_msgspec_decode", [])
    yield


def _documents(extra: list[str]) -> list[tuple[Format, bytes]]:
    lines = _records(3000, extra)
    return [
        ("json", ("[" + ",\n".join(lines) + "]").encode()),
        ("jsonl", "\n".join(lines).encode() + b"\n"),
    ]


@pytest.mark.parametrize("extra", [[], AWKWARD], ids=["plain", "awkward"])
def test_the_outline_is_the_same_with_or_without_msgspec(
    extra: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("msgspec")
    with_it = [_outline(fmt, data) for fmt, data in _documents(extra)]
    monkeypatch.setitem(sys.modules, "msgspec", None)
    monkeypatch.setattr(_decode, "_msgspec_decode", [])
    without = [_outline(fmt, data) for fmt, data in _documents(extra)]
    assert with_it == without
    assert all(records == 3000 + len(extra) for _, records in with_it)
    if extra:
        assert all('"id":6' in text or "failed" in text for text, _ in with_it)


def test_loads_gives_json_s_values_where_msgspec_refuses_the_text() -> None:
    pytest.importorskip("msgspec")
    for text in AWKWARD:
        expected = json.loads(text)
        got = _decode.loads(text.encode())
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    with pytest.raises(ValueError):
        _decode.loads(b"{not json")


def test_loads_works_without_msgspec(without_msgspec: None) -> None:
    assert _decode.loads(b'[1, {"a": NaN}]')[0] == 1  # type: ignore[index]


def test_an_array_of_many_small_elements_is_not_split_whole() -> None:
    """Each element split out costs a handle of about 50 bytes: an array with too many
    commas is read through the sliding window instead (bounded memory), with the same
    outline."""
    pytest.importorskip("msgspec")
    from toolswap.structured._fast_path import _Accumulator
    from toolswap.structured._read_json import _WHOLE_ELEMENTS, _split_whole_array

    dense = ("[" + ",".join(["0"] * (_WHOLE_ELEMENTS + 1)) + "]").encode()
    sparse = ("[" + ",".join(['{"a": "' + "x" * 40 + '"}'] * 1000) + "]").encode()
    for data, split in ((dense, False), (sparse, True)):
        acc = _Accumulator()
        read = lambda count, offset, data=data: data[offset : offset + count]  # noqa: E731
        assert _split_whole_array(read, acc, size=len(data)) is split
    text, records = _outline("json", dense)
    assert records == _WHOLE_ELEMENTS + 1
    assert f"{_WHOLE_ELEMENTS + 1:,}" in text


def _json_array(records: list[str]) -> bytes:
    return ("[" + ",".join(records) + "]").encode()


def test_a_record_is_too_large_to_walk_by_its_characters_not_its_bytes() -> None:
    """700,000 two-byte characters (1.4 MB of UTF-8) are under the 1 Mi-character bound:
    the record is walked, its field named, as the sliding window always did."""
    records = [json.dumps({"id": i, "status": "ok"}) for i in range(6)]
    records.insert(3, json.dumps({"id": 99, "s": "é" * 700_000}, ensure_ascii=False))
    text, count = _outline("json", _json_array(records))
    assert count == 7
    assert ".[].s" in text
    assert "too large" not in text


@pytest.mark.parametrize(
    "bad", [b"\xed\xa0\x80", b"\xff"], ids=["an encoded surrogate", "not UTF-8 at all"]
)
@pytest.mark.parametrize("big", [False, True], ids=["small record", "record over 1 MiB"])
def test_bytes_that_are_not_utf8_keep_the_document_text(bad: bytes, big: bool) -> None:
    records = [json.dumps({"id": i, "status": "ok"}).encode() for i in range(40)]
    filler = b"x" * (1 << 20) if big else b""
    records[20] = b'{"id": 20, "status": "o' + bad + filler + b'k"}'
    data = b"[" + b",".join(records) + b"]"
    found = outline("json", lambda count, offset: data[offset : offset + count], len(data))
    assert found is None


def test_the_last_json_line_counts_without_a_trailing_newline() -> None:
    lines = [json.dumps({"id": i, "status": "ok"}) for i in range(30)]
    for data in ("\n".join(lines).encode(), "\n".join(lines).encode() + b"\n"):
        text, count = _outline("jsonl", data)
        assert count == 30
        assert "30 records" in text
