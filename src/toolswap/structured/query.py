"""Queries over a structured artifact: a jq expression (libjq, through the ``jq`` package)
or a JMESPath expression, evaluated on the verified artifact.

JSON is queried as the document; JSON Lines and CSV/TSV as an array of records (a table's
cells typed as numbers, booleans or null where they read as such), so ``.[5119]`` is the
5,120th record either way. The expression is compiled here first, so a bad one is refused
before anything runs; then a child process (started like grep's, its address space capped)
reads the already verified descriptor, evaluates, and writes at most ``max_bytes`` of
results. A child that misses the deadline is killed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

from .._tool_descriptions import DEFAULT_QUERY_TIMEOUT
from ..artifact import ArtifactReference
from ..errors import ArtifactQueryError, ArtifactQueryTimeoutError, ArtifactReadError
from ..reader import ArtifactReader, VerifiedArtifact
from .detect import Format, sniff_on

__all__ = [
    "DEFAULT_QUERY_BYTES",
    "DEFAULT_QUERY_TIMEOUT",
    "MAX_QUERY_BYTES",
    "MAX_QUERY_TIMEOUT",
    "Language",
    "QueryResult",
    "check_expression",
    "query_artifact",
    "structured_format",
    "structured_reference",
]

Language = Literal["jq", "jmespath"]

DEFAULT_QUERY_BYTES = 16 << 20
"""Most result bytes a query collects; more are counted and reported, not kept."""
MAX_QUERY_BYTES = 256 << 20
"""The most ``max_bytes`` may be: the results are held in memory, in the child and here."""
MAX_QUERY_TIMEOUT = 3600.0
"""The longest ``timeout`` a query may be given, in seconds."""
_MAX_EXPRESSION = 64 << 10
"""The longest expression, in bytes (it is passed on the child's command line, where one
argument of 128 KiB or more is refused)."""
_SNIFF_BYTES = 64 << 10
_CHILD_MEMORY_FLOOR = 2 << 30


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What a query returned."""

    source_id: str
    expression: str
    language: Language
    format: Format
    """How the artifact was read: ``json``, ``jsonl``, ``csv`` or ``tsv``."""
    text: str
    """The results as compact JSON, one per line (as ``jq -c`` prints them)."""
    count: int
    """How many results the expression produced (all of them, also when truncated)."""
    truncated: bool
    """Results past ``max_bytes`` were left out of ``text``."""


def check_expression(expression: str, language: Language = "jq") -> None:
    """Compile ``expression``; a bad one raises :class:`ArtifactQueryError`.

    Raises:
        ArtifactQueryError: the expression is not valid jq or JMESPath (with the reason).
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ArtifactQueryError("the query expression is empty: pass a jq path such as '.[0]'")
    if "\x00" in expression:
        raise ArtifactQueryError("the query expression holds a NUL character")
    try:
        size = len(expression.encode())
    except UnicodeEncodeError:
        raise ArtifactQueryError(
            "the query expression is not UTF-8 text (it holds a lone surrogate)"
        ) from None
    if size > _MAX_EXPRESSION:
        raise ArtifactQueryError(
            f"the query expression is {size:,} bytes; at most {_MAX_EXPRESSION:,} are taken"
        )
    if language == "jq":
        import jq

        try:
            jq.compile(expression)
        except ValueError as exc:
            raise ArtifactQueryError(
                f"not a valid jq expression: {str(exc).strip()[:500]}"
            ) from None
    elif language == "jmespath":
        import jmespath
        import jmespath.exceptions

        try:
            jmespath.compile(expression)
        except jmespath.exceptions.JMESPathError as exc:
            raise ArtifactQueryError(
                f"not a valid JMESPath expression: {str(exc).strip()[:500]}"
            ) from None
    else:
        raise ArtifactQueryError(f"unknown query language {language!r}: use 'jq' or 'jmespath'")


def query_artifact(
    reader: ArtifactReader,
    source: str | ArtifactReference,
    expression: str,
    *,
    language: Language = "jq",
    timeout: float = DEFAULT_QUERY_TIMEOUT,
    max_bytes: int = DEFAULT_QUERY_BYTES,
) -> QueryResult:
    """Evaluate ``expression`` over the verified artifact ``source``.

    Raises:
        ArtifactQueryError: the expression is invalid or failed on this document, or the
            artifact is not JSON, JSON Lines, CSV or TSV.
        ArtifactQueryTimeoutError: the query ran longer than ``timeout`` seconds.
    """
    check_expression(expression, language)
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or not 0 < timeout <= MAX_QUERY_TIMEOUT
    ):
        raise ArtifactQueryError(
            f"timeout must be a number of seconds above 0 and at most {MAX_QUERY_TIMEOUT:g}, "
            f"not {timeout!r}"
        )
    if (
        not isinstance(max_bytes, int)
        or isinstance(max_bytes, bool)
        or not 1 <= max_bytes <= MAX_QUERY_BYTES
    ):
        raise ArtifactQueryError(
            f"max_bytes must be an integer from 1 to {MAX_QUERY_BYTES:,}, not {max_bytes!r}"
        )
    ref = structured_reference(reader, source)
    with reader.open_verified(ref) as art:  # the digest matches the record
        fmt = structured_format(art, "search it with grep")
        text, count, truncated = _run(art.fd, fmt, language, expression, timeout, max_bytes, ref)
        art.check_unchanged()
    if truncated and not text:
        # Nothing to show and nothing to save (a caller saving the results whole would
        # write an empty artifact and call it saved).
        raise ArtifactQueryError(
            f"{ref.source_id}: the first of the {count:,} results of {expression!r} is larger "
            f"than {max_bytes:,} bytes alone; narrow the query (pick fields, or a part such as "
            "'.items[0:100]')"
        )
    return QueryResult(
        source_id=ref.source_id,
        expression=expression,
        language=language,
        format=fmt,
        text=text,
        count=count,
        truncated=truncated,
    )


def structured_reference(
    reader: ArtifactReader, source: str | ArtifactReference
) -> ArtifactReference:
    """The reference of an artifact that may be structured (a binary one is refused).

    Raises:
        ArtifactReadError: the artifact is binary.
    """
    ref = reader.reference(source)
    if ref.binary:
        raise ArtifactReadError(
            f"{ref.source_id} is binary; only JSON, JSON Lines, CSV or TSV text is read by "
            "records or queried"
        )
    return ref


def structured_format(art: VerifiedArtifact, instead: str) -> Format:
    """The format of the verified artifact ``art``, recognised from its first bytes.

    Raises:
        ArtifactQueryError: it is not JSON, JSON Lines, CSV or TSV (``instead`` says what
            to do then).
    """
    from .outline import scan_bytes  # (the reader of records imports it anyway)

    head = art.pread(_SNIFF_BYTES, 0)
    # As far as the outline in the pointer looked: the two name one format.
    fmt = sniff_on(head, art.pread, art.size, limit=scan_bytes(art.size))
    if fmt is None:
        raise ArtifactQueryError(
            f"{art.reference.source_id} is not JSON, JSON Lines, CSV or TSV; {instead}"
        )
    return fmt


def _run(
    fd: int,
    fmt: Format,
    language: Language,
    expression: str,
    timeout: float,
    max_bytes: int,
    ref: ArtifactReference,
) -> tuple[str, int, bool]:
    memory = max(_CHILD_MEMORY_FLOOR, 12 * ref.byte_size + max_bytes)

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    argv = [
        sys.executable,
        "-m",
        "toolswap.structured._query_worker",
        str(fd),
        fmt,
        language,
        expression,
        str(max_bytes),
    ]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME", "LANG")}
    try:
        done = subprocess.run(
            argv,
            pass_fds=(fd,),
            capture_output=True,
            timeout=timeout,
            preexec_fn=bound,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ArtifactQueryTimeoutError(
            f"{ref.source_id}: the query ran longer than {timeout:g} s and was stopped; "
            "narrow it (select fewer records) or pass a longer timeout"
        ) from None
    errors = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        if done.returncode < 0 or "MemoryError" in errors:
            raise ArtifactQueryError(
                f"{ref.source_id}: the query process failed (exit {done.returncode}, "
                f"memory capped at {memory >> 20} MiB): {errors[-300:]}. A query reads the "
                "whole artifact into memory: read single records with "
                "read_artifact(record=...), or search it with grep"
            )
        raise ArtifactQueryError(f"{ref.source_id}: the query failed: {errors[-1000:]}")
    try:
        trailer = json.loads(errors.splitlines()[-1])
        count, truncated = int(trailer["count"]), bool(trailer["truncated"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ArtifactQueryError(
            f"{ref.source_id}: the query process said: {errors[-300:]}"
        ) from None
    return done.stdout.decode("utf-8", "replace"), count, truncated
