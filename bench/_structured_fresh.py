"""A fresh held-out set for the outline: structured output of real programs run here, with
their own failures where they have one (a compiler's error among its warnings), not a record
inserted by the bench. Written before any outline of them was looked at (committed first,
759eb91), then run through the pointer once (2026-12-03, at 759eb91): field paths named
213/213, exact record count shown 7/7, the failing record shown 3/3 (cargo's E0308 at
``.[180]`` of 363 records, gcc's error at ``.[162]`` of 321 diagnostics, the file with the
error at ``.[37]`` of 60 lines), pointers 3.2-8.0 KB, outlines 6-20 ms. Each entry: (name,
format, bytes, jq paths of the failing records).

The programs: cargo's JSON messages (``cargo check --message-format=json``), gcc's JSON
diagnostics (one file; and one file at a time over a tree, a JSON array a line),
``cargo metadata`` of a workspace, ``npm pack --dry-run --json`` (npm's own package),
and a PostgreSQL server's ``pg_settings`` through ``psql`` as CSV and as one JSON array.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["fresh_outputs"]

Output = tuple[str, str, bytes, list[str]]


def _run(argv: list[str], cwd: Path | None = None, stderr: bool = False) -> bytes:
    proc = subprocess.run(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
        check=False,
        timeout=600,
    )
    return proc.stdout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _rust_crate(root: Path, name: str, modules: int, broken: int | None) -> None:
    """A crate of ``modules`` modules, each with unused variables and imports (warnings);
    module ``broken`` assigns a string to an integer (error E0308)."""
    lines = [f"mod m{i:03d};" for i in range(modules)]
    _write(root / "src" / "main.rs", "\n".join(lines) + "\nfn main() {}\n")
    for i in range(modules):
        body = [
            "use std::collections::HashMap;",
            "use std::fmt::Write;",
            f"pub fn compute_{i}(values: &[i64]) -> i64 {{",
            "    let mut total = 0;",
            f"    let unused_{i} = values.len();",
            "    for v in values { total += v; }",
            "    total",
            "}",
            f"fn helper_{i}(x: i64) -> i64 {{ let scratch = x * 2; x }}",
        ]
        if i == broken:
            body.append(f'pub fn broken_{i}() -> i64 {{ let count: i64 = "seven"; count }}')
        _write(root / "src" / f"m{i:03d}.rs", "\n".join(body) + "\n")
    _write(
        root / "Cargo.toml",
        f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n',
    )


def _cargo_check(work: Path) -> Output | None:
    if shutil.which("cargo") is None:
        return None
    root = work / "cargo-check"
    _rust_crate(root, "ledger", 90, broken=47)
    data = _run(
        ["cargo", "check", "--offline", "--quiet", "--message-format=json"],
        cwd=root,
    )
    failing = []
    for number, line in enumerate(x for x in data.splitlines() if x.strip()):
        record = json.loads(line)
        message = record.get("message") or {}
        if message.get("level") == "error" and message.get("code"):
            failing.append(f".[{number}]")
    return "cargo check --message-format=json", "jsonl", data, failing


def _c_unit(index: int, functions: int, broken: bool) -> str:
    parts = ["#include <stdio.h>", "#include <string.h>"]
    for j in range(functions):
        parts.append(
            f"int unit{index}_f{j}(int count, const char *name) {{\n"
            f"  int unused_{j} = 0;\n  unsigned n = strlen(name);\n"
            f"  for (int k = 0; k < n; k++) count += k;\n  return count;\n}}"
        )
        if broken and j == functions // 2:
            parts.append(f"long unit{index}_f{j}(int count, const char *name);")
    return "\n".join(parts) + "\n"


def _gcc_one(work: Path) -> Output | None:
    if shutil.which("gcc") is None:
        return None
    root = work / "gcc-one"
    _write(root / "report.c", _c_unit(0, 160, broken=True))
    data = _run(
        [
            "gcc",
            "-c",
            "-Wall",
            "-Wextra",
            "-fdiagnostics-format=json",
            "report.c",
            "-o",
            "/dev/null",
        ],
        cwd=root,
        stderr=True,
    )
    doc = json.loads(data)
    failing = [f".[{i}]" for i, item in enumerate(doc) if item.get("kind") == "error"]
    return "gcc -fdiagnostics-format=json", "json", data, failing


def _gcc_tree(work: Path) -> Output | None:
    if shutil.which("gcc") is None:
        return None
    root = work / "gcc-tree"
    for i in range(60):
        _write(root / "src" / f"unit{i:02d}.c", _c_unit(i, 8, broken=i == 37))
    script = (
        "for f in src/*.c; do "
        'gcc -c -Wall -Wextra -fdiagnostics-format=json "$f" -o /dev/null 2>&1; done'
    )
    data = _run(["bash", "-c", script], cwd=root)
    failing = []
    for number, line in enumerate(x for x in data.splitlines() if x.strip()):
        if any(item.get("kind") == "error" for item in json.loads(line)):
            failing.append(f".[{number}]")
    return "gcc json, a file a line", "jsonl", data, failing


def _cargo_metadata(work: Path) -> Output | None:
    if shutil.which("cargo") is None:
        return None
    root = work / "cargo-ws"
    members = [f"crate{i:02d}" for i in range(40)]
    _write(
        root / "Cargo.toml",
        '[workspace]\nresolver = "2"\nmembers = [' + ", ".join(f'"{m}"' for m in members) + "]\n",
    )
    for i, member in enumerate(members):
        deps = "".join(
            f'{members[j]} = {{ path = "../{members[j]}" }}\n' for j in range(max(0, i - 3), i)
        )
        _write(
            root / member / "Cargo.toml",
            f'[package]\nname = "{member}"\nversion = "0.{i}.0"\nedition = "2021"\n'
            f'description = "member {i} of the workspace"\nlicense = "MIT"\n'
            f"[dependencies]\n{deps}",
        )
        _write(root / member / "src" / "lib.rs", f"pub fn f{i}() -> u32 {{ {i} }}\n")
    data = _run(["cargo", "metadata", "--offline", "--format-version", "1"], cwd=root)
    return "cargo metadata", "json", data, []


def _npm_pack(work: Path) -> Output | None:
    npm = shutil.which("npm")
    if npm is None:
        return None
    home = Path(npm).resolve().parent.parent
    env_cache = work / "npm-cache"
    data = subprocess.run(
        # (--ignore-scripts: npm's prepack builds its docs, which fails here)
        [npm, "pack", "--dry-run", "--json", "--ignore-scripts", "--cache", str(env_cache)],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=600,
    ).stdout
    return "npm pack --dry-run --json", "json", data, []


def _psql(work: Path) -> list[Output]:
    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    from postgres_server import PostgresServer, unavailable_reason

    if unavailable_reason() is not None or shutil.which("psql") is None:
        return []
    server = PostgresServer().start()
    try:
        query = "select * from pg_settings order by name"
        csv_data = _run(["psql", server.dsn, "--csv", "-c", query])
        json_data = _run(["psql", server.dsn, "-At", "-c", f"select json_agg(s) from ({query}) s"])
    finally:
        server.stop()
        server.remove()
    return [
        ("psql --csv pg_settings", "csv", csv_data, []),
        ("psql json_agg(pg_settings)", "json", json_data, []),
    ]


def fresh_outputs(work: Path) -> list[Output]:
    """The set (an entry whose program is absent here is left out)."""
    found: list[Output] = []
    makers: list[Callable[[Path], Output | None]] = [
        _cargo_check,
        _gcc_one,
        _gcc_tree,
        _cargo_metadata,
        _npm_pack,
    ]
    for make in makers:
        made = make(work)
        if made is not None:
            found.append(made)
    found.extend(_psql(work))
    return found
