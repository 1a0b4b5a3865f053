"""ResultRewriter on result shapes, in process (the proxy tests cover the wire)."""

from __future__ import annotations

import json
from pathlib import Path

from toolswap import ToolResultExternalizer
from toolswap.mcp.rewrite import ResultRewriter
from toolswap.settings import parse_threshold

RULE = parse_threshold("20kb")


def _rewriter(tmp_path: Path) -> tuple[ResultRewriter, ToolResultExternalizer]:
    ext = ToolResultExternalizer(tmp_path / "s1", read_hint="mcp")
    return ResultRewriter(ext), ext


def test_compact_json_text_is_saved_pretty_printed_once_and_pages_by_line(tmp_path: Path) -> None:
    rewriter, ext = _rewriter(tmp_path)
    value = {"rows": [{"id": i, "name": f"row-{i}"} for i in range(2000)]}
    compact = json.dumps(value, separators=(",", ":"))
    shrunk = rewriter.tool_result(
        "t", {"content": [{"type": "text", "text": compact}], "structuredContent": value}, RULE
    )

    assert shrunk is not None
    (saved,) = ext.list_artifacts()
    assert shrunk["structuredContent"]["toolswap"]["source_id"] == saved.source_id
    assert json.loads(saved.path.read_bytes()) == value
    assert saved.line_count > 2000 and saved.media_type == "application/json"


def test_a_wrapped_string_keeps_the_structure_around_it(tmp_path: Path) -> None:
    rewriter, ext = _rewriter(tmp_path)
    text = "line\n" * 10_000
    structured = {"path": "/srv/a.log", "content": text, "truncated": False}
    shrunk = rewriter.tool_result(
        "read", {"content": [{"type": "text", "text": text}], "structuredContent": structured}, RULE
    )

    assert shrunk is not None
    new = shrunk["structuredContent"]
    assert (new["path"], new["truncated"]) == ("/srv/a.log", False)
    (saved,) = ext.list_artifacts()
    assert new["content"]["toolswap"]["source_id"] == saved.source_id
    assert saved.path.read_text(encoding="utf-8") == text


def test_large_siblings_of_the_wrapped_text_save_the_whole_structure_instead(
    tmp_path: Path,
) -> None:
    rewriter, ext = _rewriter(tmp_path)
    text = "line\n" * 10_000
    structured = {"content": text, "index": list(range(20_000))}
    shrunk = rewriter.tool_result(
        "read", {"content": [{"type": "text", "text": text}], "structuredContent": structured}, RULE
    )

    assert shrunk is not None
    assert set(shrunk["structuredContent"]) == {"toolswap"}
    # Text and structure differ as a whole: two artifacts, but one pointer and a note.
    assert len(ext.list_artifacts()) == 2
    pointer, note = (b["text"] for b in shrunk["content"])
    assert pointer.startswith("[Artifact: ")
    assert note.startswith("[The structured result is saved too")


def test_small_results_and_unfinished_results_are_left_alone(tmp_path: Path) -> None:
    rewriter, ext = _rewriter(tmp_path)
    small = {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}
    pending = {"resultType": "input_required", "content": [{"type": "text", "text": "x" * 99999}]}
    assert rewriter.tool_result("t", small, RULE) is None
    assert rewriter.tool_result("t", pending, RULE) is None
    assert rewriter.resource_result({"contents": [{"uri": "a://b", "text": "hi"}]}, RULE) is None
    assert ext.list_artifacts() == []


def test_a_reference_in_place_that_breaks_the_kept_schema_becomes_a_conforming_one(
    tmp_path: Path,
) -> None:
    import jsonschema

    from toolswap.mcp.rewrite import admits_reference

    # {"content": <string>}: a reference object at the root conforms, one in place of the
    # string would not.
    schema = {"type": "object", "properties": {"content": {"type": "string"}}}
    assert admits_reference(schema)
    assert not admits_reference({"type": "object", "required": ["content"]})
    rewriter, _ = _rewriter(tmp_path)
    text = "".join(f"line {i}: ok\n" for i in range(5000))
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    shrunk = rewriter.tool_result("read", result, RULE, schema)
    assert shrunk is not None
    jsonschema.validate(shrunk["structuredContent"], schema)
    assert shrunk["structuredContent"]["toolswap"]["externalized"] is True
    # Without the schema the reference stays in place of the string.
    loose = rewriter.tool_result("read", result, RULE)
    assert loose is not None and "toolswap" in loose["structuredContent"]["content"]


def test_structured_content_saved_beside_text_brings_its_outline(tmp_path: Path) -> None:
    rewriter, _ = _rewriter(tmp_path)
    records = [{"id": i, "status": "lost" if i == 1234 else "ok"} for i in range(3000)]
    text = "".join(f"line {i}: ok\n" for i in range(3000))
    result = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"count": 3000, "records": records},
    }
    shrunk = rewriter.tool_result("inventory", result, RULE)
    assert shrunk is not None
    note = shrunk["content"][-1]["text"]
    assert "The structured result is saved too" in note
    assert "--- structure: JSON object" in note
    assert "3,000 objects" in note and ".records[1234]" in note
    assert "query_artifact(" in note


def test_a_schema_whose_ref_cannot_be_resolved_is_not_kept_and_never_raises(
    tmp_path: Path,
) -> None:
    """jsonschema's referencing error escaped the check: the proxy's task group died and
    ``tools/list`` was never answered (a review). Such a schema is taken as one the
    result does not conform to."""
    from toolswap.mcp.rewrite import admits_reference

    assert not admits_reference({"$ref": "https://example.com/schemas/result.json"})
    schema = {"type": "object", "properties": {"content": {"$ref": "https://example.com/x"}}}
    assert admits_reference(schema)  # (the reference object has no content to check)
    rewriter, _ext = _rewriter(tmp_path)
    text = "line\n" * 10_000
    shrunk = rewriter.tool_result(
        "read",
        {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}},
        RULE,
        schema,
    )
    assert shrunk is not None and set(shrunk["structuredContent"]) == {"toolswap"}


def test_text_that_equals_the_structure_only_in_python_is_not_taken_for_it(
    tmp_path: Path,
) -> None:
    """``True == 1`` in Python: a text of ``"active": 1`` was taken for structured content
    holding ``true``, and replaced by a reference to the text's artifact, whose values
    differ (a review). The structure is saved as it is."""
    rewriter, ext = _rewriter(tmp_path)
    rows = [{"id": i, "active": True} for i in range(3000)]
    text = json.dumps({"rows": [{"id": i, "active": 1} for i in range(3000)]}, indent=2)
    shrunk = rewriter.tool_result(
        "t",
        {"content": [{"type": "text", "text": text}], "structuredContent": {"rows": rows}},
        RULE,
    )
    assert shrunk is not None
    source_id = shrunk["structuredContent"]["toolswap"]["source_id"]
    saved = ext.get_artifact(source_id)
    assert json.loads(saved.path.read_bytes()) == {"rows": rows}
    assert json.loads(saved.path.read_bytes())["rows"][0]["active"] is True


def test_a_structure_its_schema_keeps_whole_says_so_and_is_saved_without_its_media(
    tmp_path: Path,
) -> None:
    """When no reference conforms, the structure is kept as it came; the note said it was
    saved and nothing of why it was still large, and the saved copy held the base64 of an
    image saved already (a review)."""
    import base64

    rewriter, ext = _rewriter(tmp_path)
    data = base64.b64encode(bytes(range(256)) * 300).decode()
    structured = {"image": {"data": data, "mimeType": "image/png"}, "rows": list(range(9000))}
    schema = {
        "type": "object",
        "properties": {"image": {"type": "object"}},
        "additionalProperties": {"type": "array"},
    }
    shrunk = rewriter.tool_result(
        "t",
        {"content": [{"type": "text", "text": "done"}], "structuredContent": structured},
        RULE,
        schema,
    )
    assert shrunk is not None
    texts = [block["text"] for block in shrunk["content"] if block.get("type") == "text"]
    assert any("admits no reference" in text for text in texts)
    for artifact in ext.list_artifacts():
        if artifact.media_type == "application/json":
            assert data[:200] not in artifact.path.read_text(encoding="utf-8")


def test_a_servers_unusable_mime_type_is_detected_instead_and_the_result_is_saved(
    tmp_path: Path,
) -> None:
    """A ``mimeType`` holding a lone surrogate failed the record and stopped the proxy;
    a legal one of 281 characters was refused and the output lost (two reviews). An
    unusable one gives way to the type detected from the bytes."""
    rewriter, ext = _rewriter(tmp_path)
    text = '{"a": 1}\n' * 20_000
    long_type = 'application/ld+json; profile="' + "https://example.org/p" * 12 + '"'
    for mime in ("text/\ud800", long_type, "text/plain\nx"):
        block = {
            "type": "resource",
            "resource": {"uri": "file:///a", "mimeType": mime, "text": text},
        }
        shrunk = rewriter.tool_result("t", {"content": [block]}, RULE)
        assert shrunk is not None
        assert "Embedded resource file:///a" in shrunk["content"][0]["text"]
    assert len(ext.list_artifacts()) == 3
    assert {a.media_type for a in ext.list_artifacts()} != {None}
