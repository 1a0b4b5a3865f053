"""How the outline writes a record: ``_compact`` stops building a big record's members once
its text is sure to be cut, and still writes exactly what shortening every member and
cutting the text would."""

from __future__ import annotations

import enum
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from toolswap.structured._values import _compact, _shorten


def _plain(value: object, limit: int) -> str:
    """Every member shortened, the whole text written, then cut (no room given)."""
    shown, _ = _shorten(value)
    text = json.dumps(shown, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities too: json writes them as NaN, Infinity
    st.text(max_size=90),  # past the 60 characters a string is cut at; escapes; emoji
)
_KEYS = st.one_of(st.text(max_size=12), st.integers(-5, 500), st.booleans(), st.none())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=8), st.dictionaries(_KEYS, inner, max_size=30)
    ),
    max_leaves=120,
)


@settings(max_examples=800, deadline=None)
@given(_VALUES, st.integers(-12, 12), st.integers(1, 400))
def test_a_cut_record_reads_as_the_whole_one_cut(value: object, near: int, anywhere: int) -> None:
    whole = len(_plain(value, 1 << 30))
    # Limits about the text's own length (where an early stop could drop the cut) and any.
    for limit in (max(1, whole + near), anywhere):
        assert _compact(value, limit) == _plain(value, limit), limit


_SMALL = [
    ["x", "y"],
    [1, [2, 3], "z", None, True],  # a list of more than 4: its "…+1" marker
    {"a": "x", "b": [1, 2]},
    {"a": {"b": ["c", "d"], "e": 1}, "f": 2, 3: False, None: "n"},
    [{"k": "v" * 70}, {"k": "w"}],  # a string past 60 characters, cut
    [[1, 2, 3, 4, 5], "tail"],
    [[[[[1], "after"], 5]]],  # a list past depth 4 is a string
    [{"a": {"b": {"c": {"d": {"e": 1}, "z": 0}}}}, 7],  # and so is an object
]


def test_every_cut_of_small_records() -> None:
    for value in _SMALL:
        whole = len(_plain(value, 1 << 30))
        for limit in range(1, whole + 3):
            assert _compact(value, limit) == _plain(value, limit), (value, limit)


class _Kind(str, enum.Enum):  # noqa: UP042 (StrEnum's str() is its value; this one's is "_Kind.A")
    A = "a"


class _Level(enum.IntEnum):
    ONE = 1  # str() says "_Level.ONE", json writes 1


def test_keys_json_writes_shorter_than_str_does_are_cut_alike() -> None:
    for value in ({_Kind.A: "v" * 20, "b": 1}, {_Level.ONE: "v" * 20, "b": [1, 2]}):
        whole = len(_plain(value, 1 << 30))
        for limit in range(1, whole + 3):
            assert _compact(value, limit) == _plain(value, limit), (value, limit)


def test_a_big_record_is_not_built_past_its_cut() -> None:
    members = {f"package-{n}": {"version": f"1.{n}.0", "deps": list(range(9))} for n in range(24)}
    shown, length = _shorten(members, room=60)
    assert isinstance(shown, dict)
    assert 0 < len(shown) < 24  # stopped early,
    assert length > 60  # and knows its text is longer than the room
    assert _compact(members, 60) == _plain(members, 60)
    assert len(_compact(members, 60)) == 60


def test_a_bound_is_a_lower_bound() -> None:
    for value in ({"a": [1, 2, "xyz"], "b": None}, [math.inf, "é" * 70, {"k": True}], "x" * 61):
        shown, length = _shorten(value)
        assert length <= len(json.dumps(shown, ensure_ascii=False, separators=(",", ":")))
