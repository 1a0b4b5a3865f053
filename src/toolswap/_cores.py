"""How many cores this process can use (private): the CPUs it may run on, cut to the CPU
time its cgroup lets it have. Work beside the main thread (the outline's helper process,
imports ahead of a capture) is only worth starting where a second core is there to take it:
a container given one CPU often sees every core of its host, and such work there only takes
the capture's time.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["usable_cores"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_OWN_CGROUP = Path("/proc/self/cgroup")


def usable_cores() -> float:
    """The cores this process may run on (its affinity), at most the CPU time its cgroup
    allows (``_quota_cores``)."""
    try:
        cores = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = float(os.cpu_count() or 1)
    quota = _quota_cores()
    return cores if quota is None else min(cores, quota)


def _quota_cores() -> float | None:
    """The CPU time this process's cgroup may use, in cores, at the tightest level from its
    own cgroup up to the root (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None when no
    level sets one, or it cannot be read."""
    try:
        # (A cgroup's name is bytes: one that is not UTF-8 is still a path.)
        lines = os.fsdecode(_OWN_CGROUP.read_bytes()).splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            base, read = _CGROUP_ROOT, _v2_quota
        elif "cpu" in controllers.split(","):
            base, read = _CGROUP_ROOT / controllers, _v1_quota
        else:
            continue
        level = Path("/", path)
        for directory in (level, *level.parents):
            quota = read(base / directory.relative_to("/"))
            if quota is not None:
                found.append(quota)
    return min(found) if found else None


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, _, period = (directory / "cpu.max").read_bytes().strip().partition(b" ")
        return None if quota == b"max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_bytes())
        period = int((directory / "cpu.cfs_period_us").read_bytes())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError, ZeroDivisionError):
        return None
