"""The local backend: the session directory is the authority for everything.

Names are decided by the link into ``tool-results/`` alone (a taken name is never
overwritten), records by the append to ``manifest.jsonl`` under the session lock, and an
artifact missing from the directory is missing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from .._verify_model import VerifyFinding
from ..errors import ArtifactNotFoundError
from ..records import ArtifactRecord
from ..remote import StoreObject

__all__ = ["LocalBackend"]


class LocalBackend:
    """A session whose directory is the whole truth (see the module docstring)."""

    location = "this directory"
    record_crash_prefix = "manifest"
    pull_interval = math.inf
    copies_only = False

    def key(self, workspace: str, session_id: str) -> str:
        return f"{workspace}/{session_id}"

    def local_retention_refused(self) -> str | None:
        return None

    def pull(self, after_seq: int, *, snapshot: bool = True) -> list[bytes]:
        return []

    def offer(self, seq: int, line: bytes) -> bool:
        return True  # the session lock already makes this process the only appender

    def keep_snapshot(self, seq: int, data: Callable[[], bytes]) -> None:
        return None

    def accept(self, dir_fd: int, tmp_name: str, filename: str, size: int, sha256: str) -> bool:
        return True  # the link into tool-results/ decides

    def fetch(
        self,
        tool_results_dir: Path,
        filename: str,
        size: int,
        check: Callable[[int], None],
    ) -> os.stat_result | None:
        raise ArtifactNotFoundError(
            "the file is missing from tool-results/ although the manifest records it; "
            "run `toolswap verify`"
        )

    def objects(self) -> list[StoreObject]:
        return []

    def stat_object(self, filename: str) -> StoreObject | None:
        return None

    def delete_object(self, obj: StoreObject) -> bool:
        return False

    def audit(
        self,
        tool_results_dir: Path,
        records: Mapping[str, ArtifactRecord],
        collected: Callable[[str], bool],
        check: Callable[[ArtifactRecord], Callable[[int], None]],
    ) -> tuple[list[VerifyFinding], set[str]]:
        return [], set()
