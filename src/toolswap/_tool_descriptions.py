"""What a model reads about the artifact tools: their names, descriptions, parameter texts
and the bounds their schemas state.

This is a product surface, kept apart from the logic in :mod:`toolswap.tools` so it can be
read and reviewed as the model sees it. The MCP tool table (:mod:`toolswap._tool_table`)
puts these texts in the tool schemas; :func:`toolswap.tools.artifact_tools` puts them in its
functions' docstrings (:func:`tool_docstring`), where agent frameworks read them. The
descriptions tell the model what each tool returns and that the saved output should be paged
rather than the original command run again.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_QUERY_TIMEOUT",
    "GREP_ARTIFACT_DESCRIPTION",
    "GREP_WIDTH",
    "LIST_ARTIFACTS_DESCRIPTION",
    "MAX_BYTES_LENGTH",
    "MAX_GREP_TIMEOUT",
    "MAX_LIMIT",
    "MAX_MATCHES",
    "PARAMETER_DESCRIPTIONS",
    "QUERY_ARTIFACT_DESCRIPTION",
    "READ_ARTIFACT_BYTES_DESCRIPTION",
    "READ_ARTIFACT_DESCRIPTION",
    "TOOL_NAMES",
    "tool_docstring",
]

TOOL_NAMES = (
    "read_artifact",
    "read_artifact_bytes",
    "grep_artifact",
    "query_artifact",
    "list_artifacts",
)
"""The tool names the ``mcp`` pointer hint refers to."""

MAX_BYTES_LENGTH = 1 << 20
"""Upper bound on ``length`` for one byte read."""
MAX_LIMIT = 2000
"""Upper bound on ``limit`` for one line read."""
MAX_MATCHES = 500
"""Upper bound on ``max_matches`` for one search."""
MAX_GREP_TIMEOUT = 120.0
"""Upper bound on a model's ``timeout`` for one search, in seconds."""
DEFAULT_QUERY_TIMEOUT = 30.0
"""Seconds a query may run by default (the artifact's verification not included)."""
GREP_WIDTH = 1000
"""Longest matching line grep_artifact shows whole, in characters; a longer one is shown
as a window around its match."""

READ_ARTIFACT_DESCRIPTION = """\
Read lines of a saved tool output (an artifact). Large tool results are not put in the \
conversation: they are saved whole, and you get a pointer that starts with \
[Artifact: artifact:...] and shows the head, the tail and failure-looking lines. Use this \
tool to read the omitted part instead of running the original command again (the full \
output is already saved, and running it again may be slow or have side effects).

Returns lines `offset` to `offset + limit - 1` (offset is 0-based: the line numbered N in \
the pointer or in grep_artifact results has offset N-1), each prefixed with its 1-based \
line number, then a note with the offset of the next page. At most about 64 KB are \
returned per call; a very long line is split into pieces marked ⟨line continues⟩. \
The artifact's SHA-256 is checked before anything is returned.

For JSON, JSON Lines, CSV or TSV (the pointer shows a '--- structure: ...' outline), \
`record` reads one record by the path the outline prints instead of lines: \
record="items[3777]" or ".items[3777].status" in a JSON document, record="5120" (0-based, \
the 5,121st record) or ".[5120].name" in JSON Lines or a table (a row is an object keyed \
by the header). The record is returned as indented JSON; of one larger than about 64 KB \
you get its first lines and the query_artifact call that saves it whole."""

READ_ARTIFACT_BYTES_DESCRIPTION = """\
Read a byte range of a saved tool output (an artifact), for binary artifacts (images, \
archives) and for single huge lines such as minified JSON. Returns bytes `start` to \
`start + length - 1`: text artifacts as text, binary ones base64-encoded (an image that \
fits in the range is returned as an image). At most 1 MiB per call; the note at the end \
gives the next `start`. The artifact's SHA-256 is checked first."""

GREP_ARTIFACT_DESCRIPTION = f"""\
Search a saved tool output (an artifact) line by line, like grep -n -E. Returns each \
matching line with its 1-based line number, plus `context` lines before and after; read \
around a match with read_artifact(offset=line_number-1). Use this to find the error, test \
name or record you need in a large output instead of reading it all or running the \
command again. Stops after `max_matches` matches and says so.

The pattern is a regular expression in Python syntax (`ERROR|Traceback`, `\\d+ failed`, \
`(?i)timeout`) matched within one line; \\d, \\w and \\s are ASCII classes. \
Backreferences (\\1) and lookaround ((?=...), (?<!...)) are refused because they cannot run \
in linear time. A plain string is searched fastest. A search that runs longer than `timeout` \
seconds is stopped with an error. A matching line longer than {GREP_WIDTH} characters is \
shown as a window around the match that starts with ⟨from byte N⟩: read more of it with \
read_artifact_bytes(start=N)."""

QUERY_ARTIFACT_DESCRIPTION = """\
Query a saved tool output that is JSON, JSON Lines, CSV or TSV (its pointer shows a \
'--- structure: ...' outline with jq paths such as .items[3777] or .[].status). The \
expression is jq (default) or JMESPath (language="jmespath"). JSON Lines and tables are \
read as an array of records, so .[5119] is the 5,120th record and a table's cells are \
numbers, booleans or null where they read as such. Examples: '.items[3777]', \
'.items[] | select(.status != "ok") | .id', '[.[] | .severity] | group_by(.) | \
map({(.[0]): length}) | add', 'length'. Returns the results as compact JSON, one per \
line; a result larger than about 64 KB is saved as a new artifact and you get its \
pointer. The artifact's SHA-256 is checked first; a query that runs longer than \
`timeout` seconds is stopped with an error."""

LIST_ARTIFACTS_DESCRIPTION = """\
List the saved tool outputs (artifacts) of this session, newest last: source ID, the tool \
that produced it, size, line count and a one-line summary. Use it to find an artifact's \
source ID when you no longer have its pointer."""

PARAMETER_DESCRIPTIONS: dict[str, str] = {
    "source_id": (
        "The artifact's source ID, exactly as in the pointer's [Artifact: ...] line "
        "(artifact:<session>:tool_result_NNN.txt:<12 hex digits>)."
    ),
    "offset": "First line to return, 0-based (the line numbered N has offset N-1).",
    "limit": f"Number of lines to return (1-{MAX_LIMIT}).",
    "record": (
        "A record of a structured artifact, as the outline prints its path: 'items[3777]', "
        "'.items[3777].name', '.[\"a key\"]', or '5120' for record 5120 (0-based) of JSON "
        "Lines or a table. When given, offset and limit are ignored."
    ),
    "start": "First byte to return, 0-based.",
    "length": f"Number of bytes to return (1-{MAX_BYTES_LENGTH}).",
    "pattern": (
        "Regular expression (Python syntax, no backreferences or lookaround) matched within "
        "one line, e.g. 'ERROR|Traceback'."
    ),
    "context": "Lines to show before and after each match (0-50).",
    "expression": (
        "A jq expression such as '.items[3777]' or '.[] | select(.status == \"error\")' "
        "(or JMESPath with language='jmespath')."
    ),
    "language": "'jq' (default) or 'jmespath'.",
    "max_matches": f"Stop after this many matching lines (1-{MAX_MATCHES}).",
    # One text for grep's and query's timeout, whose defaults differ: each schema (and each
    # function signature) states its own default.
    "timeout": f"Seconds the search may run before it is stopped (at most {MAX_GREP_TIMEOUT:g}).",
}
"""What each tool parameter means, for tool schemas and docstrings."""


def tool_docstring(description: str, *params: str) -> str:
    """A Google-style docstring (frameworks read parameter descriptions from it)."""
    if not params:
        return description
    args = "\n".join(f"    {name}: {PARAMETER_DESCRIPTIONS[name]}" for name in params)
    return f"{description}\n\nArgs:\n{args}"
