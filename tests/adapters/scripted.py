"""What the adapter tests share: a 5 MB tool output with one needle, and the script a
model follows (call the tool, grep the artifact its pointer names, read the line found)."""

from __future__ import annotations

import re

NEEDLE_LINE = 81_234
NEEDLE = "ERROR shard 7 lost its lease"
BIG = "".join(
    f"row {i:06d}: {NEEDLE if i == NEEDLE_LINE else 'ok, nothing to report here'} {'.' * 20}\n"
    for i in range(1, 120_001)
)
assert len(BIG) > 5_000_000
POINTER_MAX = 32 * 1024


def source_id(pointer: str) -> str:
    found = re.search(r"\[Artifact: (artifact:[^\]]+)\]", pointer)
    assert found, pointer[:300]
    return found.group(1)


def line_number(grep_answer: str) -> int:
    found = re.search(r"^(\d+):row", grep_answer, re.MULTILINE)
    assert found, grep_answer[:500]
    return int(found.group(1))


def expected_line() -> str:
    return BIG.splitlines()[NEEDLE_LINE - 1]


def search_logs(service: str) -> str:
    """Search a service's logs.

    Args:
        service: the service name.
    """
    return BIG
