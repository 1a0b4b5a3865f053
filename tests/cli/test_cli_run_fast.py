"""``toolswap run`` read without click (:func:`toolswap.cli._run.parse_run`) reads every
command line exactly as the click command does, or leaves it to click.

The matrix runs each command line through both: the click command's own parse (its
context's parameters, callbacks included) and the fast reader, in the same environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from toolswap.cli import main
from toolswap.cli._run import RUN_OPTIONS, parse_run

REFUSED = "refused"

# {dir}, {file} and {missing} become real paths under tmp_path.
TAKEN = [
    ["--", "true"],
    ["--", "sh", "-c", "echo hi; exit 3"],
    ["--session", "s1", "--", "true"],
    ["--session=s1", "--", "true"],
    ["--session", "", "--", "true"],
    ["--session=", "--", "true"],
    ["--workspace", "w", "--session", "s", "--", "make", "test"],
    ["--workspace=", "--", "true"],
    ["--tool", "pytest", "--", "pytest", "-v"],
    ["--tool=my tool", "--", "x"],
    ["--summary", "the build log", "--", "make"],
    ["--summary=a=b", "--", "make"],
    ["--json", "--", "true"],
    ["--json", "--json", "--", "true"],
    ["--session", "a", "--session", "b", "--", "true"],
    ["--session", "--json", "--", "true"],  # click takes the next argument as the value
    ["--session", "-h", "--", "true"],
    ["--session-dir", "{dir}", "--", "true"],
    ["--session-dir={missing}", "--", "true"],
    ["--session-dir", "", "--", "true"],
    ["--", "--json"],
    ["--", "--", "x"],
    ["--", "-h", "--help"],
    ["--", "ls", "--session", "x"],
    ["--json", "--session", "s", "--tool", "t", "--summary", "s", "--", "a", "b"],
]
"""Command lines the fast reader must read (not leave to click)."""

LEFT_TO_CLICK = [
    [],
    ["--"],
    ["--json", "--"],
    ["true"],
    ["ls", "-la"],
    ["--json", "ls"],
    ["ls", "--", "x"],
    ["-h"],
    ["--help"],
    ["--help", "--", "x"],
    ["--foo", "--", "true"],
    ["--sess", "s", "--", "true"],
    ["-s", "x", "--", "y"],
    ["--json=1", "--", "x"],
    ["--json=", "--", "x"],
    ["--tool", "", "--", "x"],
    ["--tool", " ", "--", "x"],
    ["--tool", "a\nb", "--", "x"],
    ["--tool", "t" * 201, "--", "x"],
    ["--summary", " ", "--", "x"],
    ["--summary", "s" * 241, "--", "x"],
    ["--summary", "two\nlines", "--", "x"],
    ["--session-dir", "{file}", "--", "x"],
    ["--session"],
    ["--session", "--"],
    ["--session", "--", "true"],
    ["--session", "s", "true"],
    ["--tool"],
    ["-", "--", "x"],
]
"""Command lines the fast reader leaves to click (click may still take some of them)."""

ENVIRONMENTS = [
    {},
    {"TOOLSWAP_SESSION": "from-env"},
    {"TOOLSWAP_SESSION": ""},
    {"TOOLSWAP_SESSION": "e", "TOOLSWAP_WORKSPACE": "env-ws"},
    {"TOOLSWAP_WORKSPACE": ""},
]


def _fill(shape: list[str], tmp_path: Path) -> list[str]:
    (tmp_path / "dir").mkdir(exist_ok=True)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    paths = {name: str(tmp_path / name) for name in ("dir", "file", "missing")}
    return [arg.format(**paths) for arg in shape]


def _click_reads(args: Sequence[str]) -> dict[str, object] | str:
    """What the click command passes for ``toolswap ARGS``: its parameters, or REFUSED."""
    group = main.group
    try:
        ctx = group.make_context("toolswap", list(args))
        if args[:1] != ["run"]:
            return REFUSED
        command = group.get_command(ctx, "run")
        assert command is not None
        sub = command.make_context("run", list(args[1:]), parent=ctx)
    except (click.ClickException, click.exceptions.Exit):
        return REFUSED
    return dict(sub.params)


def _with_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in ("TOOLSWAP_SESSION", "TOOLSWAP_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("shape", TAKEN, ids=" ".join)
def test_the_fast_reader_reads_the_usual_command_lines_as_click_does(
    shape: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["run", *_fill(shape, tmp_path)]
    for env in ENVIRONMENTS:
        _with_env(monkeypatch, env)

        fast = parse_run(args, os.environ)

        assert fast is not None, (args, env)
        assert fast._asdict() == _click_reads(args), (args, env)


@pytest.mark.parametrize("shape", LEFT_TO_CLICK, ids=lambda s: " ".join(s) or "nothing")
def test_the_fast_reader_leaves_every_other_command_line_to_click(
    shape: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["run", *_fill(shape, tmp_path)]
    for env in ENVIRONMENTS:
        _with_env(monkeypatch, env)

        assert parse_run(args, os.environ) is None, (args, env)
        _click_reads(args)  # click reads it (or refuses it) without a crash


@pytest.mark.parametrize(
    "args",
    [
        ["--store", "s3://bucket/prefix", "run", "--", "true"],
        ["--version"],
        ["read", "--", "x"],
        ["runs", "--", "true"],
        ["ru", "--", "true"],
    ],
    ids=" ".join,
)
def test_the_fast_reader_takes_only_the_run_command_itself(args: list[str]) -> None:
    assert parse_run(args, os.environ) is None


def test_the_fast_reader_leaves_shell_completion_to_click(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("_TOOLSWAP_COMPLETE", "bash_source")

    assert parse_run(["run", "--", "true"], os.environ) is None


def test_the_click_command_declares_exactly_the_options_of_the_table() -> None:
    command = main.group.get_command(click.Context(main.group), "run")
    assert command is not None
    declared = [
        (p.opts, p.name, p.envvar, p.help)
        for p in command.params
        if isinstance(p, click.Option) and p.name != "help"
    ]

    assert declared == [([s.flag], s.dest, s.envvar, s.help) for s in RUN_OPTIONS]


# -- the fast path end to end, in a real process ----------------------------------------

_MAIN = "import sys\nfrom toolswap.cli import main\nsys.exit(main())\n"


def _toolswap(*args: str) -> subprocess.CompletedProcess[str]:
    """``toolswap ARGS`` as the console script runs it (``main()`` reads sys.argv)."""
    return subprocess.run(
        [sys.executable, "-c", _MAIN, *args], capture_output=True, text=True, check=False
    )


def test_run_through_the_fast_path_prints_and_exits_as_the_click_command_does(
    tmp_path: Path,
) -> None:
    args = ["run", "--session-dir", str(tmp_path / "s"), "--json", "--"]
    command = [sys.executable, "-c", "print('hi'); raise SystemExit(3)"]

    fast = _toolswap(*args, *command)
    clicked = CliRunner().invoke(main, [*args, *command])

    assert fast.returncode == clicked.exit_code == 3
    assert json.loads(fast.stdout) == json.loads(clicked.stdout)
    assert json.loads(fast.stdout)["context_text"] == "hi\n"


def test_a_refused_option_value_is_still_clicks_usage_error(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    proc = _toolswap("run", "--tool", "", "--", "touch", str(marker))

    assert proc.returncode == 2
    assert "Invalid value for '--tool'" in proc.stderr
    assert "Usage:" in proc.stderr
    assert not marker.exists()


def test_run_without_the_double_dash_still_runs_through_click(tmp_path: Path) -> None:
    proc = _toolswap("run", "--session-dir", str(tmp_path / "s"), "echo", "hi")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hi\n"


def test_a_command_that_cannot_start_exits_127_with_one_line(tmp_path: Path) -> None:
    proc = _toolswap("run", "--session-dir", str(tmp_path / "s"), "--", str(tmp_path / "nope"))

    assert proc.returncode == 127
    assert proc.stderr == (
        f"toolswap: cannot run {str(tmp_path / 'nope')!r}: No such file or directory\n"
    )


def test_a_command_found_that_cannot_run_exits_126_as_a_shell_says(tmp_path: Path) -> None:
    """A file that is not executable, or a directory: 126, as sh and env give (toolswap
    gave 127, "not found", a review)."""
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    for target in (plain, tmp_path):
        proc = _toolswap("run", "--session-dir", str(tmp_path / "s"), "--", str(target))
        assert proc.returncode == 126, (target, proc.stderr)
        assert proc.stderr.startswith(f"toolswap: cannot run {str(target)!r}: ")


def test_options_after_the_commands_name_are_the_commands(tmp_path: Path) -> None:
    """Without ``--``, click read on past the command's name: ``toolswap run grep --json y
    f`` ran ``grep y f`` and printed toolswap's JSON (a review)."""
    data = tmp_path / "f.txt"
    data.write_text("a --json b\nother\n")
    proc = _toolswap("run", "--session-dir", str(tmp_path / "s"), "grep", "-e", "--json", str(data))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a --json b\n"


def test_a_closed_standard_output_keeps_the_commands_exit_status(tmp_path: Path) -> None:
    """Started with stdout closed (``>&-``): ``sys.stdout`` is None, and an AttributeError
    traceback replaced the command's status (a review)."""
    command = [sys.executable, "-c", _MAIN, "run", "--session-dir", str(tmp_path / "s")]
    command += ["--", "sh", "-c", "exit 6"]
    proc = subprocess.run(
        ["sh", "-c", '"$@" >&-', "sh", *command], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "standard output is closed" in proc.stderr


def test_main_called_with_arguments_ends_with_system_exit_as_click_does(tmp_path: Path) -> None:
    script = (
        "import sys\nfrom toolswap.cli import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit as stop:\n    print('caught', stop.code)\n"
    )
    args = ["run", "--session-dir", str(tmp_path / "s"), "--", "sh", "-c", "exit 3"]

    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )

    assert (proc.returncode, proc.stdout) == (0, "caught 3\n")


def test_the_console_script_s_run_still_runs_atexit_callbacks(tmp_path: Path) -> None:
    script = (
        "import atexit, sys\nfrom toolswap.cli import main\n"
        "atexit.register(lambda: print('at exit'))\nsys.exit(main())\n"
    )
    args = ["run", "--session-dir", str(tmp_path / "s"), "--", "sh", "-c", "echo out; exit 4"]

    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )

    assert (proc.returncode, proc.stdout) == (4, "out\nat exit\n")


def test_the_console_script_s_run_prints_all_of_a_large_inline_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_BASH_MAX_CHARS", "1000000")  # inline: all through stdout
    args = ["run", "--session-dir", str(tmp_path / "s"), "--", "seq", "100000"]

    proc = _toolswap(*args)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(f"{i}\n" for i in range(1, 100_001))


def test_echo_without_click_strips_escape_sequences_off_a_terminal_as_click_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toolswap.cli._common import echo

    for err in (False, True):
        echo("plain ✓", err=err)
        echo("\x1b[31mred\x1b[0m", err=err)
        click.echo("\x1b[31mred\x1b[0m", err=err)

    captured = capsys.readouterr()
    assert captured.out == captured.err == "plain ✓\nred\nred\n"
