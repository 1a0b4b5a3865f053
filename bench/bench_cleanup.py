"""Cleanup planning over many artifacts against one SHA-256 pass over the same files.

Target: plan within 1.3x of the floor (planning must hash every candidate once, and do
little else).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from toolswap.cleanup import ArtifactCleanupPolicy, plan_cleanup
from toolswap.session import Session

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
COUNT = 200 if QUICK else 10_000
SIZE = 100_000  # 10,000 x 100 kB = 1 GB


def floor(directory: Path) -> float:
    start = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        sha = hashlib.sha256()
        with open(directory / name, "rb") as f:
            while block := f.read(1 << 20):
                sha.update(block)
    return time.perf_counter() - start


def main() -> None:
    root = Path(__file__).resolve().parent / ".data" / "cleanup"
    shutil.rmtree(root, ignore_errors=True)
    session = Session.at(root / "bench-session")
    block = os.urandom(SIZE)
    for i in range(1, COUNT + 1):
        path = session.tool_results_dir / f"tool_result_{i:03d}.txt"
        path.write_bytes(block[i % 97 :] + block[: i % 97])
    total = COUNT * SIZE
    later = datetime.now(UTC) + timedelta(days=2)
    policy = ArtifactCleanupPolicy()
    best_floor = min(floor(session.tool_results_dir) for _ in range(3))
    best_plan = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        plan = plan_cleanup(session, [], policy=policy, now=later)
        best_plan = min(best_plan, time.perf_counter() - start)
    assert len(plan.planned) == COUNT
    gb = total / 1e9
    print(f"plan_cleanup over {COUNT:,} artifacts ({gb:.2f} GB, page cache warm)")
    print(f"  floor (one sha256 pass): {best_floor:.3f} s  ({gb / best_floor:.2f} GB/s)")
    print(f"  plan:                    {best_plan:.3f} s  ({gb / best_plan:.2f} GB/s)")
    print(f"  ratio plan / floor:      {best_plan / best_floor:.2f}x  (target <= 1.3x)")
    shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
