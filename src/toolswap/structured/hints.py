"""How the pointer presents an outline: the outline, then the exact calls that read a
record it names and query it."""

from __future__ import annotations

import json
import re
import shlex

__all__ = ["QUERY_HINTS", "RARE_HEADING", "lists_failures", "structured_section"]

_FAILURES = "records that look like failures"
"""How the outline heads the records it lists when a failure is among them (``_render``)."""
RARE_HEADING = "records that are rare"
"""How the outline heads the records it lists when all are only rare (``_render``)."""

QUERY_HINTS: dict[str, str] = {
    "cli": (
        "Record: {command} read {source_id}{scope} --record {example}\n"
        "Query: {command} query {source_id}{scope} {example}   (jq; --jmespath for JMESPath)"
    ),
    "mcp": (
        'Record: read_artifact(source_id="{source_id}", record={example})\n'
        'Query: query_artifact(source_id="{source_id}", expression={example})'
    ),
    "python": (
        'Record: externalizer.read_record("{source_id}", {example})\n'
        'Query: externalizer.query("{source_id}", {example})'
    ),
}
"""The lines under an outline: the call that reads the record a path names (the path as
the outline prints it is the address), and the call that queries the artifact (jq)."""


def structured_section(outline: str, hint: str, fields: dict[str, str]) -> str:
    """The outline with its query line, or ``""`` when there is no outline.

    Args:
        outline: the capture's outline (its first record path after ``<- `` or ``: `` is
            the example queried).
        hint: ``cli``, ``mcp`` or ``python``.
        fields: ``source_id``, ``scope`` and ``command`` for the calls.
    """
    if not outline:
        return ""
    example = _example(outline)
    template = QUERY_HINTS.get(hint, QUERY_HINTS["cli"])
    if example == ".":  # no record path to show: only the query line
        template = template.split("\n", 1)[1]
    line = template.format(
        command=fields.get("command", "toolswap"),
        source_id=fields["source_id"],
        scope=fields.get("scope", ""),
        # Quoted for where it goes: a shell word, or a string literal of the call.
        example=shlex.quote(example) if hint == "cli" else json.dumps(example),
    )
    text = outline if outline.endswith("\n") else outline + "\n"
    return text + line + "\n"


_RECORD_PATH = re.compile(
    r'\.(?:[A-Za-z_][A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*|\.?\["(?:[^"\\]|\\.)*"\]|\[[0-9]+\])*'
    r"(?=: )"
)
"""A record's path at the start of its line, before the ``: `` that the record follows (a
key may hold ``: `` itself: ``.["data: items"][0]``)."""


def lists_failures(outline: str) -> bool:
    """Whether the outline lists records that look like failures (when it lists none, the
    failure lines the text scan found keep their room in the pointer)."""
    return any(line.startswith(_FAILURES) for line in outline.split("\n"))


def _example(outline: str) -> str:
    """A record path the outline names (a failure-looking one first), as a jq path."""
    lines = outline.split("\n")  # (not splitlines: a key may hold U+2028)
    for marker in (_FAILURES, RARE_HEADING, "sample records:"):
        for i, line in enumerate(lines):
            if line.startswith(marker) and i + 1 < len(lines):
                found = _RECORD_PATH.match(lines[i + 1])
                if found is not None:
                    return found.group()
    return "."
