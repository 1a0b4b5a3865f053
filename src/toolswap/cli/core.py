"""Page-fault and inspection commands: read, grep, ls, show, verify, demo.

The capture commands, run and wrap, are in :mod:`toolswap.cli.capture`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Unpack

import click

from ..grep import DEFAULT_TIMEOUT, GrepOptions
from ..pointer import human_size
from ..reader import CONTINUATION_MARKER, ArtifactReader
from ..verify import verify_session
from ._common import echo_json, handle_errors, is_tty
from ._group import main
from ._options import SessionOptions, SourceOptions, json_option, session_options, source_options

__all__: list[str] = []


@main.command()
@click.argument("source_id")
@click.option("--offset", type=int, default=0, show_default=True, help="First line (0-based).")
@click.option("--limit", type=int, default=200, show_default=True, help="Number of lines.")
@click.option(
    "--width", type=int, default=2000, show_default=True, help="Split lines longer than this."
)
@click.option("--byte-start", type=int, default=None, help="Read bytes from here instead of lines.")
@click.option("--byte-length", type=int, default=65536, show_default=True, help="Bytes to read.")
@click.option("--numbers/--no-numbers", default=False, help="Prefix each line with its number.")
@click.option(
    "--record",
    default=None,
    metavar="ADDRESS",
    help="Read one record of a JSON, JSON Lines, CSV or TSV artifact instead of lines: the "
    "path the outline prints (items[3777], .items[3777].name), or N for record N (0-based) "
    "of JSON Lines or a table.",
)
@source_options
@json_option()
@handle_errors
def read(
    source_id: str,
    offset: int,
    limit: int,
    width: int,
    byte_start: int | None,
    byte_length: int,
    numbers: bool,
    record: str | None,
    where: SourceOptions,
    as_json: bool,
) -> None:
    """Read lines (or bytes, or a record) of an artifact, verified against its SHA-256.

    --offset is 0-based (the line numbered N has offset N-1); --numbers and the footer on
    stderr give 1-based line numbers. A line longer than --width is split into pieces; a
    line longer than a page ends with the --byte-start that reads on from there.

    --record prints one record of a structured artifact as indented JSON (a table's row as
    an object keyed by its header), whole up to 16 MiB; reading never writes (`toolswap
    query ID PATH` saves a larger one as a new artifact).
    """
    if record is not None:
        _read_record(source_id, record, where, as_json)
        return
    reader = ArtifactReader(where.session(source_id))
    if byte_start is not None:
        chunk = reader.read_bytes(source_id, byte_start, byte_length)
        ref = reader.reference(source_id)
        if as_json:
            echo_json(chunk.to_dict(encoding="base64" if ref.binary else "utf-8"))
        elif ref.binary:
            sys.stdout.buffer.write(chunk.data)
        else:
            click.echo(chunk.text(), nl=False)
            end = chunk.start + len(chunk.data)
            note = f"[bytes {chunk.start}-{end - 1} of {chunk.size}, from line {chunk.line_no}"
            more = f"; next: --byte-start {end}]" if chunk.next_offset is not None else "]"
            click.echo(f"\n{note}{more}", err=True)
        return
    page = reader.read_lines(source_id, offset, limit, width=width)
    if as_json:
        echo_json(page.to_dict())
        return
    ref = reader.reference(source_id)
    lines = list(page.lines)
    if (
        page.next_offset is None
        and lines
        and lines[-1] == ""
        and offset + len(lines) > (ref.line_count)
    ):
        lines.pop()  # the empty string after the final newline is not a line
    no = offset
    for line in lines:
        click.echo(f"{no + 1:>7}  {line}" if numbers else line)
        if not line.endswith(CONTINUATION_MARKER):
            no += 1
    span = f"lines {offset + 1}-{no}" if no > offset else "no complete line"
    if page.continue_byte is not None:
        tail = f"line {no + 1} continues at byte {page.continue_byte}: --byte-start "
        tail += str(page.continue_byte)
        if page.next_offset is not None:
            tail += f"; next line: --offset {page.next_offset}"
        click.echo(f"[{span} of {ref.line_count}; {tail}]", err=True)
    elif page.next_offset is not None:
        click.echo(f"[{span} of {ref.line_count}; next: --offset {page.next_offset}]", err=True)


def _read_record(source_id: str, record: str, where: SourceOptions, as_json: bool) -> None:
    import shlex

    from .._invocation import cli_command
    from ..structured.address import parse_address
    from ..structured.record import read_record

    address = parse_address(record)  # a bad address never opens the artifact
    session = where.session(source_id)
    found = read_record(ArtifactReader(session), source_id, address)
    # Reading never writes: a record is printed whole (up to the record size limit); one
    # past the limit is cut, and the note names the query that saves it whole.
    cut_note = (
        f"the record is larger than {human_size(len(found.text.encode()))} and was cut; save "
        f"it whole with: {cli_command()} query {shlex.quote(found.source_id)} "
        f"{shlex.quote(found.address)}"
        if found.truncated
        else None
    )
    if as_json:
        echo_json(
            {
                "source_id": found.source_id,
                "record": found.address,
                "format": found.format,
                "line": found.line,
                "truncated": found.truncated,
                "value": None if found.truncated else json.loads(found.text),
                "note": cut_note,
            }
        )
        return
    click.echo(found.text)
    where_line = f", line {found.line}" if found.line is not None else ""
    click.echo(f"[record {found.address} of {found.source_id}{where_line}]", err=True)
    if cut_note is not None:
        click.echo(f"[{cut_note}]", err=True)


@main.command()
@click.argument("source_id")
@click.argument("pattern")
@click.option("-C", "--context", type=int, default=0, show_default=True, help="Context lines.")
@click.option("-m", "--max-matches", type=int, default=100, show_default=True, help="Stop after N.")
@click.option("-i", "--ignore-case", is_flag=True, help="Case-insensitive match.")
@click.option("-F", "--fixed-strings", "fixed", is_flag=True, help="PATTERN is a plain string.")
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Stop the search after this many seconds (an error, exit 1).",
)
@click.option(
    "--width", type=int, default=2000, show_default=True, help="Window longer lines to this."
)
@source_options
@json_option()
@handle_errors
def grep(
    source_id: str,
    pattern: str,
    where: SourceOptions,
    as_json: bool,
    **options: Unpack[GrepOptions],
) -> None:
    """Search an artifact for PATTERN; print matching lines with their 1-based numbers.

    PATTERN is a regular expression in Python syntax, matched within each line in linear
    time (backreferences and lookaround are refused). A line longer than --width shows a
    window around the match that starts at the byte given by ⟨from byte N⟩ (read more
    with `toolswap read ID --byte-start N`).
    """
    reader = ArtifactReader(where.session(source_id))
    result = reader.grep(source_id, pattern, **options)
    if as_json:
        echo_json(result.to_dict())
    else:
        if result.matches:
            click.echo(result.render())
        else:
            click.echo("no matches", err=True)
    if not result.matches:
        sys.exit(1)


@main.command(name="ls")
@session_options
@json_option("Print a JSON array.")
@handle_errors
def ls_(where: SessionOptions, as_json: bool) -> None:
    """List the session's artifacts."""
    ext = where.externalizer(create=False)
    artifacts = ext.list_artifacts()
    if as_json:
        echo_json([a.to_dict() for a in artifacts])
        return
    if not artifacts:
        click.echo("no artifacts", err=True)
        return
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table("source ID", "tool", "size", "lines", "captured", "summary")
        for a in artifacts:
            table.add_row(
                a.source_id,
                a.source_tool,
                human_size(a.byte_size),
                f"{a.line_count:,}",
                a.source.captured_at.isoformat(timespec="seconds") if a.source.captured_at else "",
                a.summary,
            )
        Console().print(table)
        return
    for a in artifacts:
        click.echo(f"{a.source_id}\t{a.source_tool}\t{a.byte_size}\t{a.line_count}\t{a.summary}")


@main.command()
@click.argument("source_id")
@source_options
@json_option()
@handle_errors
def show(source_id: str, where: SourceOptions, as_json: bool) -> None:
    """Show an artifact's record and its memory reference (no body)."""
    reader = ArtifactReader(where.session(source_id))
    ref = reader.reference(source_id)
    data = {"artifact": ref.to_dict(), "memory_reference": ref.for_memory().to_dict()}
    if as_json:
        echo_json(data)
        return
    for key, value in ref.to_dict().items():
        click.echo(f"{key}: {value}")


@main.command()
@session_options
@json_option("Print a JSON array of findings.")
@click.option("--all", "show_all", is_flag=True, help="Also list artifacts that are fine.")
@handle_errors
def verify(where: SessionOptions, as_json: bool, show_all: bool) -> None:
    """Check every artifact against its manifest record; exit 1 on any problem."""
    session = where.session()
    progress = None
    bar = None
    if is_tty() and not as_json:
        from rich.progress import Progress

        bar = Progress(transient=True)
        task = bar.add_task("verifying", total=None)
        bar.start()

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

    try:
        findings = verify_session(session, progress=progress)
    finally:
        if bar is not None:
            bar.stop()
    problems = [f for f in findings if f.kind.is_problem]
    if as_json:
        echo_json([f.to_dict() for f in findings])
    else:
        for f in findings:
            if show_all or f.kind.is_problem:
                click.echo(f"{f.kind.value}\t{f.name}\t{f.detail}")
        ok = sum(1 for f in findings if not f.kind.is_problem)
        click.echo(f"{ok} ok, {len(problems)} problem(s)", err=True)
    if problems:
        sys.exit(1)


@main.command()
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="TOOLSWAP_HOME for the demo (default: a fresh temporary directory).",
)
@handle_errors
def demo(home: Path | None) -> None:
    """Run an offline, scripted agent session over real data on this machine."""
    from ..demo import run_demo

    run_demo(home)
