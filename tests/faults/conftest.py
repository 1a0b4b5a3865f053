"""Fixtures of the fault tests: a scratch directory the explorer may fill and empty fast,
and the fleet's real servers behind fault proxies."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture
def fleet_servers(
    s3_server: Any, postgres_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The real S3 and PostgreSQL servers of the run behind fault proxies
    (:class:`.fleet.FleetServers`), with toolswap's S3 clients pointed at the proxy."""
    pytest.importorskip("boto3")
    pytest.importorskip("psycopg")
    from botocore.config import Config
    from botocore.retries.standard import ExponentialBackoff

    from .fleet import FleetServers

    servers = FleetServers(s3_server, postgres_server, bucket)
    for name, value in servers.env.items():
        monkeypatch.setenv(name, value)
    # Only the waits get shorter: no backoff between retries, and a held reply is given up
    # on after a second (the same three attempts either way).
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    quick = Config(
        connect_timeout=3, read_timeout=1, retries={"total_max_attempts": 3, "mode": "standard"}
    )
    monkeypatch.setattr("toolswap.backends.s3store._CONTROL", quick)
    monkeypatch.setattr("toolswap.backends.s3store._BODIES", quick)
    monkeypatch.setattr("toolswap.backends.store._STORES", {})
    try:
        yield servers
    finally:
        servers.drop_schemas()
        servers.close()
