"""Structured output: how much of its shape the pointer shows, on real programs' output.

Each output is produced here by a real program (pip inspect, ruff check as JSON and JSON
Lines, sqlite3 -json and -csv, git log as TSV, lsblk --json, and, where npm is installed,
npm ls --all --json --long over npm's own install), at least 60 KB; some get one
anomalous record inserted in the middle. Per output it reports: the share of field paths
(present in at least 1% of records) the pointer names, whether the exact record count is
shown, whether the anomalous record is shown (by its jq path), the pointer's bytes, and the
capture time of `cat FILE` against the floor (pipe read + sha256 + write + fsync), against
the same capture as text (the outline off; min against min, and the median of the paired
differences, "added"), and the outline's own time, computed alone from memory.

The captures run as a process that captures many outputs does (the MCP server, a harness
using the library): its outlines in the helper process (``structured.outline_process``),
started before the first measure. "thread" is the same capture with the outline on the
capturing process's thread, as a one-shot command (``toolswap run``) has it, against text.
"run" is the whole one-shot command, ``toolswap run -- cat FILE`` in a new process each
time (its start, its imports and its outline on the thread), against the same command with
the outline off: the wall time's ratio and the median of the paired differences. "tool" is
the same for a command that computes before it prints, as most tools that print JSON do
(``sleep 0.2; cat FILE``: toolswap imports what the capture needs while it is quiet), and
"vs cold" compares it with the text capture without those imports ahead
(``TOOLSWAP_PREWARM=off``, the one-shot text capture before they were made).

A tree's entries nested under the key that holds them (npm's dependencies within
dependencies) are records of the same kind: counted as records, with their field paths
folded (`.dependencies[].dependencies[].version` is `.dependencies[].version`). A path is
named when the pointer spells it, or a brace group in it does (`.a{.b, .c}` spells `.a.b`
and `.a.c`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from _floor import capture_floor
from _structured_fresh import fresh_outputs
from toolswap import ExternalizerSettings, ToolResultExternalizer
from toolswap.externalizer import head_kept
from toolswap.structured import inspect_output
from toolswap.structured._fields import _names
from toolswap.structured._values import _key_path

MIN_BYTES = 60_000
REPEATS = 7


def _run(argv: list[str], **kw: object) -> bytes:
    return subprocess.run(argv, capture_output=True, check=False, **kw).stdout  # type: ignore[call-overload,no-any-return]


def _records(fmt: str, data: bytes) -> tuple[str, list[object]]:
    """(collection pattern, records) as the outline names them."""
    if fmt == "jsonl":
        return ".[]", [json.loads(x) for x in data.splitlines() if x.strip()]
    if fmt in ("csv", "tsv"):
        rows = list(
            csv.DictReader(io.StringIO(data.decode()), delimiter="\t" if fmt == "tsv" else ",")
        )
        return ".[]", list(rows)
    doc = json.loads(data)
    if isinstance(doc, list):
        return ".[]", doc
    maps = [(k, v) for k, v in doc.items() if isinstance(v, dict) and _names(v)]
    if maps:  # a map of names (npm's dependencies): its entries are the records
        key, entries = max(maps, key=lambda kv: len(kv[1]))
        return _key_path("", key) + "[]", list(entries.values())
    key, value = max(
        ((k, v) for k, v in doc.items() if isinstance(v, list)), key=lambda kv: len(kv[1])
    )
    return _key_path("", key) + "[]", value


_LAST_KEY = re.compile(r'(?:\.[A-Za-z_][A-Za-z0-9_]*|\["(?:[^"\\]|\\.)*"\])\Z')


def _folded(pattern: str) -> str | None:
    """``W.k[]`` for ``W.k[].k``: entries that hold more entries like themselves under one
    key (npm's dependencies within dependencies) are records of the same kind, with the same
    field paths however deep they are nested."""
    found = _LAST_KEY.search(pattern)
    if found is not None and pattern.endswith(found.group() + "[]" + found.group()):
        return pattern[: -len(found.group())]
    return None


def _children(
    value: object, pattern: str, maps: set[str], depth: int, *, learn: bool
) -> list[tuple[object, str, int, bool]]:
    """The values below one value: (value, its path, its depth, folded into the entries
    that hold it). ``learn``: an object whose keys are names makes its path a map."""
    if isinstance(value, dict):
        named = depth and (pattern in maps or (learn and _names(value)))
        if not named:
            return [(v, _key_path(pattern, str(k)), depth + 1, False) for k, v in value.items()]
        maps.add(pattern)
        items: list[object] = list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return []
    target = _folded(pattern) if depth else None
    return [
        (v, target, depth - 1, True)
        if target is not None and isinstance(v, dict)
        else (v, pattern + "[]", depth + 1, False)
        for v in items
    ]


def _maps(value: object, pattern: str, maps: set[str], depth: int = 0) -> None:
    """The field paths holding a map of names (once one, a path stays one)."""
    for v, p, d, _ in _children(value, pattern, maps, depth, learn=True):
        _maps(v, p, maps, d)


def _paths(
    value: object,
    pattern: str,
    maps: set[str],
    out: set[str],
    nested: list[object],
    collection: str,
    depth: int = 0,
) -> None:
    """The field paths of one record into ``out``; objects nested like the collection's
    records into ``nested`` (those nested like a field's items are part of this record)."""
    for v, p, d, folded in _children(value, pattern, maps, depth, learn=False):
        if folded and p == collection:
            nested.append(v)
            continue
        if not folded:
            out.add(p)
        _paths(v, p, maps, out, nested, collection, d)


def _common_paths(pattern: str, records: list[object]) -> tuple[list[str], int]:
    """The field paths present in at least 1% of the records, and the records counted: the
    collection's own and, in a tree, every object nested like them."""
    maps: set[str] = set()
    for record in records:
        _maps(record, pattern, maps)
    counts: dict[str, int] = {}
    nodes = list(records)
    for record in nodes:  # grows as nested entries are found
        seen: set[str] = set()
        _paths(record, pattern, maps, seen, nodes, pattern)
        for p in seen:
            counts[p] = counts.get(p, 0) + 1
    return [p for p, n in counts.items() if n >= 0.01 * len(nodes)], len(nodes)


def _expanded(pointer: str) -> str:
    """The pointer with the brace groups of its field paths spelled out (``.a{.b, .c{.d}}``:
    ``.a.b``, ``.a.c.d``), one path a line, after it: the outline may list paths grouped."""
    spelled: list[str] = []
    inside = False
    for line in pointer.splitlines():
        if line.startswith("field paths in at least 1% of records"):
            inside = True
        elif inside and line.startswith("  ."):
            spelled.extend(_braces(line.strip().replace("↻", "")))
        else:
            inside = False
    return pointer + "\n" + "\n".join(spelled)


def _scan(text: str) -> list[tuple[int, str]]:
    """(position, character) of ``text`` outside its quoted keys."""
    found: list[tuple[int, str]] = []
    quoted = escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif quoted:
            escaped = ch == "\\"
            quoted = ch != '"'
        elif ch == '"':
            quoted = True
        else:
            found.append((i, ch))
    return found


def _braces(text: str) -> list[str]:
    depth, start = 0, -1
    for i, ch in _scan(text):
        if ch == "{":
            depth += 1
            if depth == 1:
                start = i
        elif ch == "}":
            depth -= 1
            if depth == 0:
                head, tail = text[:start], text[i + 1 :]
                return [
                    head + x + y
                    for item in _items(text[start + 1 : i])
                    for x in _braces(item)
                    for y in _braces(tail)
                ]
    return [text]


def _items(text: str) -> list[str]:
    out, depth, last = [], 0, 0
    for i, ch in _scan(text):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[last:i].strip())
            last = i + 1
    out.append(text[last:].strip())
    return out


def _insert(fmt: str, data: bytes, anomaly: dict[str, object]) -> tuple[bytes, str]:
    """``data`` with ``anomaly`` inserted as the middle record; returns its jq path."""
    if fmt == "jsonl":
        lines = data.splitlines()
        mid = len(lines) // 2
        lines.insert(mid, json.dumps(anomaly).encode())
        return b"\n".join(lines) + b"\n", f".[{mid}]"
    doc = json.loads(data)
    pattern, _ = _records(fmt, data)
    if isinstance(doc, dict) and isinstance(doc.get(pattern[1:-2]), dict):
        entries = list(doc[pattern[1:-2]].items())
        name = "zz-anomaly"
        entries.insert(len(entries) // 2, (name, {**entries[0][1], **anomaly}))
        doc[pattern[1:-2]] = dict(entries)
        return json.dumps(doc, indent=2).encode(), _key_path(pattern[:-2], name)
    target = (
        doc
        if isinstance(doc, list)
        else max((v for v in doc.values() if isinstance(v, list)), key=len)
    )
    mid = len(target) // 2
    template = dict(target[0]) if target and isinstance(target[0], dict) else {}
    target.insert(mid, {**template, **anomaly})
    pretty = 1 if data.lstrip().startswith(b"[\n") else None
    return json.dumps(doc, indent=pretty).encode(), f"{pattern[:-2] or '.'}[{mid}]"


def _outputs(work: Path) -> list[tuple[str, str, bytes, str | None]]:
    """(name, format, bytes, jq path of the inserted anomaly)."""
    out: list[tuple[str, str, bytes, str | None]] = []
    pip = _run([sys.executable, "-m", "pip", "inspect"])
    out.append(("pip inspect", "json", pip, None))
    pip_bad, at = _insert("json", pip, {"error": "METADATA could not be read: invalid UTF-8"})
    out.append(("pip inspect + error record", "json", pip_bad, at))
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    tree = next(
        Path(item["metadata_location"]).parent
        for item in json.loads(pip)["installed"]
        if item["metadata"]["name"] == "pydantic"
    )
    for fmt, flag in (("json", "json"), ("jsonl", "json-lines")):
        data = _run(
            [
                ruff,
                "check",
                "--no-cache",
                "--select",
                "E,W,F,B,UP",
                "--exit-zero",
                "--output-format",
                flag,
                str(tree / "pydantic"),
            ]
        )
        out.append((f"ruff {flag}", fmt, data, None))
        bad, at = _insert(fmt, data, {"code": "E999", "message": "SyntaxError: unexpected indent"})
        out.append((f"ruff {flag} + E999", fmt, bad, at))
    db = work / "pkgs.db"
    rows = [
        (m["metadata"]["name"], m["metadata"]["version"], f.name, "ok")
        for m in json.loads(pip)["installed"]
        for f in Path(m["metadata_location"]).parent.glob(
            m["metadata"]["name"].replace("-", "_") + "/**/*.py"
        )
    ]
    mid = len(rows) // 2
    rows[mid] = (*rows[mid][:3], "failed")
    at = f".[{mid}]"
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("create table files(package text, version text, file text, status text)")
        conn.executemany("insert into files values (?,?,?,?)", rows)
    out.append(
        ("sqlite3 -json", "json", _run(["sqlite3", "-json", str(db), "select * from files"]), at)
    )
    csv_data = _run(["sqlite3", "-csv", "-header", str(db), "select * from files"])
    out.append(("sqlite3 -csv", "csv", csv_data, at))
    log = _run(
        [
            "git",
            "-C",
            str(Path(__file__).resolve().parent.parent),
            "log",
            "--format=%H%x09%an%x09%at%x09%s",
        ]
    )
    out.append(("git log (TSV)", "tsv", b"hash\tauthor\ttime\tsubject\n" + log, None))
    out.append(("lsblk --json", "json", _run(["lsblk", "--json", "--output-all"]), None))
    npm = shutil.which("npm")
    if npm is not None:
        # npm's own install is a real dependency tree: ``dependencies`` maps package names
        # to entries (a map of names, not of fields), nested.
        npm_home = Path(npm).resolve().parent.parent
        npm_tree = _run([npm, "ls", "--all", "--json", "--long"], cwd=npm_home)
        out.append(("npm ls --all --json --long", "json", npm_tree, None))
        bad, at = _insert(
            "json", npm_tree, {"invalid": "1.0.0 does not satisfy ^2.0.0", "error": "ELSPROBLEMS"}
        )
        out.append(("npm ls + invalid entry", "json", bad, at))
    return out


def _text_capture(path: Path, work: Path) -> float:
    """The same bytes captured as text (the outline turned off): what "capture speed
    unchanged" compares with."""
    ext = ToolResultExternalizer(
        work / "text-session", settings=ExternalizerSettings(structured_outline=False)
    )
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    start = time.perf_counter()
    result = ext.externalize(proc.stdout, "bench", exit_code=proc.wait)
    elapsed = time.perf_counter() - start
    proc.stdout.close()
    result.artifact.path.unlink()  # (see _capture)
    return elapsed


def _capture(ext: ToolResultExternalizer, path: Path) -> tuple[float, str]:
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    start = time.perf_counter()
    result = ext.externalize(proc.stdout, "bench", exit_code=proc.wait)
    elapsed = time.perf_counter() - start
    proc.stdout.close()
    # Every run writes into pages the run before it freed, as the floor's does (it removes
    # its file): on this VM a write into pages never touched costs about 2.5 ms a MiB, and
    # whichever run came after one that kept its file paid it.
    result.artifact.path.unlink()
    return elapsed, result.context_text


def _warm(ext: ToolResultExternalizer, work: Path, data: bytes) -> None:
    """Capture one structured output, then wait for the outline helper it starts."""
    from toolswap.structured import outline_process

    path = work / "warm.bin"
    path.write_bytes(data)
    _capture(ext, path)
    path.unlink()
    deadline = time.monotonic() + 30
    while not outline_process.OUTLINES.ready:
        if time.monotonic() > deadline:
            print("(the outline helper did not start: captures outline on their thread)")
            return
        time.sleep(0.01)


_TOOL_SECONDS = 0.2
"""How long the stand-in for a tool that computes before it prints sleeps (``tool``)."""


def _one_shot(path: Path, work: Path, command: list[str]) -> dict[str, list[float]]:
    """Wall seconds of ``toolswap run -- COMMAND`` in a new process each time, interleaved:
    as shipped ("on"), with the outline off ("text"), and with the outline and the imports
    ahead off ("cold": the text capture as it was before ``TOOLSWAP_PREWARM``)."""
    toolswap = Path(sys.executable).with_name("toolswap")
    argv = [str(toolswap), "run", "--session-dir", str(work / "run-session"), "--", *command]
    envs = {
        "on": None,
        "text": {**os.environ, "TOOLSWAP_OUTLINE": "off"},
        "cold": {**os.environ, "TOOLSWAP_OUTLINE": "off", "TOOLSWAP_PREWARM": "off"},
    }
    runs: dict[str, list[float]] = {name: [] for name in envs}
    for _ in range(REPEATS):
        for name, env in envs.items():
            start = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True)
            runs[name].append(time.perf_counter() - start)
    shutil.rmtree(work / "run-session")
    return runs


def _added(runs: dict[str, list[float]], base: str) -> float:
    """The median of the paired differences between the shipped runs and ``base``'s."""
    return statistics.median(a - b for a, b in zip(runs["on"], runs[base], strict=True))


def _outline_alone(data: bytes, head: int) -> float:
    """Seconds to outline ``data`` from memory, as the capture's thread does from the file
    (``head``: the bytes of it the capture keeps, which decide its format)."""
    start = time.perf_counter()
    inspect_output(data[:head], lambda count, offset: data[offset : offset + count], len(data))
    return time.perf_counter() - start


def _floor(path: Path, scratch: Path) -> float:
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    elapsed = capture_floor(proc.stdout, scratch)
    proc.wait()
    return elapsed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ext = ToolResultExternalizer(work / "session")
        threaded = ToolResultExternalizer(
            work / "thread-session", settings=ExternalizerSettings(outline_process=False)
        )
        head = head_kept(ext.settings, "bench")  # (its format is sniffed from these bytes)
        outputs = _outputs(work)
        _warm(ext, work, outputs[0][2])
        print(
            f"{'output':28} {'size':>9} {'records':>8} {'paths':>7} {'count':>5} "
            f"{'anomaly':>7} {'pointer':>8} {'capture/floor':>13} {'s':>9} {'vs text':>7} "
            f"{'added':>8} {'thread':>6} {'outline':>8} {'run':>6} {'added':>8} {'tool':>8} "
            f"{'vs cold':>8}"
        )
        named_all = total_all = 0
        for name, fmt, data, anomaly in outputs:
            if len(data) < MIN_BYTES:
                print(f"{name:28} {len(data):>9,} (under {MIN_BYTES:,} bytes here: skipped)")
                continue
            path = work / "out.bin"
            path.write_bytes(data)
            pattern, records = _records(fmt, data)
            paths, record_count = _common_paths(pattern, records)
            floors, captures, texts, threads = [], [], [], []
            pointer = ""
            for _ in range(REPEATS):
                floors.append(_floor(path, work / "floor.bin"))
                took, pointer = _capture(ext, path)
                captures.append(took)
                texts.append(_text_capture(path, work))
                threads.append(_capture(threaded, path)[0])
            spelled = _expanded(pointer)
            named = sum(1 for p in paths if p in spelled)
            named_all += named
            total_all += len(paths)
            count_shown = f"{record_count:,} " in pointer
            shown = "-"
            if anomaly is not None:
                shown = "yes" if f"{anomaly}: " in pointer else "NO"
            ratio = min(captures) / min(floors)
            # The time the outline adds to a capture: the median of the paired differences
            # (each capture against the text capture right after it), and the outline's own
            # time, computed alone from memory (min of the repeats).
            added = statistics.median(c - t for c, t in zip(captures, texts, strict=True))
            alone = min(_outline_alone(data, head) for _ in range(REPEATS))
            cat = _one_shot(path, work, ["cat", str(path)])
            computes = f'sleep {_TOOL_SECONDS}; cat "$0"'
            tool = _one_shot(path, work, ["sh", "-c", computes, str(path)])
            print(
                f"{name:28} {len(data):>9,} {record_count:>8,} {named:>3}/{len(paths):<3} "
                f"{'yes' if count_shown else 'NO':>5} {shown:>7} {len(pointer.encode()):>8,} "
                f"{ratio:>12.2f}x {min(captures):>9.3f} {min(captures) / min(texts):>6.2f}x "
                f"{added * 1e3:>+6.1f}ms {min(threads) / min(texts):>5.2f}x "
                f"{alone * 1e3:>6.1f}ms {min(cat['on']) / min(cat['text']):>5.2f}x "
                f"{_added(cat, 'text') * 1e3:>+6.1f}ms {_added(tool, 'text') * 1e3:>+6.1f}ms "
                f"{_added(tool, 'cold') * 1e3:>+6.1f}ms"
            )
        if total_all:
            print(
                f"field paths named overall: {named_all}/{total_all} "
                f"({100 * named_all / total_all:.0f}%)"
            )
        sarif = _held_out(ext, work, head)
        _fresh(ext, work, head)
        large = {name: data for name, _, data, _ in outputs}
        _large(ext, threaded, work, large, sarif)
    return 0


# -- held out: programs the outline was never tuned on ---------------------------------


def _held_out_outputs(work: Path) -> list[tuple[str, str, bytes]]:
    """(name, format, bytes) of real programs' structured output that no rule of the
    outline was written for: SARIF and other linters' report formats, npm's query, ruff's
    rule catalogue, mypy's JSON Lines, find's files as CSV, dpkg's packages as TSV."""
    out: list[tuple[str, str, bytes]] = []
    bin_dir = Path(sys.executable).parent
    ruff = shutil.which("ruff") or str(bin_dir / "ruff")
    import pydantic  # (the tree ruff checks, as in ``_outputs``)

    tree = Path(pydantic.__file__).parent
    for flag in ("sarif", "gitlab", "rdjson"):
        lint = ("check", "--no-cache", "--select", "E,W,F,B,UP", "--exit-zero")
        data = _run([ruff, *lint, "--output-format", flag, str(tree)])
        out.append((f"ruff {flag}", "json", data))
    out.append(
        ("ruff rule --all", "json", _run([ruff, "rule", "--all", "--output-format", "json"]))
    )
    npm = shutil.which("npm")
    if npm is not None:
        home = Path(npm).resolve().parent.parent
        out.append(("npm query '*'", "json", _run([npm, "query", "*", "--json"], cwd=home)))
    mypy = shutil.which("mypy") or str(bin_dir / "mypy")
    checked = work / "mypy-input"
    checked.mkdir()
    import dateutil
    import jmespath

    for package in (jmespath, dateutil):
        shutil.copytree(Path(package.__file__).parent, checked / package.__name__)
    out.append(
        (
            "mypy -O json",
            "jsonl",
            _run(
                [
                    mypy,
                    "-O",
                    "json",
                    "--strict",
                    "--ignore-missing-imports",
                    "--no-incremental",
                    "--cache-dir",
                    "/dev/null",
                    "jmespath",
                    "dateutil",
                ],
                cwd=checked,
            ),
        )
    )
    stdlib = str(Path(json.__file__).parent.parent)
    found = _run(["find", stdlib, "-maxdepth", "3", "-printf", "%p,%s,%T@,%m,%u\n"])
    out.append(("find -printf CSV", "csv", b"path,size,mtime,mode,user\n" + found))
    if shutil.which("dpkg-query") is not None:
        fields = ("Package", "Version", "Installed-Size", "Architecture", "Section")
        fields += ("Priority", "Maintainer", "Status")
        packages = _run(["dpkg-query", "-W", "-f", "\t".join(f"${{{f}}}" for f in fields) + "\n"])
        out.append(("dpkg-query TSV", "tsv", "\t".join(fields).lower().encode() + b"\n" + packages))
    return out


_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]')


def _at(doc: object, path: str) -> object:
    """The value at a jq path of object keys and indices (``.runs[0].results``)."""
    for step in _STEP.finditer(path):
        key, quoted, number = step.groups()
        if number is not None:
            doc = doc[int(number)]  # type: ignore[index]
        else:
            doc = doc[key if key is not None else json.loads(f'"{quoted}"')]  # type: ignore[index]
    return doc


def _largest(value: object, pattern: str, path: str, best: list[object]) -> None:
    """The largest array, or object keyed by names, anywhere in ``value`` (the first 50
    elements of each array looked into): ``best`` becomes [count, pattern, path]."""
    if isinstance(value, list):
        if len(value) > best[0]:  # type: ignore[operator]
            best[:] = [len(value), pattern + "[]", path]
        for number, item in enumerate(value[:50]):
            _largest(item, pattern + "[]", f"{path}[{number}]", best)
    elif isinstance(value, dict):
        if pattern and _names(value) and len(value) > best[0]:  # type: ignore[operator]
            best[:] = [len(value), pattern + "[]", path]
        for key, item in value.items():
            _largest(item, _key_path(pattern, str(key)), _key_path(path, str(key)), best)


def _collection(fmt: str, data: bytes) -> tuple[str, list[object], str]:
    """(pattern, records, path of their container) of the largest collection: the whole
    of JSON Lines or a table, else the largest array or map of names in the document."""
    if fmt != "json":
        pattern, records = _records(fmt, data)
        return pattern, records, "."
    best: list[object] = [0, ".[]", ""]
    doc = json.loads(data)
    _largest(doc, "", "", best)
    path = str(best[2])
    node = _at(doc, path)
    return str(best[1]), list(node.values()) if isinstance(node, dict) else list(node), path  # type: ignore[call-overload]


def _held_out_insert(fmt: str, data: bytes) -> tuple[bytes, str]:
    """``data`` with one failing record in the middle of its largest collection: a copy of
    the first with an ``error`` and ``status: failed`` (for a table, the middle row's last
    cell ``failed``; for mypy's JSON Lines, a record of severity ``fatal``)."""
    if fmt == "jsonl":
        first = json.loads(data.splitlines()[0])
        return _insert(fmt, data, {**first, "severity": "fatal", "message": "INTERNAL ERROR"})
    if fmt in ("csv", "tsv"):
        lines = data.splitlines(keepends=True)
        mid = len(lines) // 2
        delimiter = "\t" if fmt == "tsv" else ","
        cells = next(csv.reader([lines[mid].decode()], delimiter=delimiter))
        cells[-1] = "failed"
        lines[mid] = (delimiter.join(cells) + "\n").encode()
        return b"".join(lines), f".[{mid - 1}]"
    doc = json.loads(data)
    _, _, path = _collection(fmt, data)
    node = _at(doc, path)
    anomaly = {"error": "could not be read: permission denied", "status": "failed"}
    if isinstance(node, dict):
        entries = list(node.items())
        entries.insert(len(entries) // 2, ("zz-anomaly", {**entries[0][1], **anomaly}))
        node.clear()
        node.update(entries)
        at = _key_path(path, "zz-anomaly")
    else:
        assert isinstance(node, list)
        mid = len(node) // 2
        template = dict(node[0]) if node and isinstance(node[0], dict) else {}
        node.insert(mid, {**template, **anomaly})
        at = f"{path or '.'}[{mid}]"
    pretty = 1 if data.lstrip()[:2] in (b"[\n", b"{\n") else None
    return json.dumps(doc, indent=pretty).encode(), at


class _Measured(NamedTuple):
    pattern: str
    records: int
    named: int
    paths: int
    count_shown: bool
    found: bool | None
    """Whether the pointer shows the failing record (None: the output has none)."""
    pointer_bytes: int


def _measure(
    ext: ToolResultExternalizer, work: Path, fmt: str, output: bytes, failing: str | None
) -> _Measured:
    """Capture ``output`` and measure its pointer against the largest collection in it:
    field paths named, the exact count, the record at ``failing`` (a jq path)."""
    pattern, records, _ = _collection(fmt, output)
    paths, record_count = _common_paths(pattern, records)
    path = work / "measured.bin"
    path.write_bytes(output)
    with path.open("rb") as stream:
        result = ext.externalize(stream, "bench")
    result.artifact.path.unlink()
    pointer = result.context_text
    spelled = _expanded(pointer)
    return _Measured(
        pattern,
        record_count,
        sum(1 for p in paths if p in spelled),
        len(paths),
        f"{record_count:,} " in pointer,
        None if failing is None else f"{failing}: " in pointer,
        len(pointer.encode()),
    )


def _held_out(ext: ToolResultExternalizer, work: Path, head: int) -> bytes:
    """The same measures on held-out outputs (``_held_out_outputs``), each as it is and
    with one failing record inserted: whether what the outline does generalizes. Returns
    ruff's SARIF log (repeated for the large outputs)."""
    print("held out (programs no rule of the outline was written for):")
    measured: list[_Measured] = []
    sarif = b""
    for name, fmt, data in _held_out_outputs(work):
        if name == "ruff sarif":
            sarif = data
        if len(data) < MIN_BYTES:
            print(f"  {name:30} {len(data):>9,} (under {MIN_BYTES:,} bytes here: skipped)")
            continue
        bad, at = _held_out_insert(fmt, data)
        for label, output, anomaly in ((name, data, None), (name + " + failure", bad, at)):
            m = _measure(ext, work, fmt, output, anomaly)
            measured.append(m)
            mark = "-" if m.found is None else ("yes" if m.found else "NO")
            alone = min(_outline_alone(output, head) for _ in range(3))
            print(
                f"  {label:30} {len(output):>9,} {m.pattern[:22]:>22} {m.records:>7,} "
                f"{m.named:>3}/{m.paths:<3} {'yes' if m.count_shown else 'NO':>5} {mark:>7} "
                f"{m.pointer_bytes:>7,} {alone * 1e3:>6.1f}ms"
            )
    _totals("held out", measured)
    return sarif


def _totals(title: str, measured: list[_Measured]) -> None:
    if not measured:
        return
    failing = [m.found for m in measured if m.found is not None]
    print(
        f"  {title}: field paths named {sum(m.named for m in measured)}/"
        f"{sum(m.paths for m in measured)}, exact count shown in "
        f"{sum(m.count_shown for m in measured)}/{len(measured)}, failing record shown in "
        f"{sum(failing)}/{len(failing)}"
    )


def _fresh(ext: ToolResultExternalizer, work: Path, head: int) -> None:
    """The same measures on a fresh held-out set (``_structured_fresh``): real programs'
    output with their own failures, none inserted."""
    print("held out fresh (real failures, none inserted; see _structured_fresh.py):")
    measured: list[_Measured] = []
    for name, fmt, output, failing in fresh_outputs(work):
        if len(output) < MIN_BYTES:
            print(f"  {name:32} {len(output):>9,} (under {MIN_BYTES:,} bytes here: skipped)")
            continue
        m = _measure(ext, work, fmt, output, failing[0] if failing else None)
        measured.append(m)
        mark = "-" if m.found is None else f"{'yes' if m.found else 'NO'} {failing[0]}"
        alone = min(_outline_alone(output, head) for _ in range(3))
        print(
            f"  {name:32} {len(output):>9,} {m.pattern[:18]:>18} {m.records:>6,} "
            f"{m.named:>3}/{m.paths:<3} {'yes' if m.count_shown else 'NO':>5} {mark:>11} "
            f"{m.pointer_bytes:>6,} {alone * 1e3:>6.1f}ms"
        )
    _totals("held out fresh", measured)


LARGE_BYTES = 64 << 20


def _large(
    ext: ToolResultExternalizer,
    threaded: ToolResultExternalizer,
    work: Path,
    outputs: dict[str, bytes],
    sarif: bytes,
) -> None:
    """Large structured outputs (a real one repeated past 64 MiB): the capture against its
    floor and against the same bytes captured as text, with the outline in the helper
    process and on the capture's thread, and how much the outline parsed."""
    print(f"large outputs ({LARGE_BYTES >> 20} MiB and more; min of {REPEATS // 2 + 1}):")
    ruff_lines = outputs.get("ruff json-lines", b"")
    ruff = outputs.get("ruff json", b"")
    if not ruff_lines or not ruff:
        return
    records = json.loads(ruff) * (LARGE_BYTES // len(ruff) + 1)
    large = {
        "ruff json-lines, repeated": ruff_lines * (LARGE_BYTES // len(ruff_lines) + 1),
        "ruff json, one array": json.dumps(records, indent=2).encode(),
        # An API's response as most return it: the same array on one line.
        "ruff json, one line": json.dumps(records, separators=(",", ":")).encode(),
    }
    del records
    if sarif:
        # One run of a SARIF log: a wrapper read by ijson's events, in Python.
        log = json.loads(sarif)
        results = log["runs"][0]["results"]
        log["runs"][0]["results"] = results * (LARGE_BYTES // len(sarif) + 1)
        large["ruff sarif, one run"] = json.dumps(log, indent=2).encode()
        del log, results
    for name, data in large.items():
        path = work / "large.bin"
        path.write_bytes(data)
        floors, captures, texts, threads = [], [], [], []
        pointer = ""
        for _ in range(REPEATS // 2 + 1):
            floors.append(_floor(path, work / "floor.bin"))
            took, pointer = _capture(ext, path)
            captures.append(took)
            texts.append(_text_capture(path, work))
            threads.append(_capture(threaded, path)[0])
        parsed = re.search(r"--- structure: (.*) ---", pointer)
        floor = min(floors)
        print(
            f"  {name:26} {len(data):>11,} B: floor {floor:.3f} s; capture "
            f"{min(captures) / floor:.2f}x the floor, as text {min(texts) / floor:.2f}x; "
            f"vs text {min(captures) / min(texts):.2f}x (on the thread "
            f"{min(threads) / min(texts):.2f}x)"
        )
        print(f"    {parsed.group(1) if parsed else 'no outline'}")
        path.unlink()


if __name__ == "__main__":
    raise SystemExit(main())
