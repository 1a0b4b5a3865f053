"""How the pointer presents an outline: the outline, then the exact call that queries it."""

from __future__ import annotations

__all__ = ["QUERY_HINTS", "structured_section"]

QUERY_HINTS: dict[str, str] = {
    "cli": "Query: toolswap query {source_id}{scope} '{example}'   (jq; --jmespath for JMESPath)",
    "mcp": 'Query: query_artifact(source_id="{source_id}", expression="{example}")',
    "python": 'Query: externalizer.query("{source_id}", "{example}")',
}
"""The line under an outline that says how to ask for a record or a field (jq paths)."""


def structured_section(outline: str, hint: str, fields: dict[str, str]) -> str:
    """The outline with its query line, or ``""`` when there is no outline.

    Args:
        outline: the capture's outline (its first record path after ``<- `` or ``: `` is
            the example queried).
        hint: ``cli``, ``mcp`` or ``python``.
        fields: ``source_id`` and ``scope`` for the query line.
    """
    if not outline:
        return ""
    example = _example(outline)
    line = QUERY_HINTS.get(hint, QUERY_HINTS["cli"]).format(
        source_id=fields["source_id"], scope=fields.get("scope", ""), example=example
    )
    text = outline if outline.endswith("\n") else outline + "\n"
    return text + line + "\n"


def _example(outline: str) -> str:
    """A record path the outline names (a failure-looking one first), as a jq path."""
    lines = outline.splitlines()
    for marker in ("records that look like failures", "sample records:"):
        for i, line in enumerate(lines):
            if line.startswith(marker) and i + 1 < len(lines):
                path = lines[i + 1].split(": ", 1)[0]
                if path.startswith("."):
                    return path
    return "."
