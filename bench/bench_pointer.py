"""What the pointer shows: recall of the failure reason, pointer sizes, capture speed.

1. Recall on the LogChunks development corpus (``/work/shared/corpus/logchunks-dev.tar.xz``
   or ``$TOOLSWAP_LOGCHUNKS``; skipped when absent): a log counts as found when the first
   line of its labelled failure chunk with at least 12 characters of text, normalised
   (ANSI escapes, CR, a leading ISO timestamp and repeated whitespace removed; first 60
   characters), appears in the pointer normalised the same way. Only logs over the bash
   threshold count.
2. Recall on outputs of real programs run here (bench/_real_outputs.py: gcc/make/ld,
   python, pytest, node, git, tar, find, ls, sqlite3, bash -x, sha256sum, perl...), each
   with its failure in the middle of a long output.
3. Mean and max pointer bytes over both corpora.
4. Capture of 256 MiB of build-log-like text that contains failure words, against the
   floor (pipe read + sha256 + write + fsync).

``TOOLSWAP_BENCH_QUICK=1`` uses tiny sizes; ``TOOLSWAP_BENCH_NO_CAPTURE=1`` skips 4;
``TOOLSWAP_BENCH_VERBOSE=1`` lists the corpus logs whose failure reason the pointer missed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _floor import capture_floor
from real_outputs import REAL_CASES, RealCase
from toolswap import ExternalizerSettings, ToolResultExternalizer

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
DATA = Path(__file__).resolve().parent / ".data"
CORPUS = Path(os.environ.get("TOOLSWAP_LOGCHUNKS", "/work/shared/corpus/logchunks-dev.tar.xz"))
MIB = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_ISO = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


def normalise(line: str) -> str:
    """The corpus README's rule for one line."""
    line = _ANSI.sub("", line).replace("\r", "")
    line = _ISO.sub("", line)
    return " ".join(line.split())


def needle(chunk: str) -> str | None:
    """The first line of a chunk with at least 12 characters of text, normalised, cut to 60."""
    for raw in chunk.splitlines():
        text = normalise(raw)
        if len(text) >= 12:
            return text[:60]
    return None


def found(pointer: str, wanted: str) -> bool:
    return wanted in "\n".join(normalise(line) for line in pointer.splitlines())


def _corpus_dir() -> Path | None:
    target = DATA / "logchunks"
    if (target / "cases.json").exists():
        return target
    if not CORPUS.exists():
        return None
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(CORPUS) as tar:
        tar.extractall(target, filter="data")
    return target


def _externalizer(root: Path) -> ToolResultExternalizer:
    return ToolResultExternalizer(root, settings=ExternalizerSettings())


def corpus_recall(root: Path) -> tuple[int, int, list[int], list[str]]:
    """(found, counted, pointer sizes, files missed) over the LogChunks logs."""
    corpus = _corpus_dir()
    if corpus is None:
        return 0, 0, [], []
    cases = json.loads((corpus / "cases.json").read_text(encoding="utf-8"))
    if QUICK:
        cases = cases[:40]
    ext = _externalizer(root / "logchunks")
    threshold = ext.settings.bash_max_chars
    hits, counted, sizes, missed = 0, 0, [], []
    for case in cases:
        data = (corpus / "all" / case["file"]).read_bytes()
        if len(data.decode("utf-8", "replace")) <= threshold:
            continue
        wanted = needle(case["chunk"])
        if wanted is None:
            continue
        result = ext.process(data, "bash")
        assert result.artifact is not None
        counted += 1
        sizes.append(len(result.context_text.encode()))
        if found(result.context_text, wanted):
            hits += 1
        else:
            missed.append(case["file"])
        result.artifact.path.unlink()
    return hits, counted, sizes, missed


def real_recall(root: Path) -> tuple[int, int, list[int], list[str], list[str]]:
    """(found, counted, pointer sizes, names missed, names skipped) over real programs."""
    ext = _externalizer(root / "real")
    work = root / "work"
    hits, counted, sizes, missed, skipped = 0, 0, [], [], []
    for case in REAL_CASES:
        produced = case.produce(work / case.name)
        if produced is None:
            skipped.append(case.name)
            continue
        result = ext.process(produced.output, "bash")
        assert result.artifact is not None, case.name
        counted += 1
        sizes.append(len(result.context_text.encode()))
        if all(found(result.context_text, normalise(w)[:60]) for w in produced.wanted):
            hits += 1
        else:
            missed.append(case.name)
        result.artifact.path.unlink()
    return hits, counted, sizes, missed, skipped


PRODUCER = """
import sys
total = int(sys.argv[1])
lines = []
for i in range(20_000):
    if i % 500 == 7:
        lines.append(b"src/module_%05d.c:%d:5: warning: unused 'tmp_%d' [-Wunused]" % (i, i, i))
    elif i % 997 == 3:
        lines.append(b"[%08d] test_case_%05d ... FAILED (exit code %d)" % (i, i, i % 3))
    else:
        lines.append(b"[%08d] compiling src/module_%05d.c -> build/module_%05d.o ok" % (i, i, i))
block = b"\\n".join(lines)[: 1 << 20]
block = block[: block.rfind(b"\\n") + 1].ljust(1 << 20, b" ")[:-1] + b"\\n"
out = sys.stdout.buffer
for _ in range(total // len(block)):
    out.write(block)
out.write(block[: total % len(block)])
"""


def _capture_once(root: Path, total: int) -> tuple[float, float]:
    """(toolswap seconds, floor seconds) for one run of each."""
    floor_path = root / "floor.bin"
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, str(total)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        import fcntl

        fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, MIB)
    except (OSError, AttributeError, ImportError):
        pass
    floor = capture_floor(proc.stdout, floor_path)
    proc.stdout.close()
    proc.wait()

    ext = _externalizer(root / "capture")
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, str(total)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    start = time.perf_counter()
    result = ext.process(proc.stdout, "bash", exit_code=proc.wait)
    ours = time.perf_counter() - start
    proc.stdout.close()
    assert result.artifact is not None and result.artifact.byte_size == total
    assert "FAILED" in result.context_text
    result.artifact.path.unlink()
    return ours, floor


def _pct(hits: int, counted: int) -> str:
    return f"{hits}/{counted} = {100 * hits / counted:.1f}%" if counted else "n/a"


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="pointer-", dir=DATA))
    try:
        if QUICK:
            print("(TOOLSWAP_BENCH_QUICK=1: a subset and tiny sizes)")
        hits, counted, sizes, missed = corpus_recall(root)
        if counted:
            print(
                f"LogChunks corpus: failure reason in the pointer {_pct(hits, counted)} "
                f"(logs over the bash threshold); pointer bytes mean "
                f"{statistics.mean(sizes):,.0f}, max {max(sizes):,}"
            )
            if os.environ.get("TOOLSWAP_BENCH_VERBOSE") == "1":
                for name in missed:
                    print(f"  missed: {name}")
        else:
            print(f"LogChunks corpus: not found at {CORPUS}; skipped")
        r_hits, r_counted, r_sizes, r_missed, skipped = real_recall(root)
        if r_counted:
            print(
                f"real programs run here: failure reason in the pointer "
                f"{_pct(r_hits, r_counted)}; pointer bytes mean "
                f"{statistics.mean(r_sizes):,.0f}, max {max(r_sizes):,}"
                + (f"; missed: {', '.join(r_missed)}" if r_missed else "")
                + (f"; skipped (program absent): {', '.join(skipped)}" if skipped else "")
            )
        if os.environ.get("TOOLSWAP_BENCH_NO_CAPTURE") == "1":
            return 0
        total = (4 if QUICK else 256) * MIB
        runs = [_capture_once(root, total) for _ in range(1 if QUICK else 5)]
        ours = min(r[0] for r in runs)
        floor = min(r[1] for r in runs)
        mb = total / MIB
        print(
            f"capture {mb:.0f} MiB of log text with failure words: toolswap {ours:.3f} s "
            f"({mb / ours:.0f} MiB/s); floor (pipe read + sha256 + write + fsync) "
            f"{floor:.3f} s; ratio {ours / floor:.2f}x (target <= 1.30x)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


__all__ = ["RealCase", "found", "needle", "normalise"]

if __name__ == "__main__":
    raise SystemExit(main())
