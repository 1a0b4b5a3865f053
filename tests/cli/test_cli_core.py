"""The core CLI: run, wrap, read, grep, ls, show, verify.

``run`` goes through real ``python -m toolswap`` processes (exit statuses, pipes); the rest
use click's CliRunner where a subprocess adds nothing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from toolswap import ToolResultExternalizer, __version__
from toolswap._invocation import cli_command
from toolswap.cli import main

BIG_COMMAND = [
    sys.executable,
    "-c",
    "import sys\n"
    "for i in range(20000): print(f'build step {i}: ok')\n"
    "print('error: link failed', file=sys.stderr)\n"
    "sys.exit(3)",
]


def _cli(*args: str, input: bytes | str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def _toolswap(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "toolswap", *args], input=input, capture_output=True, check=False
    )


def _big_session(home: Path) -> tuple[ToolResultExternalizer, str]:
    ext = ToolResultExternalizer.open("default")
    text = "".join(f"line {i}: {'error here' if i == 4321 else 'fine'}\n" for i in range(10_000))
    return ext, ext.externalize(text, "bash", argv=["gen"], exit_code=0).artifact.source_id


# -- run -----------------------------------------------------------------------------


def test_run_prints_small_output_inline_and_exits_with_the_commands_status(
    toolswap_home: Path,
) -> None:
    proc = _toolswap("run", "--", sys.executable, "-c", "print('hello'); raise SystemExit(4)")

    assert proc.returncode == 4
    assert proc.stdout == b"hello\n"
    assert not (toolswap_home / "projects" / "ws" / "default" / "manifest.jsonl").exists()


def test_run_externalizes_large_output_and_records_argv_and_exit_code(
    toolswap_home: Path,
) -> None:
    proc = _toolswap("run", "--session", "build", "--", *BIG_COMMAND)

    assert proc.returncode == 3
    pointer = proc.stdout.decode()
    source_id = re.match(r"\[Artifact: (\S+)\]", pointer).group(1)  # type: ignore[union-attr]
    assert "Summary: bash output (exit 3): 20,001 lines" in pointer
    assert "error: link failed" in pointer  # stderr is captured with stdout, here in the tail
    shown = json.loads(_cli("show", source_id, "--json").stdout)
    assert shown["artifact"]["argv"] == BIG_COMMAND
    assert shown["artifact"]["exit_code"] == 3
    assert shown["artifact"]["line_count"] == 20_001


def test_run_json_reports_the_artifact_and_the_exit_code(toolswap_home: Path) -> None:
    proc = _toolswap("run", "--json", "--tool", "make", "--", *BIG_COMMAND)

    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    assert data["externalized"] is True
    assert data["exit_code"] == 3
    assert data["artifact"]["source_tool"] == "make"
    assert data["context_text"].startswith("[Artifact: ")


def test_the_read_more_command_in_the_pointer_works_as_printed(toolswap_home: Path) -> None:
    pointer = _toolswap("run", "--", *BIG_COMMAND).stdout.decode()
    read_more = pointer.splitlines()[-1]
    command = read_more.removeprefix("Read more: ").split(" | ")[0]
    argv = shlex.split(command)

    assert command.startswith(f"{cli_command()} read ")  # as this environment runs toolswap
    proc = subprocess.run(["bash", "-c", command], capture_output=True, check=False)

    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.decode().splitlines()[0]
    offset = int(argv[argv.index("--offset") + 1])
    assert first == f"build step {offset}: ok"


def test_the_read_more_command_finds_a_session_given_by_directory(tmp_path: Path) -> None:
    session_dir = tmp_path / "elsewhere" / "s7"
    pointer = _toolswap("run", "--session-dir", str(session_dir), "--", *BIG_COMMAND)
    command = pointer.stdout.decode().splitlines()[-1].removeprefix("Read more: ")
    grep = shlex.split(command.split(" | search: ")[1].replace("PATTERN", "link failed"))

    proc = _toolswap(*grep[1:])

    assert proc.returncode == 0
    assert proc.stdout.decode() == "20001:error: link failed\n"


def test_run_exits_128_plus_the_signal_that_killed_the_command() -> None:
    proc = _toolswap(
        "run", "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    )

    assert proc.returncode == 128 + 15


def test_run_of_a_missing_command_exits_127_with_a_message() -> None:
    proc = _toolswap("run", "--", "/nonexistent/toolswap-test-command")

    assert proc.returncode == 127
    assert b"cannot run" in proc.stderr
    assert b"Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "option", [("--summary", ""), ("--summary", "s" * 241), ("--summary", "a\nb"), ("--tool", " ")]
)
def test_run_refuses_a_bad_summary_or_tool_before_running_anything(
    tmp_path: Path, option: tuple[str, str]
) -> None:
    marker = tmp_path / "ran"

    proc = _toolswap("run", *option, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")

    assert proc.returncode == 2
    assert not marker.exists()
    assert b"Traceback" not in proc.stderr


def test_run_without_a_command_is_a_usage_error() -> None:
    assert _cli_result_code("run") == 2


def _cli_result_code(*args: str) -> int:
    return CliRunner().invoke(main, list(args)).exit_code


# -- wrap ----------------------------------------------------------------------------


def test_wrap_returns_small_standard_input_inline() -> None:
    result = _cli("wrap", "--tool", "fetch", input="short answer\n")

    assert result.exit_code == 0
    assert result.stdout == "short answer\n"


def test_wrap_externalizes_large_standard_input_with_its_exit_code(toolswap_home: Path) -> None:
    data = "".join(f"row {i}\n" for i in range(30_000))

    proc = _toolswap("wrap", "--tool", "sql", "--exit-code", "5", "--json", input=data.encode())

    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    assert out["externalized"] is True
    assert out["artifact"]["source_tool"] == "sql"
    assert out["artifact"]["exit_code"] == 5
    assert Path(out["artifact"]["path"]).read_text(encoding="utf-8") == data


def test_wrap_requires_a_tool_name() -> None:
    assert _cli_result_code("wrap") == 2


# -- read ----------------------------------------------------------------------------


def test_read_prints_a_page_of_lines_and_says_where_the_next_starts(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli("read", sid, "--offset", "100", "--limit", "3")

    assert result.exit_code == 0
    assert result.stdout == "line 100: fine\nline 101: fine\nline 102: fine\n"
    assert "next: --offset 103" in result.stderr


def test_read_numbers_lines_when_asked(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli("read", sid, "--offset", "4321", "--limit", "1", "--numbers")

    assert result.stdout == "   4322  line 4321: error here\n"


def test_read_numbers_and_its_footer_agree_and_are_1_based(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli("read", sid, "--offset", "100", "--limit", "3", "--numbers")

    numbers = [int(line.split()[0]) for line in result.stdout.splitlines()]
    assert numbers == [101, 102, 103]
    assert "[lines 101-103 of 10000; next: --offset 103]" in result.stderr


def test_read_of_the_last_page_shows_no_line_past_the_last(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli("read", sid, "--offset", "9998", "--numbers")

    assert result.stdout == "   9999  line 9998: fine\n  10000  line 9999: fine\n"


def test_read_offset_past_the_end_is_an_error_as_documented(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli_runner_result("read", sid, "--offset", "10000")

    assert result.exit_code == 1
    assert "offset 10000 is past the end" in result.stderr
    assert "read offsets 0-9999" in result.stderr


def test_read_of_a_line_longer_than_a_page_says_which_byte_to_read_on_from(
    toolswap_home: Path,
) -> None:
    ext = ToolResultExternalizer.open("default")
    sid = ext.externalize("x" * (1 << 20) + "\nafter\n", "t").artifact.source_id

    result = _cli("read", sid, "--width", "1000")

    pieces = result.stdout.splitlines()
    assert pieces[0] == "x" * 1000 + " ⟨line continues⟩"
    byte = int(re.search(r"--byte-start (\d+)", result.stderr).group(1))  # type: ignore[union-attr]
    shown = sum(len(p.removesuffix(" ⟨line continues⟩")) for p in pieces)
    assert byte == shown
    assert "line 1 continues at byte" in result.stderr
    assert "next line: --offset 1" in result.stderr
    rest = _cli("read", sid, "--byte-start", str(byte), "--byte-length", "10")
    assert rest.stdout == "x" * 10
    assert f"[bytes {byte}-{byte + 9} of {(1 << 20) + 7}, from line 1;" in rest.stderr


def test_read_of_a_last_line_longer_than_a_page_names_no_next_line(
    toolswap_home: Path,
) -> None:
    ext = ToolResultExternalizer.open("default")
    sid = ext.externalize("x" * (1 << 20) + "\n", "t").artifact.source_id

    result = _cli("read", sid, "--width", "1000")

    assert "line 1 continues at byte" in result.stderr
    assert "--offset" not in result.stderr
    assert _cli("read", sid, "--offset", "0", "--limit", "1").stdout.startswith("x" * 1000)


def test_read_json_returns_the_page(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    page = json.loads(_cli("read", sid, "--offset", "9999", "--json").stdout)

    assert page["lines"] == ["line 9999: fine", ""]
    assert page["next_offset"] is None
    assert page["total_lines"] == 10_001


def test_read_bytes_of_a_binary_artifact_as_base64_json(toolswap_home: Path) -> None:
    ext = ToolResultExternalizer.open("default")
    data = bytes(range(256)) * 10
    sid = ext.externalize(data, "dump").artifact.source_id

    out = json.loads(
        _cli("read", sid, "--byte-start", "256", "--byte-length", "512", "--json").stdout
    )

    assert out["encoding"] == "base64"
    assert base64.b64decode(out["data"]) == data[256:768]
    assert out["next_offset"] == 768
    lines = _cli("read", sid)
    assert lines.exit_code == 1
    assert "binary" in lines.stderr


def test_read_bytes_of_a_text_artifact_prints_the_text(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli("read", sid, "--byte-start", "0", "--byte-length", "15")

    assert result.stdout == "line 0: fine\nli"
    assert "[bytes 0-14 of 158896, from line 1; next: --byte-start 15]" in result.stderr


@pytest.mark.parametrize(
    ("source_id", "message"),
    [
        ("artifact:default:../x:abcdef012345", "SourceIdError"),
        ("artifact:default:tool_result_009.txt:abcdef012345", "ArtifactNotFoundError"),
        ("artifact:nosuch:tool_result_001.txt:abcdef012345", "no session 'nosuch'"),
    ],
)
def test_read_of_a_bad_source_id_exits_1_with_a_clean_message(
    toolswap_home: Path, source_id: str, message: str
) -> None:
    _big_session(toolswap_home)

    proc = _toolswap("read", source_id)

    assert proc.returncode == 1
    assert message in proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def test_read_of_a_tampered_artifact_exits_1_and_prints_nothing(toolswap_home: Path) -> None:
    ext, sid = _big_session(toolswap_home)
    path = ext.get_artifact(sid).path
    path.write_bytes(path.read_bytes().replace(b"line 5: fine", b"line 5: FINE"))

    result = _cli_runner_result("read", sid)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert "ArtifactIntegrityError" in result.stderr


def _cli_runner_result(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


# -- grep ----------------------------------------------------------------------------


def test_grep_prints_matches_with_line_numbers_and_context(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    plain = _cli("grep", sid, "error here")
    context = _cli("grep", sid, "error here", "-C", "1")

    assert plain.stdout == "4322:line 4321: error here\n"
    assert context.stdout == (
        "4321-line 4320: fine\n4322:line 4321: error here\n4323-line 4322: fine\n"
    )


def test_grep_json_and_options(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    out = json.loads(_cli("grep", sid, "LINE 99.", "-i", "-m", "2", "--json").stdout)

    assert [m["line_no"] for m in out["matches"]] == [100, 991]
    assert out["truncated"] is True
    fixed = json.loads(_cli("grep", sid, "line 9.", "-F", "--json").stdout)
    assert fixed["matches"] == []


def test_grep_without_matches_exits_1_like_grep(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli_runner_result("grep", sid, "no such text")

    assert result.exit_code == 1
    assert "no matches" in result.stderr


def test_grep_with_an_invalid_pattern_exits_1_with_a_message(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    result = _cli_runner_result("grep", sid, "(")

    assert result.exit_code == 1
    assert "invalid pattern" in result.stderr


def _hostile_session() -> str:
    ext = ToolResultExternalizer.open("default")
    text = "".join("a" * 40 + "b\n" for _ in range(200)) + "a" * 40 + "\n"
    return ext.externalize(text, "t").artifact.source_id


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs GNU grep")
def test_grep_runs_a_catastrophic_backtracking_pattern_in_linear_time(
    toolswap_home: Path,
) -> None:
    sid = _hostile_session()

    proc = _toolswap("grep", sid, "(a+)+$")

    assert proc.returncode == 0
    assert proc.stdout == b"201:" + b"a" * 40 + b"\n"


def test_grep_on_a_hostile_pattern_without_grep_stops_at_its_deadline_with_one_line(
    toolswap_home: Path, tmp_path: Path
) -> None:
    sid = _hostile_session()
    empty = tmp_path / "no-grep-bin"
    empty.mkdir()

    proc = subprocess.run(
        [sys.executable, "-m", "toolswap", "grep", sid, "(a+)+$", "--timeout", "1"],
        capture_output=True,
        env={**os.environ, "PATH": str(empty)},
        check=False,
    )

    assert proc.returncode == 1
    assert proc.stdout == b""
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("toolswap: ArtifactSearchTimeoutError: ")
    assert "did not finish within 1 s" in line


def test_grep_refuses_a_backreference_with_a_typed_one_line_error(toolswap_home: Path) -> None:
    sid = _hostile_session()

    proc = _toolswap("grep", sid, r"(a)\1")

    assert proc.returncode == 1
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("toolswap: ArtifactPatternError: ")
    assert "backreference" in line


def test_grep_shows_a_window_with_a_byte_offset_that_read_accepts(toolswap_home: Path) -> None:
    ext = ToolResultExternalizer.open("default")
    line = "".join(f'{{"id": {i}, "ok": true}}, ' for i in range(40_000))
    line = line.replace('"id": 23456, "ok": true', '"id": 23456, "ok": false')
    sid = ext.externalize(line + "\n", "t").artifact.source_id

    shown = _cli("grep", sid, '"ok": false', "--width", "200").stdout

    start = int(re.search(r"⟨from byte (\d+)⟩", shown).group(1))  # type: ignore[union-attr]
    assert shown.startswith(f"1:⟨from byte {start}⟩ ")
    read = _cli("read", sid, "--byte-start", str(start), "--byte-length", "100").stdout
    assert shown.removeprefix(f"1:⟨from byte {start}⟩ ").startswith(read)
    assert '"ok": false' in shown


# -- ls and show ---------------------------------------------------------------------


def test_ls_lists_artifacts_as_text_and_json(toolswap_home: Path) -> None:
    _, sid = _big_session(toolswap_home)

    text = _cli("ls")
    listed = json.loads(_cli("ls", "--json").stdout)

    assert text.stdout.split("\t")[:4] == [sid, "bash", str(listed[0]["byte_size"]), "10000"]
    assert [a["source"]["source_id"] for a in listed] == [sid]


def test_ls_of_a_missing_session_exits_1() -> None:
    result = _cli_runner_result("ls", "--session", "never-created")

    assert result.exit_code == 1
    assert "does not exist" in result.stderr


def test_show_prints_the_record_and_a_memory_reference_without_the_body(
    toolswap_home: Path,
) -> None:
    _, sid = _big_session(toolswap_home)

    text = _cli("show", sid)
    data = json.loads(_cli("show", sid, "--json").stdout)

    assert f"source: {{'source_id': '{sid}'" in text.stdout
    memory = data["memory_reference"]
    assert set(memory) == {"summary", "artifact_path", "content_sha256", "source_tool", "source"}
    assert "error here" not in json.dumps(memory)
    assert data["artifact"]["argv"] == ["gen"]


# -- verify --------------------------------------------------------------------------


def test_verify_passes_a_healthy_session(toolswap_home: Path) -> None:
    _big_session(toolswap_home)

    result = _cli("verify", "--all")

    assert result.exit_code == 0
    assert result.stdout.startswith("ok\ttool_result_001.txt")
    assert "1 ok, 0 problem(s)" in result.stderr


def test_verify_reports_typed_findings_and_exits_1_on_any_problem(toolswap_home: Path) -> None:
    ext, sid = _big_session(toolswap_home)
    second = ext.externalize("second\n" * 10_000, "t").artifact
    third = ext.externalize("third\n" * 10_000, "t").artifact
    path = ext.get_artifact(sid).path
    path.write_bytes(path.read_bytes().replace(b"line 5: fine", b"line 5: FINE"))  # same size
    with open(second.path, "ab") as f:
        f.write(b"more")
    third.path.unlink()
    (ext.tool_results_dir / "notes.txt").write_text("stray", encoding="utf-8")
    (ext.tool_results_dir / "tool_result_009.txt").write_text("unrecorded", encoding="utf-8")

    result = _cli_runner_result("verify", "--json")

    assert result.exit_code == 1
    kinds = {f["name"]: f["kind"] for f in json.loads(result.stdout)}
    assert kinds == {
        "tool_result_001.txt": "digest_mismatch",
        "tool_result_002.txt": "size_mismatch",
        "tool_result_003.txt": "missing",
        "notes.txt": "unknown_file",
        "tool_result_009.txt": "unrecorded",
    }
    text = _cli_runner_result("verify")
    assert text.exit_code == 1
    assert "5 problem(s)" in text.stderr


def test_verify_of_a_corrupt_manifest_is_a_problem(toolswap_home: Path) -> None:
    ext, _ = _big_session(toolswap_home)
    raw = ext.session.manifest_path.read_bytes()
    ext.session.manifest_path.write_bytes(raw.replace(b'"bash"', b'"BASH"', 1))

    result = _cli_runner_result("verify", "--json")

    assert result.exit_code == 1
    assert [f["kind"] for f in json.loads(result.stdout)] == ["manifest_corrupt"]


# -- help ----------------------------------------------------------------------------


def test_every_command_has_help_text() -> None:
    assert isinstance(main.group, click.Group)
    for name, command in main.commands.items():
        assert (command.help or "").strip(), f"{name} has no help text"
        result = CliRunner().invoke(main, [name, "-h"])
        assert result.exit_code == 0, name
        assert "Usage:" in result.stdout


def test_every_core_command_that_prints_data_takes_json() -> None:
    for name in ("run", "wrap", "read", "grep", "ls", "show", "verify"):
        assert "--json" in CliRunner().invoke(main, [name, "--help"]).stdout, name


def test_version_and_python_dash_m_work() -> None:
    assert _cli("--version").stdout.strip().endswith(__version__)
    proc = _toolswap("--help")
    assert proc.returncode == 0
    assert b"Commands:" in proc.stdout


def test_an_unknown_command_is_a_usage_error() -> None:
    assert _cli_result_code("no-such-command") == 2


def test_a_bad_environment_setting_exits_1_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BASH_MAX_OUTPUT_LENGTH", "lots")

    proc = subprocess.run(
        [sys.executable, "-m", "toolswap", "run", "--", "true"],
        capture_output=True,
        env=os.environ.copy(),
        check=False,
    )

    assert proc.returncode == 1
    assert b"BASH_MAX_OUTPUT_LENGTH" in proc.stderr
    assert b"Traceback" not in proc.stderr
