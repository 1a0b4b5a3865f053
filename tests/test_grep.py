"""Searching artifacts: linear-time patterns, deadlines, cancellation, the Python fallback
and windows inside very long lines. Every search runs a real ``grep`` (or the fallback's
Python process); "no grep" is a PATH without one."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolswap import (
    ArtifactPatternError,
    ArtifactReadError,
    ArtifactReference,
    ArtifactSearchTimeoutError,
    ToolResultExternalizer,
)
from toolswap import grep as grep_module
from toolswap.grep import GrepMatch

HOSTILE = "(a+)+$"
"""Exponential for a backtracking engine on a line of ``a``s that ends with another letter."""

needs_gnu_grep = pytest.mark.skipif(shutil.which("grep") is None, reason="needs GNU grep")


@pytest.fixture
def no_grep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without any grep: searches fall back to the Python process."""
    empty = tmp_path / "no-grep-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def hostile(externalizer: ToolResultExternalizer) -> ArtifactReference:
    text = "".join("a" * 40 + "b\n" for _ in range(200)) + "a" * 40 + "\n"
    return externalizer.externalize(text, "t").artifact


def _numbers(matches: tuple[GrepMatch, ...]) -> list[int]:
    return [m.line_no for m in matches]


@needs_gnu_grep
def test_a_catastrophic_backtracking_pattern_runs_in_linear_time(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference
) -> None:
    # Python's re needs about 2**40 steps per line here; the default deadline is 10 s.
    result = externalizer.grep(hostile, HOSTILE)

    assert _numbers(result.matches) == [201]


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", "backreference"),
        (r"(?P<x>a)(?P=x)", "backreference"),
        (r"error(?=:)", "lookahead"),
        (r"(?<!no )error", "lookahead or lookbehind"),
        (r"(a)?(?(1)b|c)", "conditional"),
        (r"(?>a+)b", "atomic group"),
        (r"a++b", "possessive"),
    ],
)
def test_constructs_that_cannot_run_in_linear_time_are_refused_before_any_search(
    externalizer: ToolResultExternalizer,
    hostile: ArtifactReference,
    pattern: str,
    construct: str,
) -> None:
    with pytest.raises(ArtifactPatternError, match=construct) as caught:
        externalizer.grep(hostile, pattern)

    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ArtifactReadError)  # callers catching the old error


@pytest.mark.parametrize(
    "pattern", ["(unclosed", "a{2000}", "x" * 2001, "two\nlines", "nul\x00", "[^é]", "[à-é]"]
)
def test_patterns_grep_cannot_run_are_refused_with_a_one_line_reason(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference, pattern: str
) -> None:
    with pytest.raises(ArtifactPatternError) as caught:
        externalizer.grep(hostile, pattern)

    assert "\n" not in str(caught.value)


@pytest.mark.usefixtures("no_grep")
def test_without_grep_a_hostile_pattern_is_stopped_at_its_deadline(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference
) -> None:
    with pytest.raises(ArtifactSearchTimeoutError, match=r"did not finish within 0\.5 s") as caught:
        externalizer.grep(hostile, HOSTILE, timeout=0.5)

    assert isinstance(caught.value, TimeoutError)
    assert "\n" not in str(caught.value)


@needs_gnu_grep
def test_a_search_that_misses_its_deadline_is_stopped_with_gnu_grep_too(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("fine\n" * 2_000_000, "t").artifact
    externalizer.read_lines(art, 0, 1)  # verified now, so the deadline is the search's

    with pytest.raises(ArtifactSearchTimeoutError):
        externalizer.grep(art, "f[a-z]+e", timeout=0.000_001)


@pytest.mark.usefixtures("no_grep")
def test_a_cancelled_search_stops_and_says_so(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference
) -> None:
    cancel = threading.Event()
    failure: list[BaseException] = []

    def search() -> None:
        try:
            externalizer.reader.grep(hostile, HOSTILE, timeout=600, cancel=cancel)
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=search)
    worker.start()
    cancel.set()
    worker.join(60)

    assert not worker.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], ArtifactReadError)
    assert "cancelled" in str(failure[0])


@pytest.mark.parametrize(
    ("timeout", "context", "max_matches"),
    [(0, 0, 1), (-1.0, 0, 1), (True, 0, 1), ("5", 0, 1), (3601, 0, 1), (1.0, 51, 1)],
)
def test_bad_search_arguments_are_refused(
    externalizer: ToolResultExternalizer,
    hostile: ArtifactReference,
    timeout: object,
    context: int,
    max_matches: int,
) -> None:
    with pytest.raises(ArtifactReadError):
        externalizer.reader.grep(
            hostile,
            "a",
            timeout=timeout,  # type: ignore[arg-type]
            context=context,
            max_matches=max_matches,
        )


def _corpus(seed: int) -> list[str]:
    rnd = random.Random(seed)
    words = ["error", "Error", "ok", "warn", "x1", "42", "a.b", "[x]", "path/to", "é", "\t", ""]
    return [" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 6))) for _ in range(3000)]


PATTERNS = [
    ("error", False, False),
    ("ERROR", True, False),
    ("a.b", False, True),
    (r"\d+", False, False),
    (r"^ok( ok)*$", False, False),
    (r"(?i)warn\s+x1", False, False),
    (r"\[x\]|path/", False, False),
    (r"é", False, False),
    (r"\bok\b.*\b42\b", False, False),
]


@pytest.mark.parametrize("seed", range(2))
def test_the_python_fallback_finds_what_gnu_grep_finds(
    externalizer: ToolResultExternalizer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    if shutil.which("grep") is None:
        pytest.skip("needs GNU grep to compare with")
    art = externalizer.externalize("\n".join(_corpus(seed)) + "\n", "t").artifact

    def run_all() -> list[object]:
        return [
            externalizer.grep(art, p, ignore_case=i, fixed=f, context=c, max_matches=m).to_dict()
            for p, i, f in PATTERNS
            for c, m in ((0, 1000), (2, 7))
        ]

    with_grep = run_all()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    without = run_all()

    assert json.dumps(without) == json.dumps(with_grep)


@pytest.mark.parametrize("engine", ["grep", "python"])
@pytest.mark.parametrize("pattern", ['"status": "failed"', r'"status": "fail\w+"'])
def test_a_match_in_a_1_mib_line_shows_a_window_at_its_byte_offset(
    externalizer: ToolResultExternalizer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    engine: str,
    pattern: str,
) -> None:
    records = [{"id": i, "status": "ok", "note": "ünïcode"} for i in range(20_000)]
    records[12_345]["status"] = "failed"
    line = json.dumps(records)
    art = externalizer.externalize("header\n" + line + "\nfooter\n", "t").artifact
    if engine == "python":
        empty = tmp_path / "empty-bin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))

    (match,) = externalizer.reader.grep(art, pattern, width=300, context=1).matches

    at = len(b"header\n") + line.encode().index(b'"status": "failed"')
    assert match.line_no == 2 and match.line_start == len(b"header\n")
    assert match.text_start < at < match.text_start + 300
    assert match.text.startswith(f"⟨from byte {match.text_start}⟩ ")
    assert '"status": "failed"' in match.text
    assert match.text.endswith("⟨line continues⟩")
    shown = match.text.removeprefix(f"⟨from byte {match.text_start}⟩ ")
    shown = shown.removesuffix(" ⟨line continues⟩")
    assert externalizer.read_bytes(art, match.text_start, len(shown.encode())).text() == shown
    assert match.before == ((1, "header"),) and match.after == ((3, "footer"),)


def test_a_long_context_line_is_cut_and_marked(externalizer: ToolResultExternalizer) -> None:
    art = externalizer.externalize("x" * 5000 + "\nneedle\n", "t").artifact

    (match,) = externalizer.grep(art, "needle", context=1).matches

    ((number, text),) = match.before
    assert number == 1 and text == "x" * 2000 + " ⟨line continues⟩"


def test_render_separates_groups_that_are_not_adjacent_like_grep(
    externalizer: ToolResultExternalizer,
) -> None:
    art = externalizer.externalize("".join(f"{i}\n" for i in range(1, 21)), "t").artifact

    result = externalizer.grep(art, "^(3|5|15)$", context=1)

    assert result.render() == "2-2\n3:3\n4-4\n5:5\n6-6\n--\n14-14\n15:15\n16-16"


def test_the_python_worker_dies_at_its_cpu_limit_even_with_nobody_to_kill_it() -> None:
    worker = grep_module._WORKER
    data = ("a" * 40 + "b\n").encode() * 50
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(worker), "-T", "1", "-e", HOSTILE],
        input=data,
        capture_output=True,
        timeout=120,  # a guard against a hang, far above the 1 s CPU limit
        check=False,
    )

    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


def test_a_refused_pattern_is_refused_before_the_artifact_is_opened(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference
) -> None:
    hostile.path.unlink()  # reading it now would fail with ArtifactNotFoundError

    with pytest.raises(ArtifactPatternError, match="lookahead"):
        externalizer.grep(hostile, "a(?=b)")


def test_a_pattern_that_expands_to_a_million_positions_is_refused_before_any_search(
    externalizer: ToolResultExternalizer, hostile: ArtifactReference
) -> None:
    # Each count alone is allowed; nested, grep would build an automaton of gigabytes.
    with pytest.raises(ArtifactPatternError, match="positions") as caught:
        externalizer.grep(hostile, "(.{1,1000}){1,1000}")

    assert "\n" not in str(caught.value)
    assert externalizer.grep(hostile, "a{40}b").matches  # one count stays searchable


def test_a_search_child_runs_with_its_address_space_capped() -> None:
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    child = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=grep_module._bound_memory,
        capture_output=True,
        text=True,
        check=True,
    )

    assert int(child.stdout) == grep_module.CHILD_MEMORY


def test_a_match_made_from_its_slots_is_the_one_its_constructor_makes() -> None:
    """Matches without context are made by setting their slots (``_plain_match``): the
    same value, hash and dict as the constructor's, and every field of ``GrepMatch`` set."""
    from toolswap import grep as grep_module

    assert GrepMatch.__slots__ == grep_module._MATCH_FIELDS
    for line_no, text, start in ((1, "", 0), (7, "error: x", 12_345), (2**40, "é\u2028", 3)):
        made = grep_module._plain_match(line_no, text, start)
        expected = GrepMatch(line_no, text, line_start=start, text_start=start)
        assert made == expected and hash(made) == hash(expected)
        assert made.to_dict() == expected.to_dict()


def test_many_matches_are_collected_with_the_cyclic_collector_paused(
    externalizer: ToolResultExternalizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each match is a lasting object: the collector ran every 700 of them and rescanned
    the whole process every so often (a search of 178,000 matches took a quarter longer in
    a process holding many objects). It is paused while grep's output is read, and runs
    again after, however the search ends."""
    import gc

    text = "".join(f"batch {i} in {i % 97} ms\n" for i in range(20_000))
    ref = externalizer.externalize(text, "logs").artifact
    seen: list[bool] = []
    feed = grep_module._Collector.feed

    def watched(self: grep_module._Collector, chunk: bytes) -> bool:
        seen.append(gc.isenabled())
        return feed(self, chunk)

    monkeypatch.setattr(grep_module._Collector, "feed", watched)
    result = externalizer.grep(ref.source_id, "batch [0-9]*7 in", max_matches=100_000)
    assert len(result.matches) == 2_000 and seen and not any(seen)
    assert gc.isenabled()
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ArtifactReadError, match="cancelled"):
        externalizer.reader.grep(ref, "batch", cancel=cancel)
    assert gc.isenabled()
