"""How a text output becomes the bytes of its artifact, and how many characters bytes hold.

Shared by the threshold rule (``settings``) and the capture (``externalizer``), so an
output is measured exactly as it is saved.
"""

from __future__ import annotations

import re

__all__ = ["encode_output", "escaped_bytes", "lone_surrogate", "shell_word", "utf8_chars"]

# Lone surrogates other than the U+DC80..U+DCFF that ``surrogateescape`` maps back to bytes.
_LONE_SURROGATE = "[\ud800-\udc7f\udd00-\udfff]"  # compiled on first use (re's cache)


def encode_output(text: str) -> bytes:
    """UTF-8 of ``text``; escaped bytes (``os.fsdecode``) come back as the original bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Not encodable as UTF-8 at all: keep the text, mark each bad spot with U+FFFD.
        return re.sub(_LONE_SURROGATE, "\ufffd", text).encode("utf-8", "surrogateescape")


def lone_surrogate(text: str) -> bool:
    """``text`` holds a surrogate code point, which strict UTF-8 (every record toolswap
    writes) cannot encode: a lone one, or a byte ``os.fsdecode`` escaped."""
    return re.search("[\ud800-\udfff]", text) is not None


def escaped_bytes(text: str) -> str:
    """``text`` (an argument as ``os.fsdecode`` gives it) with each byte that is not UTF-8
    written as ``\\xNN``: a file name in Latin-1 is recorded as ``caf\\xe9.txt``."""
    if not lone_surrogate(text):
        return text
    escaped = re.sub(_LONE_SURROGATE, "\ufffd", text).encode("utf-8", "surrogateescape")
    return escaped.decode("utf-8", "backslashreplace")


def shell_word(text: str) -> str:
    """``text`` (a path as ``os.fsdecode`` gives it) as one word a shell reads back to the
    same bytes: ``shlex.quote``, or, for bytes that are not UTF-8, bash's ``$'...'`` with
    each such byte as ``\\xNN`` (a pointer naming a Latin-1 session directory could not be
    printed at all)."""
    import shlex

    if not lone_surrogate(text):
        return shlex.quote(text)
    quoted = escaped_bytes(text.replace("\\", "\\\\").replace("'", "\\'"))
    return f"$'{quoted}'"


def utf8_chars(data: bytes) -> int:
    """Characters in UTF-8 ``data`` (bytes that are not continuation bytes)."""
    if data.isascii():
        return len(data)
    return len(data) - sum(data.count(bytes([b])) for b in range(0x80, 0xC0))
