"""Queries and record reads on inputs a review found wrong: bad arguments, a BOM, TSV
quotes, table cells that only look like numbers, results too large to keep, and the
record path a pointer names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolswap import ArtifactQueryError, ToolResultExternalizer
from toolswap.structured.hints import structured_section
from toolswap.structured.query import query_artifact
from toolswap.structured.record import read_record


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _files(externalizer: ToolResultExternalizer) -> list[str]:
    return sorted(p.name for p in externalizer.session.root.rglob("*") if p.is_file())


# -- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "options", "says"),
    [
        (".a\x00", {}, "NUL"),
        ('"\ud800"', {}, "lone surrogate"),
        ("'\ud800'", {"language": "jmespath"}, "lone surrogate"),
        ("." + " " * 140_000, {}, "at most 65,536"),
        (".a", {"timeout": float("nan")}, "timeout"),
        (".a", {"timeout": float("inf")}, "timeout"),
        (".a", {"timeout": 1e300}, "timeout"),
        (".a", {"max_bytes": 10**30}, "max_bytes"),
        (".a", {"max_bytes": 2**40}, "max_bytes"),
        (".a", {"max_bytes": True}, "max_bytes"),
    ],
)
def test_a_bad_argument_is_a_typed_error_and_nothing_is_written(
    externalizer: ToolResultExternalizer, expression: str, options: dict[str, Any], says: str
) -> None:
    """Each escaped as ValueError, UnicodeEncodeError, OSError (E2BIG), OverflowError or
    SubprocessError, or held the whole result in memory (a review)."""
    ref = externalizer.externalize(json.dumps({"a": list(range(100))}), "t").artifact
    before = _files(externalizer)
    with pytest.raises(ArtifactQueryError, match=says):
        query_artifact(externalizer.reader, ref, expression, **options)
    assert _files(externalizer) == before


def test_a_first_result_larger_than_the_limit_is_an_error_not_an_empty_artifact(
    externalizer: ToolResultExternalizer,
) -> None:
    """The results past ``max_bytes`` are counted, not kept; when even the first was too
    large, the tools saved the empty text as a new artifact and called it saved (every
    caller goes through ``query_artifact``, which now says so instead)."""
    document = json.dumps({"big": ["x" * 100] * 2000, "small": 1})
    ref = externalizer.externalize(document, "t").artifact
    before = _files(externalizer)
    with pytest.raises(ArtifactQueryError, match=r"first of the 1 results .* larger than"):
        query_artifact(externalizer.reader, ref, ".big", max_bytes=1000)
    assert _files(externalizer) == before
    kept = query_artifact(externalizer.reader, ref, ".big[]", max_bytes=1000)
    assert kept.truncated and kept.count == 2000 and kept.text.count("\n") == 9


# -- a BOM, tables -------------------------------------------------------------------------


def test_a_bom_is_read_past_by_record_reads_as_by_queries_and_the_outline(
    externalizer: ToolResultExternalizer,
) -> None:
    """yajl refuses a BOM: the record read failed where the query answered, and the
    pointer's own record line for JSON Lines named a read that failed (a review)."""
    document = "\ufeff" + json.dumps({"a": [1, 2], "items": [{"id": i} for i in range(50)]})
    ref = externalizer.externalize(document, "t").artifact
    assert json.loads(read_record(externalizer.reader, ref, "a").text) == [1, 2]
    lines = "\ufeff" + "".join(json.dumps({"id": i, "v": "x" * 50}) + "\n" for i in range(3000))
    result = externalizer.externalize(lines, "t")
    assert "--- structure: JSON Lines, 3,000 records" in result.context_text
    assert json.loads(read_record(externalizer.reader, result.artifact, "0").text)["id"] == 0
    table = "\ufeffid,name\n" + "".join(f"{i},n{i}\n" for i in range(3000))
    result = externalizer.externalize(table, "t")
    assert 'header: ["id","name"]' in result.context_text, result.context_text
    assert query_artifact(externalizer.reader, result.artifact, ".[50].id").text == "50\n"
    found = read_record(externalizer.reader, result.artifact, "50")
    assert json.loads(found.text) == {"id": 50, "name": "n50"}


def test_a_tsv_cell_that_opens_with_a_quote_is_a_character_of_it(
    externalizer: ToolResultExternalizer,
) -> None:
    """TSV has no quoting: read with CSV's, one cell opening with an unmatched quote
    swallowed the rest of 2,000 rows (3 counted by the outline, the query and the read)."""
    rows = "".join(f"{i}\t{'' if i != 5 else chr(34)}n{i}\n" for i in range(2000))
    result = externalizer.externalize("id\tname\n" + rows, "t")
    assert "--- structure: TSV table, 2,000 rows" in result.context_text
    assert query_artifact(externalizer.reader, result.artifact, "length").text == "2000\n"
    assert query_artifact(externalizer.reader, result.artifact, ".[5].name").text == '"\\"n5"\n'
    found = read_record(externalizer.reader, result.artifact, "1999")
    assert json.loads(found.text) == {"id": 1999, "name": "n1999"}


@pytest.mark.parametrize(
    ("cell", "value"),
    [("١٢٣", "١٢٣"), ("1e999", "1e999"), ("00501", "00501"), ("-0.5", -0.5), ("0", 0)],
)
def test_a_cell_is_a_number_only_as_json_writes_one(
    externalizer: ToolResultExternalizer, cell: str, value: object
) -> None:
    """Arabic-Indic digits read as 123, ``1e999`` as infinity (``Infinity``, not JSON, in
    a record read) and a postal code lost its leading zero (a review)."""
    table = "id,v\n" + "".join(f"{i},{cell if i == 7 else i}\n" for i in range(300))
    ref = externalizer.externalize(table, "t").artifact
    found = read_record(externalizer.reader, ref, "7")
    assert json.loads(found.text) == {"id": 7, "v": value}
    assert json.loads(query_artifact(externalizer.reader, ref, ".[7].v").text) == value


def _hashes(rows: int) -> list[str]:
    """Short commit hashes of a real shape: about 1 in 30 spells a JSON number."""
    import hashlib

    return [hashlib.sha1(str(i).encode()).hexdigest()[:8] for i in range(rows)]


def test_a_column_of_text_keeps_the_cells_that_look_like_numbers_as_text(
    externalizer: ToolResultExternalizer,
) -> None:
    """Read cell by cell, a column of short hashes held ``38995e87`` as ``3.8995e+91`` and
    ``1234567`` as a number: the outline typed it ``str|int|float``, and a query for a
    hash or a record read gave a number (a review of the noted defects)."""
    hashes = _hashes(3000)
    looks = [i for i, h in enumerate(hashes) if _spells_number(h)]
    assert any("e" in hashes[i] for i in looks), "the fixture must hold such hashes"
    table = "hash\ttime\n" + "".join(f"{h}\t{1700000000 + i}\n" for i, h in enumerate(hashes))
    result = externalizer.externalize(table, "t")
    assert "{hash: str, time: int}" in result.context_text, result.context_text
    at = next(i for i in looks if "e" in hashes[i])
    found = json.loads(read_record(externalizer.reader, result.artifact, str(at)).text)
    assert found == {"hash": hashes[at], "time": 1700000000 + at}
    answer = query_artifact(
        externalizer.reader, result.artifact, f'[.[] | select(.hash == "{hashes[at]}")] | length'
    )
    assert answer.text == "1\n"
    kinds = query_artifact(externalizer.reader, result.artifact, "[.[].hash | type] | unique")
    assert json.loads(kinds.text) == ["string"]


def _spells_number(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_a_column_of_numbers_with_a_few_placeholders_stays_numbers(
    externalizer: ToolResultExternalizer,
) -> None:
    """The other side of the rule: ``N/A`` in 1 row of 20 leaves the column numbers (and
    itself text), and a column that is empty but for numbers is numbers."""
    rows = "".join(
        f"{i},{'N/A' if i % 20 == 3 else i * 1.5},{'' if i % 2 else i}\n" for i in range(600)
    )
    result = externalizer.externalize("id,price,sparse\n" + rows, "t")
    ref = result.artifact
    assert json.loads(read_record(externalizer.reader, ref, "4").text) == {
        "id": 4,
        "price": 6.0,
        "sparse": 4,
    }
    assert json.loads(read_record(externalizer.reader, ref, "3").text)["price"] == "N/A"
    assert query_artifact(externalizer.reader, ref, "[.[].sparse | numbers] | length").text == (
        "300\n"
    )


def test_only_the_first_rows_decide_a_column_of_text(
    externalizer: ToolResultExternalizer,
) -> None:
    """Which columns hold text is decided from the first 200 rows, the same for the
    outline, a record read and a query (a record read of row 2,500 reads no further than
    it; a query sees every row): numbers past them stay numbers in a column of numbers."""
    rows = "".join(f"{i},{i if i < 200 or i % 10 == 1 else 'x' + str(i)}\n" for i in range(3000))
    ref = externalizer.externalize("id,v\n" + rows, "t").artifact
    assert json.loads(read_record(externalizer.reader, ref, "2501").text)["v"] == 2501
    assert json.loads(query_artifact(externalizer.reader, ref, ".[2501].v").text) == 2501
    assert json.loads(query_artifact(externalizer.reader, ref, ".[2500].v").text) == "x2500"


def test_blank_lines_do_not_change_which_columns_hold_text(
    externalizer: ToolResultExternalizer,
) -> None:
    """The outline decided from its first 200 rows blank ones included, record reads and
    queries from the first 200 that are not blank: the outline showed ``v: 0`` as a
    number where a read and a query gave ``"5"`` (a review)."""
    rows = [f"{i},{i}" for i in range(80)] + [""] * 120 + [f"{i},x{i}" for i in range(80, 400)]
    result = externalizer.externalize("id,v\n" + "\n".join(rows) + "\n", "t")
    assert "{id: int, v: str}" in result.context_text, result.context_text
    assert json.loads(read_record(externalizer.reader, result.artifact, "5").text)["v"] == "5"
    assert query_artifact(externalizer.reader, result.artifact, ".[5].v").text == '"5"\n'


def test_placeholders_for_missing_values_do_not_make_a_column_of_numbers_text(
    externalizer: ToolResultExternalizer,
) -> None:
    """250 rows of R's ``NA`` before the numbers made the column text in every row, and
    ``select(.duration_s > 900)`` compared strings (a review); the placeholders count for
    neither side, and stay text themselves."""
    rows = "".join(f"j{i},{'NA' if i < 250 else i * 2}\n" for i in range(1000))
    ref = externalizer.externalize("job,duration_s\n" + rows, "t").artifact
    numbers = query_artifact(externalizer.reader, ref, "[.[].duration_s | numbers] | length")
    assert numbers.text == "750\n"
    assert json.loads(read_record(externalizer.reader, ref, "3").text)["duration_s"] == "NA"
    assert json.loads(read_record(externalizer.reader, ref, "300").text)["duration_s"] == 600


# -- the pointer and the CLI ---------------------------------------------------------------


def test_the_record_a_pointer_names_may_have_a_key_holding_a_colon() -> None:
    """The path was cut at its first ``": "``: ``.["data`` (a review)."""
    outline = 'sample records:\n.["data: items"][0]: {"id":0}\n'
    section = structured_section(outline, "mcp", {"source_id": "s"})
    assert 'record=".[\\"data: items\\"][0]"' in section


def test_the_cli_s_json_results_split_at_newlines_only(
    tmp_path: Path, externalizer: ToolResultExternalizer
) -> None:
    """``splitlines`` also splits at U+2028 inside a string: the results were not JSON."""
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"items": [{"s": "a\u2028b"}] * 4000}), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "toolswap", "run", "--", "cat", str(doc)],
        capture_output=True,
        env=_env(),
        check=True,
        cwd=tmp_path,
    )
    source_id = run.stdout.decode().splitlines()[0].removeprefix("[Artifact: ").rstrip("]")
    query = subprocess.run(
        [sys.executable, "-m", "toolswap", "query", "--json", source_id, ".items[0].s"],
        capture_output=True,
        env=_env(),
        cwd=tmp_path,
        check=True,
    )
    results = json.loads(query.stdout)["results"]
    assert [json.loads(r) for r in results] == ["a\u2028b"]


# -- a second look (a review of the fixes above) -------------------------------------------


def test_a_tsv_is_read_without_quoting_past_its_first_bytes_too(
    externalizer: ToolResultExternalizer,
) -> None:
    """Deciding the quoting from the first 64 KiB (a first fix) let an unterminated quote
    past them swallow the rest again, and quoting dropped the quotes of ``"WIP" do not
    merge`` (a review). TSV is read as IANA defines it: a quote is a character of its
    cell, in every reader."""
    subjects = {5: '"WIP" do not merge', 6: '"quoted"', 7: '""', 8000: '"unterminated'}
    rows = "".join(f"{i}\t{subjects.get(i, f'subject {i}')}\n" for i in range(12_000))
    result = externalizer.externalize("id\tsubject\n" + rows, "t")
    assert "--- structure: TSV table, 12,000 rows" in result.context_text
    ref = result.artifact
    assert query_artifact(externalizer.reader, ref, "length").text == "12000\n"
    for row, subject in subjects.items():
        found = json.loads(read_record(externalizer.reader, ref, str(row)).text)
        assert found == {"id": row, "subject": subject}
        queried = query_artifact(externalizer.reader, ref, f".[{row}].subject").text
        assert json.loads(queried) == subject
    assert json.loads(read_record(externalizer.reader, ref, "11999").text)["id"] == 11_999


def test_a_zero_padded_exit_code_in_a_table_is_still_a_failure(
    externalizer: ToolResultExternalizer,
) -> None:
    """A cell with a leading zero stays text (the first fix), but ``01`` as an exit code
    is a non-zero exit, and ``00`` as an error is none (a review)."""
    rows = [f"t{i},{'02' if i == 1500 else '00'},{'00'}" for i in range(3000)]
    result = externalizer.externalize("name,rc,error\n" + "\n".join(rows) + "\n", "t")
    failures = result.context_text.split("records that look like failures")[1]
    assert ".[1500]" in failures and "rc=2" in failures
    assert "error field" not in result.context_text


def test_a_bom_before_a_quoted_header_cell_and_a_bom_line_before_json_lines(
    externalizer: ToolResultExternalizer,
) -> None:
    """The BOM was dropped from the parsed header, after its quote had been read as a
    character (``"id"``); and a first line holding only a BOM was counted as record 0 by
    the record read alone (a review)."""
    table = '\ufeff"id",name\n' + "".join(f"{i},n{i}\n" for i in range(3000))
    ref = externalizer.externalize(table, "t").artifact
    assert query_artifact(externalizer.reader, ref, ".[3].id").text == "3\n"
    assert json.loads(read_record(externalizer.reader, ref, "3").text) == {"id": 3, "name": "n3"}
    lines = "\ufeff\n" + "".join(json.dumps({"id": i, "v": "x" * 50}) + "\n" for i in range(3000))
    ref = externalizer.externalize(lines, "t").artifact
    for number in (0, 1, 2999):
        found = read_record(externalizer.reader, ref, str(number))
        assert json.loads(found.text)["id"] == number and found.line == number + 2


def test_the_record_a_pointer_names_may_have_a_key_holding_a_line_separator() -> None:
    outline = 'sample records:\n.["a\u2028b"][0]: {"id":0}\n'
    section = structured_section(outline, "cli", {"source_id": "s"})
    assert "--record '.[\"a\u2028b\"][0]'" in section
