"""Named durable steps, for whitebox crash and interleaving tests.

Every durable step calls :func:`crash_point` with a stable name from :data:`CRASH_POINTS`.
It does nothing unless the environment asks for it:

- ``TOOLSWAP_CRASH_POINT=<name>`` kills the process with SIGKILL at that point
  (``TOOLSWAP_CRASH_SKIP=<n>`` lets the first *n* hits pass).
- ``TOOLSWAP_SYNC_DIR=<dir>`` and ``TOOLSWAP_SYNC_POINT=<name>`` make the process stop at
  that point: it opens the FIFO ``<dir>/<name>.reached`` for writing (which blocks until
  the test opens it), then waits on ``<dir>/<name>.go`` until the test writes to it. The
  test orders two processes with pipes, never with sleeps.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_POINTS", "crash_point"]

CRASH_POINTS: tuple[str, ...] = (
    "capture.tmp_created",
    "capture.tmp_fsynced",
    "capture.linked",
    "capture.tmp_unlinked",
    "capture.dir_fsynced",
    "manifest.appended",
    "manifest.fsynced",
    "manifest.head_written",
    "journal.prepared.appended",
    "journal.prepared.fsynced",
    "journal.publisher.before",
    "owner.publishing",
    "owner.published",
    "journal.publisher.after",
    "journal.committed.appended",
    "journal.committed.fsynced",
    "journal.aborted.appended",
    "journal.aborted.fsynced",
    "journal.remover.before",
    "owner.removing",
    "owner.removed",
    "journal.remover.after",
    "journal.released.appended",
    "journal.released.fsynced",
    "journal.checkpoint.tmp_written",
    "journal.checkpoint.tmp_fsynced",
    "journal.checkpoint.renamed",
    "journal.checkpoint.dir_fsynced",
    "reconcile.fenced",
    "owner.tombstoning",
    "owner.tombstoned",
    "cleanup.locked",
    "cleanup.claims_folded",
    "cleanup.verified",
    "cleanup.collect_recorded",
    "cleanup.unlinked",
    "cleanup.dir_fsynced",
    "store.bound",
    "store.object_put",
    "store.record_put",
    "store.replica.appended",
    "store.replica.fsynced",
    "store.fetched",
    "store.deleted",
)

_KNOWN = frozenset(CRASH_POINTS)


def crash_point(name: str) -> None:
    """Mark a durable step; kill or pause here when the environment names this point."""
    if name not in _KNOWN:
        raise ValueError(f"unknown crash point {name!r}; add it to CRASH_POINTS")
    if os.environ.get("TOOLSWAP_CRASH_POINT") == name:
        skip = int(os.environ.get("TOOLSWAP_CRASH_SKIP", "0") or "0")
        if skip > 0:
            os.environ["TOOLSWAP_CRASH_SKIP"] = str(skip - 1)
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("TOOLSWAP_SYNC_POINT") == name:
        sync_dir = os.environ.get("TOOLSWAP_SYNC_DIR")
        if sync_dir:
            # Hand the point to the test once: later hits in this process pass through.
            del os.environ["TOOLSWAP_SYNC_POINT"]
            with open(os.path.join(sync_dir, f"{name}.reached"), "w", encoding="utf-8") as f:
                f.write(name + "\n")
            with open(os.path.join(sync_dir, f"{name}.go"), encoding="utf-8") as f:
                f.read()
