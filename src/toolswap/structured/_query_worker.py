"""The child process that evaluates one query (``toolswap.structured.query`` starts it).

argv: FD FORMAT LANGUAGE EXPRESSION MAX_BYTES. The artifact is read from the inherited,
already verified descriptor FD; results go to stdout as compact JSON, one per line, until
MAX_BYTES; a JSON trailer on stderr says how many there were. An expression that fails
exits 2 with the reason on stderr. The parent enforces the deadline and bounds memory.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["main"]

_BLOCK = 1 << 20


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    pos = 0
    while True:
        block = os.pread(fd, _BLOCK, pos)
        if not block:
            return b"".join(parts)
        parts.append(block)
        pos += len(block)


def _records(fmt: str, data: bytes) -> Any:
    if fmt == "json":
        return json.loads(data)
    if fmt == "jsonl":
        return [json.loads(line) for line in data.split(b"\n") if line.strip()]
    import io
    from itertools import chain, islice

    from ._tables import TYPING_ROWS, table_rows, text_columns, typed_row

    text = io.StringIO(data.decode("utf-8-sig", "replace"), newline="")
    rows = table_rows(text, fmt)
    header = next(rows, [])
    filled = filter(None, rows)
    # The first rows decide which columns hold text, as for the outline and record reads.
    first = list(islice(filled, TYPING_ROWS))
    text_cols = text_columns(header, first)
    return [typed_row(header, row, text_cols) for row in chain(first, filled)]


def _results(fmt: str, language: str, expression: str, data: bytes) -> Iterator[object]:
    if language == "jmespath":
        import jmespath

        yield jmespath.search(expression, _records(fmt, data))
        return
    import jq

    program = jq.compile(expression)
    if fmt == "json":
        yield from program.input_text(data.decode("utf-8", "replace"))
    elif fmt == "jsonl":
        yield from program.input_text(data.decode("utf-8", "replace"), slurp=True)
    else:
        yield from program.input_value(_records(fmt, data))


def main(argv: list[str]) -> int:
    fd, fmt, language, expression, max_bytes = argv
    limit = int(max_bytes)
    data = _read_all(int(fd))
    out = sys.stdout.buffer
    written = 0
    count = 0
    truncated = False
    try:
        for value in _results(fmt, language, expression, data):
            count += 1
            if truncated:
                continue
            line = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            if written + len(line) > limit:
                truncated = True
                continue
            out.write(line)
            written += len(line)
    except Exception as exc:  # jq's and jmespath's runtime errors, a document that is not JSON
        sys.stderr.write(f"{type(exc).__name__}: {exc}"[:2000])
        return 2
    out.flush()
    sys.stderr.write(json.dumps({"count": count, "truncated": truncated}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
