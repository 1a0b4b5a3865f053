"""The two readers of a JSON object document agree: msgspec's pass over raw members
(``_read_tree``, a whole document) builds the outline the event pass (``_read_json``, ijson's
events, for a document read in part) builds, decision for decision; and where the event
pass guessed (members after a long collection), the pass over raw members is exact."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolswap.structured import _read_json
from toolswap.structured._read_tree import _Fallback
from toolswap.structured.outline import Outline, outline

pytest.importorskip("msgspec")


def _outline(data: bytes) -> Outline | None:
    return outline("json", lambda count, offset: data[offset : offset + count], len(data))


def _by_events(data: bytes, monkeypatch: pytest.MonkeyPatch) -> Outline | None:
    """The outline the event pass builds, reading every record from the events (no switch
    to ijson's items, which reads the members after a long collection from the tail)."""
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        patch.setattr(_read_json, "_SWITCH_AFTER", 1 << 30)
        return _outline(data)


def _by_tree(data: bytes, monkeypatch: pytest.MonkeyPatch, *, taken: bool = True) -> Outline | None:
    """The outline with the pass over raw members; ``taken``: that pass read the document
    to its end (else it handed it to the event pass)."""
    ends: list[str] = []
    scan = _read_json._scan_tree  # type: ignore[attr-defined]

    def watched(*args: Any) -> object:
        try:
            root = scan(*args)
        except _Fallback:
            ends.append("handed over")
            raise
        ends.append("read")
        return root

    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_scan_tree", watched)
        found = _outline(data)
    assert ends == (["read"] if taken else ["handed over"])
    return found


# Keys as JSON outputs have them: fields, names (packages, paths), and sign-bearing ones.
_KEYS = st.sampled_from(
    ["id", "name", "version", "status", "error", "items", "left-pad", "@s/p", "/a/b", "x y"]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([1.5, -0.25]),
    st.sampled_from(["ok", "failed", "ELSPROBLEMS", "", "é"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=24), st.dictionaries(_KEYS, inner, max_size=12)
    ),
    max_leaves=80,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=12))
def test_the_pass_over_raw_members_builds_the_event_pass_s_outline(
    doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.dumps(doc).encode()
    assert _by_tree(data, monkeypatch) == _by_events(data, monkeypatch)


def _names_map(count: int) -> dict[str, object]:
    return {
        (f"@scope/pkg-{i}" if i % 2 else f"pkg-{i}"): {
            "version": f"1.{i}.0",
            "dependencies": {f"dep-{j}": {"version": "2.0.0"} for j in range(i % 3)},
        }
        for i in range(count)
    }


@pytest.mark.parametrize("count", [1, 2, 3, 70, 300])
def test_a_map_of_names_is_read_alike_however_long(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {"version": "1.0.0", "dependencies": _names_map(count), "problems": ["x"] * 3}
    data = json.dumps(doc, indent=2).encode()
    assert _by_tree(data, monkeypatch) == _by_events(data, monkeypatch)


@pytest.mark.parametrize("entries", [2, 5])
def test_an_object_past_the_envelope_s_room_is_not_shown_in_it(
    entries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The envelope keeps an object's first 60 members. An object keyed by names past them
    is a collection if its names show before its end (from its third member on); at its
    end, only an object the envelope kept becomes one. Both passes decide alike."""
    doc: dict[str, object] = {f"field{i}": i for i in range(64)}
    doc["deps"] = _names_map(entries)
    doc["more"] = [{"id": i} for i in range(3)]
    data = json.dumps(doc).encode()
    found = _by_tree(data, monkeypatch)
    assert found == _by_events(data, monkeypatch)
    assert found is not None
    envelope = found.text.splitlines()[1]
    assert '"field59": 59' in envelope and '"deps"' not in envelope
    assert (".deps{}: 5 entries" in found.text) is (entries == 5)
    assert (".deps{}" in found.text) is (entries == 5)


def test_the_members_after_a_long_collection_are_read_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """npm's ``error`` after its map of names, a nested object after a long array: the
    event pass, switched to ijson's items, found root members by the tail's last brackets
    and lost nested ones; the pass over raw members reads every member."""
    doc = {
        "items": [{"id": i, "status": "ok"} for i in range(300)],
        "meta": {"later": [{"n": i} for i in range(40)], "page": 2},
        "dependencies": _names_map(120),
        "error": {"code": "ELSPROBLEMS", "summary": "invalid: left-pad@1.0.0"},
    }
    data = json.dumps(doc, indent=2).encode()
    found = _by_tree(data, monkeypatch)
    assert found is not None
    assert found == _by_events(data, monkeypatch)  # every record from the events alike
    assert '"error": {"code": "ELSPROBLEMS"' in found.text
    assert ".meta.later[]: 40 objects" in found.text
    assert '"page": 2' in found.text
    assert found.records == 300 + 40 + 120


def _deep_record(events: int) -> dict[str, object]:
    return {"id": 0, "values": list(range(events))}


@pytest.mark.parametrize("where", ["array", "names"])
def test_a_record_of_too_many_events_is_counted_not_walked(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = _deep_record(25_000)
    if where == "array":
        doc: dict[str, object] = {"items": [{"id": 1}, big, {"id": 2}]}
    else:
        doc = {"deps": {"a-b": {"id": 1}, "c-d": {"id": 2}, "e-f": big, "g-h": {"id": 3}}}
    data = json.dumps(doc).encode()
    found = _by_tree(data, monkeypatch)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert "too large" in found.text
    assert "values" not in found.text


def test_a_record_at_the_event_bound_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,001 events is the most a record may have: 2 for the object, 2 keys, the id,
    2 for the array and its elements."""
    for events, walked in ((20_001, True), (20_002, False)):
        doc = {"items": [{"id": 1}, _deep_record(events - 7), {"id": 2}]}
        data = json.dumps(doc).encode()
        found = _by_tree(data, monkeypatch)
        assert found is not None
        assert found == _by_events(data, monkeypatch)
        assert ("values" in found.text) is walked


def test_a_record_of_many_bytes_and_many_events_is_never_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record of 1.9 MB and 150,000 events is counted from its raw bytes: nothing of it
    is built (built, it takes more than 6 times its size)."""
    big = {"id": 0, "values": [f"v{i:08d}" for i in range(150_000)]}
    data = json.dumps({"items": [{"id": 1}, big, {"id": 2}]}).encode()
    tracemalloc.start()
    try:
        found = _by_tree(data, monkeypatch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found is not None and "too large" in found.text
    assert peak < 3 * len(data)


def test_a_record_of_many_bytes_but_few_events_is_walked() -> None:
    doc = {"items": [{"id": 1}, {"id": 2, "text": "x" * (2 << 20)}, {"id": 3}]}
    found = _outline(json.dumps(doc).encode())
    assert found is not None
    assert ".items[].text" in found.text
    assert "too large" not in found.text


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xef\xbb\xbf" + json.dumps({"a": [1, 2, 3]}).encode(), id="a BOM"),
        pytest.param(
            json.dumps({"items": [{"v": i} for i in range(30)]}).encode()
            + b"\n"
            + json.dumps({"b": 1}).encode(),
            id="two documents",
        ),
        pytest.param(
            ('{"a": ' * 250 + json.dumps([{"id": i} for i in range(20)]) + "}" * 250).encode(),
            id="an envelope 250 objects deep",
        ),
    ],
)
def test_a_document_the_pass_over_raw_members_refuses_gets_the_event_pass_s_outline(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _by_tree(data, monkeypatch, taken=False) == _by_events(data, monkeypatch)


@pytest.mark.parametrize("bad", [b"\xed\xa0\x80", b"\xff"])
def test_bytes_that_are_not_utf8_in_a_record_never_walked_keep_the_document_text(
    bad: bytes,
) -> None:
    big = json.dumps(_deep_record(25_000)).encode()[:-1] + b', "s": "' + bad + b'"}'
    data = b'{"items": [{"id": 1}, ' + big + b', {"id": 2}]}'
    assert _outline(data) is None
