"""Wrapper arrays: an array of a few elements, one of them an object too large to be one
record (SARIF's ``runs``, each run holding all its ``results``), is read as envelope, and
the arrays in its elements are the collections, with ``[]`` for the wrapper's index in
their patterns and the index itself in their records' paths. Both readers of a JSON object
(the pass over raw members and the event pass) decide alike, and so does the event pass
over a document it reads only in part."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolswap import ToolResultExternalizer
from toolswap.structured import _read_json
from toolswap.structured.outline import Outline, outline

pytest.importorskip("msgspec")


def _result(n: int, *, level: str = "warning") -> dict[str, Any]:
    """A SARIF result as linters write them (about 30 parser events)."""
    return {
        "ruleId": f"E{n % 7}",
        "level": level,
        "message": {"text": f"message {n}"},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": f"file:///src/mod_{n % 40}.py"},
                    "region": {"startLine": n + 1},
                }
            }
        ],
    }


def _sarif(*runs: int, error: tuple[int, int] | None = None) -> bytes:
    """A SARIF log with a run of each many results (1,000 are past one record's events);
    ``error``: (run, result) of the one result at level error."""
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "lint", "version": "1.0"}},
                "results": [
                    _result(n, level="error" if error == (r, n) else "warning")
                    for n in range(count)
                ],
            }
            for r, count in enumerate(runs)
        ],
    }
    return json.dumps(doc, indent=2).encode()


def _outline(data: bytes, *, scan_limit: int | None = None) -> Outline | None:
    return outline(
        "json",
        lambda count, offset: data[offset : offset + count],
        len(data),
        scan_limit=scan_limit,
    )


def _by_events(data: bytes, monkeypatch: pytest.MonkeyPatch) -> Outline | None:
    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        return _outline(data)


def test_a_sarif_run_is_a_wrapper_and_its_results_the_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _sarif(1_000, error=(0, 500))
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    text = found.text
    assert found.records == 1_000
    assert (
        '"runs": [{"tool": {"driver": {"name": "lint", "version": "1.0"}}, "results": [1,000'
        in (text)
    )
    assert ".runs[].results[]: 1,000 objects" in text
    assert ".runs[].results[].locations[].physicalLocation.region.startLine" in text
    assert ".runs[0].results[500]: " in text and "<- level=error" in text
    # Before, the run was one record "too large to outline", shown as null.
    assert "too large" not in text and "null" not in text


def test_the_results_of_every_run_are_one_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sarif(1_000, 300, error=(1, 7))
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert found.records == 1_300
    assert ".runs[].results[]: 1,300 objects" in found.text
    assert ".runs[1].results[7]: " in found.text


@pytest.mark.parametrize(("elements", "wrapper"), [(8, True), (9, False)])
def test_a_wrapper_has_at_most_eight_elements(
    elements: int, wrapper: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past eight, the array is a collection with one record too large to walk (a list of
    packages where one holds a huge file list stays a list of packages)."""
    big = {"id": 0, "files": [f"f{i}" for i in range(25_000)]}
    doc = {"items": [{"id": n} for n in range(1, elements)] + [big]}
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert (".items[].files[]: 25,000 strings" in found.text) is wrapper
    assert (f".items[]: {elements} objects" in found.text) is not wrapper
    assert ("too large" in found.text) is not wrapper


def test_a_document_read_in_part_ends_inside_its_wrapper() -> None:
    """30,000 results, 4.5 MB, outlined from their first MiB: the part ends inside the one
    run, which is a wrapper all the same."""
    data = _sarif(30_000, error=(0, 1_000))
    found = _outline(data, scan_limit=1 << 20)
    assert found is not None and not found.complete
    assert "outline of the first 1,048,576 of" in found.text
    assert ".runs[].results[]: " in found.text
    assert ".runs[0].results[1000]: " in found.text and "<- level=error" in found.text


def test_nested_wrappers_are_bounded() -> None:
    """Each wrapper found reads the document again: past eight, no outline (the raw text
    stands), and no error."""
    inner: Any = [{"id": i, "v": list(range(30))} for i in range(1_000)]
    for level in range(10):
        inner = {f"k{level}": [{"x": level, "inner": inner}]}
    data = json.dumps(inner).encode()
    assert _outline(data) is None
    shallow: Any = [{"id": i, "v": list(range(30))} for i in range(1_000)]
    for level in range(3):
        shallow = {f"k{level}": [{"x": level, "inner": shallow}]}
    found = _outline(json.dumps(shallow).encode())
    assert found is not None and ".k2[].inner.k1[].inner.k0[].inner[]: 1,000 objects" in (
        found.text
    )


def test_the_pointer_s_record_address_reads_the_record(tmp_path: Path) -> None:
    """What the pointer names (``.runs[0].results[500]``) is what a record read returns,
    and a query over the wrapper's collection sees every run."""
    ext = ToolResultExternalizer(tmp_path / "session")
    source = tmp_path / "lint.sarif"
    source.write_bytes(_sarif(1_000, 20, error=(0, 500)))
    with source.open("rb") as stream:
        result = ext.externalize(stream, "lint")
    assert ".runs[0].results[500]: " in result.context_text
    record = ext.read_record(result.artifact.source_id, ".runs[0].results[500]")
    assert json.loads(record.text)["level"] == "error"
    count = ext.query(result.artifact.source_id, "[.runs[].results[]] | length")
    assert json.loads(count.text) == 1_020


@pytest.mark.parametrize(
    "first",
    [
        {"@odata.context": "https://graph/$metadata#users", "@odata.count": "100"},
        {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0"},
        {"@context": "https://schema.org", "@type": "ItemList"},
    ],
)
def test_keys_marked_as_a_format_s_own_are_fields(first: dict[str, str]) -> None:
    """``$schema``, JSON-LD's ``@context`` and OData's ``@odata.*`` sit among an object's
    fields: two of them first no longer make the root a map of names (which hid the
    collection after them)."""
    doc = {**first, "value": [{"id": str(i), "displayName": f"user {i}"} for i in range(100)]}
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert ".value[]: 100 objects" in found.text
    assert ".{}" not in found.text
