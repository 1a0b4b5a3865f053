"""Deterministic payloads shared by the test upstream server and the tests that check them."""

from __future__ import annotations

import struct
import zlib


def big_lines(lines: int) -> str:
    """Numbered lines with one failure line in the middle (the needle)."""
    out = []
    needle = lines // 2
    for i in range(1, lines + 1):
        if i == needle:
            out.append(f"line {i:06d}: ERROR disk quota exceeded while writing shard {i}")
        else:
            out.append(f"line {i:06d}: ok, processed record {i * 7919 % 100003}")
    return "\n".join(out) + "\n"


def inventory(count: int) -> dict[str, object]:
    """The structured result of ``big_structured``."""
    return {
        "count": count,
        "records": [
            {"id": i, "name": f"item-{i:05d}", "status": "lost" if i == count // 3 else "ok"}
            for i in range(count)
        ],
    }


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG whose pixels do not compress (so its size tracks width*height)."""
    raw = bytearray()
    state = 12345
    for _ in range(height):
        raw.append(0)
        for _ in range(width * 3):
            state = (state * 1103515245 + 12345) & 0x7FFFFFFF
            raw.append(state >> 16 & 0xFF)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 1))
        + chunk(b"IEND", b"")
    )
