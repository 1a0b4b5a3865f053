"""The docs hold: every environment variable is documented, every install line works from a
checkout."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_toolswap_environment_variable_is_documented() -> None:
    guide = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    names: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        names |= set(re.findall(r"\b(TOOLSWAP_[A-Z_]+[A-Z])\b", path.read_text(encoding="utf-8")))
    assert {"TOOLSWAP_HOME", "TOOLSWAP_WORKSPACE", "TOOLSWAP_SESSION"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in guide)
    assert missing == []


def test_the_default_home_is_documented_where_users_look_first() -> None:
    for doc in ("README.md", "docs/configuration.md"):
        assert "~/.toolswap" in (ROOT / doc).read_text(encoding="utf-8")


# -- install lines ---------------------------------------------------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_INSTALL = re.compile(r"\b(?:uv )?pip install [^`\n#]*|\buv add [^`\n#]*")
_CHECKOUT = re.compile(r"\.(?:\[([a-z0-9-]+(?:,[a-z0-9-]+)*)\])?")


def _install_lines() -> list[tuple[str, str]]:
    """Every ``pip install`` / ``uv pip install`` / ``uv add`` line of the docs (code blocks
    and inline code alike), with the document it is in."""
    return [
        (doc.name, found.group(0).strip())
        for doc in DOCS
        for found in _INSTALL.finditer(doc.read_text(encoding="utf-8"))
    ]


def _extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(pyproject["project"]["optional-dependencies"])


def _install_problems(line: str, extras: set[str]) -> list[str]:
    """Why ``line`` would not install toolswap as written from a checkout (empty: it would).

    toolswap is not on PyPI, so the only requirement that works is the checkout itself:
    ``.`` or ``.[extra,...]`` with extras pyproject.toml declares, optionally editable and
    with a constraints file that exists.
    """
    words = shlex.split(line)
    if words[:2] == ["uv", "pip"]:
        words = words[1:]
    if words[:2] != ["pip", "install"]:
        return [f"not a pip install line: {words[:2]}"]
    problems: list[str] = []
    targets: list[str] = []
    args = iter(words[2:])
    for word in args:
        if word in ("-e", "--editable"):
            continue
        if word in ("-c", "--constraint"):
            constraints = next(args, "")
            if not (ROOT / constraints).is_file():
                problems.append(f"no constraints file {constraints!r} in the checkout")
        elif word.startswith("-"):
            problems.append(f"option {word} is not checked here")
        else:
            targets.append(word)
    if not targets:
        problems.append("nothing to install")
    for target in targets:
        match = _CHECKOUT.fullmatch(target)
        if match is None:
            problems.append(f"{target!r} is not the checkout (toolswap is not on PyPI)")
            continue
        unknown = set((match.group(1) or "").split(",")) - extras - {""}
        if unknown:
            problems.append(f"pyproject.toml has no extra {sorted(unknown)}")
    return problems


def test_every_install_line_in_the_docs_installs_from_the_checkout() -> None:
    lines = _install_lines()
    extras = _extras()

    assert len(lines) >= 6
    assert any("mcp" in line for _, line in lines)
    for doc, line in lines:
        assert _install_problems(line, extras) == [], f"{doc}: {line}"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("pip install 'toolswap[mcp]'", "is not the checkout"),
        ("pip install 'toolswap[s3,postgres]'", "is not the checkout"),
        ("pip install '.[mpc]'", "no extra ['mpc']"),
        ("pip install -c constraint.txt .", "no constraints file"),
        ("uv add toolswap", "not a pip install line"),
    ],
)
def test_the_install_line_check_refuses_lines_that_fail(line: str, problem: str) -> None:
    (found,) = _install_problems(line, _extras())
    assert problem in found


def test_the_documented_mcp_install_line_resolves_with_pip_from_the_checkout(
    tmp_path: Path,
) -> None:
    (line,) = [line for doc, line in _install_lines() if doc == "mcp.md"]
    report = tmp_path / "report.json"
    # What pip would install here, in a fresh environment: toolswap itself, not the copy that
    # runs these tests, and not its dependencies (the extras are checked above).
    dry_run = ["--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", str(report)]
    done = subprocess.run(
        [sys.executable, "-m", *shlex.split(line), *dry_run],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 and _offline(done.stderr):
        pytest.skip(f"pip cannot reach its index for the build backend: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    assert [i["metadata"]["name"] for i in installs] == ["toolswap"]
    (ours,) = installs
    assert ours["requested_extras"] == ["mcp"]
    assert ours["download_info"]["url"] == ROOT.as_uri()


def _offline(stderr: str) -> bool:
    return any(
        sign in stderr
        for sign in (
            "Failed to establish a new connection",
            "Temporary failure in name resolution",
            "No matching distribution found for setuptools",
            "Network is unreachable",
        )
    )


# -- code examples ---------------------------------------------------------------------


def _python_blocks(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def _examples() -> list[tuple[str, str]]:
    """Every Python example of the docs that runs on its own. The README's first three run
    together, twice, in test_readme.py; the Claude Code hook (it reads an event on stdin)
    runs in test_hosts.py."""
    found = []
    for doc in DOCS:
        blocks = _python_blocks(doc)
        first = 3 if doc.name == "README.md" else 0
        for number, block in enumerate(blocks[first:], start=first + 1):
            if "sys.stdin" not in block:
                found.append((f"{doc.name}#{number}", block))
    return found


def _top_level_imports(code: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_docs_have_the_examples_the_runner_expects() -> None:
    names = [name for name, _ in _examples()]
    assert "README.md#4" in names
    assert {"adapters.md#1", "adapters.md#2", "adapters.md#3", "mcp.md#1", "mcp.md#2"} <= set(names)


@pytest.mark.parametrize(("name", "code"), _examples(), ids=[name for name, _ in _examples()])
def test_every_python_example_in_the_docs_runs_as_written(
    tmp_path: Path, name: str, code: str
) -> None:
    missing = sorted(m for m in _top_level_imports(code) if importlib.util.find_spec(m) is None)
    if missing:
        pytest.skip(f"{name} needs {missing} (the dev extra installs them)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSWAP_")}
    env.update(HOME=str(tmp_path / "user"), TOOLSWAP_HOME=str(tmp_path / "home"))

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, f"{name}:\n{done.stderr[-3000:]}"
    if "print(" in code:  # an example that shows its result shows the pointer it promises
        assert "[Artifact: artifact:" in done.stdout, done.stdout[:1000]
