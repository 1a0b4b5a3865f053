"""``toolswap query``: a jq or JMESPath query over a structured artifact."""

from __future__ import annotations

import click

from ._common import SHOW_BYTES, echo_json, handle_errors, save_if_large
from ._group import main
from ._options import SourceOptions, json_option, source_options

__all__: list[str] = []


@main.command()
@click.argument("source_id")
@click.argument("expression")
@click.option("--jmespath", "use_jmespath", is_flag=True, help="EXPRESSION is JMESPath, not jq.")
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Stop the query after this many seconds (an error, exit 1).",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=SHOW_BYTES,
    show_default=True,
    help="Print at most this much; a larger result is saved as a new artifact instead.",
)
@source_options
@json_option()
@handle_errors
def query(
    source_id: str,
    expression: str,
    use_jmespath: bool,
    timeout: float,
    max_bytes: int,
    where: SourceOptions,
    as_json: bool,
) -> None:
    """Query a JSON, JSON Lines, CSV or TSV artifact with a jq EXPRESSION.

    JSON Lines and tables are read as an array of records (`.[5119]` is the 5,120th);
    the outline in the pointer names the paths (`.items[3777]`, `.items[].status`). The
    results are printed as compact JSON, one per line; a result larger than --max-bytes
    is saved as a new artifact of the same session and its pointer printed instead.
    """
    from ..reader import ArtifactReader
    from ..structured.query import Language, check_expression, query_artifact

    language: Language = "jmespath" if use_jmespath else "jq"
    check_expression(expression, language)
    session = where.session(source_id)
    result = query_artifact(
        ArtifactReader(session), source_id, expression, language=language, timeout=timeout
    )
    saved = save_if_large(
        session,
        result.text,
        truncated=result.truncated,
        max_bytes=max_bytes,
        tool="query",
        summary=f"{result.count} results of {expression}",
    )
    if as_json:
        echo_json(
            {
                "source_id": result.source_id,
                "expression": expression,
                "language": language,
                "format": result.format,
                "count": result.count,
                "truncated": result.truncated,
                # (split at newlines only: splitlines also splits at U+2028 in a string)
                "results": None if saved else result.text.split("\n")[:-1],
                "saved_as": saved.artifact.source_id if saved else None,
            }
        )
    elif saved is not None:
        click.echo(saved.context_text, nl=False)
    else:
        click.echo(result.text, nl=False)
