"""Fixtures of the fault tests: a scratch directory the explorer may fill and empty fast."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory on tmpfs when there is one (``/dev/shm``), else ``tmp_path``.

    The explorer creates and removes files and directories thousands of times; on a disk
    mounted with ``discard`` each removal costs milliseconds. Nothing here needs a real
    disk: the fault seam decides what is durable.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="toolswap-faults-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
