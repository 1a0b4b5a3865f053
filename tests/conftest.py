"""Shared fixtures: every test gets its own TOOLSWAP_HOME and a clean environment."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import journal_backend
from postgres_server import PostgresServer, unavailable_reason
from s3_server import S3Server
from s3_server import unavailable_reason as s3_unavailable_reason
from toolswap import ToolResultExternalizer

# The tests signal the processes they start and expect the default dispositions there. A
# run started with signals ignored (a background job of a script ignores SIGINT, nohup
# SIGHUP) passes that on to every child, and toolswap run, as it should, leaves a signal it
# was started ignoring ignored: the signal tests then hung. Each is reset here, once.
for _sig, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGHUP, signal.SIG_DFL),
    (signal.SIGTERM, signal.SIG_DFL),
):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _handler)

_ENV = (
    "TOOLSWAP_HOME",
    "TOOLSWAP_WORKSPACE",
    "TOOLSWAP_SESSION",
    "TOOLSWAP_BASH_MAX_CHARS",
    "TOOLSWAP_THRESHOLD_KB",
    "TOOLSWAP_TOOL_THRESHOLDS",
    "TOOLSWAP_HEAD_BYTES",
    "TOOLSWAP_TAIL_BYTES",
    "TOOLSWAP_POINTER_BYTES",
    "TOOLSWAP_CRASH_POINT",
    "TOOLSWAP_CRASH_SKIP",
    "TOOLSWAP_SYNC_POINT",
    "TOOLSWAP_SYNC_DIR",
    "TOOLSWAP_DATABASE_URL",
    "TOOLSWAP_STORE",
    "TOOLSWAP_DATABASE_SCHEMA",
    "BASH_MAX_OUTPUT_LENGTH",
    "CODEBUDDY_TOOL_RESULT_THRESHOLD_KB",
)


@pytest.fixture(autouse=True)
def toolswap_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point TOOLSWAP_HOME at a fresh directory and clear toolswap's variables."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("TOOLSWAP_HOME", str(home))
    monkeypatch.setenv("TOOLSWAP_WORKSPACE", "ws")
    return home


class Clock:
    """An injectable UTC clock that tests move by hand (no sleeps)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / "s1"


@pytest.fixture
def externalizer(session_dir: Path, clock: Clock) -> Iterator[ToolResultExternalizer]:
    yield ToolResultExternalizer(session_dir, now=clock)


# -- a real full disk ----------------------------------------------------------------


def _can_mount_tmpfs(where: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=64k tmpfs {shlex.quote(str(where))}",
        ],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def full_disk_command(
    mount_dir: Path, script: str, *, size_kib: int
) -> subprocess.CompletedProcess[bytes]:
    """Run ``script`` (sh) with a ``size_kib`` tmpfs mounted at ``mount_dir``.

    The mount lives in a private mount namespace and disappears with the script. Without
    mount namespaces the script runs under a file-size limit of the same size instead, so
    a write past it fails with EFBIG, the same error path as ENOSPC.
    """
    if _can_mount_tmpfs(mount_dir):
        quoted = shlex.quote(str(mount_dir))
        wrapped = f"mount -t tmpfs -o size={size_kib}k,mode=0700 tmpfs {quoted} && {script}"
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", wrapped], capture_output=True, check=False
        )
    if os.name != "posix":
        pytest.skip("needs a POSIX system")
    mount_dir.mkdir(parents=True, exist_ok=True)
    limited = f"ulimit -f {size_kib} && trap '' XFSZ && {script}"
    return subprocess.run(["sh", "-c", limited], capture_output=True, check=False)


@pytest.fixture
def full_disk() -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """``full_disk(mount_dir, script, size_kib=N)``: see :func:`full_disk_command`."""
    return full_disk_command


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole run (each test uses its own schema)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"PostgreSQL tests need a local server: {reason}")
    server = PostgresServer().start()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            server.remove()


_schemas = iter(range(1, 1 << 30))


@pytest.fixture
def postgres_schema(postgres_server: PostgresServer) -> str:
    """A schema name no other test of this run uses."""
    return f"t{os.getpid()}_{next(_schemas)}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3-compatible server (moto's server mode, a subprocess) for the whole run."""
    reason = s3_unavailable_reason()
    if reason is not None:
        pytest.skip(f"S3 tests need moto's server: {reason}")
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


_buckets = iter(range(1, 1 << 30))


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    """A bucket no other test of this run uses."""
    name = f"toolswap-test-{os.getpid()}-{next(_buckets)}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "postgres"])
def journal_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the lease journal and its owner live for this test and every process it
    starts: the session's file and SQLite owner, or PostgreSQL (see journal_backend.py)."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_server").dsn
        schema = request.getfixturevalue("postgres_schema")
        monkeypatch.setenv(journal_backend.ENV, journal_backend.spec(schema, dsn))
    return str(request.param)
