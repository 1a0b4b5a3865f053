"""The capture floor shared by the benchmarks: the least any capture of a pipe must do."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

MIB = 1 << 20


def capture_floor(pipe: IO[bytes], path: Path) -> float:
    """Seconds to read ``pipe`` to its end (whatever it holds, up to 1 MiB at a time),
    sha256 and write every chunk to ``path``, then fsync; ``path`` is removed after."""
    read1 = getattr(pipe, "read1", pipe.read)
    return chunks_floor(iter(lambda: read1(MIB), b""), path)


def chunks_floor(chunks: Iterable[bytes], path: Path) -> float:
    """Seconds to take every chunk, sha256 it and write it to ``path``, then fsync; the
    least any capture of these chunks must do. ``path`` is removed after."""
    start = time.perf_counter()
    sha = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in chunks:
            sha.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed
