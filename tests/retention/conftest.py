"""Fixtures for the retention tests: a session with artifacts, its owner, worker processes.

Workers are real processes (``worker.py``) killed at named crash points or stopped at
them through the crash-point FIFOs; nothing waits on a timer to order two processes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import journal_backend
from postgres_server import PostgresServer, unavailable_reason
from toolswap import (
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
)

WORKER = Path(__file__).with_name("worker.py")
TIMEOUT = 60
BACKENDS = ["sqlite", "postgres"]
"""Owner backends; a module whose tests hold for any owner parametrizes ``env`` with them:
``pytestmark = pytest.mark.parametrize("env", BACKENDS, indirect=True)``."""


@dataclass
class Result:
    code: int
    out: Any
    err: str

    @property
    def killed(self) -> bool:
        return self.code == -signal.SIGKILL


@dataclass
class Env:
    """One session with three artifacts and its SQLite memory owner."""

    tmp: Path
    session_dir: Path
    owner_db: Path
    ext: ToolResultExternalizer
    source_ids: list[str]
    _sync_count: list[int] = field(default_factory=lambda: [0])
    backend: str = "sqlite"
    """The owner: "sqlite", "postgres", or "postgres-journal" (the journal in it too)."""
    dsn: str = ""
    schema: str = ""
    opened: list[Any] = field(default_factory=list)
    """Database stores and owners made here, closed when the test ends."""

    @property
    def shared_journal(self) -> bool:
        return self.backend == "postgres-journal"

    def store(self) -> Any:
        """The journal store (None: the session's journal file)."""
        if not self.shared_journal:
            return None
        from toolswap.retention.postgres_journal import PostgresJournalStore

        store = PostgresJournalStore(self.dsn, self.session_dir, schema=self.schema)
        self.opened.append(store)
        return store

    def reference(self, index: int = 0) -> ArtifactMemoryReference:
        return self.ext.get_artifact(self.source_ids[index]).for_memory()

    def claim(self, index: int = 0, **kw: Any) -> ArtifactRetentionClaim:
        return ArtifactRetentionClaim.from_memory_reference(self.reference(index), **kw)

    def owner(self, **kw: Any) -> Any:
        """The memory owner of this backend (a new object: another process, later)."""
        if self.backend.startswith("postgres"):
            from toolswap.retention.owners.postgres import PostgresMemoryOwner

            owner = PostgresMemoryOwner(self.dsn, schema=self.schema, **kw)
            self.opened.append(owner)
            return owner
        return SqliteMemoryOwner(self.owner_db, **kw)

    @property
    def owner_spec(self) -> str:
        """How a worker process opens the same owner (see worker.py)."""
        if self.backend.startswith("postgres"):
            return f"postgres|{self.schema}|{self.dsn}"
        return str(self.owner_db)

    def sqlstate(self, statement: str) -> str | None:
        """The SQLSTATE the owner's PostgreSQL database answers ``statement`` with."""
        import psycopg

        try:
            self.owner_sql(statement)
        except psycopg.Error as exc:
            return str(exc.sqlstate)
        return None

    def owner_sql(self, statement: str) -> None:
        """Run one statement on the owner's database directly (a damaged record, ...)."""
        if self.backend.startswith("postgres"):
            import psycopg

            with psycopg.connect(self.dsn, options=f"-c search_path={self.schema}") as conn:
                conn.execute(statement)
            return
        with sqlite3.connect(self.owner_db) as conn:
            conn.execute(statement)
        conn.close()

    def journal(self, **kw: Any) -> ArtifactRetentionJournal:
        if "owner" not in kw:
            kw["owner"] = self.owner()
        if "store" not in kw and self.shared_journal:
            kw["store"] = self.store()
        return ArtifactRetentionJournal(self.session_dir, **kw)

    def publish(self, tx: str, index: int = 0) -> None:
        """A complete, successful publication in this process."""
        owner = self.owner()
        ref = self.reference(index)
        self.journal(owner=owner).publish_reference(
            self.claim(index), lambda: owner.publish(tx, ref), transaction_id=tx
        )

    # -- worker processes -------------------------------------------------------------

    def _env(self, crash: str | None, sync: tuple[Path, str] | None) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("TOOLSWAP_CRASH_POINT", "TOOLSWAP_SYNC_POINT", "TOOLSWAP_SYNC_DIR"):
            env.pop(name, None)
        env.pop(journal_backend.ENV, None)
        if self.shared_journal:
            env[journal_backend.ENV] = journal_backend.spec(self.schema, self.dsn)
        if crash is not None:
            env["TOOLSWAP_CRASH_POINT"] = crash
        if sync is not None:
            env["TOOLSWAP_SYNC_DIR"] = str(sync[0])
            env["TOOLSWAP_SYNC_POINT"] = sync[1]
        return env

    def spawn(
        self, *args: str, crash: str | None = None, sync: tuple[Path, str] | None = None
    ) -> subprocess.Popen[str]:
        action, *rest = args
        return subprocess.Popen(
            [sys.executable, str(WORKER), action, str(self.session_dir), self.owner_spec, *rest],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(crash, sync),
        )

    @staticmethod
    def finish(proc: subprocess.Popen[str]) -> Result:
        out, err = proc.communicate(timeout=TIMEOUT)
        parsed = json.loads(out) if out.strip() else None
        return Result(proc.returncode, parsed, err)

    def run(self, *args: str, crash: str | None = None) -> Result:
        return self.finish(self.spawn(*args, crash=crash))

    @contextmanager
    def stopped_at(self, point: str, *args: str) -> Iterator[subprocess.Popen[str]]:
        """Run a worker until it reaches ``point``; the body runs while it waits there."""
        self._sync_count[0] += 1
        sync = self.tmp / f"sync-{self._sync_count[0]}"
        sync.mkdir()
        reached, go = sync / f"{point}.reached", sync / f"{point}.go"
        os.mkfifo(reached)
        os.mkfifo(go)
        proc = self.spawn(*args, sync=(sync, point))
        got: list[str] = []

        def wait() -> None:
            with open(reached, encoding="utf-8") as f:
                got.append(f.read().strip())

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        while waiter.is_alive():
            waiter.join(0.05)
            if waiter.is_alive() and proc.poll() is not None:
                # The worker ended without reaching the point: unblock our reader, report.
                try:
                    os.close(os.open(reached, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    continue  # our reader is not in open() yet
                waiter.join()
                _, err = proc.communicate()
                raise AssertionError(f"worker exited before {point}: {err}")
        assert got == [point]
        try:
            yield proc
        finally:
            with open(go, "w", encoding="utf-8") as f:
                f.write("go")


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A session with three artifacts and its owner (SQLite unless parametrized)."""
    backend = getattr(request, "param", "sqlite")
    dsn = schema = ""
    if backend.startswith("postgres"):
        dsn = request.getfixturevalue("postgres_server").dsn
        schema = request.getfixturevalue("postgres_schema")
    session_dir = tmp_path / "sessions" / "s1"
    ext = ToolResultExternalizer(session_dir)
    source_ids = [
        ext.externalize(f"{tag} line\n" * 20_000, "grep").artifact.source_id
        for tag in ("alpha", "beta", "gamma")
    ]
    made = Env(
        tmp=tmp_path,
        session_dir=session_dir,
        owner_db=session_dir / "memory.sqlite3",
        ext=ext,
        source_ids=source_ids,
        backend=backend,
        dsn=dsn,
        schema=schema,
    )
    yield made
    for opened in made.opened:  # deterministically, not when the collector runs
        opened.close()


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test alone, so it can be stopped and restarted."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        finally:
            server.remove()
