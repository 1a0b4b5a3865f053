"""A throwaway PostgreSQL server for tests and benchmarks: initdb + pg_ctl, Unix socket only.

The server runs from a fresh temporary directory (data, socket and log inside it) and
listens on no TCP port. PostgreSQL refuses to run as root, so under root it runs as
``nobody`` (through ``setpriv``), which owns only that directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres_bin", "unavailable_reason"]

RUN_AS = "nobody"


def find_postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    candidates = [shutil.which("initdb")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    for found in candidates:
        if found and os.access(found, os.X_OK):
            path = Path(os.path.realpath(found)).parent
            if (path / "pg_ctl").exists():
                return path
    return None


def unavailable_reason() -> str | None:
    """Why no server can be started here (None when one can)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    if find_postgres_bin() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root and there is no {RUN_AS!r} user to run PostgreSQL as"
        if shutil.which("setpriv") is None:
            return "running as root and setpriv (util-linux) is missing"
    return None


class PostgresServer:
    """One PostgreSQL server in its own temporary directory (start(), then stop())."""

    def __init__(self) -> None:
        bindir = find_postgres_bin()
        assert bindir is not None
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="toolswap-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._prefix = [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                "--",
            ]
        os.chmod(self.dir, 0o755)  # the client (maybe another user) reaches the socket

    @property
    def dsn(self) -> str:
        return f"host={self.dir} port=5432 user=postgres dbname=postgres"

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._prefix, *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
            timeout=120,
        )

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            )
        options = (
            f"-k {self.dir} -p 5432 -c listen_addresses='' -c max_connections=200 "
            "-c fsync=on -c synchronous_commit=on"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no checkpoint, WAL replay on start)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
