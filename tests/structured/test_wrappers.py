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
    assert found.records == 1_001  # the results, and the run (a record of .runs[])
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
    assert found.records == 1_302
    assert ".runs[].results[]: 1,300 objects" in found.text
    assert ".runs[1].results[7]: " in found.text


@pytest.mark.parametrize(("elements", "wrapper"), [(8, True), (9, False)])
def test_a_wrapper_has_at_most_eight_elements(
    elements: int, wrapper: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past eight, the array is a collection with one record too large to walk (a list of
    packages where one holds a huge file list stays a list of packages). A wrapper's
    elements are records too, each collection read from them an empty array there."""
    big = {"id": 0, "files": [f"f{i}" for i in range(25_000)]}
    doc = {"items": [{"id": n} for n in range(1, elements)] + [big]}
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert (".items[].files[]: 25,000 strings" in found.text) is wrapper
    files = ", files?: [str]" if wrapper else ""  # (a collection of its own, in its place)
    assert f".items[]: {elements} objects {{id: int{files}}}" in found.text
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


def test_nested_wrappers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wrapper found reads the document again: past eight, an array is a collection
    again (here with one record too large to walk)."""
    inner: Any = [{"id": i, "v": list(range(30))} for i in range(1_000)]
    for level in range(10):
        inner = {f"k{level}": [{"x": level, "inner": inner}]}
    data = json.dumps(inner).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    eight = ".k9[].inner.k8[].inner.k7[].inner.k6[].inner.k5[].inner.k4[].inner.k3[].inner.k2[]"
    assert f"{eight}: 1 object {{x: int, inner: object}}" in found.text
    assert f"{eight}.inner.k1[]: 1 object\n  (1 record too large to outline)" in found.text
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


def _huge_result() -> dict[str, Any]:
    """One result past a record's events (a code flow of 25,000 steps)."""
    return {"ruleId": "X", "codeFlows": [{"step": n} for n in range(25_000)]}


def test_an_integer_past_64_bits_is_no_end_of_the_part_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """u64::MAX stops ijson's float reading: the event pass read that error as the end of
    the part, inside an array of two elements begun, and made a collection of 1,000 a
    wrapper (a review). The exact reading keeps it a collection."""
    items: list[Any] = [_huge_result(), {"id": 1, "n": 18446744073709551615}]
    items += [{"id": n, "status": "ok"} for n in range(2, 1_000)]
    items[500] = {"id": 500, "status": "failed"}
    data = json.dumps({"items": items}).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert ".items[]: 1,000 objects" in found.text
    assert ".items[500]: " in found.text and "status=failed" in found.text


def test_each_array_is_judged_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run 0's results are one huge result (a wrapper); run 1's 5,000 results stay a
    collection, their failure listed (every array at the same field path was read as a
    wrapper, its results envelope text only, found by a review)."""
    runs = [
        {"tool": {"name": "a"}, "results": [_huge_result()]},
        {"tool": {"name": "b"}, "results": [_result(n) for n in range(5_000)]},
    ]
    runs[1]["results"][4_242]["level"] = "error"
    data = json.dumps({"version": "2.1.0", "runs": runs}).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert ".runs[].results[]: 5,001 objects" in found.text
    assert ".runs[1].results[4242]: " in found.text and "<- level=error" in found.text


def test_each_run_shows_its_own_count_in_the_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sarif(1_500, 20, 0)
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert '"results": [1,500 of .runs[].results[]]' in found.text
    assert '"results": [20 of .runs[].results[]]' in found.text
    assert '"results": []' in found.text
    assert ".runs[].results[]: 1,520 objects" in found.text


def test_a_wrapper_s_element_is_never_a_map_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run keyed by file names (a wrapper's element) was collapsed as a map of names,
    which dropped run 0's 3,000 results from the outline (a review)."""
    doc = json.loads(_sarif(3_000, error=(0, 500)))
    doc["runs"].append({"src/a.py": {"hash": "1"}, "src/b.py": {"hash": "2"}})
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert ".runs[].results[]: 3,000 objects" in found.text
    assert ".runs[0].results[500]: " in found.text


def test_a_failing_element_of_a_wrapper_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """trivy: one target of thousands of findings makes ``Results`` a wrapper; a target
    that failed (no findings, an ``Error``) is a record of ``.Results[]`` and listed."""
    vulns = [{"VulnerabilityID": f"CVE-2024-{n}", "Severity": "LOW"} for n in range(6_000)]
    doc = {
        "SchemaVersion": 2,
        "Results": [
            {"Target": "img (debian 12)", "Class": "os-pkgs", "Vulnerabilities": vulns},
            {"Target": "app/package-lock.json", "Class": "lang-pkgs", "Packages": []},
            {"Target": "app/go.sum", "Class": "lang-pkgs", "Error": "unexpected EOF"},
        ],
    }
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert ".Results[].Vulnerabilities[]: 6,000 objects" in found.text
    assert ".Results[]: 3 objects" in found.text
    assert ".Results[2]: " in found.text and "<- Error field" in found.text


def test_a_wrapper_without_arrays_has_an_outline(monkeypatch: pytest.MonkeyPatch) -> None:
    """An element of 25,000 settings and no array: its wrapper's elements are the records
    (there was no collection, so no outline, found by a review)."""
    doc = {"profiles": [{"name": "default", **{f"k{n}": n for n in range(25_000)}}]}
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    assert ".profiles[]: 1 object" in found.text


def test_handles_are_names() -> None:
    """``@alice`` is a name, not a format's keyword: a map of handles stays a map."""
    doc = {f"@user{n}": {"followers": n, "status": "ok"} for n in range(3)}
    found = _outline(json.dumps({"users": doc}).encode())
    assert found is not None and ".users{}: 3 entries" in found.text


def test_a_wrapper_s_element_keeps_its_collections_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose results are a collection of their own still has ``results``: the field's
    share counts it, and the run is shown with the collection named where its array is
    (before, the member was dropped: ``.runs[].results  array  33%`` for 2 runs of 3, and a
    result whose ``codeFlows`` was a collection was shown without it)."""
    huge = {"ruleId": "X", "codeFlows": [{"step": n} for n in range(25_000)]}
    doc = {
        "runs": [
            {"tool": {"name": "a"}, "results": [huge, {"ruleId": "Y"}]},
            {"tool": {"name": "b"}, "results": [{"ruleId": "Y"} for _ in range(20)]},
            ["not", "an", "object", 1, 2, 3, 4, 5, 6, 7],
        ]
    }
    data = json.dumps(doc).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    lines = found.text.splitlines()
    assert "  .runs[].results  array  67%" in lines, found.text
    shown = '"codeFlows":"[25,000 elements: .runs[].results[].codeFlows[]]"'
    assert f'.runs[0].results[0]: {{"ruleId":"X",{shown}}}' in lines, found.text


_HUGE_FLOWS = {"ruleId": "X", "codeFlows": [{"step": n} for n in range(25_000)]}
_SMALL_FLOWS = {"ruleId": "Y", "codeFlows": [{"step": 0}, {"step": 1}]}


def _flows(
    runs: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> tuple[Outline, list[str]]:
    """The outline of a SARIF-like log of these runs' results (both readers agree on it)."""
    data = json.dumps({"runs": [{"results": results} for results in runs]}).encode()
    found = _outline(data)
    assert found is not None
    assert found == _by_events(data, monkeypatch)
    return found, found.text.splitlines()


def test_a_collection_that_is_also_a_field_of_other_records_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run 0's one result is too large (its results a wrapper, its codeFlows a collection);
    run 1's 5,000 results are records whose codeFlows are fields: jq's
    ``.runs[].results[].codeFlows[]`` matches both, and the outline says it counts more than
    the collection's 25,000 (before, it said 25,000 where jq finds 35,000)."""
    found, lines = _flows([[_HUGE_FLOWS], [_SMALL_FLOWS] * 5_000], monkeypatch)
    at = lines.index(".runs[].results[].codeFlows[]: 25,000 objects {step: int}")
    assert lines[at + 1] == (
        "  (.runs[].results[].codeFlows[] also matches 398 elements of arrays in other records"
        " walked whole: 25,398 or more in all)"
    ), found.text
    assert ".runs[].results[]: 5,001 objects" in found.text
    assert "  .runs[].results[].codeFlows  array  100%" in lines, found.text


def test_a_collection_in_records_too_large_to_walk_says_it_may_count_fewer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run 0's one result is a wrapper's element (its codeFlows a collection of 25,000);
    run 1's ten results are records, one of them too large to walk, with 25,000 more
    codeFlows that nothing counts: the collection says so (jq finds 50,018; it said 25,018
    or more from the records walked, a review's fuzzing found such counts short)."""
    found, lines = _flows([[_HUGE_FLOWS], [_SMALL_FLOWS] * 9 + [_HUGE_FLOWS]], monkeypatch)
    at = lines.index(".runs[].results[].codeFlows[]: 25,000 objects {step: int}")
    notes = lines[
        at + 1 : lines.index(".runs[].results[]: 11 objects {ruleId: str, codeFlows: [object]}")
    ]
    assert "  (more may be in the 1 record of .runs[].results[] too large to outline)" in notes, (
        found.text
    )
    assert lines[
        lines.index(".runs[].results[]: 11 objects {ruleId: str, codeFlows: [object]}") + 1
    ] == ("  (1 record too large to outline)")
    # A collection with no such records above it says nothing of the kind.
    plain = json.dumps({"runs": [{"results": [_HUGE_FLOWS]}, {"results": [_SMALL_FLOWS] * 9}]})
    plain_data = plain.encode()
    shown = _outline(plain_data)
    assert shown is not None and "more may be in" not in shown.text, shown.text


def test_a_wrapper_is_known_at_its_element_too_large_to_be_a_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SARIF log of one run, read by events: the run is guessed to be a wrapper's element
    as soon as it passes a record's events, so the document is read about once, not once
    to the end of the run and then again (a 263 MB log's outline took 410 ms, now 240)."""
    data = _sarif(6_000)
    reads: list[int] = []

    def read(count: int, offset: int) -> bytes:
        reads.append(count)
        return data[offset : offset + count]

    with monkeypatch.context() as patch:
        patch.setattr(_read_json, "_WHOLE_DOCUMENT", 0)
        found = outline("json", read, len(data))
    assert found is not None and found == _outline(data)
    assert ".runs[].results[]: 6,000 objects" in found.text
    assert sum(reads) < 1.3 * len(data), (sum(reads), len(data))
    # A guess that the array is longer than a wrapper undoes: the ten files are records,
    # one too large to walk (read once more, as before the guess).
    files = [{"id": n} for n in range(10)]
    files[1] = {"id": 1, "values": list(range(25_000))}
    longer = json.dumps({"files": files}).encode()
    found = _by_events(longer, monkeypatch)
    assert found is not None and found == _outline(longer)
    assert ".files[]: 10 objects {id: int}\n  (1 record too large to outline)" in found.text
