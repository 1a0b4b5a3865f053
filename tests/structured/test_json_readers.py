"""The two readers of a JSON object document agree: msgspec's pass over raw members
(``_read_tree``, a whole document) builds the outline the event pass (``_read_json``, ijson's
events, for a document read in part) builds, decision for decision; and where the event
pass guessed (members after a long collection), the pass over raw members is exact."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolswap.structured import _read_json, _read_tree, _render, _tail_members
from toolswap.structured._envelope import _Summary
from toolswap.structured._fast_path import _Accumulator
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


def _by_tree(
    data: bytes, monkeypatch: pytest.MonkeyPatch, *, taken: bool = True, reread: bool = False
) -> Outline | None:
    """The outline with the pass over raw members; ``taken``: that pass read the document
    to its end (else it handed it to the event pass); ``reread``: it reads again the
    entries of a map of names read as envelope (as it does by default; off, its outline is
    the event pass's)."""
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
        patch.setattr(_read_tree, "REREAD_ENTRIES", reread)
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
    events = _by_events(data, monkeypatch)
    assert _by_tree(data, monkeypatch) == events
    # Reading again the entries of a map of names changes its records, not the counts.
    reread = _by_tree(data, monkeypatch, reread=True)
    assert (reread is None) == (events is None)
    if reread is not None and events is not None:
        assert (reread.records, reread.complete) == (events.records, events.complete)
        assert reread.text.splitlines()[0] == events.text.splitlines()[0]
        if _UNSHOWN not in events.text:
            assert reread == events


_UNSHOWN = "the outline does not show: query the artifact)"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=12))
def test_the_passes_agree_on_wrappers(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """With a record's events bounded at 12, many of these small arrays are wrappers (an
    object past the bound among at most eight elements), nested in one another and in maps
    of names: both passes find the same ones and build the same outline."""
    data = json.dumps(doc).encode()
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "RECORD_EVENTS", 12)
        patch.setattr(_read_tree, "RECORD_EVENTS", 12)
        events = _by_events(data, monkeypatch)
        assert _by_tree(data, monkeypatch) == events


def test_the_arrays_in_the_entries_of_a_map_of_names_are_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An object keyed by paths, each an array of diagnostics: the arrays of its first
    entries were read as collections of their own before its keys said it was a map, then
    dropped, and with them the one error in them (found by a review). The pass over raw
    members reads those entries again; the event pass says what it does not show."""
    doc = {
        f"src/mod_{f}.py": [{"line": n, "severity": "info"} for n in range(50)] for f in range(10)
    }
    doc["src/mod_0.py"][33] = {"line": 33, "severity": "error", "message": "undefined name"}
    data = json.dumps(doc).encode()
    tree = _by_tree(data, monkeypatch, reread=True)
    assert tree is not None
    assert ".[][]  object  500 items" in tree.text
    assert '"error" ×1' in tree.text and '.["src/mod_0.py"]: [' in tree.text
    assert "<- severity=error" in tree.text
    events = _by_events(data, monkeypatch)
    assert events is not None and ".[][]  object  400 items" in events.text
    assert "hold 100 elements " + _UNSHOWN in events.text
    tests = {
        "passed-tests": [{"name": f"t{i}", "status": "passed"} for i in range(200)],
        "failed-tests": [{"name": "test_login", "status": "failed", "error": "AssertionError"}],
    }
    found = _by_tree(json.dumps(tests).encode(), monkeypatch, reread=True)
    assert found is not None and "test_login" in found.text and "status=failed" in found.text


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


def test_an_object_freed_by_the_event_pass_leaves_no_count_to_a_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event pass counted members by ``id(object)``; an object it did not keep was
    freed and its id reused, so a later map of names inherited its count and was never
    collapsed (found by review)."""
    doc: dict[str, object] = {f"f{i}": i for i in range(60)}
    doc["x"] = {"a": 1, "b": 2, "c": 3}
    doc["w0"] = {"q": 1}
    doc["y"] = {f"n-{i}": {"v": list(range(i))} for i in range(1, 5)}
    data = json.dumps(doc).encode()
    found = _by_events(data, monkeypatch)
    assert found == _by_tree(data, monkeypatch)
    assert found is not None and ".y{}: 4 entries" in found.text


def _random_value(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice([None, True, 0, 7, 1.5, "ok", "failed", "é", ""])
    if roll < 0.75:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return _random_object(rng, depth + 1, rng.randrange(6))


def _random_object(rng: random.Random, depth: int, members: int) -> dict[str, object]:
    keys = ["id", "name", "status", "error", "left-pad", "@s/p", "a.b", "", "x y"]
    out: dict[str, object] = {}
    for i in range(members):
        key = rng.choice(keys) + (str(i) if rng.random() < 0.7 else "")
        roll = rng.random()
        if roll < 0.1:  # a long collection: past the sample, in batches
            out[key] = [
                {"id": j, "status": rng.choice(["ok", "ok", "failed"])}
                for j in range(rng.randrange(150, 700))
            ]
        elif roll < 0.2:  # a map of names, of 1 to 300 entries
            out[key] = {f"pkg-{j}": {"version": f"1.{j}"} for j in range(rng.randrange(1, 300))}
        else:
            out[key] = _random_value(rng, depth)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_documents_past_the_envelope_s_room_and_the_sample_are_read_alike(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    data = json.dumps(_random_object(rng, 0, rng.randrange(50, 80))).encode()
    assert _by_tree(data, monkeypatch) == _by_events(data, monkeypatch)


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


def test_members_after_a_long_collection_below_the_root_are_said_to_be_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the switch to ijson's items, only the root object's members after the
    collection are read (from the document's last bytes): those of a collection deeper down
    were dropped without a word (found by a review); the outline says they are missing."""
    doc = {
        "result": {
            "items": [{"id": i, "v": i % 7} for i in range(300)],
            "errors": [{"id": 5, "error": "disk full"}],
        }
    }
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)  # the event pass, and its switch
        found = _outline(json.dumps(doc).encode())
    assert found is not None
    assert "(any members after .result.items are not shown: query the artifact)" in found.text


def _deep_record(events: int) -> dict[str, object]:
    return {"id": 0, "values": list(range(events))}


def _among(big: dict[str, object]) -> dict[str, object]:
    """``big`` as the second of ten records: more than a wrapper's elements."""
    return {"items": [{"id": 1}, big, *({"id": n} for n in range(2, 10))]}


@pytest.mark.parametrize("where", ["array", "names"])
def test_a_record_of_too_many_events_is_counted_not_walked(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = _deep_record(25_000)
    if where == "array":
        doc: dict[str, object] = _among(big)
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
        doc = _among(_deep_record(events - 7))
        data = json.dumps(doc).encode()
        found = _by_tree(data, monkeypatch)
        assert found is not None
        assert found == _by_events(data, monkeypatch)
        assert ("values" in found.text) is walked


def _peak_by_tree(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[Outline | None, int]:
    """The outline of the pass over raw members, and the most memory it held (traced)."""
    tracemalloc.start()
    try:
        found = _by_tree(data, monkeypatch)
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_record_of_many_bytes_and_many_events_is_never_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record of 1.9 MB and 150,000 events is counted from its raw bytes: nothing of it
    is built (built, it takes more than 6 times its size)."""
    big = {"id": 0, "values": [f"v{i:08d}" for i in range(150_000)]}
    data = json.dumps(_among(big)).encode()
    found, peak = _peak_by_tree(data, monkeypatch)
    assert found is not None and "too large" in found.text
    assert peak < 3 * len(data)


def test_a_document_that_is_not_ascii_is_checked_in_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One emoji in 3.9 MB (under the 4 MiB parsed whole): the whole checked as one str
    would take four times its size."""
    records = [{"id": i, "name": f"item-{i:06d}", "note": "x" * 40} for i in range(44_000)]
    records[22_000]["note"] = "\U0001f600"
    data = json.dumps({"items": records}, ensure_ascii=False).encode()
    found, peak = _peak_by_tree(data, monkeypatch)
    assert found is not None and found.records == 44_000
    assert peak < 2.5 * len(data)


def test_a_record_of_many_bytes_but_few_events_is_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = {"items": [{"id": 1}, {"id": 2, "text": "x" * (2 << 20)}, {"id": 3}]}
    found = _by_tree(json.dumps(doc).encode(), monkeypatch)
    assert found is not None
    assert ".items[].text" in found.text
    assert "too large" not in found.text


@pytest.mark.parametrize("big", [False, True], ids=["small record", "record over 1 MiB"])
def test_an_integer_of_more_digits_than_python_reads_gives_no_outline_and_no_error(
    big: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read again with numbers exact, ijson builds a Python int, which stops past 4,300
    digits with a SystemError: it escaped the outline (a review). The event pass gives no
    outline; a record of more than 1 MiB is counted as too large, as before."""
    text = ', "text": "' + "x" * ((1 << 20) + 10) + '"' if big else ""
    records = [json.dumps({"id": i}) for i in range(30)]
    records[5] = '{"id": 5, "n": ' + "7" * 5000 + text + "}"
    data = ('{"items": [' + ", ".join(records) + "]}").encode()
    if big:
        found = _outline(data)
        assert found is not None and found.records == 30 and "too large" in found.text
    monkeypatch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
    assert _outline(data) is None


_CRASH_CHECK = """
import faulthandler, json, sys
faulthandler.enable()
from toolswap.structured.outline import outline
items = [json.dumps({"id": i}) for i in range(300_000)]
items[200_000] = '{"id": 0, "n": ' + "7" * 5000 + '}'
data = ('{"items": [' + ", ".join(items) + ']}').encode()
found = outline("json", lambda count, at: data[at : at + count], len(data))
print("outline", None if found is None else found.records)
"""


def test_a_number_past_python_s_digits_is_never_read_exactly() -> None:
    """Read exactly, ijson's C backend leaves ``int``'s error at 4,300 digits pending and
    calls on into Python: this document crashed the process (a review). A document with
    such a run of digits is not read again; it stays as the first read left it (here: not
    JSON to yajl, so no outline). (In a child process: a crash fails the test alone.)"""
    done = subprocess.run(
        [sys.executable, "-c", _CRASH_CHECK], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "outline None"


def test_a_cut_document_with_a_number_past_python_s_digits_keeps_its_part() -> None:
    """The records before the number are outlined, as before the exact read (a review:
    a first fix gave no outline at all)."""
    items = [json.dumps({"id": i, "name": "n" * 60}) for i in range(100_000)]
    items[100] = '{"id": 0, "n": ' + "7" * 5000 + "}"
    data = ('{"items": [' + ", ".join(items) + "]}").encode()
    found = outline("json", lambda count, at: data[at : at + count], len(data))
    assert found is not None and not found.complete and found.records == 100


def test_a_record_of_many_bytes_with_an_integer_past_64_bits_is_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its events are counted by ijson before it is built; ijson stopped at the integer
    (reading numbers as floats), so the record was counted as too large, not walked."""
    doc = {"items": [{"id": 1}, {"id": 2**70, "text": "x" * (2 << 20)}, {"id": 3}]}
    found = _by_tree(json.dumps(doc).encode(), monkeypatch)
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
    """(The event pass switches to ijson's items past a collection's first records; below
    the root it then cannot read the members after it, and says so.)"""
    found = _by_tree(data, monkeypatch, taken=False)
    events = _by_events(data, monkeypatch)
    if found is None or events is None:
        assert found == events
        return
    lines = [line for line in found.text.splitlines() if not line.startswith("(any members")]
    assert "\n".join(lines) + "\n" == events.text
    assert dataclasses.replace(found, text=events.text) == events


@pytest.mark.parametrize("bad", [b"\xed\xa0\x80", b"\xff"])
def test_bytes_that_are_not_utf8_in_a_record_never_built_keep_the_document_text(
    bad: bytes,
) -> None:
    """A record of more than 1 MiB and 20,001 events is counted from its bytes, never
    decoded: its bytes past the count are checked for UTF-8 all the same."""
    values = ",".join(f'"v{i:08d}"' for i in range(150_000))
    big = b'{"id": 0, "values": [' + values.encode() + b'], "s": "' + bad + b'"}'
    data = b'{"items": [{"id": 1}, ' + big + b', {"id": 2}]}'
    assert _outline(data) is None
    assert _outline(data.replace(bad, b"ok")) is not None


@pytest.mark.parametrize("number", [b"18446744073709551616", b"-9223372036854775809", b"1e400"])
@pytest.mark.parametrize("big", [False, True], ids=["small record", "record over 1 MiB"])
def test_a_number_yajl_refuses_is_read_as_json_reads_it(number: bytes, big: bool) -> None:
    """The event pass (yajl) ends at an integer past 64 bits or 1e400; the pass over raw
    members reads it as json does, and a record over 1 MiB holding one, whose events yajl
    counts first, is counted again with numbers read exactly, and walked (it was counted as
    too large)."""
    text = b', "text": "' + b"x" * ((1 << 20) + 10) + b'"' if big else b""
    data = b'{"items": [{"id": 1}, {"id": 2, "n": ' + number + text + b'}, {"id": 3}]}'
    found = _outline(data)
    assert found is not None and found.records == 3
    assert "too large" not in found.text
    assert ".items[].n" in found.text


def test_a_record_nested_600_deep_gives_no_outline_and_no_error() -> None:
    data = b'{"items": [{"id": 1}, ' + b"[" * 600 + b"1" + b"]" * 600 + b', {"id": 2}]}'
    assert _outline(data) is None


def _traced(data: bytes) -> tuple[Outline | None, int]:
    """The outline of ``data``, and the most memory it held (traced)."""
    tracemalloc.start()
    try:
        return _outline(data), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_objects_nested_20000_deep_give_no_outline_in_bounded_memory() -> None:
    """Past the tree pass's depth the event pass reads the envelope, whose every level
    holds its path: 120 KB of ``{"a":`` took 790 MiB (traced: hundreds of MiB) and seconds
    before the depth was bounded."""
    found, peak = _traced(b'{"a":' * 20_000 + b"1" + b"}" * 20_000)
    assert found is None and peak < 16 << 20


def test_a_json_lines_record_nested_too_deep_to_walk_gives_no_outline() -> None:
    deep = '{"a":[' * 495 + "1" + "]}" * 495
    lines = [deep] * 3 + [json.dumps({"id": i}) for i in range(5)]
    data = ("\n".join(lines) + "\n").encode()
    assert outline("jsonl", lambda count, offset: data[offset : offset + count], len(data)) is None


def test_a_table_cell_past_the_csv_module_s_limit_gives_no_outline() -> None:
    rows = ["name,size,status"] + [f"pkg{i},{i},ok" for i in range(750)]
    rows.append("big," + "x" * 200_000 + ",ok")
    data = ("\n".join(rows) + "\n").encode()
    assert outline("csv", lambda count, offset: data[offset : offset + count], len(data)) is None


def _cut_outlines(
    data: bytes, limit: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Outline | None, Outline | None, list[int | None]]:
    """The outline of the first ``limit`` bytes of an array: split by msgspec where it
    can be, and read element by element only."""
    resumed: list[int | None] = []
    split = _read_json._split_cut_array

    def watched(*args: Any) -> int | None:
        resumed.append(split(*args))
        return resumed[-1]

    read = lambda count, offset: data[offset : offset + count]  # noqa: E731
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_split_cut_array", watched)
        fast = outline("json", read, len(data), scan_limit=limit)
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_split_cut_array", lambda *args: None)
        slow = outline("json", read, len(data), scan_limit=limit)
    return fast, slow, resumed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    indent=st.sampled_from([None, 2]),
    kinds=st.sampled_from(["alike", "mixed", "scalars"]),
    share=st.floats(0.05, 0.95),
)
def test_a_cut_array_split_by_msgspec_outlines_as_one_read_element_by_element(
    seed: int, indent: int | None, kinds: str, share: float
) -> None:
    rng = random.Random(seed)
    if kinds == "alike":
        elements: list[object] = [
            {
                "id": i,
                "status": rng.choice(["ok", "failed"]),
                "more": rng.choice([None, 1.5, "é", [1, "x"], {"k": [True]}]),
            }
            for i in range(400)
        ]
    elif kinds == "mixed":
        elements = [_random_value(rng, 1) for _ in range(300)]
    else:
        elements = [_random_value(rng, 4) for _ in range(400)]
    data = json.dumps(elements, indent=indent).encode()
    limit = max(64, int(len(data) * share))
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow, resumed = _cut_outlines(data, limit, monkeypatch)
    assert fast == slow
    if kinds == "alike" and fast is not None:
        assert resumed[0] is not None  # msgspec split it


def test_a_cut_inside_an_element_that_opens_alike_falls_back_to_an_earlier_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The last element opens as the first does and holds, nested, more that do: the cut
    # after its nested ones does not read as JSON, the one before it does.
    inner = {"id": 0, "status": "ok"}
    elements = [{"id": i, "status": "ok"} for i in range(50)]
    elements.append({"id": 50, "status": "ok", "inner": [inner] * 2})
    data = json.dumps(elements).encode()
    limit = data.rfind(b'{"id": 0, "status": "ok"}') + 10
    fast, slow, resumed = _cut_outlines(data, limit, monkeypatch)
    assert fast == slow and fast is not None
    assert resumed == [data.index(b'{"id": 50,') - 1]  # (after the comma before it)
    assert ".[]: 50 objects" in fast.text


def test_a_part_cut_inside_a_character_is_outlined(monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps([{"name": "é" * 40, "n": i} for i in range(2_000)], ensure_ascii=False)
    raw = data.encode()
    cut = raw.index("é".encode(), len(raw) // 2) + 1  # between the two bytes of an é
    for split in (True, False):  # by msgspec, then element by element alone
        with monkeypatch.context() as patch:
            if not split:
                patch.setattr(_read_json, "_split_cut_array", lambda *args: None)
            found = outline("json", lambda n, at: raw[at : at + n], len(raw), scan_limit=cut)
        assert found is not None and "objects" in found.text


def _by_window(data: bytes, monkeypatch: pytest.MonkeyPatch, *, runs: bool) -> Outline | None:
    """The outline of an array read from the sliding window (as one of 2**18 elements
    or more is), counting runs of numbers, booleans and nulls past the sample or not."""
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_ELEMENTS", 0)
        if not runs:
            patch.setattr(_read_json, "_count_run", lambda text, pos, records: (pos, True, 0))
        patch.setattr(_read_json, "_RUN_PIECE", 64)  # many pieces
        patch.setattr(_read_json, "_BLOCK", 97)  # many windows, cutting numbers and runs
        return _outline(data)


_RUN_VALUES = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.sampled_from(["a,b", "1", "", "[", '"']),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["id", "x"]), st.integers(0, 3), max_size=2),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    tail=st.lists(_RUN_VALUES, max_size=600),
    indent=st.sampled_from([None, 1]),
    junk=st.sampled_from([None, "01", "1.", "tru", "+1", "1e", "--1", "nul", "NaN", "1 2", ""]),
    at=st.integers(0, 10_000),
)
def test_scalars_counted_a_run_at_a_time_outline_as_one_by_one(
    tail: list[object],
    indent: int | None,
    junk: str | None,
    at: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the sample, numbers, booleans and nulls are decoded a piece of a run at a
    time and counted by type: the same outline as reading them one by one, and a run that
    is not JSON (``01``, ``1.``) gives no outline either way."""
    text = json.dumps([*range(250), *tail], indent=indent)
    if junk is not None:
        cut = text.rfind(",", 0, 1200 + at % max(len(text) - 1200, 1)) + 1
        text = text[:cut] + junk + "," + text[cut:] if cut else text
    data = text.encode()
    assert _by_window(data, monkeypatch, runs=True) == _by_window(data, monkeypatch, runs=False)


def test_millions_of_numbers_are_counted_in_runs() -> None:
    """An array of 1,600,000 numbers (past 2**18 elements, so not split by msgspec) took
    seconds, a record at a time: its runs are counted, exactly. (Its 1 MiB windows end
    inside a float, ``1.|5``: that read as 1, then as "not JSON".)"""
    data = ("[" + ",".join(["0", "1.5", "7", "null"] * 400_000) + "]").encode()
    assert data[(2 << 20) - 2 : (2 << 20) + 1] == b"1.5"
    found = _outline(data)
    assert found is not None and (found.records, found.complete) == (1_600_000, True)
    assert "800,000 ints, 400,000 floats, 400,000 nulls" in found.text


def test_a_part_cut_inside_a_number_counts_the_whole_elements_before_it() -> None:
    """``195`` of ``195000585`` ends the part the outline parses: it is cut, not counted
    (found by a review)."""
    data = ("[" + ", ".join(str(i * 1000003) for i in range(4000)) + "]").encode()
    limit = data.index(b"195000585") + 3
    found = outline(
        "json", lambda count, offset: data[offset : offset + count], len(data), scan_limit=limit
    )
    assert found is not None and found.records == 195 and not found.complete


@pytest.mark.parametrize("bad", ["01", "1.", "nan", ""])
def test_a_run_that_is_not_json_is_decoded_once(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One bad element among 400,000 numbers: each element before it tried the run again
    and decoded the same failing piece, 35 s (found by a review). Runs stop after one
    failed piece; an empty element on a piece's edge (``1,,2``) fails it too."""
    decoded: list[int] = []
    real = _read_json.loads

    def counted(data: bytes | memoryview) -> object:
        decoded.append(len(data))
        return real(data)

    elements = [str(i) for i in range(400_000)]
    elements[16_000] = bad
    data = ("[" + ",".join(elements) + "]").encode()
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "loads", counted)
        assert _outline(data) is None
    assert len(decoded) < 10


def test_numbers_mixed_with_strings_are_not_decoded_one_run_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An array alternating numbers and strings: each number was a run of its own, decoded
    alone (slower than reading it); runs of fewer than 16 elements are left to the read."""
    decoded: list[int] = []
    real = _read_json.loads

    def counted(data: bytes | memoryview) -> object:
        decoded.append(len(data))
        return real(data)

    data = json.dumps([i if i % 2 else str(i) for i in range(300_000)]).encode()
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "loads", counted)
        found = _outline(data)
    assert found is not None and found.records == 300_000
    assert not decoded


@pytest.mark.parametrize(
    "first", ["k" * 4000, "\U0001f600" * 63_000], ids=["4000-char keys", "one emoji key"]
)
def test_long_keys_nested_deep_give_no_outline_in_bounded_memory(first: str) -> None:
    """500 levels (under the depth bound) of 4,000-character keys, or one key of 63,000
    emoji (four bytes each in a str) above 505 levels: each level held its path, 968 MiB
    and 245 MiB (found by two reviews); past a million characters held no outline."""
    key = "k" * 4000 if first.startswith("k") else "a"
    data = (f'{{"{first}":' + f'{{"{key}":' * 505 + "[1, 2, 3]" + "}" * 506).encode()
    found, peak = _traced(data)
    assert found is None and peak < 32 << 20


@pytest.mark.parametrize("where", ["first record", "past the switch", "member after"])
def test_an_integer_past_64_bits_keeps_the_outline_of_a_large_document(where: str) -> None:
    """ijson's C backend reading numbers as floats stops at an integer past 64 bits
    (ICRAR/ijson#153): a large JSON object with one 20-digit id anywhere got no outline,
    and one cut at the scan limit was counted only up to it. It is read again, exactly."""
    items: list[dict[str, object]] = [{"id": i, "v": i / 7, "ok": True} for i in range(3000)]
    doc: dict[str, object] = {"items": items, "n": 3000}
    if where == "first record":
        items[0]["id"] = 10**25
    elif where == "past the switch":
        items[1000]["id"] = -(2**63)
        items[2600]["error"] = "timed out"
    else:
        doc["n"] = 2**64
    data = json.dumps(doc).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        found = _outline(data)
        assert found is not None and found.records == 3000
        assert ".items[].v  float" in found.text
        if where == "past the switch":
            assert ".items[2600]" in found.text
        cut = outline("json", lambda count, at: data[at : at + count], len(data), scan_limit=80_000)
    assert cut is not None and not cut.complete and cut.records > 1500


def _members_after(data: bytes, **patches: int) -> tuple[dict[str, Any], Outline | None]:
    """The envelope past the switch to ijson's items (the root object's members after the
    long collection are read from the document's end), and the outline."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        for name, value in patches.items():
            patch.setattr(_tail_members, name, value)
        envelope = _read_json._scan_json(
            lambda count, offset: data[offset : offset + count],
            len(data),
            _Accumulator(),
            size=len(data),
        )
        assert isinstance(envelope, dict)
        return envelope, _outline(data)


_AFTER = {
    "errors and status": {
        "items": [{"id": i} for i in range(2000)],
        "errors": [{"id": 5, "error": "x" * 9000}],
        "status": "partial",
    },
    # An array member after it that begins before the last 8 KiB and ends as the collection
    # does: which array the last ``]`` closes cannot be told from there (a review).
    "[0, 0] members": {"points": [[0, 0]] * 300, "test": [[0, 0]] * 2000, "n": 2},
    # More brackets in the members than the 64 the last bytes' reading tries.
    "40 arrays": {"items": [{"id": i} for i in range(20)], **{f"a{i}": [[]] for i in range(40)}},
    # Brackets inside strings of the last record and of the members.
    "brackets in strings": {
        "items": [{"id": i, "s": '],"k": 1}'} for i in range(400)],
        "s": '"], "x": [1]}',
        "": ["], }"],
        "t": [],
    },
    # An array member before it, in the bytes ijson read last: the rest after its ']'
    # reads as the end of an object too, with the collection in it (a review).
    "an array before it": {
        "warnings": [],
        "data": [{"id": i, "name": "n" * 600} for i in range(40)],
        "status": "ok",
    },
}


@pytest.mark.parametrize("doc", _AFTER.values(), ids=_AFTER.keys())
def test_root_members_after_a_long_collection_are_all_read(doc: dict[str, Any]) -> None:
    """Past the switch to ijson's items, the root object's members after the collection
    were read from the document's last 8 KiB: members that began before those bytes were
    lost, or said to be maybe missing on every large document (three reviews). The
    collection's ``]`` is now known to be in the bytes ijson read last: all are found."""
    data = json.dumps(doc).encode()
    envelope, found = _members_after(data)
    assert list(envelope) == list(doc)
    keys = list(doc)
    long = next(k for k in keys if isinstance(doc[k], list) and len(doc[k]) > 16)
    for key in keys[: keys.index(long) + 1]:  # (arrays read by the event pass: summaries)
        assert isinstance(envelope[key], _Summary) is isinstance(doc[key], list)
    for key in keys[keys.index(long) + 1 :]:  # (the members read from the end: values)
        assert envelope[key] == doc[key]
    assert found is not None and "document's end" not in found.text
    if "status" in doc:
        assert f'"status": "{doc["status"]}"' in found.text


@pytest.mark.parametrize("doc", list(_AFTER.values())[:3], ids=list(_AFTER)[:3])
def test_root_members_read_from_the_last_bytes_say_when_some_may_be_missing(
    doc: dict[str, Any],
) -> None:
    """Where the collection's end is not known (members after it of more than
    ``_TAIL_REGION`` bytes, or another ijson backend), the members are read from the last
    8 KiB, and unless those bytes hold the whole document (and every bracket in them was
    tried), the outline says some may be missing."""
    data = json.dumps(doc).encode()
    _members, found = _members_after(data, _TAIL_REGION=0)
    assert found is not None and "are read from the document's end: some" in found.text
    small = json.dumps({"items": [{"id": i} for i in range(20)], "status": "ok"}).encode()
    envelope, found = _members_after(small, _TAIL_REGION=0)
    assert list(envelope) == ["items", "status"]
    assert found is not None and "document's end" not in found.text


def _records(count: int) -> str:
    return json.dumps([{"id": i} for i in range(count)])


_UNSURE = {
    # The collection's name again after it: which ']' is its own cannot be told.
    "its name again": '{"items": ' + _records(40) + ', "x": [1], "items": [2]}',
    # More array members before it than are tried.
    "20 arrays before": "{"
    + "".join(f'"a{i}": [], ' for i in range(20))
    + '"items": '
    + _records(20)
    + ', "s": 1}',
    # A member nested deeper than json reads (RecursionError ended the outline).
    "a deep member": '{"items": '
    + _records(40)
    + ', "deep": '
    + "[" * 1100
    + "]" * 1100
    + ', "t": "'
    + "y" * 10_000
    + '"}',
}


@pytest.mark.parametrize("text", _UNSURE.values(), ids=_UNSURE.keys())
def test_members_after_a_collection_whose_end_is_not_known_say_so(text: str) -> None:
    """Where the exact read cannot tell the collection's ']', the members come from the
    last bytes, with the note (or, past them, none): the collection stays a summary, and
    no member is lost without a word (a review found each of these wrong)."""
    envelope, found = _members_after(text.encode())
    assert isinstance(envelope["items"], _Summary)
    assert found is not None
    # (The last bytes hold the whole of the first two documents: all members are read.)
    if text is _UNSURE["its name again"]:
        assert envelope["x"] == [1]
    elif text is _UNSURE["20 arrays before"]:
        assert envelope["s"] == 1
    else:
        assert "query the artifact)" in found.text, found.text


def test_a_large_member_read_from_the_end_is_not_rendered_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Members read from the document's end are raw values; the envelope rendered each
    whole before cutting it to 900 characters: a member of 90,000 objects took 2.2 s (a
    review). Rendering stops once past the cut, with the same text."""
    doc = {"items": [{"id": i} for i in range(40)], "m": [{"k": [1]} for _ in range(20_000)]}
    data = json.dumps(doc).encode()
    shown: list[object] = []
    compact = _render._compact  # type: ignore[attr-defined]

    def counted(value: object, limit: int = 400) -> str:
        shown.append(value)
        return compact(value, limit)

    monkeypatch.setattr(_render, "_compact", counted)
    _envelope, found = _members_after(data)
    assert found is not None and len(shown) < 2_000
    line = found.text.splitlines()[1]
    assert line.startswith('{"items": [40 objects], "m": [{"k": [1]}, {"k": [1]}')
    assert line.endswith("…") and len(line) == 900


def test_a_last_record_of_many_brackets_is_not_parsed_once_for_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each ']' of the last record was tried by parsing the rest of the document: a record
    of 5,000 ``"k": [0]`` before a member of 900 KB took 8.8 s (a review). Only the root's
    own ']' are tried."""
    last = {f"k{i}": [0] for i in range(5000)}
    doc = {"items": [{"id": i} for i in range(20)] + [last], "blob": "," * 150_000}
    data = json.dumps(doc, separators=(",", ":")).encode()
    tried: list[int] = []
    members = _tail_members._members

    def counted(rest: bytes) -> dict[str, object] | None:
        tried.append(len(rest))
        return members(rest)

    monkeypatch.setattr(_tail_members, "_members", counted)
    envelope, found = _members_after(data)
    assert list(envelope) == ["items", "blob"] and len(tried) == 2  # (the outline's own read too)
    assert found is not None and found.records == 21


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.integers(17, 3000),
    width=st.integers(0, 120),
    after=st.lists(
        st.recursive(
            st.none() | st.integers() | st.text(alphabet='[]{},:" ab0'),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(alphabet="]}, a", max_size=3), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=6,
    ),
    indent=st.sampled_from([None, 0, 2]),
)
def test_the_members_after_any_long_collection_are_found(
    records: int, width: int, after: list[object], indent: int | None
) -> None:
    """Whatever the records, the members after them and the layout: every member is
    found, exactly (the first ``]`` after the bytes ijson read last after which the rest
    ends an object is the collection's: each one before it leaves a bracket open)."""
    rows = [[i, "]" * (i % 3), {"s": "x" * width, "t": [[0, 0]] * (i % 2)}] for i in range(records)]
    doc: dict[str, object] = {"head": 1, "rows": rows}
    doc.update({f"m{i}]": value for i, value in enumerate(after)})
    data = json.dumps(doc, indent=indent).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        patch.setattr(_tail_members, "_TAIL_WINDOW", 64)  # (the last bytes alone do not do)
        envelope = _read_json._scan_json(
            lambda count, offset: data[offset : offset + count],
            len(data),
            _Accumulator(),
            size=len(data),
        )
    assert isinstance(envelope, dict) and list(envelope) == list(doc)
    for key in list(doc)[2:]:
        assert envelope[key] == doc[key] or isinstance(doc[key], list)


@pytest.mark.parametrize(("depth", "key"), [(150, 50), (190, 30), (100, 100)])
def test_a_deep_document_of_long_keys_within_the_bounds_is_outlined(depth: int, key: int) -> None:
    """The bound on the paths held counts what they hold, not depth times the deepest:
    documents of 8-12 KB nested 100-190 deep lost their outline under that (a review)."""
    value: object = {"items": [{"id": i, "name": f"n{i}"} for i in range(40)], "total": 40}
    for level in range(depth):
        value = {f"level_{level:03d}_" + "x" * (key - 10): value}
    found = _outline(json.dumps(value).encode())
    assert found is not None and found.records == 40
