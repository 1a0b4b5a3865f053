"""ToolResultExternalizer: thresholds, inputs, files on disk, manifest records, summaries."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import Clock
from toolswap import (
    ArtifactAccessError,
    ArtifactWriteError,
    ChainLogError,
    ExternalizedToolResult,
    ExternalizerSettings,
    InlineToolResult,
    InvalidArgumentError,
    ToolResultExternalizer,
    ToolThreshold,
)
from toolswap.records import CollectedRecord
from toolswap.session import Session

BIG = "x" * 60_000


def _files(ext: ToolResultExternalizer) -> list[str]:
    return sorted(os.listdir(ext.tool_results_dir))


def _body(ext: ToolResultExternalizer, result: ExternalizedToolResult) -> bytes:
    return (ext.tool_results_dir / result.artifact.filename).read_bytes()


def _manifest(ext: ToolResultExternalizer) -> list[dict[str, object]]:
    text = ext.session.manifest_path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


# -- thresholds ----------------------------------------------------------------------


def test_bash_output_is_externalized_above_30000_characters(
    externalizer: ToolResultExternalizer,
) -> None:
    assert not externalizer.should_externalize("x" * 30_000, "bash")
    assert externalizer.should_externalize("x" * 30_001, "bash")
    assert isinstance(externalizer.process("x" * 30_000, "bash"), InlineToolResult)
    assert isinstance(externalizer.process("x" * 30_001, "bash"), ExternalizedToolResult)


def test_bash_threshold_counts_characters_not_bytes(externalizer: ToolResultExternalizer) -> None:
    text = "é" * 30_000  # 60,000 bytes of UTF-8

    assert not externalizer.should_externalize(text, "bash")
    assert not externalizer.should_externalize(text.encode(), "bash")
    assert isinstance(externalizer.process(text.encode(), "bash"), InlineToolResult)
    assert externalizer.should_externalize(text + "é", "bash")
    assert isinstance(externalizer.process((text + "é").encode(), "bash"), ExternalizedToolResult)


def test_other_tools_are_externalized_above_50_kib_of_utf8(
    externalizer: ToolResultExternalizer,
) -> None:
    assert not externalizer.should_externalize("x" * 51_200, "grep")
    assert externalizer.should_externalize("x" * 51_201, "grep")
    # 25,601 characters, but 51,202 bytes: the byte count decides.
    assert externalizer.should_externalize("é" * 25_601, "grep")
    assert isinstance(externalizer.process("é" * 25_601, "grep"), ExternalizedToolResult)
    assert isinstance(externalizer.process("x" * 51_200, "grep"), InlineToolResult)


def test_small_output_is_returned_inline_and_nothing_is_written(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.process("all 3 tests passed\n", "pytest")

    assert isinstance(result, InlineToolResult)
    assert result.context_text == "all 3 tests passed\n"
    assert result.artifact is None
    assert not result.externalized
    assert _files(externalizer) == []
    assert not externalizer.session.manifest_path.exists()


def test_small_bytes_output_is_returned_inline_as_text(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.process(iter([b"caf", "é\n".encode()]), "tool")

    assert result.context_text == "café\n"


def test_a_tool_set_to_never_stays_inline_whatever_its_size(session_dir: Path) -> None:
    ext = ToolResultExternalizer(
        session_dir,
        settings=ExternalizerSettings(tools={"secret": ToolThreshold(never=True)}),
    )

    assert not ext.should_externalize("x" * 5_000_000, "secret")
    result = ext.process("x" * 5_000_000, "secret")

    assert isinstance(result, InlineToolResult)
    assert len(result.context_text) == 5_000_000
    assert _files(ext) == []


def test_a_zero_threshold_externalizes_any_non_empty_output(session_dir: Path) -> None:
    ext = ToolResultExternalizer(
        session_dir, settings=ExternalizerSettings(tools={"t": ToolThreshold(max_bytes=0)})
    )

    assert isinstance(ext.process("", "t"), InlineToolResult)
    assert isinstance(ext.process("x", "t"), ExternalizedToolResult)


def test_externalize_always_writes_an_artifact(externalizer: ToolResultExternalizer) -> None:
    result = externalizer.externalize("tiny\n", "bash")

    assert result.externalized
    assert _body(externalizer, result) == b"tiny\n"
    assert result.artifact.line_count == 1


def test_an_empty_output_can_be_externalized(externalizer: ToolResultExternalizer) -> None:
    result = externalizer.externalize(b"", "tool")

    assert result.artifact.byte_size == 0
    assert result.artifact.line_count == 0
    assert result.artifact.content_sha256 == hashlib.sha256(b"").hexdigest()
    assert _body(externalizer, result) == b""


# -- inputs of every kind ------------------------------------------------------------


def _payload() -> bytes:
    return b"".join(b"line %d: \xc3\xa9t\xc3\xa9\n" % i for i in range(20_000))


def _pipe_output(data: bytes) -> Iterator[io.BufferedReader]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    writer = threading.Thread(target=lambda: (proc.stdin.write(data), proc.stdin.close()))
    writer.start()
    yield proc.stdout
    writer.join()
    proc.stdout.close()
    assert proc.wait() == 0


@pytest.mark.parametrize(
    "kind", ["str", "bytes", "bytearray", "memoryview", "bytesio", "file", "list", "generator"]
)
def test_every_kind_of_input_is_stored_byte_for_byte(
    externalizer: ToolResultExternalizer, tmp_path: Path, kind: str
) -> None:
    data = _payload()
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    output: object
    if kind == "str":
        output = data.decode()
    elif kind == "bytes":
        output = data
    elif kind == "bytearray":
        output = bytearray(data)
    elif kind == "memoryview":
        output = memoryview(data)
    elif kind == "bytesio":
        output = io.BytesIO(data)
    elif kind == "file":
        output = source.open("rb")
    elif kind == "list":
        output = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    else:
        output = (data[i : i + 77_777] for i in range(0, len(data), 77_777))

    result = externalizer.externalize(output, "tool")  # type: ignore[arg-type]
    if kind == "file":
        output.close()  # type: ignore[union-attr]

    assert _body(externalizer, result) == data
    assert result.artifact.content_sha256 == hashlib.sha256(data).hexdigest()
    assert result.artifact.byte_size == len(data)
    assert result.artifact.line_count == 20_000
    assert result.artifact.char_count == len(data.decode())


def test_a_subprocess_pipe_is_streamed_into_an_artifact(
    externalizer: ToolResultExternalizer,
) -> None:
    data = _payload() * 5
    for stdout in _pipe_output(data):
        result = externalizer.process(stdout, "bash")

    assert isinstance(result, ExternalizedToolResult)
    assert _body(externalizer, result) == data


def test_a_text_mode_file_is_refused_and_leaves_nothing_behind(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    source = tmp_path / "source.txt"
    source.write_text("hello\n", encoding="utf-8")

    with source.open(encoding="utf-8") as f, pytest.raises(TypeError, match="binary mode"):
        externalizer.externalize(f, "tool")  # type: ignore[arg-type]

    assert _files(externalizer) == []


def test_an_iterable_of_str_is_refused_and_leaves_nothing_behind(
    externalizer: ToolResultExternalizer,
) -> None:
    with pytest.raises(TypeError, match="bytes"):
        externalizer.externalize(iter(["a", "b"]), "tool")  # type: ignore[arg-type]

    assert _files(externalizer) == []


def test_a_failing_stream_leaves_no_artifact_and_no_temporary_file(
    externalizer: ToolResultExternalizer,
) -> None:
    def broken() -> Iterator[bytes]:
        yield b"x" * 200_000
        raise OSError("pipe broke")

    with pytest.raises(OSError, match="pipe broke"):
        externalizer.externalize(broken(), "tool")

    assert _files(externalizer) == []
    assert externalizer.externalize("next", "tool").artifact.filename == "tool_result_001.txt"


def test_str_with_escaped_bytes_round_trips_to_the_original_bytes(
    externalizer: ToolResultExternalizer,
) -> None:
    raw = b"name: \xff\xfe.txt\n"
    result = externalizer.externalize(os.fsdecode(raw), "ls")

    assert _body(externalizer, result) == raw


def test_str_with_a_lone_surrogate_is_stored_with_a_replacement_character(
    externalizer: ToolResultExternalizer,
) -> None:
    assert externalizer.should_externalize("\ud800" * 60_000, "grep")

    result = externalizer.externalize("broken \ud800 text\n", "tool")

    assert _body(externalizer, result) == "broken \ufffd text\n".encode()
    assert not result.artifact.binary


# -- files on disk -------------------------------------------------------------------


def test_artifacts_are_private_files_in_private_directories(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize(BIG, "bash")

    def mode(path: Path) -> int:
        return stat.S_IMODE(os.lstat(path).st_mode)

    assert result.artifact.path == externalizer.tool_results_dir / "tool_result_001.txt"
    assert mode(result.artifact.path) == 0o600
    assert mode(externalizer.session.manifest_path) == 0o600
    assert mode(externalizer.tool_results_dir) == 0o700
    assert mode(externalizer.session_dir) == 0o700


def test_a_group_readable_session_directory_is_made_private(tmp_path: Path) -> None:
    root = tmp_path / "s1"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)

    ToolResultExternalizer(root)

    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_a_symlinked_tool_results_directory_is_refused(session_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    session_dir.mkdir(parents=True)
    (session_dir / "tool-results").symlink_to(elsewhere)

    with pytest.raises(ArtifactAccessError, match="symlink"):
        ToolResultExternalizer(session_dir)

    assert list(elsewhere.iterdir()) == []


def test_tool_results_replaced_by_a_symlink_after_opening_is_refused_on_write(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    externalizer.tool_results_dir.rmdir()
    externalizer.tool_results_dir.symlink_to(elsewhere)

    with pytest.raises(ArtifactWriteError, match="not a symlink") as caught:
        externalizer.externalize(BIG, "bash")

    assert isinstance(caught.value.__cause__, ArtifactAccessError)
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_session_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "s1"
    link.symlink_to(real)

    with pytest.raises(ArtifactAccessError):
        ToolResultExternalizer(link)


# -- names are never reused ----------------------------------------------------------


def test_artifacts_are_numbered_in_order(externalizer: ToolResultExternalizer) -> None:
    names = [externalizer.externalize(f"out {i}", "t").artifact.filename for i in range(3)]

    assert names == ["tool_result_001.txt", "tool_result_002.txt", "tool_result_003.txt"]


def test_recreated_externalizer_never_overwrites_earlier_artifact(
    session_dir: Path, clock: Clock
) -> None:
    first = ToolResultExternalizer(session_dir, now=clock)
    one = first.externalize("first output", "bash")
    two = first.externalize("second output", "bash")

    again = ToolResultExternalizer(session_dir, now=clock)
    three = again.externalize("third output", "bash")

    assert three.artifact.filename == "tool_result_003.txt"
    assert _body(again, one) == b"first output"
    assert _body(again, two) == b"second output"


def test_a_name_taken_by_a_stray_file_is_skipped_and_the_file_left_alone(
    externalizer: ToolResultExternalizer,
) -> None:
    stray = externalizer.tool_results_dir / "tool_result_001.txt"
    stray.write_bytes(b"not ours")

    result = externalizer.externalize(BIG, "bash")

    assert result.artifact.filename == "tool_result_002.txt"
    assert stray.read_bytes() == b"not ours"


def test_a_name_is_not_reused_after_its_file_is_deleted(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize("one", "t")
    two = externalizer.externalize("two", "t")
    two.artifact.path.unlink()

    again = ToolResultExternalizer(externalizer.session_dir)

    assert again.externalize("three", "t").artifact.filename == "tool_result_003.txt"


def test_a_name_is_not_reused_after_cleanup_recorded_its_collection(
    externalizer: ToolResultExternalizer,
) -> None:
    one = externalizer.externalize("one", "t")
    with externalizer.session.lock():
        one.artifact.path.unlink()
        externalizer.manifest.append(
            CollectedRecord(
                filename=one.artifact.filename,
                source_id=one.artifact.source_id,
                collected_at="2026-01-02T00:00:00+00:00",
                reason="orphan TTL expired",
            )
        )

    again = ToolResultExternalizer(externalizer.session_dir)

    assert again.externalize("two", "t").artifact.filename == "tool_result_002.txt"
    assert again.list_artifacts()[0].filename == "tool_result_002.txt"


def test_threads_sharing_a_session_get_distinct_names(session_dir: Path) -> None:
    names: list[str] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        ext = ToolResultExternalizer(session_dir)
        for i in range(10):
            name = ext.externalize(f"thread {n} output {i}", "t").artifact.filename
            with guard:
                names.append(name)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(set(names)) == 40
    assert sorted(names) == [f"tool_result_{i:03d}.txt" for i in range(1, 41)]


# -- manifest records ----------------------------------------------------------------


def test_every_artifact_has_a_durable_manifest_record(
    externalizer: ToolResultExternalizer,
) -> None:
    data = b"collected 3 items\nFAILED test_x\n" * 2000
    result = externalizer.externalize(
        data,
        "bash",
        summary="pytest run",
        argv=["pytest", "-v"],
        exit_code=1,
    )

    (record,) = _manifest(externalizer)
    assert record["event"] == "artifact"
    assert record["source_id"] == result.artifact.source_id
    assert record["filename"] == "tool_result_001.txt"
    assert record["tool"] == "bash"
    assert record["summary"] == "pytest run"
    assert record["byte_size"] == len(data)
    assert record["line_count"] == 4000
    assert record["char_count"] == len(data)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["binary"] is False
    assert record["media_type"] == "text/plain"
    assert record["captured_at"] == "2026-01-01T12:00:00+00:00"
    assert record["argv"] == ["pytest", "-v"]
    assert record["exit_code"] == 1


def test_source_id_names_session_file_and_digest_prefix(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize(BIG, "bash")
    digest = hashlib.sha256(BIG.encode()).hexdigest()

    assert result.artifact.source_id == f"artifact:s1:tool_result_001.txt:{digest[:12]}"
    assert result.artifact.content_sha256 == digest
    assert result.artifact.source.source_type == "tool_result"
    assert result.artifact.source.title == "bash output (tool_result_001.txt)"
    assert result.artifact.source.captured_at == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_a_reference_is_rebuilt_from_its_source_id_after_a_restart(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize(BIG, "bash", argv=("echo", "x"), exit_code=0)

    restarted = ToolResultExternalizer(externalizer.session_dir)

    assert restarted.get_artifact(result.artifact.source_id) == result.artifact
    assert restarted.list_artifacts() == [result.artifact]


def test_exit_code_may_be_a_callable_evaluated_after_the_stream_ends(
    externalizer: ToolResultExternalizer,
) -> None:
    finished = []

    def stream() -> Iterator[bytes]:
        yield b"x" * 100_000
        finished.append(True)

    result = externalizer.externalize(stream(), "bash", exit_code=lambda: 3 if finished else 99)

    assert result.artifact.exit_code == 3
    assert "(exit 3)" in result.artifact.summary


def test_captured_at_comes_from_the_injected_clock(
    externalizer: ToolResultExternalizer, clock: Clock
) -> None:
    clock.advance(hours=5)

    result = externalizer.externalize(BIG, "bash")

    assert result.artifact.source.captured_at == datetime(2026, 1, 1, 17, 0, tzinfo=UTC)


def test_a_clock_without_a_timezone_is_refused_and_nothing_is_published(
    session_dir: Path,
) -> None:
    ext = ToolResultExternalizer(session_dir, now=lambda: datetime(2026, 1, 1))

    with pytest.raises(ValueError, match="timezone"):
        ext.externalize(BIG, "bash")

    assert _files(ext) == []


# -- summaries -----------------------------------------------------------------------


@pytest.mark.parametrize("summary", ["", "   ", "\t\n"])
def test_a_blank_summary_is_refused_before_anything_is_written(
    externalizer: ToolResultExternalizer, summary: str
) -> None:
    with pytest.raises(ValueError, match="blank"):
        externalizer.externalize(BIG, "bash", summary=summary)
    with pytest.raises(ValueError, match="blank"):
        externalizer.process(BIG, "bash", summary=summary)

    assert _files(externalizer) == []
    assert not externalizer.session.manifest_path.exists()


def test_an_over_long_summary_is_refused_before_anything_is_written(
    externalizer: ToolResultExternalizer,
) -> None:
    with pytest.raises(ValueError, match="241 characters; at most 240"):
        externalizer.externalize(BIG, "bash", summary="s" * 241)

    assert _files(externalizer) == []


def test_a_multi_line_summary_is_refused(externalizer: ToolResultExternalizer) -> None:
    with pytest.raises(ValueError, match="single line"):
        externalizer.externalize(BIG, "bash", summary="one\ntwo")


def test_a_240_character_summary_is_kept_as_given(externalizer: ToolResultExternalizer) -> None:
    result = externalizer.externalize(BIG, "bash", summary="s" * 240)

    assert result.artifact.summary == "s" * 240
    assert f"Summary: {'s' * 240}\n" in result.context_text


def test_default_summary_is_bounded_even_for_a_10000_character_first_line(
    externalizer: ToolResultExternalizer,
) -> None:
    result = externalizer.externalize("y" * 10_000 + "\nsecond\n", "bash")

    assert len(result.artifact.summary) <= 240
    assert result.artifact.summary.startswith("bash output: 2 lines, 9.8 KiB; first line: yyy")


def test_default_summary_is_deterministic(externalizer: ToolResultExternalizer) -> None:
    output = "\n\n   Compiling toolswap v0.1\nwarning: unused\n" + "z\n" * 40_000

    one = externalizer.externalize(output, "cargo").artifact.summary
    two = externalizer.externalize(output, "cargo").artifact.summary

    assert (
        one == two == ("cargo output: 40,004 lines, 78.2 KiB; first line: Compiling toolswap v0.1")
    )


def test_default_summary_of_binary_output_names_its_kind_and_size(
    externalizer: ToolResultExternalizer,
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 400

    result = externalizer.externalize(png, "screenshot")

    assert result.artifact.binary
    assert result.artifact.media_type == "image/png"
    assert result.artifact.summary == "screenshot output: binary image/png, 100.0 KiB"


@pytest.mark.parametrize("tool", ["", "  ", "a\nb", "x" * 201])
def test_a_bad_tool_name_is_refused(externalizer: ToolResultExternalizer, tool: str) -> None:
    with pytest.raises(ValueError, match="tool_name"):
        externalizer.process(BIG, tool)


# -- sessions by ID ------------------------------------------------------------------


def test_open_by_session_id_uses_toolswap_home_and_the_workspace(toolswap_home: Path) -> None:
    ext = ToolResultExternalizer.open("sess-1")

    assert ext.session_dir == toolswap_home / "projects" / "ws" / "sess-1"
    assert ext.session.session_id == "sess-1"
    result = ext.externalize(BIG, "bash")
    assert result.artifact.source_id.startswith("artifact:sess-1:tool_result_001.txt:")


def test_open_by_session_id_defaults_to_the_home_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TOOLSWAP_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))

    ext = ToolResultExternalizer.open("s9", workspace="proj")

    assert ext.session_dir == tmp_path / "user" / ".toolswap" / "projects" / "proj" / "s9"


def test_open_refuses_a_session_id_that_is_not_one_path_component() -> None:
    with pytest.raises(ValueError):
        ToolResultExternalizer.open("../escape")


def test_session_at_without_create_refuses_a_missing_session(tmp_path: Path) -> None:
    with pytest.raises(ArtifactAccessError, match="does not exist"):
        Session.at(tmp_path / "nope", create=False)


def test_a_pipe_gets_a_larger_buffer_so_reader_and_writer_take_fewer_turns(
    externalizer: ToolResultExternalizer,
) -> None:
    fcntl = pytest.importorskip("fcntl")
    get_size = getattr(fcntl, "F_GETPIPE_SZ", None)
    if get_size is None:
        pytest.skip("no F_GETPIPE_SZ on this platform")
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"x" * 1000)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        result = externalizer.process(pipe, "bash")
        size = fcntl.fcntl(pipe.fileno(), get_size)

    assert result.context_text == "x" * 1000
    assert size >= 1 << 20


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00", b"caf\xe9", b"text\x00more"])
def test_small_binary_output_is_never_decoded_into_the_context(
    externalizer: ToolResultExternalizer, data: bytes
) -> None:
    result = externalizer.process(data, "tool")

    assert isinstance(result, ExternalizedToolResult)
    assert result.artifact.binary
    assert "\ufffd" not in result.context_text
    assert _body(externalizer, result) == data


def test_small_binary_output_of_a_never_tool_stays_inline(session_dir: Path) -> None:
    ext = ToolResultExternalizer(
        session_dir, settings=ExternalizerSettings(tools={"raw": ToolThreshold(never=True)})
    )

    result = ext.process(b"caf\xe9", "raw")

    assert isinstance(result, InlineToolResult)
    assert result.context_text == "caf\ufffd"
    assert _files(ext) == []


def test_a_symlinked_manifest_is_refused_and_its_target_left_alone(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(b"")
    externalizer.session.manifest_path.symlink_to(target)

    with pytest.raises(ArtifactWriteError, match="symlink") as caught:
        externalizer.externalize(BIG, "bash")

    assert isinstance(caught.value.__cause__, ChainLogError)
    assert target.read_bytes() == b""
    assert not any(n.startswith(".tmp-") for n in _files(externalizer))


def test_a_symlinked_session_lock_is_refused_and_the_output_still_reaches_the_caller(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    target = tmp_path / "lock-target"
    externalizer.session.lock_path.symlink_to(target)

    with pytest.raises(ArtifactWriteError, match="session lock") as caught:
        externalizer.externalize(BIG, "bash")

    assert isinstance(caught.value.__cause__, ArtifactAccessError)
    assert caught.value.byte_size == len(BIG.encode())
    assert BIG[-200:] in caught.value.preview  # the tail of the output, bounded
    assert not target.exists()
    assert externalizer.list_artifacts() == []


@pytest.mark.parametrize("call", ["process", "externalize"])
def test_an_unknown_or_invalid_fact_is_refused_before_anything_is_written(
    tmp_path: Path, call: str
) -> None:
    ext = ToolResultExternalizer(tmp_path / "s")
    method = getattr(ext, call)
    with pytest.raises(InvalidArgumentError, match=r"unknown argument.*exitcode"):
        method(b"x" * 100_000, "bash", exitcode=3)
    # argv is checked whether or not the output spills (a small one used to pass unchecked).
    with pytest.raises(InvalidArgumentError, match="argv must be a sequence of strings"):
        method(b"small", "bash", argv=["ls", 3])
    assert not any(ext.tool_results_dir.iterdir())
    manifest = ext.session.manifest_path
    assert not manifest.exists() or manifest.stat().st_size == 0


@pytest.mark.parametrize(
    ("tool", "facts"),
    [
        ("bash\udce9", {}),
        ("bash", {"argv": ["cat", "caf\udce9.txt"]}),
        ("bash", {"argv": ["echo", "\ud800"]}),
        ("bash", {"summary": "made by caf\udce9"}),
        ("bash", {"media_type": "text/\ud800"}),  # (an MCP server's mimeType: the proxy died)
        ("bash", {"interrupted": "SIG\udce9"}),
    ],
)
def test_text_strict_utf8_cannot_hold_is_refused_before_anything_is_written(
    tmp_path: Path, tool: str, facts: dict[str, object]
) -> None:
    """The record is strict UTF-8: a surrogate (a byte os.fsdecode escaped, or a lone
    one) in the tool name, an argument or the summary failed to encode after the
    artifact's name was linked, and left it without a record (a review)."""
    ext = ToolResultExternalizer(tmp_path / "s")
    with pytest.raises(InvalidArgumentError, match="not UTF-8 text"):
        ext.externalize(b"x\n" * 50_000, tool, **facts)  # type: ignore[arg-type]
    assert not any(ext.tool_results_dir.iterdir())


def test_what_stopped_a_tool_asked_after_the_output_is_made_fit_for_the_record(
    tmp_path: Path,
) -> None:
    """``interrupted`` given as a callable is asked once the output is saved: a surrogate
    in its answer failed the record's encoding then (a review); it is written as \\xNN."""
    ext = ToolResultExternalizer(tmp_path / "s")
    made = ext.externalize(b"x\n" * 50_000, "bash", interrupted=lambda: "SIG\udce9")
    assert made.artifact.interrupted == "SIG\\xe9"
    assert ext.manifest.record_for(made.artifact.filename) is not None
    # ``killed and "SIGTERM"`` answers False: not interrupted (it became "False"), and an
    # answer of several lines stays on the summary's one line (a review).
    quiet = ext.externalize(b"x\n" * 50_000, "bash", interrupted=lambda: False)
    assert quiet.artifact.interrupted is None
    assert "[interrupted" not in quiet.artifact.summary
    lines = ext.externalize(b"x\n" * 50_000, "bash", interrupted=lambda: "killed\nby\x00cron")
    assert lines.artifact.interrupted == "killed by cron"


def test_argv_may_be_any_iterable_of_strings_but_not_one_string(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s")
    made = ext.externalize(b"x\n" * 10, "bash", argv=(a for a in ["ls", "-l"]))
    assert made.artifact.argv == ("ls", "-l")  # a generator is read once, not used up
    with pytest.raises(InvalidArgumentError, match="not one string"):
        ext.externalize(b"x\n", "bash", argv="ls -l")
    with pytest.raises(InvalidArgumentError, match="a sequence of strings"):
        ext.externalize(b"x\n", "bash", argv=5)  # type: ignore[arg-type]
    assert len(list(ext.tool_results_dir.iterdir())) == 1
