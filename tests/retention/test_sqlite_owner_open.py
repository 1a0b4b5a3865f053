"""Several processes opening one new SQLite owner database at the same moment all succeed.

Switching a new database to WAL can answer SQLITE_BUSY without SQLite's busy handler ever
running; before the owner waited on it itself, about one first open in twenty failed with
"database is locked" when six processes started together.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

OPEN = """
import fcntl, sys
from toolswap import SqliteMemoryOwner
print("ready", flush=True)
with open(sys.argv[2], "rb") as gate:
    fcntl.flock(gate, fcntl.LOCK_SH)
SqliteMemoryOwner(sys.argv[1]).journal_head("ws/s1")
"""


def test_processes_opening_a_new_owner_database_at_once_all_succeed(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.write_bytes(b"")
    for round_ in range(4):
        db = tmp_path / f"memory-{round_}.sqlite3"
        with open(gate, "rb") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # every process opens when this is released
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", OPEN, str(db), str(gate)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(6)
            ]
            for proc in procs:  # all imported and about to wait on the gate
                assert proc.stdout is not None
                assert proc.stdout.readline() == "ready\n"
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors
