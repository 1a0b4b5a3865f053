"""The readiness check's memory: ``<session>/manifest.checked``.

The readiness check runs before every ``toolswap run`` and verifies the whole manifest, so
each command of a long session would pay for the session's length. A full check that passes
remembers the manifest's :data:`~toolswap.chainlog.StatKey` (device, inode, size, mtime,
ctime: any write, truncation, replacement or change of its times gives another) and the
head file's exact bytes; the next check skips the full verification only while both are
exactly so. An append, a cut, a replacement or a changed head file, like any doubt about the
memory or the manifest itself (unreadable, odd, not ours, a symlink), means the full check.

Only the manifest's owner (:class:`~toolswap.manifest.Manifest`) decides what was verified;
this module keeps the file and the rule for when a memory may be written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from . import durable
from .chainlog import StatKey, stat_key
from .durable import not_ours

__all__ = ["matches", "remember"]

_MAX = 4096
"""The most bytes a memory may hold; a larger file is no memory of ours."""
SETTLED_S = 2.0
"""A manifest changed less than this long ago is not remembered as checked: a write in the
same tick of the file system's clock (coarse: up to 2 s on some) as the check's own read
could leave every time stamp as it was (git's "racily clean" index entries)."""


def _body(session: str, key: StatKey | tuple[int, ...], head: bytes) -> dict[str, object]:
    return {"v": 1, "session": session, "manifest": list(key), "head": head.decode("ascii")}


def matches(memory: Path, manifest: Path, session: str, head: bytes | None) -> bool:
    """Whether ``memory`` remembers ``manifest`` exactly as it is now, with the head file
    bytes ``head``. False whenever anything is in doubt (no head, no memory, an odd one, a
    manifest that is not this user's regular file): the full check then runs."""
    if not head:
        return False
    try:
        raw = durable.read_trusted(memory, _MAX + 1)
        if not raw or len(raw) > _MAX:
            return False
        remembered = json.loads(raw)
        st = os.lstat(manifest)
        if not_ours(st, directory=False) is not None:
            return False
        return bool(remembered == _body(session, stat_key(st), head))
    except Exception:  # an unreadable or odd memory is no evidence: check in full
        return False


def remember(
    memory: Path,
    manifest: Path,
    session: str,
    whole: StatKey,
    head: bytes,
    clock: Callable[[], object],
) -> None:
    """Remember that a full check verified every byte of ``manifest`` as its key was
    ``whole``, with the head file bytes ``head`` (best effort: nothing is written when in
    doubt). Nothing is remembered if the manifest changed since (its key is not ``whole``),
    is not this user's regular file, or changed within :data:`SETTLED_S` of what ``clock``
    says is now; a clock that does not give a timezone-aware datetime remembers nothing.
    """
    try:
        st = os.lstat(manifest)
    except OSError:
        return
    if stat_key(st) != whole or not_ours(st, directory=False) is not None:
        return
    from datetime import datetime

    now = clock()
    if not isinstance(now, datetime) or now.utcoffset() is None:
        return
    if now.timestamp() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < SETTLED_S:
        return
    try:
        body = json.dumps(_body(session, whole, head), sort_keys=True).encode()
        durable.write_atomically(memory.parent, memory.name, body, replace=True)
    except (OSError, UnicodeDecodeError):
        return
