"""The one rule for a record's JSON form (``toolswap._json_form``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap._json_form import fields_form, json_form
from toolswap.grep import GrepMatch
from toolswap.retention.claims import ArtifactRetentionClaim
from toolswap.retention.lease import ArtifactLeasePhase, ArtifactLeaseTransaction


class _Kind(StrEnum):
    A = "a"


@dataclass(frozen=True)
class _Inner:
    when: datetime | None
    kind: _Kind


@dataclass(frozen=True)
class _Outer:
    name: str
    path: Path
    inner: _Inner
    pairs: tuple[tuple[int, str], ...]
    secret: str = "x"


def test_fields_in_order_each_made_plain() -> None:
    when = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
    record = _Outer("n", Path("/a/b"), _Inner(when, _Kind.A), ((1, "x"), (2, "y")))
    form = fields_form(record, skip=("secret",))
    assert list(form) == ["name", "path", "inner", "pairs"]
    assert form == {
        "name": "n",
        "path": "/a/b",
        "inner": {"when": "2026-12-02T04:00:00+00:00", "kind": "a"},
        "pairs": [[1, "x"], [2, "y"]],
    }
    json.dumps(form)  # nothing in it that JSON cannot hold


def test_a_value_with_no_json_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no JSON form for object"):
        json_form(object())


def test_an_artifact_reference_round_trips_through_its_json_form(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s")
    ref = ext.externalize(b"line\n" * 100, "bash", argv=["seq", "100"], exit_code=3).artifact
    data = ref.to_dict()
    assert list(data)[:3] == ["source_id", "source", "path"]
    assert data["argv"] == ["seq", "100"] and data["exit_code"] == 3
    memory = ref.for_memory()
    assert type(memory).from_dict(json.loads(json.dumps(memory.to_dict()))) == memory


def test_grep_matches_and_leases_print_their_keys_in_the_order_they_always_had(
    tmp_path: Path,
) -> None:
    """``--json`` output does not sort keys: a grep match and a lease keep their order."""
    match = GrepMatch(1, "boom", before=((0, "a"),), line_start=5, text_start=5)
    assert list(match.to_dict()) == [
        "line_no",
        "text",
        "line_start",
        "text_start",
        "before",
        "after",
    ]
    assert match.to_dict()["before"] == [[0, "a"]]
    ref = ToolResultExternalizer(tmp_path / "s").externalize(b"x\n" * 10, "bash").artifact
    claim = ArtifactRetentionClaim(ref.source_id, ref.content_sha256)
    when = datetime(2026, 12, 2, tzinfo=UTC)
    lease = ArtifactLeaseTransaction(
        "t1", claim, ArtifactLeasePhase.PREPARED, "0" * 64, when, when, 1, 1
    )
    assert list(lease.to_dict())[:3] == ["transaction_id", "phase", "claim"]
    assert lease.to_dict()["phase"] == "PREPARED"
