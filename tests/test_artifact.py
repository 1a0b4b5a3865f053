"""Source IDs, artifact file names and the memory reference."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

import pytest

from toolswap import (
    ArtifactMemoryReference,
    ArtifactReference,
    ArtifactSource,
    SourceIdError,
    parse_artifact_source_id,
)
from toolswap.artifact import (
    artifact_filename,
    format_source_id,
    parse_artifact_filename,
    validate_session_id,
)

SHA = "abcdef0123456789" * 4


def test_source_id_parses_into_session_filename_and_digest_prefix() -> None:
    parsed = parse_artifact_source_id("artifact:s1:tool_result_001.txt:abcdef012345")

    assert parsed.session == "s1"
    assert parsed.filename == "tool_result_001.txt"
    assert parsed.digest_prefix == "abcdef012345"
    assert parsed.number == 1
    assert str(parsed) == "artifact:s1:tool_result_001.txt:abcdef012345"


def test_source_id_accepts_numbers_past_three_digits_and_session_punctuation() -> None:
    parsed = parse_artifact_source_id("artifact:s.1-x_y:tool_result_1000.txt:abcdef012345")

    assert parsed.session == "s.1-x_y"
    assert parsed.number == 1000


@pytest.mark.parametrize(
    "source_id",
    [
        "",
        "artifact",
        "artifact:s1:tool_result_001.txt",
        "artifact:s1:tool_result_001.txt:abcdef012345:extra",
        "Artifact:s1:tool_result_001.txt:abcdef012345",
        " artifact:s1:tool_result_001.txt:abcdef012345",
        "artifact:s1:tool_result_001.txt:abcdef012345 ",
        "artifact:s1:tool_result_001.txt:abcdef012345\n",
        # digest prefix: exactly 12 lowercase hex digits
        "artifact:s1:tool_result_001.txt:abcdef01234",
        "artifact:s1:tool_result_001.txt:abcdef0123456",
        "artifact:s1:tool_result_001.txt:ABCDEF012345",
        "artifact:s1:tool_result_001.txt:abcdef01234g",
        # file name: canonical numbering only
        "artifact:s1:tool_result_01.txt:abcdef012345",
        "artifact:s1:tool_result_0001.txt:abcdef012345",
        "artifact:s1:tool_result_000.txt:abcdef012345",
        "artifact:s1:tool_result_001.TXT:abcdef012345",
        "artifact:s1:tool_result_\u0661\u0662\u0663.txt:abcdef012345",
        "artifact:s1:../tool_result_001.txt:abcdef012345",
        "artifact:s1:sub/tool_result_001.txt:abcdef012345",
        "artifact:s1:manifest.jsonl:abcdef012345",
        # session: one safe path component
        "artifact::tool_result_001.txt:abcdef012345",
        "artifact:..:tool_result_001.txt:abcdef012345",
        "artifact:a..b:tool_result_001.txt:abcdef012345",
        "artifact:.s1:tool_result_001.txt:abcdef012345",
        "artifact:a/b:tool_result_001.txt:abcdef012345",
        "artifact:s1\n:tool_result_001.txt:abcdef012345",
        "artifact:" + "a" * 129 + ":tool_result_001.txt:abcdef012345",
    ],
)
def test_malformed_source_ids_are_refused(source_id: str) -> None:
    with pytest.raises(SourceIdError):
        parse_artifact_source_id(source_id)


def test_a_source_id_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(SourceIdError, match="must be a string"):
        parse_artifact_source_id(b"artifact:s1:tool_result_001.txt:abcdef012345")  # type: ignore[arg-type]


def test_source_id_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        parse_artifact_source_id("nope")


def test_artifact_filenames_are_zero_padded_to_three_digits_and_round_trip() -> None:
    assert artifact_filename(1) == "tool_result_001.txt"
    assert artifact_filename(999) == "tool_result_999.txt"
    assert artifact_filename(1000) == "tool_result_1000.txt"
    for number in (1, 42, 999, 1000, 123456):
        assert parse_artifact_filename(artifact_filename(number)) == number
    assert parse_artifact_filename("tool_result_0042.txt") is None
    assert parse_artifact_filename(".tmp-1-abc.partial") is None
    with pytest.raises(ValueError):
        artifact_filename(0)


def test_format_source_id_uses_the_first_twelve_hex_digits_of_the_digest() -> None:
    assert format_source_id("s1", "tool_result_007.txt", SHA) == (
        "artifact:s1:tool_result_007.txt:abcdef012345"
    )
    with pytest.raises(SourceIdError):
        format_source_id("s1", "tool_result_007.txt", SHA.upper())
    with pytest.raises(SourceIdError):
        format_source_id("../x", "tool_result_007.txt", SHA)


def test_session_ids_must_be_single_safe_path_components() -> None:
    assert validate_session_id("abc-1.2_3") == "abc-1.2_3"
    for bad in ("", ".", "..", "a/b", "-x", "x" * 129, "a\x00b", "é"):
        with pytest.raises(SourceIdError):
            validate_session_id(bad)


def _reference() -> ArtifactReference:
    return ArtifactReference(
        source=ArtifactSource(
            source_id="artifact:s1:tool_result_001.txt:abcdef012345",
            title="bash output (tool_result_001.txt)",
            captured_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        ),
        path=Path("/sessions/s1/tool-results/tool_result_001.txt"),
        summary="bash output: 3 lines",
        source_tool="bash",
        content_sha256=SHA,
        byte_size=10,
        line_count=3,
        char_count=10,
        argv=("pytest", "-v"),
        exit_code=1,
    )


def test_memory_reference_carries_the_spec_fields_and_no_body_or_preview() -> None:
    memory = _reference().for_memory()

    assert {f.name for f in fields(ArtifactMemoryReference)} == {
        "summary",
        "artifact_path",
        "content_sha256",
        "source_tool",
        "source",
    }
    assert memory.summary == "bash output: 3 lines"
    assert memory.artifact_path == "/sessions/s1/tool-results/tool_result_001.txt"
    assert memory.content_sha256 == SHA
    assert memory.source_tool == "bash"
    assert memory.source.source_id == "artifact:s1:tool_result_001.txt:abcdef012345"


def test_memory_reference_dict_is_json_and_round_trips() -> None:
    memory = _reference().for_memory()

    payload = json.loads(json.dumps(memory.to_dict()))

    assert payload == {
        "summary": "bash output: 3 lines",
        "artifact_path": "/sessions/s1/tool-results/tool_result_001.txt",
        "content_sha256": SHA,
        "source_tool": "bash",
        "source": {
            "source_id": "artifact:s1:tool_result_001.txt:abcdef012345",
            "source_type": "tool_result",
            "title": "bash output (tool_result_001.txt)",
            "captured_at": "2026-01-01T12:00:00+00:00",
        },
    }
    assert ArtifactMemoryReference.from_dict(payload) == memory


def test_memory_reference_whose_digest_contradicts_its_source_id_is_refused() -> None:
    payload = _reference().for_memory().to_dict()
    payload["content_sha256"] = "0" * 64

    with pytest.raises(SourceIdError, match="digest"):
        ArtifactMemoryReference.from_dict(payload)


def test_memory_reference_with_a_malformed_source_id_is_refused() -> None:
    payload = _reference().for_memory().to_dict()
    source = dict(payload["source"])  # type: ignore[call-overload]
    source["source_id"] = "artifact:s1:../../etc/passwd:abcdef012345"
    payload["source"] = source

    with pytest.raises(SourceIdError):
        ArtifactMemoryReference.from_dict(payload)


def test_artifact_source_carries_source_id_type_title_and_capture_time() -> None:
    source = _reference().source

    assert source.to_dict() == {
        "source_id": "artifact:s1:tool_result_001.txt:abcdef012345",
        "source_type": "tool_result",
        "title": "bash output (tool_result_001.txt)",
        "captured_at": "2026-01-01T12:00:00+00:00",
    }
    assert ArtifactSource.from_dict(source.to_dict()) == source


def test_artifact_reference_dict_is_json_serializable() -> None:
    data = json.loads(json.dumps(_reference().to_dict()))

    assert data["argv"] == ["pytest", "-v"]
    assert data["exit_code"] == 1
    assert data["source"]["source_id"] == "artifact:s1:tool_result_001.txt:abcdef012345"


def test_a_source_id_with_a_five_thousand_digit_number_is_a_source_id_error() -> None:
    # int() of so many digits raised a bare ValueError (Python's 4300-digit limit).
    huge = "artifact:s1:tool_result_" + "1" * 5000 + ".txt:0123456789ab"

    with pytest.raises(SourceIdError, match="not an artifact file name"):
        parse_artifact_source_id(huge)
