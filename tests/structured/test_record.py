"""Reading one record of a structured artifact by the path its outline prints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolswap import ArtifactQueryError, ArtifactReadError, ToolResultExternalizer
from toolswap.mcp.local import LocalTools
from toolswap.structured.address import parse_address
from toolswap.structured.query import query_artifact
from toolswap.structured.record import read_record
from toolswap.tools import ArtifactTools, artifact_tools


def _items(count: int = 6000, bad: int = 3777) -> list[dict[str, object]]:
    items: list[dict[str, object]] = [
        {"id": i, "name": f"item-{i}", "tags": ["a", "b"], "price": i * 1.25, "status": "ok"}
        for i in range(count)
    ]
    items[bad] = {**items[bad], "status": "failed", "error": {"code": 504, "detail": "timed out"}}
    return items


def _document() -> str:
    return json.dumps({"total": 6000, "items": _items(), "meta": {"page": 1, "next": None}})


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


# -- addresses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "steps", "path"),
    [
        ("items[3777]", ("items", 3777), ".items[3777]"),
        (".items[3777].error.code", ("items", 3777, "error", "code"), ".items[3777].error.code"),
        ("5120", (5120,), ".[5120]"),
        (".[5119]", (5119,), ".[5119]"),
        ('.dependencies["left-pad"]', ("dependencies", "left-pad"), '.dependencies["left-pad"]'),
        ('.["a b"][0]', ("a b", 0), '.["a b"][0]'),
    ],
)
def test_an_address_is_read_as_the_outline_writes_paths(
    text: str, steps: tuple[object, ...], path: str
) -> None:
    address = parse_address(text)
    assert (address.steps, address.path) == (steps, path)


@pytest.mark.parametrize(
    "text", ["", ".", "items[", "items[-1]", "items[01]", ".a..b", "a b", "['x']", "$x", "a|b"]
)
def test_a_malformed_address_is_refused_before_the_artifact_is_opened(
    externalizer: ToolResultExternalizer, text: str
) -> None:
    missing = "artifact:s1:tool_result_999.txt:000000000000"
    with pytest.raises(ArtifactQueryError, match="items\\[3777\\]"):
        read_record(externalizer.reader, missing, text)
    if text:  # an empty record is the tools' default: read lines
        with pytest.raises(ArtifactQueryError):
            ArtifactTools(externalizer).read_artifact(missing, record=text)


# -- JSON ----------------------------------------------------------------------------------


def test_the_failed_record_an_outline_shows_is_read_by_the_call_its_pointer_names(
    tmp_path: Path,
) -> None:
    ext = ToolResultExternalizer(tmp_path / "session", read_hint="mcp")
    pointer = ext.externalize(_document(), "http_get").context_text
    call = re.search(r'Record: read_artifact\(source_id="([^"]+)", record="([^"]+)"\)', pointer)
    assert call is not None, pointer
    assert call.group(2) == ".items[3777]"
    answer = ArtifactTools(ext).read_artifact(call.group(1), record=call.group(2))
    head, _, body = answer.partition("\n")
    assert head == f"[{call.group(1)}: record .items[3777] (JSON)]"
    assert json.loads(body) == _items()[3777]
    assert body == json.dumps(_items()[3777], indent=2)


def test_a_record_is_the_value_the_same_jq_path_queries(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    for address in ("items[0]", "items[5999].tags", ".items[3777].error.code", "meta", "total"):
        found = read_record(externalizer.reader, ref, address)
        queried = query_artifact(externalizer.reader, ref, found.address)
        assert json.loads(found.text) == json.loads(queried.text), address


def test_a_document_with_an_integer_past_64_bits_is_read_exactly(
    externalizer: ToolResultExternalizer,
) -> None:
    """ijson's C backend reading numbers as floats stops at an integer past 64 bits
    (ICRAR/ijson#153): a valid document with one 20-digit id had no readable record. It is
    read again with every number as written."""
    items = _items(200, bad=7)
    items[3]["id"] = 12345678901234567890123
    items[150]["price"] = -(2**63)
    items[151]["price"] = 1.5e300
    document = json.dumps({"total": 200, "items": items})
    ref = externalizer.externalize(document, "http_get").artifact
    for address, value in (
        ("items[3].id", 12345678901234567890123),
        ("items[150]", items[150]),
        ("items[151].price", 1.5e300),
        ("items[199]", items[199]),
    ):
        found = read_record(externalizer.reader, ref, address)
        assert json.loads(found.text) == value, address
    lines = "".join(json.dumps(item) + "\n" for item in items)
    ref = externalizer.externalize(lines, "http_get").artifact
    assert json.loads(read_record(externalizer.reader, ref, "3").text) == items[3]


def test_a_number_of_more_digits_than_python_reads_is_a_read_error(
    externalizer: ToolResultExternalizer,
) -> None:
    """Past 4,300 digits, ijson's exact read stops with Python's SystemError, which
    escaped ``read_record`` (a review): it is the typed read error, saying why."""
    document = '{"n": ' + "7" * 5000 + ', "m": 1, "items": [' + "1, " * 100 + "2]}"
    ref = externalizer.externalize(document, "http_get").artifact
    with pytest.raises(ArtifactReadError, match="more digits than Python reads"):
        read_record(externalizer.reader, ref, "m")


def test_a_record_of_real_pip_inspect_output_is_the_one_query_returns(
    externalizer: ToolResultExternalizer,
) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "inspect"], capture_output=True, check=True)
    ref = externalizer.externalize(proc.stdout, "pip").artifact
    last = len(json.loads(proc.stdout)["installed"]) - 1
    found = read_record(externalizer.reader, ref, f"installed[{last}].metadata")
    queried = query_artifact(externalizer.reader, ref, f".installed[{last}].metadata")
    assert json.loads(found.text) == json.loads(queried.text)


def test_an_address_past_the_end_says_what_the_document_has(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    with pytest.raises(ArtifactReadError, match=r"\.items has 6,000 elements; .*\(0-5999\)"):
        read_record(externalizer.reader, ref, "items[6000]")
    with pytest.raises(ArtifactReadError, match=r'\.items\[3\] has no key "nope"'):
        read_record(externalizer.reader, ref, "items[3].nope")
    with pytest.raises(ArtifactReadError, match=r"\.total is a number, not an object"):
        read_record(externalizer.reader, ref, "total.x")


def test_a_text_artifact_has_no_records_and_the_error_says_to_read_lines(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize("plain line\n" * 10_000, "bash").artifact
    with pytest.raises(ArtifactQueryError, match="not JSON, JSON Lines, CSV or TSV; read it by"):
        read_record(externalizer.reader, ref, "0")


def test_a_record_larger_than_one_answer_shows_its_start_and_the_query_that_saves_it(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    tools = ArtifactTools(externalizer, max_output_bytes=16 * 1024)
    answer = tools.read_artifact(ref.source_id, record="items")
    assert len(answer.encode()) <= 16 * 1024
    assert answer.startswith(f'[{ref.source_id}: record .items (JSON)]\n[\n  {{\n    "id": 0,')
    # Reading wrote nothing (read_artifact is read-only): the session still has one artifact.
    assert len(externalizer.list_artifacts()) == 1
    # The call the answer names saves the record whole.
    call = answer.rpartition("query_artifact(")[2]
    assert call == f'source_id="{ref.source_id}", expression=".items")]'
    saved = tools.query_artifact(ref.source_id, ".items")
    assert "saved as a new artifact" in saved
    whole = externalizer.list_artifacts()[-1]
    assert json.loads(externalizer.reader.read_bytes(whole, 0, 16 << 20).data) == _items()


def test_a_record_past_the_size_limit_is_cut_and_says_so(
    externalizer: ToolResultExternalizer,
) -> None:
    ref = externalizer.externalize(_document(), "http_get").artifact
    found = read_record(externalizer.reader, ref, "items", max_bytes=4096)
    assert found.truncated and len(found.text) == 4096
    assert found.text.startswith('[\n  {\n    "id": 0,')


# -- JSON Lines and tables -----------------------------------------------------------------


def test_json_lines_record_n_is_the_nth_line_that_is_not_blank(
    externalizer: ToolResultExternalizer,
) -> None:
    items = _items(6000, bad=5120)
    lines = "".join(json.dumps(x) + "\n" + ("\n" if i == 10 else "") for i, x in enumerate(items))
    ref = externalizer.externalize(lines, "events").artifact
    found = read_record(externalizer.reader, ref, "5120")
    assert (json.loads(found.text), found.line, found.address) == (items[5120], 5122, ".[5120]")
    assert json.loads(query_artifact(externalizer.reader, ref, ".[5120]").text) == items[5120]
    assert read_record(externalizer.reader, ref, ".[5120].status").text == '"failed"'
    with pytest.raises(ArtifactReadError, match=r"6,000 records; record 6000 is past the end"):
        read_record(externalizer.reader, ref, "6000")
    with pytest.raises(ArtifactQueryError, match="starts with a record number"):
        read_record(externalizer.reader, ref, "status")


def test_a_json_lines_line_that_is_not_json_keeps_its_place_in_the_outlines_paths(
    externalizer: ToolResultExternalizer,
) -> None:
    items = _items(6000, bad=5120)
    lines = [json.dumps(x) + "\n" for x in items]
    lines[100] = "{truncated record\n"  # not JSON: still record 100, as a read counts it
    result = externalizer.externalize("".join(lines), "events")
    pointer = result.context_text
    assert "lines that are not JSON: 101" in pointer
    assert ".[5120]" in pointer and ".[5119]" not in pointer
    found = read_record(externalizer.reader, result.artifact, ".[5120]")
    assert json.loads(found.text) == items[5120]


def test_a_csv_row_is_an_object_keyed_by_the_header_typed_as_query_types_it(
    externalizer: ToolResultExternalizer,
) -> None:
    table = "id,ok,cost,note\n" + "".join(
        f'{i},{"true" if i % 2 else "false"},{i}.5,"line {i}\nsecond"\n' for i in range(3000)
    )
    ref = externalizer.externalize(table, "sqlite3").artifact
    found = read_record(externalizer.reader, ref, "1001")
    row = {"id": 1001, "ok": True, "cost": 1001.5, "note": "line 1001\nsecond"}
    assert (json.loads(found.text), found.format) == (row, "csv")
    assert json.loads(query_artifact(externalizer.reader, ref, ".[1001]").text) == row
    with pytest.raises(ArtifactReadError, match=r"3,000 rows after the header; row 3000"):
        read_record(externalizer.reader, ref, "3000")


def test_a_table_row_after_an_empty_line_has_the_number_its_outline_prints(
    externalizer: ToolResultExternalizer,
) -> None:
    rows = [f"{i},row {i},{'failed' if i == 4000 else 'ok'}\n" for i in range(5000)]
    table = "id,name,status\n" + "".join(rows[:300]) + "\n" + "".join(rows[300:])
    result = externalizer.externalize(table, "sqlite3")
    assert '.[4000]: {"id":4000,"name":"row 4000","status":"failed"}' in result.context_text
    found = read_record(externalizer.reader, result.artifact, ".[4000]")
    assert json.loads(found.text) == {"id": 4000, "name": "row 4000", "status": "failed"}


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 shell")
def test_a_tsv_row_of_real_sqlite3_output_is_read_by_number(
    externalizer: ToolResultExternalizer,
) -> None:
    sql = (
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999) "
        "SELECT i AS id, 'row-' || i AS name, "
        "CASE WHEN i = 5120 THEN 'failed' ELSE 'ok' END AS status FROM n"
    )
    proc = subprocess.run(
        ["sqlite3", "-header", "-tabs", ":memory:", sql], capture_output=True, check=True
    )
    ref = externalizer.externalize(proc.stdout, "sqlite3").artifact
    found = read_record(externalizer.reader, ref, "5120")
    assert found.format == "tsv"
    assert json.loads(found.text) == {"id": 5120, "name": "row-5120", "status": "failed"}


# -- the faces -----------------------------------------------------------------------------


def test_every_face_reads_a_record(externalizer: ToolResultExternalizer) -> None:
    sid = externalizer.externalize(_document(), "http_get").artifact.source_id
    functions = {fn.__name__: fn for fn in artifact_tools(externalizer)}
    by_function = functions["read_artifact"](sid, record="items[3777].error")
    assert "record:" in (functions["read_artifact"].__doc__ or "")
    local = LocalTools(externalizer).call(
        "read_artifact", {"source_id": sid, "record": "items[3777].error"}
    )
    assert local["isError"] is False
    assert local["content"][0]["text"] == by_function
    assert json.loads(by_function.partition("\n")[2]) == {"code": 504, "detail": "timed out"}
    assert externalizer.read_record(sid, "items[3777].error.code").text == "504"


def test_the_cli_reads_the_record_a_captured_output_names(tmp_path: Path) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text(_document(), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "toolswap", "run", "--", "cat", str(doc)],
        capture_output=True,
        env=_env(),
        check=True,
    )
    pointer = run.stdout.decode()
    source_id = pointer.splitlines()[0].removeprefix("[Artifact: ").rstrip("]")
    assert f"read {source_id} --record '.items[3777]'" in pointer
    read = subprocess.run(
        [sys.executable, "-m", "toolswap", "read", source_id, "--record", ".items[3777]"],
        capture_output=True,
        env=_env(),
    )
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == _items()[3777]
    as_json = subprocess.run(
        [sys.executable, "-m", "toolswap", "read", source_id, "--record", "meta", "--json"],
        capture_output=True,
        env=_env(),
    )
    assert json.loads(as_json.stdout)["value"] == {"page": 1, "next": None}
    bad = subprocess.run(
        [sys.executable, "-m", "toolswap", "read", source_id, "--record", "items[x]"],
        capture_output=True,
        env=_env(),
    )
    assert bad.returncode == 1 and b"not a record address" in bad.stderr


# -- memory --------------------------------------------------------------------------------

_RECORD_CHILD = """
import json, sys
from toolswap import ToolResultExternalizer
from toolswap.structured.record import read_record


def peak_kib():
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])


def reset_peak():
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


count = int(sys.argv[2])
def document():
    yield b'{"total": %d, "items": [' % count
    block = []
    for i in range(count):
        status = "failed" if i == count - 2 else "ok"
        item = {"id": i, "name": "item-%d" % i, "tags": ["a", "b"], "status": status}
        block.append(json.dumps(item).encode())
        if len(block) == 10000:
            yield b", ".join(block) + (b", " if i < count - 1 else b"")
            block = []
    if block:
        yield b", ".join(block)
    yield b"]}"


ext = ToolResultExternalizer(sys.argv[1])
ref = ext.externalize(document(), "api").artifact
ext.reader.verify(ref)
read_record(ext.reader, ref, "items[1]")  # imports and the verified digest, warm
reset_peak()
before = peak_kib()
found = read_record(ext.reader, ref, "items[%d]" % (count - 2))
after = peak_kib()
print(json.dumps({"before": before, "after": after, "size": ref.byte_size, "text": found.text}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_reading_a_record_near_the_end_of_a_large_document_keeps_memory_bounded(
    tmp_path: Path,
) -> None:
    count = 1_200_000  # about 90 MB of JSON: a whole parse would take well over 500 MiB
    child = subprocess.run(
        [sys.executable, "-c", _RECORD_CHILD, str(tmp_path / "s"), str(count)],
        capture_output=True,
        env=_env(),
        check=False,
    )
    assert child.returncode == 0, child.stderr.decode()
    report = json.loads(child.stdout)
    assert report["size"] > 80 << 20
    assert json.loads(report["text"])["status"] == "failed"
    assert report["after"] - report["before"] < 32 * 1024, report
