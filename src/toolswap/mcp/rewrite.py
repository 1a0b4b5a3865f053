"""What the MCP proxy does to an upstream result whose parts are over the threshold.

One result gives one artifact and one pointer:

- text blocks are joined and saved as one artifact; the first block becomes its pointer;
- ``structuredContent`` that wraps the text (the same JSON, a subtree equal to the JSON
  text, or a string equal to the text: server-filesystem's ``{"content": text}``,
  server-memory's ``{"entities": [...]}``) is not saved again: the wrapped value is
  replaced by a ``{"toolswap": {...}}`` reference to the text's artifact, at the same JSON
  path, and the rest of the structure stays. JSON text on a few very long lines is saved
  pretty-printed (the same JSON value), so it pages by lines;
- structured content that wraps nothing is saved as indented JSON and replaced by a
  reference; the content then gets one short line about it, not a second pointer;
- image, audio and embedded binary blocks are saved as binary artifacts, and the same
  base64 repeated in ``structuredContent`` (server-filesystem's ``read_media_file``) is
  replaced by a short note: base64 never reaches the context.

``resources/read`` results are rewritten the same way, per content item.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from .._utf8 import lone_surrogate
from ..artifact import ArtifactReference
from ..externalizer import ToolResultExternalizer
from ..settings import ToolThreshold

__all__ = ["UNLISTED_SCHEMA", "ResultRewriter", "admits_reference"]

_BASE64_MIN = 1024
"""A string under a ``data``/``blob`` key beside a ``mimeType`` is saved as binary from here."""
_INLINE_REST = 4096
"""Structured content around a saved part stays inline up to this many characters."""
_READABLE_LINE = 4096
"""JSON text with a longer line is saved pretty-printed, so it pages by lines."""
_MAX_DEPTH = 16
_MAX_COMPARE = 512 << 20
"""Texts longer than this are not parsed to look for them in the structured content."""

JsonPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class _Saved:
    pointer: str
    """The pointer text for the context."""
    artifact: ArtifactReference


def _usable_mime(mime: object) -> str | None:
    """A server's ``mimeType`` as the capture's media type, or None (then detected from
    the bytes) when it is not one line of UTF-8 text of at most 255 characters: a
    surrogate in it stopped the proxy, and a long legal one made the save fail (two
    reviews)."""
    if not isinstance(mime, str) or len(mime) > 255 or lone_surrogate(mime):
        return None
    return None if any(ch in mime for ch in "\r\n\x00") else mime


class ResultRewriter:
    """Saves the oversized parts of MCP results in one session and says where they went."""

    def __init__(self, externalizer: ToolResultExternalizer) -> None:
        self.externalizer = externalizer

    def _save(self, data: str | bytes, tool: str, media_type: str | None = None) -> _Saved:
        saved = self.externalizer.externalize(data, tool, media_type=media_type)
        return _Saved(saved.context_text, saved.artifact)

    # -- tools/call and tasks/result -------------------------------------------------

    def tool_result(
        self,
        tool: str,
        result: dict[str, Any],
        rule: ToolThreshold,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """The result with its oversized parts saved and replaced, or None if none is.

        ``schema``: the tool's ``outputSchema`` when the host was shown it (the proxy shows
        it only if a ``{"toolswap": reference}`` object conforms, see ``admits_reference``).
        A structured result replaced in place that would not conform is saved whole and
        replaced by that reference object instead; should even that not conform, the
        structured content is kept as it came (the MCP rule: a tool that declares an
        output schema returns conforming structured results)."""
        if result.get("resultType") not in (None, "complete"):
            return None  # input_required and extension results are not tool output
        content = result.get("content")
        blocks: list[Any] = list(content) if isinstance(content, list) else []
        media: dict[str, ArtifactReference] = {}
        changed = self._media_blocks(tool, blocks, rule, media)

        texts = [
            i
            for i, b in enumerate(blocks)
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        joined = "\n".join(blocks[i]["text"] for i in texts)
        text_saved: _Saved | None = None
        structured_saved: _Saved | None = None
        new_structured: object = None
        has_structured = "structuredContent" in result and result["structuredContent"] is not None
        structured: object = None
        if has_structured:
            structured = result["structuredContent"]
            large = rule.exceeded_by(_compact(structured))
            structured, stripped = self._strip_media(structured, tool, large, media)
            if stripped:
                large = rule.exceeded_by(_compact(structured))
            if large:
                path = _find(structured, joined) if texts else None
                if path is not None:
                    rest = _replace_at(structured, path, {"toolswap": {}})
                    if path and len(_compact(rest)) > _INLINE_REST:
                        path = None  # the rest is large too: save the whole structure
                if path is not None:
                    value = _at(structured, path)
                    if isinstance(value, str):
                        text_saved = self._save(joined, tool)
                    else:
                        body = _readable_json(joined, value)
                        text_saved = self._save(body, tool, "application/json")
                    reference = {"toolswap": _reference(text_saved.artifact)}
                    new_structured = _replace_at(structured, path, reference)
                else:
                    pretty = json.dumps(structured, ensure_ascii=False, indent=2)
                    structured_saved = self._save(pretty, tool, "application/json")
                    new_structured = {"toolswap": _reference(structured_saved.artifact)}
                changed = True
            elif stripped:
                new_structured = structured
                changed = True

        if text_saved is None and texts and rule.exceeded_by(joined):
            text_saved = self._save(joined, tool)
        if text_saved is not None and texts:
            blocks[texts[0]] = {"type": "text", "text": text_saved.pointer}
            drop = set(texts[1:])
            blocks = [b for i, b in enumerate(blocks) if i not in drop]
            changed = True
        if structured_saved is not None:
            # One pointer per result: a second one would double what reaches the context.
            if text_saved is None and not texts:
                note = structured_saved.pointer
            else:
                # Its outline still comes along: the shape is what the context needs.
                note = _structured_note(structured_saved.artifact)
                outline = outline_section(structured_saved.pointer)
                if outline:
                    note += "\n" + outline
            blocks.append({"type": "text", "text": note})

        if (
            schema is not None
            and new_structured is not None
            and has_structured
            and not _conforms(new_structured, schema)
        ):
            if structured_saved is None:
                # (its media saved already: the structure without them, not twice)
                pretty = json.dumps(structured, ensure_ascii=False, indent=2)
                structured_saved = self._save(pretty, tool, "application/json")
                blocks.append({"type": "text", "text": _structured_note(structured_saved.artifact)})
            new_structured = {"toolswap": _reference(structured_saved.artifact)}
            if not _conforms(new_structured, schema):
                # The schema wins over size: the structure as it came (or without its
                # media, if that conforms), and the context is told why it is large.
                whole = result["structuredContent"]
                new_structured = structured if _conforms(structured, schema) else whole
                blocks.append({"type": "text", "text": _INLINE_NOTE})

        if not changed:
            return None
        shrunk = dict(result)
        shrunk["content"] = blocks
        if new_structured is not None:
            shrunk["structuredContent"] = new_structured
        return shrunk

    def _media_blocks(
        self,
        tool: str,
        blocks: list[Any],
        rule: ToolThreshold,
        media: dict[str, ArtifactReference],
    ) -> bool:
        """Replace oversized image, audio and embedded resource blocks in place."""
        changed = False
        for i, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            replacement: str | None = None
            if kind in ("image", "audio") and isinstance(block.get("data"), str):
                if rule.exceeded_by(block["data"]):
                    mime = block.get("mimeType")
                    replacement = self._save_base64(
                        block["data"], tool, mime if isinstance(mime, str) else None, media
                    )
            elif kind == "resource" and isinstance(block.get("resource"), dict):
                resource = block["resource"]
                mime = resource.get("mimeType")
                mime = _usable_mime(mime)
                uri = resource.get("uri")
                if isinstance(resource.get("text"), str) and rule.exceeded_by(resource["text"]):
                    saved = self._save(resource["text"], tool, mime)
                    replacement = f"Embedded resource {uri}:\n{saved.pointer}"
                elif isinstance(resource.get("blob"), str) and rule.exceeded_by(resource["blob"]):
                    pointer = self._save_base64(resource["blob"], tool, mime, media)
                    replacement = f"Embedded resource {uri}:\n{pointer}"
            if replacement is not None:
                blocks[i] = {"type": "text", "text": replacement}
                changed = True
        return changed

    def _save_base64(
        self,
        data: str,
        tool: str,
        mime: str | None,
        media: dict[str, ArtifactReference] | None = None,
    ) -> str:
        """Save a base64 block as the bytes it encodes; describe it for the model."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            saved = self._save(data, tool)
            return f"(a block whose data is not valid base64; saved as text)\n{saved.pointer}"
        saved = self._save(raw, tool, mime or "application/octet-stream")
        if media is not None:
            media[data] = saved.artifact
        artifact = saved.artifact
        return (
            f"[{artifact.media_type} from {tool}, {_size(artifact.byte_size)}: saved as "
            f"an artifact instead of being inlined as base64]\n{saved.pointer}"
        )

    def _strip_media(
        self,
        structured: object,
        tool: str,
        large: bool,
        media: dict[str, ArtifactReference],
    ) -> tuple[object, bool]:
        """``structured`` with its base64 media replaced by notes, and whether any was.

        A string equal to a media block saved from the content is replaced by a note on
        that artifact; a long base64 string under a ``data`` or ``blob`` key beside a
        ``mimeType`` is saved as binary first (only when the structure is ``large``: over
        the rule).
        """
        if not media and not large:
            return structured, False
        changed = False

        def walk(value: object, depth: int) -> object:
            nonlocal changed
            if depth > _MAX_DEPTH:
                return value
            if isinstance(value, dict):
                mime = value.get("mimeType")
                out: dict[str, object] = {}
                for key, item in value.items():
                    if (
                        large
                        and isinstance(item, str)
                        and item not in media
                        and key in ("data", "blob")
                        and isinstance(mime, str)
                        and len(item) >= _BASE64_MIN
                        and _is_base64(item)
                    ):
                        self._save_base64(item, tool, mime, media)
                    out[key] = walk(item, depth + 1)
                return out
            if isinstance(value, list):
                return [walk(item, depth + 1) for item in value]
            if isinstance(value, str) and value in media:
                changed = True
                return _media_note(media[value])
            return value

        stripped = walk(structured, 0)
        return (stripped, True) if changed else (structured, False)

    # -- resources/read --------------------------------------------------------------

    def resource_result(self, result: dict[str, Any], rule: ToolThreshold) -> dict[str, Any] | None:
        """A ``resources/read`` result with its oversized contents saved, or None."""
        contents = result.get("contents")
        if not isinstance(contents, list):
            return None
        items = list(contents)
        changed = False
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            uri = item.get("uri")
            label = f"resources/read {uri}"[:200].replace("\n", " ").replace("\r", " ")
            mime = item.get("mimeType")
            mime = _usable_mime(mime)
            if isinstance(item.get("text"), str) and rule.exceeded_by(item["text"]):
                saved = self._save(item["text"], label, mime)
                text = saved.pointer
            elif isinstance(item.get("blob"), str) and rule.exceeded_by(item["blob"]):
                text = self._save_base64(item["blob"], label, mime)
            else:
                continue
            kept = {k: v for k, v in item.items() if k not in ("text", "blob", "mimeType")}
            items[i] = {**kept, "mimeType": "text/plain", "text": text}
            changed = True
        if not changed:
            return None
        return {**result, "contents": items}


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_NO_JSON = object()


def _find(structured: object, text: str) -> JsonPath | None:
    """Where ``text`` is in ``structured``: a string equal to it, or the JSON it encodes."""
    parsed: object = _NO_JSON
    if text and len(text) <= _MAX_COMPARE and text.lstrip()[:1] in ("{", "["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = _NO_JSON

    def walk(value: object, path: JsonPath) -> JsonPath | None:
        if isinstance(value, str):
            return path if value == text else None
        if parsed is not _NO_JSON and value == parsed and _same_json(value, parsed):
            return path
        if len(path) >= _MAX_DEPTH:
            return None
        items: list[tuple[str | int, object]] = []
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        for key, item in items:
            found = walk(item, (*path, key))
            if found is not None:
                return found
        return None

    return walk(structured, ())


def _same_json(left: object, right: object) -> bool:
    """Whether two equal values (``==``) are the same JSON: ``True == 1`` and ``1 == 1.0``
    in Python, so a text of ``1`` was taken for a structure holding ``true`` and replaced
    by a reference to an artifact that holds other values (a review)."""
    pairs = [(left, right)]  # (a loop, not recursion: a structure may nest deep)
    while pairs:
        one, other = pairs.pop()
        if type(one) is not type(other):
            return False
        if isinstance(one, dict):
            assert isinstance(other, dict)
            pairs.extend((item, other[key]) for key, item in one.items())
        elif isinstance(one, list):
            assert isinstance(other, list)
            pairs.extend(zip(one, other, strict=True))
    return True


def _at(value: object, path: JsonPath) -> object:
    for key in path:
        value = value[key]  # type: ignore[index]
    return value


def _replace_at(value: object, path: JsonPath, new: object) -> object:
    """A copy of ``value`` with the value at ``path`` replaced (the containers on the way
    are copied; the rest is shared)."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, key: _replace_at(value[key], rest, new)}
    assert isinstance(value, list) and isinstance(key, int)
    copy = list(value)
    copy[key] = _replace_at(value[key], rest, new)
    return copy


def _readable_json(text: str, value: object) -> str:
    """``text`` if it pages well by lines, else ``value`` pretty-printed."""
    longest = max((len(line) for line in text.split("\n")), default=0)
    if longest <= _READABLE_LINE:
        return text
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def _read_call(artifact: ArtifactReference) -> str:
    if artifact.binary:
        return f'read_artifact_bytes(source_id="{artifact.source_id}", start=0, length=65536)'
    return f'read_artifact(source_id="{artifact.source_id}", offset=0, limit=200)'


def _reference(artifact: ArtifactReference) -> dict[str, Any]:
    return {
        "externalized": True,
        "source_id": artifact.source_id,
        "content_sha256": artifact.content_sha256,
        "byte_size": artifact.byte_size,
        "line_count": artifact.line_count,
        "media_type": artifact.media_type,
        "summary": artifact.summary,
        "read_with": _read_call(artifact),
        "note": "This part of the result was large and is saved whole; page it with read_with.",
    }


def _size(count: int) -> str:
    """:func:`toolswap.pointer.human_size`, imported when first needed: after a save, with
    the rest of the spill machinery (the proxy does not load it to start)."""
    from ..pointer import human_size

    return human_size(count)


def outline_section(pointer: str) -> str:
    """The structure outline a pointer shows (from ``--- structure:`` to its query line),
    or ``""``."""
    start = pointer.find("--- structure:")
    if start < 0:
        return ""
    end = pointer.find("\nQuery: ", start)
    if end < 0:
        return ""
    stop = pointer.find("\n", end + 1)
    return pointer[start : stop if stop >= 0 else len(pointer)].rstrip("\n")


UNLISTED_SCHEMA: dict[str, Any] = {"type": "object", "required": ["toolswap"]}
"""The schema a result is held to when its tool has not been listed through the proxy yet
(a host may call a tool before ``tools/list``, or ask for a task's result the proxy does
not know): only a reference object at the root conforms, and it conforms to every schema
the proxy keeps (``admits_reference``). A reference placed inside failed the schema the
host then listed."""


def admits_reference(schema: object) -> bool:
    """Whether a structured result replaced by ``{"toolswap": reference}`` conforms to
    ``schema`` (a tool's ``outputSchema``)."""
    if not isinstance(schema, dict):
        return False
    sample = {
        "toolswap": {
            "externalized": True,
            "source_id": "artifact:s:tool_result_001.txt:000000000000",
            "content_sha256": "0" * 64,
            "byte_size": 1,
            "line_count": 1,
            "media_type": "application/json",
            "summary": "",
            "read_with": "",
            "note": "",
        }
    }
    return _conforms(sample, schema)


def _conforms(value: object, schema: dict[str, Any]) -> bool:
    # The MCP SDK's own dependency (untyped): only where an outputSchema is kept.
    import jsonschema  # type: ignore[import-untyped]

    try:
        jsonschema.validate(value, schema)
    except Exception:
        # Invalid, a bad schema, or one whose $ref cannot be resolved (which crashed the
        # proxy): not known to conform.
        return False
    return True


_INLINE_NOTE = (
    "[The tool's output schema admits no reference in place of its structured result, so "
    "structuredContent still holds it inline, large]"
)


def _structured_note(artifact: ArtifactReference) -> str:
    return (
        f"[The structured result is saved too, as indented JSON: {artifact.source_id} "
        f"({_size(artifact.byte_size)}, {artifact.line_count:,} lines). "
        f"Read it with {_read_call(artifact)}]"
    )


def _media_note(artifact: ArtifactReference) -> str:
    return (
        f"[{artifact.media_type}, {_size(artifact.byte_size)}: saved as "
        f"{artifact.source_id}; read it with {_read_call(artifact)}]"
    )
