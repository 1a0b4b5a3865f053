"""Structured output: recognised from its head, outlined in the pointer, queried with jq."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from toolswap import ArtifactQueryError, ArtifactQueryTimeoutError, ToolResultExternalizer
from toolswap.structured import Format, inspect_output, sniff
from toolswap.structured.outline import Outline, outline
from toolswap.structured.query import query_artifact
from toolswap.tools import ArtifactTools, artifact_tools

POINTER_BUDGET = 8 * 1024


def _items(count: int = 6000, bad: int = 3777) -> list[dict[str, object]]:
    items: list[dict[str, object]] = [
        {"id": i, "name": f"item-{i}", "tags": ["a", "b"], "price": i * 1.25, "status": "ok"}
        for i in range(count)
    ]
    items[bad] = {**items[bad], "status": "failed", "error": "upstream timed out"}
    return items


def _document() -> str:
    return json.dumps({"total": 6000, "page": 1, "items": _items()})


def _read(data: bytes):  # type: ignore[no-untyped-def]
    return lambda count, offset: data[offset : offset + count]


# -- detection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": [1, 2, 3]}', "json"),
        ('{\n  "a": [\n    1\n  ]\n}\n', "json"),
        ('[{"a": 1}, {"a": 2}]', "json"),
        ('{"a": 1}\n{"a": 2}\n{"a": 3}\n', "jsonl"),
        ("id,name,price\n1,a,2.5\n2,b,3\n3,c,4\n", "csv"),
        ("id\tname\tprice\n1\ta\t2.5\n2\tb\t3\n3\tc\t4\n", "tsv"),
        ("tests/test_a.py::test_x PASSED\ntests/test_a.py::test_y FAILED\n", None),
        ("[INFO] building, please wait\n[ERROR] failed, see above\nplain line\n", None),
        ("hello, world\nthis is prose, with commas\nand more\n", None),
    ],
)
def test_the_format_is_recognised_from_the_content(text: str, expected: str | None) -> None:
    assert sniff(text.encode(), complete=True) == expected


# -- the outline in the pointer ------------------------------------------------------------


def test_a_json_document_pointer_shows_its_shape_counts_and_the_failed_record(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize(_document(), "http_get")
    text = result.context_text

    assert len(text.encode()) <= POINTER_BUDGET
    assert '{"total": 6000, "page": 1, "items": [6,000 objects]}' in text
    assert ".items[]: 6,000 objects {id: int, name: str, tags: [str], price: float" in text
    for path in ("id", "name", "tags", "tags[]", "price", "status", "error"):
        assert f".items[].{path}  " in text
    assert '.items[3777]: {"id":3777' in text
    assert "status=failed" in text
    # The outline comes before the raw head, with the exact call that queries it.
    assert text.index("--- structure: JSON object") < text.index("--- head:")
    assert f"toolswap query {result.artifact.source_id}" in text


def test_json_lines_are_outlined_and_a_line_that_is_not_json_is_named(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = [json.dumps(item) for item in _items(3000, bad=1500)]
    lines[2000] = "Traceback (most recent call last): not JSON"
    result = externalizer.externalize("\n".join(lines) + "\n", "events")
    text = result.context_text

    assert "--- structure: JSON Lines, 2,999 records" in text
    assert "lines that are not JSON: 2001" in text
    assert ".[1500]:" in text and "error field" in text


def test_two_lines_that_are_json_only_joined_are_not_records() -> None:
    """``{...},[{...}`` and ``{...}]`` are no JSON alone, but two values once a batch of
    lines is joined into one array: each line is read on its own."""
    lines = [json.dumps({"id": i, "status": "ok"}) for i in range(60)]
    lines += ['{"id": 60, "status": "ok"},[{"id": 61, "status": "failed"}', '{"id": 62}]']
    lines += [json.dumps({"id": i, "status": "ok"}) for i in range(63, 70)]
    data = ("\n".join(lines) + "\n").encode()
    text = inspect_output(data, _read(data), len(data))
    assert "JSON Lines, 67 records" in text
    assert "lines that are not JSON: 61, 62" in text


@pytest.mark.parametrize(
    ("blob", "between", "start"),
    [
        (20_000, "\n", ""),
        (40_000, "\n", ""),
        (20_000, "\n\r\n", ""),
        (20_000, "\n" + " " * 300 + "\n", ""),
        (20_000, "\n", "\ufeff"),
    ],
)
def test_json_lines_of_records_longer_than_the_head_are_json_lines(
    externalizer: ToolResultExternalizer, blob: int, between: str, start: str
) -> None:
    """The head the capture keeps (and the one a query reads) cuts the first record, or
    holds only it: it was taken for one document, which then failed to parse, so no
    outline, and a query or a read of record 7 saw the first object (found by a review)."""
    from toolswap.structured.record import read_record

    records = [
        {"id": i, "status": "failed" if i == 7 else "ok", "blob": "x" * blob} for i in range(20)
    ]
    text = start + between.join(json.dumps(r) for r in records) + "\n"
    result = externalizer.externalize(text, "bash")
    assert "--- structure: JSON Lines, 20 records, parsed whole" in result.context_text
    assert '"status": "failed"' in read_record(externalizer.reader, result.artifact, "7").text
    found = query_artifact(externalizer.reader, result.artifact, ".[7].status")
    assert (found.format, found.text) == ("jsonl", '"failed"\n')
    # One document on one line stays one document, with or without a newline at its end.
    for end in ("", "\n", "\n\n"):
        one = json.dumps({"items": records}) + end
        assert "--- structure: JSON object" in externalizer.externalize(one, "bash").context_text


def test_failures_in_a_tree_s_nested_entries_are_weighed_against_all_its_entries() -> None:
    """8 missing packages among the 60 entries of a tree (10 records, 50 nested): weighed
    against the 10 records alone they read as "the norm" and none was listed."""
    deps: dict[str, dict[str, object]] = {}
    for i in range(10):
        inner = {f"sub-{i}-{j}": {"version": "1.0.0"} for j in range(5)}
        deps[f"pkg-{i}"] = {"version": "2.0.0", "dependencies": inner}
    for i in range(8):
        nested = cast(dict[str, object], deps[f"pkg-{i}"]["dependencies"])
        nested[f"sub-{i}-0"] = {"missing": True, "problems": ["missing: x"]}
    data = json.dumps({"name": "app", "dependencies": deps}, indent=2).encode()
    text = inspect_output(data, _read(data), len(data))
    assert "the norm here" not in text
    assert "records that look like failures or are rare (8):" in text
    assert '.dependencies["pkg-7"].dependencies["sub-7-0"]: {' in text


def _outlined(records: object) -> Outline:
    data = json.dumps(records).encode()
    found = outline("json", _read(data), len(data))
    assert found is not None
    return found


def test_a_boolean_field_s_values_are_shown_as_json_has_them() -> None:
    """A tally keeps each value as text: a boolean's is shown unquoted (``always true``),
    a string's quoted, so the two never read alike."""
    records = [
        {"id": n, "ok": n != 120, "flag": True, "kind": "a" if n % 60 else "b"} for n in range(300)
    ]
    found = _outlined(records)
    lines = found.text.splitlines()
    assert "  .[].flag  bool  100%  always true" in lines, found.text
    assert "  .[].ok  bool  100%  values: true ×299, false ×1" in lines, found.text
    assert '  .[].kind  str  100%  values: "a" ×295, "b" ×5' in lines, found.text


@pytest.mark.parametrize("walked", [60, 400])  # (all walked whole; most on the fast path)
def test_a_boolean_and_the_string_that_spells_it_are_two_values(walked: int) -> None:
    """``true`` and ``"true"`` in one field (an API that changed its mind) are tallied
    apart, each shown as JSON has it: they were one value, shown quoted."""
    records = [{"id": n, "ok": True if n % 3 else "true"} for n in range(walked)]
    found = _outlined(records)
    strings = sum(1 for r in records if r["ok"] == "true")
    line = next(line for line in found.text.splitlines() if line.startswith("  .[].ok  "))
    assert line == (
        f'  .[].ok  bool|str  100%  values: true ×{walked - strings:,}, "true" ×{strings:,}'
    ), found.text


def test_a_boolean_and_the_string_that_spells_it_are_two_values_in_a_map_of_names() -> None:
    """The same past the sample of a map keyed by names (npm's dependencies), whose entries
    are checked one by one."""
    entry = [{"ok": True}, {"ok": "true"}, {"ok": True}]
    document = {"packages": {f"pkg-{n}": dict(entry[n % 3]) for n in range(400)}}
    found = _outlined(document)
    line = next(line for line in found.text.splitlines() if line.startswith("  .packages[].ok "))
    assert line.endswith('values: true ×267, "true" ×133'), found.text


def test_a_true_is_not_counted_as_the_number_1_past_the_sample() -> None:
    """true equals 1 in Python, and hashes alike: counted together, a batch of records
    past the sample had its 1s counted as true, or its trues dropped, by which came
    first."""
    head = [{"id": n, "ok": n % 2 == 0} for n in range(200)]
    head += [{"id": n, "ok": True, f"k{n}": 1} for n in range(200, 232)]  # (new shapes)
    for one in (0, 1):  # a 1 first in a batch, a true first
        tail = [{"id": n, "ok": 1 if n % 4 == one else True} for n in range(232, 1232)]
        found = _outlined(head + tail)
        trues = sum(1 for r in head + tail if r["ok"] is True)
        falses = sum(1 for r in head + tail if r["ok"] is False)
        line = next(line for line in found.text.splitlines() if line.startswith("  .[].ok "))
        assert line.endswith(f"values: true ×{trues:,}, false ×{falses:,}"), found.text


def test_a_count_of_one_is_singular() -> None:
    records = [{"id": n, "tags": ["a"] if n == 3 else []} for n in range(30)]
    found = _outlined(records)
    assert '  .[].tags[]  str  1 item  always "a"' in found.text.splitlines(), found.text


def test_arrays_and_maps_of_scalars_are_counted_and_tallied() -> None:
    """Scalars in an array or a map of names: counted as items (entries), with their types
    and (while they are few) their values."""
    records = [
        {
            "id": n,
            "tags": [["a", "b"], ["b"], []][n % 3],
            "ids": [n, n + 1] if n != 7 else [n, "x"],
            "pins": {f"pkg-{n}": f"^{n}.0.0", "left-pad": "1.0.0"},
        }
        for n in range(30)
    ]
    found = _outlined(records)
    lines = found.text.splitlines()
    assert '  .[].tags[]  str  30 items  values: "b" ×20, "a" ×10' in lines, found.text
    assert "  .[].ids[]  int|str  60 items" in lines, found.text
    assert "  .[].pins[]  str  60 entries" in lines, found.text


def test_a_share_of_100_percent_means_every_record() -> None:
    """A field one record of the 200 walked lacks is at 99.5%, not rounded up to 100%."""
    records: list[dict[str, object]] = [{"id": n, "pkg": "x"} for n in range(300)]
    del records[150]["pkg"]
    found = _outlined(records)
    lines = found.text.splitlines()
    assert '  .[].pkg  str  99.5%  always "x"' in lines, found.text
    assert "  .[].id  int  100%" in lines, found.text


def test_a_rare_value_is_shown_as_the_field_s_values_are() -> None:
    records = [{"id": n, "kind": "z" if n == 77 else "a", "ok": n != 78} for n in range(300)]
    found = _outlined(records)
    assert '.[77]: {"id":77,"kind":"z","ok":true}  <- rare kind="z" (×1)' in found.text, found.text
    assert "<- rare ok=false (×1)" in found.text or "<- ok=false" in found.text, found.text


def test_a_record_whose_items_repeat_a_sign_counts_once() -> None:
    """One suite of ten with 30 failed tests: each failed item counted the sign again, so
    "30 of the 10 records" read as the norm and the suite was not listed."""
    records = [
        {"name": f"suite-{i}", "tests": [{"id": j, "status": "ok"} for j in range(3)]}
        for i in range(10)
    ]
    records[4]["tests"] = [{"id": j, "status": "failed"} for j in range(30)]
    data = json.dumps(records).encode()
    text = inspect_output(data, _read(data), len(data))
    assert "the norm here" not in text
    assert '.[4]: {"name":"suite-4"' in text and "<- status=failed" in text


def test_a_csv_table_is_outlined_with_its_header_and_typed_columns(
    externalizer: ToolResultExternalizer,
) -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "host", "latency_ms", "status"])
    for i in range(4000):
        writer.writerow([i, f"host-{i % 17}", i % 250 + 0.5, "error" if i == 2222 else "ok"])
    text = externalizer.externalize(out.getvalue(), "sqlite3").context_text

    assert "--- structure: CSV table, 4,000 rows" in text
    assert 'header: ["id","host","latency_ms","status"]' in text
    assert ".[].latency_ms  float  100%" in text
    assert '.[2222]: {"id":2222' in text


def test_text_that_merely_starts_with_a_bracket_keeps_the_plain_pointer(
    externalizer: ToolResultExternalizer,
) -> None:
    log = "".join(f"[INFO] step {i} done, ok\n" for i in range(5000))
    text = externalizer.externalize(log, "build").context_text
    assert "--- structure" not in text
    assert "--- head: lines 1-" in text


def test_a_document_that_is_not_valid_json_stays_text(
    externalizer: ToolResultExternalizer,
) -> None:
    broken = _document()[:-2000] + "]]]"
    text = externalizer.externalize(broken, "http_get").context_text
    assert "--- structure" not in text


def test_a_carriage_return_inside_a_comma_line_is_text_and_the_output_is_kept(
    externalizer: ToolResultExternalizer,
) -> None:
    # The csv module refuses a bare carriage return inside an unquoted field ("new-line
    # character seen in unquoted field"): found by the pointer's budget property test.
    lines = ",\n0\n\r0\n"
    assert sniff(lines.encode(), complete=True) is None
    result = externalizer.externalize(lines * 4000, "tool")
    assert "--- structure" not in result.context_text
    data = externalizer.read_bytes(result.artifact, 0, 64).data
    assert data == (lines * 4000).encode()[:64]


def test_an_outline_cut_at_the_scan_limit_says_so() -> None:
    data = _document().encode()
    found = outline("json", _read(data), len(data), scan_limit=100_000)
    assert found is not None and not found.complete
    assert f"outline of the first 100,000 of {len(data):,} bytes" in found.text


def test_a_large_output_is_outlined_from_a_share_of_it_and_a_smaller_one_whole(
    tmp_path: Path,
) -> None:
    """The outline runs after the capture: of an output past 6 MiB it parses a 32nd (at
    least 2 MiB), and says its counts are of that part; one of 6 MiB is parsed whole."""
    line = json.dumps({"id": 0, "name": "x" * 60, "status": "ok"}).encode() + b"\n"
    ext = ToolResultExternalizer(tmp_path / "session")
    for size, whole in ((6 << 20, True), (9 << 20, False)):
        data = line * (size // len(line))
        text = ext.externalize(data, "api").context_text
        if whole:
            lines = data.count(b"\n")
            assert f"JSON Lines, {lines:,} records, parsed whole ({len(data):,} bytes)" in text
        else:
            lines = data[: 2 << 20].count(b"\n")
            assert (
                f"JSON Lines, outline of the first {2 << 20:,} of {len(data):,} bytes: "
                f"{lines:,} records in them ---"
            ) in text
    array = json.dumps([json.loads(line)] * ((9 << 20) // len(line))).encode()
    text = ext.externalize(array, "api").context_text
    assert (
        f"--- structure: JSON array, outline of the first {2 << 20:,} of {len(array):,} bytes "
        "(the counts below are of that part) ---"
    ) in text


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_records_of_megabytes_past_the_share_parsed_are_still_outlined(fmt: Format) -> None:
    """The part a large output's outline parses holds too few of its records: more is read
    (up to 16 MiB), and the records are outlined as before."""
    record = {"id": 1, "blob": "x" * (3 << 20)}
    if fmt == "jsonl":
        data = (json.dumps(record) + "\n").encode() * 3
    else:
        data = json.dumps([{**record, "blob": "y" * (8 << 20)}, {"id": 2}]).encode()
    assert len(data) > 6 << 20
    found = outline(fmt, _read(data), len(data))
    assert found is not None and found.complete
    assert found.records == (3 if fmt == "jsonl" else 2)


def test_the_outline_fits_its_budget_however_many_fields() -> None:
    wide = [{f"field_{j}": j for j in range(400)} | {"id": i} for i in range(50)]
    data = json.dumps(wide).encode()
    text = inspect_output(data[:32768], _read(data), len(data), budget=2048)
    assert 0 < len(text.encode()) <= 2048
    assert ".[]: 50 objects" in text
    assert "outline lines not shown for room" in text


def test_the_outline_of_real_pip_inspect_output_names_every_installed_package(
    externalizer: ToolResultExternalizer,
) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "inspect"], capture_output=True, check=True)
    installed = json.loads(proc.stdout)["installed"]
    text = externalizer.externalize(proc.stdout, "pip").context_text
    assert f".installed[]: {len(installed):,} objects" in text
    assert ".installed[].metadata.name  str  100%" in text


# -- queries -------------------------------------------------------------------------------


def test_one_query_answers_a_question_about_one_field_of_one_record(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    result = query_artifact(externalizer.reader, ref, ".items[3777].error")
    assert (result.text, result.count, result.format) == ('"upstream timed out"\n', 1, "json")
    jmes = query_artifact(externalizer.reader, ref, "items[?status!='ok'].id", language="jmespath")
    assert json.loads(jmes.text) == [3777]


def test_json_lines_and_csv_are_queried_as_arrays_of_records(
    externalizer: ToolResultExternalizer,
) -> None:
    lines = "".join(json.dumps(item) + "\n" for item in _items(500, bad=250))
    jsonl = externalizer.externalize(lines, "events").artifact
    found = query_artifact(externalizer.reader, jsonl, '[.[] | select(.status != "ok")] | length')
    assert found.text == "1\n"
    table = "id,ok,cost\n" + "".join(
        f"{i},{'true' if i % 2 else 'false'},{i}.5\n" for i in range(3000)
    )
    rows = externalizer.externalize(table, "sqlite3").artifact
    assert query_artifact(externalizer.reader, rows, ".[1001]").text == (
        '{"id":1001,"ok":true,"cost":1001.5}\n'
    )


def test_a_cell_of_more_digits_than_int_converts_is_its_text(
    externalizer: ToolResultExternalizer,
) -> None:
    """``int`` refuses more than 4,300 digits: such a cell (in the sample, and past it in a
    column that can carry a failure sign) is read as its text, by the outline and by a
    query, which both failed on it."""
    rows = ["id,value,status"] + [f"{i},{i * 3},ok" for i in range(1000)]
    rows[10] = "9," + "1" * 5000 + ",ok"
    rows[700] = "700,1," + "7" * 5000
    table = "\n".join(rows) + "\n"
    text = externalizer.externalize(table, "sqlite3").context_text
    assert "CSV table, 1,000 rows, parsed whole" in text
    assert "value: int|str" in text
    ref = externalizer.externalize(table, "sqlite3").artifact
    assert json.loads(query_artifact(externalizer.reader, ref, ".[9].value").text) == "1" * 5000
    assert query_artifact(externalizer.reader, ref, ".[2].value").text == "6\n"


def test_a_bad_expression_is_refused_before_the_artifact_is_touched(
    externalizer: ToolResultExternalizer,
) -> None:
    with pytest.raises(ArtifactQueryError, match="not a valid jq expression"):
        query_artifact(externalizer.reader, "artifact:s1:tool_result_999.txt:000000000000", ".[")
    with pytest.raises(ArtifactQueryError, match="not a valid JMESPath"):
        query_artifact(
            externalizer.reader,
            "artifact:s1:tool_result_999.txt:000000000000",
            "items[?",
            language="jmespath",
        )


def test_a_query_of_text_output_says_to_grep_it(externalizer: ToolResultExternalizer) -> None:
    ref = externalizer.externalize("plain line\n" * 10_000, "bash").artifact
    with pytest.raises(ArtifactQueryError, match="grep"):
        query_artifact(externalizer.reader, ref, ".")


def test_a_query_past_its_deadline_is_stopped(externalizer: ToolResultExternalizer) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    with pytest.raises(ArtifactQueryTimeoutError):
        query_artifact(externalizer.reader, ref, "last(range(1e15))", timeout=1.0)


def test_a_result_too_large_for_one_answer_is_saved_with_its_own_pointer(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    tools = ArtifactTools(externalizer, max_output_bytes=16 * 1024)
    answer = tools.query_artifact(ref.source_id, ".items[]")
    assert "6,000 results" in answer and "saved as a new artifact" in answer
    assert "--- structure: JSON Lines, 6,000 records" in answer
    assert len(externalizer.list_artifacts()) == 2


def test_artifact_tools_offer_query_artifact(externalizer: ToolResultExternalizer) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    tools = {fn.__name__: fn for fn in artifact_tools(externalizer)}
    answer = tools["query_artifact"](ref.source_id, ".items[3777].status")
    assert answer.splitlines()[1] == '"failed"'
    assert "jq" in (tools["query_artifact"].__doc__ or "")


def test_the_cli_queries_a_captured_command_output(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    doc = tmp_path / "doc.json"
    doc.write_text(_document(), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "toolswap", "run", "--", "cat", str(doc)],
        capture_output=True,
        env=env,
        check=True,
    )
    source_id = run.stdout.decode().splitlines()[0].removeprefix("[Artifact: ").rstrip("]")
    query = subprocess.run(
        [sys.executable, "-m", "toolswap", "query", source_id, ".items[3777].id"],
        capture_output=True,
        env=env,
    )
    assert (query.returncode, query.stdout) == (0, b"3777\n")
    bad = subprocess.run(
        [sys.executable, "-m", "toolswap", "query", source_id, ".items["],
        capture_output=True,
        env=env,
    )
    assert bad.returncode == 1 and b"not a valid jq expression" in bad.stderr


def test_records_past_the_sample_are_counted_exactly_and_a_late_failure_is_found() -> None:
    # 5000 records: only the first few hundred are walked whole; the failed one is far past.
    items = _items(5000, bad=4321)
    data = json.dumps({"total": 5000, "items": items, "next": "page-2"}).encode()
    found = outline("json", _read(data), len(data))
    assert found is not None and found.complete
    assert found.records == 5000
    assert "5,000 objects" in found.text
    assert ".items[4321]" in found.text and "status=failed" in found.text
    # The envelope's members after the long collection are read from the document's end.
    assert '"next": "page-2"' in found.text
    assert "walked whole" in found.text  # the outline says what was sampled


def test_a_record_of_a_new_shape_past_the_sample_has_its_fields_named() -> None:
    lines = [{"id": i, "kind": "a"} for i in range(3000)]
    lines[2500] = {"id": 2500, "kind": "a", "retry": {"after": 3, "reason": "busy"}}
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    found = outline("jsonl", _read(data), len(data))
    assert found is not None and found.records == 3000
    assert ".[].retry.reason" in found.text


def test_an_outline_computed_on_its_thread_reaches_the_pointer(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize(_document().encode(), "api")
    assert "6,000 objects" in result.context_text
    assert ".items[3777]" in result.context_text


def test_a_failure_word_every_record_carries_is_the_norm_and_a_rare_one_is_shown() -> None:
    # Like ruff's diagnostics: severity "error" on every record says what they are.
    lines = [{"code": "F401", "severity": "error", "row": i} for i in range(3000)]
    lines[2700] = {"code": "E999", "severity": "error", "row": 2700, "status": "crashed"}
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    found = outline("jsonl", _read(data), len(data))
    assert found is not None and found.records == 3000
    assert "have severity=error: the norm here" in found.text
    assert (
        ".[0]:"
        not in found.text.split("records that look like failures")[1].split("sample records:")[0]
    )
    assert ".[2700]" in found.text and "status=crashed" in found.text
    assert found.example_path == ".[2700]"


def test_a_csv_row_past_the_sample_is_counted_and_a_failed_one_found_typed() -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["name", "size", "status", "exit_code"])
    for i in range(5000):
        status = "failed" if i == 4100 else "ok"
        writer.writerow([f"pkg{i}", i * 10, status, 3 if i == 4600 else 0])
    data = out.getvalue().encode()
    found = outline("csv", _read(data), len(data))
    assert found is not None and found.records == 5000
    assert "5,000 rows" in found.text
    assert ".[4100]" in found.text and "status=failed" in found.text
    # The exit code cell is read as a number: 0 is no failure, 3 is one.
    assert ".[4600]" in found.text and "exit_code=3" in found.text
    assert '"size":46000' in found.text  # a row shown is typed


@pytest.mark.parametrize("ragged", [0, 3, 80])
def test_blank_and_short_rows_past_the_sample_keep_every_row_s_number(ragged: int) -> None:
    """Rows past the sample go in batches of whole rows; a batch with a blank row (not a
    record) or a short one is read row by row, and the numbers stay those ``read --record``
    and ``query`` give. Too many short rows make the output text."""
    lines = ["name,size,status"]
    record = 0
    failed: list[int] = []
    for i in range(3000):
        if i in (300, 1100, 1101, 2500):
            lines.append("")
            continue
        status = "failed" if i in (1200, 2600) else "ok"
        if status == "failed":
            failed.append(record)
        short = ragged and 1900 <= i < 1900 + ragged
        lines.append(f"pkg{i},{i}" if short else f"pkg{i},{i},{status}")
        record += 1
    data = ("\n".join(lines) + "\n").encode()
    found = outline("csv", _read(data), len(data))
    if ragged > 3:
        assert found is None
        return
    assert found is not None and found.records == record == 2996
    for number in failed:
        assert f".[{number}]" in found.text
    assert f'.[{failed[0]}]: {{"name":"pkg1200","size":1200,"status":"failed"}}' in found.text


def test_toolswap_outline_off_captures_structured_output_as_text(tmp_path: Path) -> None:
    from toolswap import ExternalizerSettings

    settings = ExternalizerSettings.from_env({"TOOLSWAP_OUTLINE": "off"})
    assert settings.structured_outline is False
    ext = ToolResultExternalizer(tmp_path / "session", settings=settings)
    result = ext.externalize(_document().encode(), "api")
    assert "--- structure:" not in result.context_text
    on = ToolResultExternalizer(tmp_path / "session2").externalize(_document().encode(), "api")
    assert "--- structure:" in on.context_text
    with pytest.raises(Exception, match="TOOLSWAP_OUTLINE"):
        ExternalizerSettings.from_env({"TOOLSWAP_OUTLINE": "maybe"})


def test_open_verified_reads_the_recorded_bytes_and_notices_a_change(
    externalizer: ToolResultExternalizer,
) -> None:
    from toolswap.errors import ArtifactIntegrityError

    data = _document().encode()
    ref = externalizer.externalize(data, "api").artifact
    with externalizer.reader.open_verified(ref.source_id) as art:
        assert art.reference.source_id == ref.source_id
        assert art.size == len(data)
        assert art.pread(64, 0) == data[:64]
        fd = art.fd
        art.check_unchanged()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed when the block ended
    path = (
        ref.path
        if ref.path.is_absolute()
        else externalizer.session.tool_results_dir / ref.path.name
    )
    with externalizer.reader.open_verified(ref.source_id) as art:
        os.chmod(path, 0o600)
        with open(path, "r+b") as f:
            f.write(b"X")
        with pytest.raises(ArtifactIntegrityError):
            art.check_unchanged()
    with pytest.raises(ArtifactIntegrityError), externalizer.reader.open_verified(ref.source_id):
        pass


def test_the_python_query_line_of_a_pointer_is_a_real_call(tmp_path: Path) -> None:
    # The hint the pointer gives a Python harness: externalizer.query(ID, EXPR).
    ext = ToolResultExternalizer(tmp_path / "session", read_hint="python")
    result = ext.externalize(_document().encode(), "api")
    line = next(x for x in result.context_text.splitlines() if x.startswith("Query: "))
    assert line.startswith(f'Query: externalizer.query("{result.artifact.source_id}", ')
    answer = ext.query(result.artifact.source_id, ".items[3777].status")
    assert answer.text.strip() == '"failed"' and answer.format == "json"


def test_records_past_the_sample_with_different_error_lists_are_each_found() -> None:
    # Lists are not hashable: each record's value is checked, not only the first one's.
    lines: list[dict[str, object]] = [{"id": i, "errors": []} for i in range(4000)]
    lines[2800] = {"id": 2800, "errors": ["disk full"]}
    lines[2900] = {"id": 2900, "errors": ["permission denied"]}
    data = json.dumps(lines).encode()
    found = outline("json", _read(data), len(data))
    assert found is not None and found.records == 4000
    assert ".[2800]" in found.text and ".[2900]" in found.text
    assert "errors field" in found.text


# -- maps keyed by names -------------------------------------------------------------------


def _tree(count: int, depth: int) -> dict[str, object]:
    """A dependency tree shaped as npm ls --json writes it: names are keys."""
    entries: dict[str, object] = {}
    for i in range(count):
        entry: dict[str, object] = {"version": f"1.{i}.0", "resolved": f"https://r/p{i}.tgz"}
        if depth:
            entry["dependencies"] = _tree(3, depth - 1)
        entries[f"@scope/package-{i}" if i % 2 else f"package{i}"] = entry
    return entries


def test_a_map_keyed_by_names_is_outlined_as_entries_of_one_shape(
    externalizer: ToolResultExternalizer,
) -> None:
    deps = _tree(312, 2)
    deps["@scope/package-155"] = {**deps["@scope/package-155"], "error": "ELSPROBLEMS"}  # type: ignore[dict-item]
    doc = {"version": "1.0.0", "name": "app", "dependencies": deps}
    text = externalizer.externalize(json.dumps(doc, indent=2), "npm").context_text
    assert len(text.encode()) <= POINTER_BUDGET
    assert '"dependencies": {312 entries}' in text
    # Entries nested in an entry's dependencies are entries like it: one set of fields.
    assert (
        ".dependencies{}: 312 entries {version: str, resolved: str, dependencies{}?: ↻, "
        "error?: str}" in text
    )
    walked = 200 + 200 * 3 + 200 * 9  # the records walked whole and the entries below them
    assert (
        "(their dependencies hold objects like them, nested up to 2 deep: 2,400 more in the "
        f"records walked whole; the fields below count all {walked:,} entries; list every "
        "one: [.dependencies?[]? | recurse(.dependencies? | .[]? | objects)])" in text
    )
    for path in ("version", "resolved", "dependencies"):
        assert f".dependencies[].{path}  " in text
    assert ".dependencies[].dependencies[]" not in text
    assert "package-7" not in text.split("fields (path")[1].split("records that")[0]
    # A record listed as a failure shows the field that says so first.
    assert '.dependencies["@scope/package-155"]: {"error":"ELSPROBLEMS","version":"1.155.0"' in text
    # The path the outline prints reads the record back.
    sid = next(line for line in text.splitlines() if line.startswith("[Artifact: "))[11:-1]
    found = externalizer.read_record(sid, '.dependencies["@scope/package-155"].error')
    assert found.text == '"ELSPROBLEMS"'


def _directory(name: str, depth: int) -> dict[str, object]:
    node: dict[str, object] = {"name": name, "size": 100 * len(name), "kind": "file"}
    if depth:
        node["kind"] = "dir"
        node["children"] = [_directory(f"{name}/{i}", depth - 1) for i in range(6)]
    return node


def test_a_tree_of_children_is_one_set_of_fields_at_every_depth(
    externalizer: ToolResultExternalizer,
) -> None:
    text = externalizer.externalize(json.dumps(_directory("", 4), indent=1), "tree").context_text
    assert ".children[]: 6 objects {name: str, size: int, kind: str, children[]?: ↻}" in text
    every = "[.children?[]? | recurse(.children? | .[]? | objects)]"
    assert (
        "(their children hold objects like them, nested up to 3 deep: 1,548 more; the fields "
        f"below count all 1,554 entries; list every one: {every})" in text
    )
    assert '.children[].kind  str  100%  values: "file" ×1,296, "dir" ×258' in text
    assert ".children[].children  array  17%" in text
    assert ".children[].children[]" not in text
    sid = next(line for line in text.splitlines() if line.startswith("[Artifact: "))[11:-1]
    assert externalizer.query(sid, every + " | length").text.strip() == "1554"


def _contents(name: str, depth: int) -> dict[str, object]:
    """A directory as ``tree -J`` writes it: its entries under ``contents``."""
    if depth == 0:
        return {"type": "file", "name": name}
    entries = [_contents(f"{name}/{i}", depth - 1) for i in range(4)]
    return {"type": "directory", "name": name, "contents": entries}


def test_a_tree_under_a_field_of_the_records_is_one_set_of_fields_too(
    externalizer: ToolResultExternalizer,
) -> None:
    doc = [_contents(".", 4), {"type": "report", "directories": 85, "files": 256}]
    text = externalizer.externalize(json.dumps(doc, indent=1), "tree").context_text
    every = "[.[]?.contents?[]? | recurse(.contents? | .[]? | objects)]"
    assert (
        "(the entries of .[].contents[]: contents hold objects like them, nested up to 3 "
        f"deep: 336 more; the fields below count all 340 entries; list every one: {every})" in text
    )
    assert ".[].contents[].contents  array  25%" in text
    sid = next(line for line in text.splitlines() if line.startswith("[Artifact: "))[11:-1]
    # (The report record has no contents: the listing skips it rather than fail.)
    assert externalizer.query(sid, every + " | length").text.strip() == "340"


def test_items_that_are_not_objects_like_the_records_are_not_taken_for_them(
    externalizer: ToolResultExternalizer,
) -> None:
    groups = [
        {"name": f"g{i}", "id": i, "groups": [f"s{j}" for j in range(5)], "pad": "x" * 900}
        for i in range(50)
    ]
    text = externalizer.externalize(json.dumps({"groups": groups}), "g").context_text
    assert ".groups[]: 50 objects {name: str, id: int, groups: [str], pad: str}" in text
    assert ".groups[].name  str  100%" in text
    assert ".groups[].groups[]  str  250 items" in text
    assert "↻" not in text and "hold objects like them" not in text


def _nodes(name: str, depth: int) -> dict[str, object]:
    children = [_nodes(f"{name}.{i}", depth - 1) for i in range(3)] if depth else []
    return {"name": name, "pad": "x" * 40, "children": children}


def test_an_empty_array_below_the_last_level_is_no_level_of_its_own(
    externalizer: ToolResultExternalizer,
) -> None:
    doc = {"children": [_nodes(f"a{i}", 2) for i in range(40)]}
    text = externalizer.externalize(json.dumps(doc), "t").context_text
    assert "(their children hold objects like them, nested up to 2 deep: 480 more;" in text
    flat = {"children": [_nodes(f"n{i}", 0) for i in range(600)]}
    text = externalizer.externalize(json.dumps(flat), "t").context_text
    assert ".children[]: 600 objects {name: str, pad: str, children: array}" in text
    assert "↻" not in text and "hold objects like them" not in text


def test_a_tree_hundreds_of_levels_deep_is_still_outlined(
    externalizer: ToolResultExternalizer,
) -> None:
    node: dict[str, object] = {"name": "leaf"}
    for i in range(450):
        node = {"name": f"n{i}", "children": [node]}
    doc = {"pad": "x" * 40_000, "children": [node, {"name": "x"}]}
    text = externalizer.externalize(json.dumps(doc), "d").context_text
    assert "(their children hold objects like them, nested up to 450 deep: 450 more;" in text


def test_a_failure_in_a_nested_entry_is_listed_by_its_own_path(
    externalizer: ToolResultExternalizer,
) -> None:
    def entry(name: str, depth: int) -> dict[str, object]:
        found: dict[str, object] = {"name": name, "status": "ok"}
        if depth:
            found["children"] = [entry(f"{name}.{i}", depth - 1) for i in range(3)]
        return found

    doc = {"pad": "x" * 40_000, "children": [entry(f"r{i}", 4) for i in range(6)]}
    doc["children"][5]["children"][1]["children"][2]["status"] = "failed"  # type: ignore[index]
    text = externalizer.externalize(json.dumps(doc), "t").context_text
    where = ".children[5].children[1].children[2]"
    assert f'\n{where}: {{"status":"failed","name":"r5.1.2","children":' in text
    assert "<- status=failed\n" in text
    assert "\n.children[5]: " not in text  # the record that holds it is not the failure
    sid = next(line for line in text.splitlines() if line.startswith("[Artifact: "))[11:-1]
    assert externalizer.read_record(sid, where + ".name").text == '"r5.1.2"'


def test_a_failure_nested_below_a_field_of_the_record_marks_the_record(
    externalizer: ToolResultExternalizer,
) -> None:
    # The trees are under each record's children: the walk knows the record's path, not
    # the path of an entry two levels down, so the record is listed, said to be nested.
    def tree(name: str, depth: int) -> dict[str, object]:
        below = [tree(f"{name}.{j}", depth - 1) for j in range(3)] if depth else []
        return {"name": name, "status": "ok", "children": below}

    records = [tree(f"r{i}", 3) for i in range(200)]
    records[150]["children"][2]["children"][0]["status"] = "failed"  # type: ignore[index]
    text = externalizer.externalize(json.dumps(records), "t").context_text
    assert '\n.[150]: {"name":"r150","status":"ok",' in text
    assert "<- status=failed (nested)\n" in text


def test_fields_past_the_table_s_room_are_all_named_as_grouped_paths(
    externalizer: ToolResultExternalizer,
) -> None:
    records = [
        {
            "id": i,
            "meta": {f"key_{j}": j for j in range(i % 3, 240, 3)},
            "spec": {"a": {"p": 1, "q": i}, "b": {"p": 1, "q": i}, "c": [{"r": i}]},
        }
        for i in range(300)
    ]
    text = externalizer.externalize(json.dumps({"items": records}), "wide").context_text
    assert len(text.encode()) <= POINTER_BUDGET
    tree = text.split("field paths in at least 1% of records (")[1].split("fields (path")[0]
    # A long group goes on as many rows as keep each short (a row too long for the room
    # would be dropped whole).
    keys = [f".key_{j}" for start in range(3) for j in range(start, 240, 3)]
    rows = [row for row in tree.splitlines() if row.startswith("  .items[].meta{")]
    assert len(rows) > 1 and all(len(row) <= 480 for row in rows)
    assert [k for row in rows for k in row[len("  .items[].meta{") : -1].split(", ")] == keys
    # Fields with the same fields below them are one group.
    assert "\n  .items[].spec{{.a, .b}{.p, .q}, .c[].r}\n" in tree
    assert "\n  .items[].id\n" in tree
    # The table of types and shares keeps what room is left.
    assert ".items[].id  int  100%" in text


def test_an_object_of_fields_is_not_taken_for_a_map_of_names() -> None:
    records = [
        {"id": i, "name": f"n{i}", "owner": {"login": f"u{i}", "site": "x"}, "labels": {}}
        for i in range(300)
    ]
    data = json.dumps({"items": records}).encode()
    text = inspect_output(data[:32768], _read(data), len(data))
    assert ".items[].owner.login  str  100%" in text
    assert "owner{}" not in text


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")
def test_real_npm_ls_output_collapses_its_dependency_maps(
    externalizer: ToolResultExternalizer,
) -> None:
    home = Path(shutil.which("npm") or "").resolve().parent.parent
    proc = subprocess.run(
        ["npm", "ls", "--all", "--json"], capture_output=True, cwd=home, check=False
    )
    deps = json.loads(proc.stdout)["dependencies"]

    def entries(level: dict[str, dict[str, object]]) -> int:
        return sum(
            1 + entries(cast(dict[str, dict[str, object]], e.get("dependencies") or {}))
            for e in level.values()
        )

    text = externalizer.externalize(proc.stdout, "npm").context_text
    assert f".dependencies{{}}: {len(deps):,} entries {{" in text
    assert f"the fields below count all {entries(deps):,} entries;" in text
    assert ".dependencies[].version  str" in text
    sid = next(line for line in text.splitlines() if line.startswith("[Artifact: "))[11:-1]
    every = "[.dependencies?[]? | recurse(.dependencies? | .[]? | objects)]"
    assert f"list every one: {every})" in text
    found = externalizer.query(sid, every + " | length")
    assert found.text.strip() == str(entries(deps))


def test_a_field_null_in_all_records_but_one_is_not_always_that_one() -> None:
    """``err`` was null in 2,999 records and ``"failed"`` in one: the field read
    ``always "failed"`` (a review). (``err`` is no failure sign: it mostly holds stderr,
    warnings in four records of ten listed 1,200 false failures when it was one.)"""
    records: list[dict[str, object]] = [{"id": i, "err": None} for i in range(3000)]
    records[1700]["err"] = "failed"
    data = json.dumps({"records": records}).encode()
    found = outline("json", _read(data), len(data))
    assert found is not None
    assert "always" not in found.text and '"failed" ×1' in found.text
    lines = "".join(
        json.dumps({"file": f"f{i}.c", "rc": 0, "err": "warning: unused x" if i % 5 < 2 else ""})
        + "\n"
        for i in range(3000)
    ).encode()
    found = outline("jsonl", _read(lines), len(lines))
    assert found is not None and "look like failures" not in found.text


def _zap_log(errors: list[int]) -> str:
    lines = []
    for i in range(8000):
        level = "ERROR" if i in errors else "INFO"
        message = (
            f"worker-{i % 7} failed to write chunk {i}: disk quota exceeded"
            if i in errors
            else f'"GET /api/v1/items" 200 in {i % 90} ms'
        )
        stamp = f"2026-01-01T00:{i // 600 % 60:02d}:{i % 60:02d}.000Z"
        lines.append(f"{stamp}\t{level}\tserver/main.go:{40 + i % 9}\t{message}\t{{}}")
    return "\n".join(lines) + "\n"


def test_a_tab_separated_log_is_no_table_and_its_failure_lines_are_all_shown(
    externalizer: ToolResultExternalizer,
) -> None:
    """A zap-style log (time, level, caller, message, JSON, by tabs) was read as a table
    named by its first line; the outline found no failure and the pointer showed one of
    its 8 failure lines (a review). A header of timestamps is no header."""
    errors = [700, 1500, 2300, 3100, 3900, 4700, 5500, 6300]
    text = _zap_log(errors)
    assert sniff(text[:32768].encode()) is None
    pointer = externalizer.externalize(text, "bash").context_text
    assert "--- structure" not in pointer
    assert "failed to write chunk 700: disk quota exceeded" in pointer
    assert "(+7 similar)" in pointer  # (the text pointer's own way with alike lines)


_FAILURES = {
    500: "FATAL: disk full writing the segment",
    1500: "panic: assignment to entry in nil map",
    2500: "connection refused by the metadata service",
    3500: "Traceback (most recent call last): KeyError 'shard'",
    4500: "checksum mismatch: expected 9f2c, got 0000",
    5500: "permission denied opening /var/lib/store/lock",
    6500: "fatal error: out of memory allocating 64 MiB",
    7500: "Segmentation fault (core dumped) in the compactor",
}
"""Failures of 8 kinds in a table's free-text column (no field names a failure)."""


def _free_text_failures(rare: int | None = None) -> str:
    """A TSV of 8,000 rows, ``_FAILURES`` in its message column; every message differs,
    so the column has too many values to tally and none is rare (``rare``: one row whose
    component is another, which is)."""
    rows = [
        f"{i}\t{'network' if i == rare else 'storage'}\t" + _FAILURES.get(i, f"segment {i} written")
        for i in range(8000)
    ]
    return "id\tcomponent\tmessage\n" + "\n".join(rows) + "\n"


def test_failure_lines_keep_their_room_beside_an_outline_that_lists_none(
    externalizer: ToolResultExternalizer,
) -> None:
    """A table whose failures are in a free-text column (no field that names a failure):
    the outline lists none, and the failure lines the text scan found were cut to 512
    bytes beside it."""
    pointer = externalizer.externalize(_free_text_failures(), "bash").context_text
    assert "--- structure: TSV table, 8,000 rows" in pointer
    assert "records that look like failures" not in pointer
    assert sum(line in pointer for line in _FAILURES.values()) >= 6, pointer
    assert len(pointer.encode()) <= POINTER_BUDGET


@pytest.mark.parametrize(
    "header", ["region,2023,2024", "metric,2024-01-01,2024-01-02", "pkg,1.2.3,2.0.0"]
)
def test_years_dates_and_versions_still_name_columns(header: str) -> None:
    """A first rule refused every header cell that was a number or began with a date, and
    such tables stayed text (a review): only clock times, epoch numbers and JSON mark a
    log's line."""
    rows = "".join(f"r{i},{i},{i * 2}\n" for i in range(3000))
    assert sniff((header + "\n" + rows).encode()[:32768]) == "csv"


@pytest.mark.parametrize(
    "stamp", ["00:01:40.000", "Jan  1 00:01:40", "2026/01/01 00:01:40", "1767225700.123"]
)
def test_a_log_stamped_any_way_is_no_table(stamp: str) -> None:
    lines = "".join(
        f"{stamp}\tINFO\tserver/main.go:{i % 9}\trequest {i} done\n" for i in range(300)
    )
    assert sniff(lines.encode()) is None


def test_rare_records_alone_leave_the_failure_lines_their_room(
    externalizer: ToolResultExternalizer,
) -> None:
    """The outline heads rare records and failures alike; one rare row made the pointer
    think failures were listed, and the failure lines fell back to 512 bytes: 3 of 8 shown
    (a review). Rare records alone have a heading of their own."""
    pointer = externalizer.externalize(_free_text_failures(rare=4000), "bash").context_text
    assert "records that are rare (1):" in pointer and ".[4000]" in pointer
    assert "look like failures or are rare" not in pointer
    assert sum(line in pointer for line in _FAILURES.values()) >= 6, pointer
    assert len(pointer.encode()) <= POINTER_BUDGET


def test_a_structured_pointer_that_lists_failures_keeps_to_8_kib(tmp_path: Path) -> None:
    """Only the pointer beside an outline that listed no failure was held to 8 KiB; with a
    session path of 127 characters one that listed failures took 8,929 bytes (a review)."""
    root = tmp_path / ("acme-monorepo-services-platform-" * 3)
    ext = ToolResultExternalizer(root / "s1")
    names = [f"column_{i:02d}" for i in range(62)]
    rows = [
        ",".join(["error" if i % 97 == 5 and c == 0 else f"v{i}_{c}" for c in range(62)])
        for i in range(3000)
    ]
    text = "status," + ",".join(names[1:]) + "\n" + "\n".join(rows) + "\n"
    pointer = ext.externalize(text, "bash").context_text
    assert "look like failures" in pointer
    assert len(pointer.encode()) <= POINTER_BUDGET


@pytest.mark.parametrize(
    "header",
    [
        "day," + ",".join(str(h) for h in range(24)),  # sqlite3 -header: a pivot by hour
        "endpoint,50,90,99",  # percentiles
        "bench,3.10,3.11,3.12",  # versions
        "0,1,2",  # pandas' columns without names (index=False)
    ],
)
def test_columns_named_by_numbers_still_make_a_table(header: str) -> None:
    """A rule taking a first row with a number over every column of numbers for data (to
    leave ``sqlite3 -csv`` without ``-header`` as text) made these tables text, and broke
    the queries of pointers already handed out, which detect the format again (a review).
    It was dropped: a table without a header line still takes its first row as one."""
    width = header.count(",")
    rows = "".join(f"r{i}," + ",".join(str(i * k) for k in range(width)) + "\n" for i in range(300))
    assert sniff((header + "\n" + rows).encode()[:32768]) == "csv"
