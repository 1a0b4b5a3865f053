"""Every durable call of every operation fails, or is cut by a crash, and every state that
leaves keeps the invariants (see ``explorer.py``, ``oracle.py`` and ``faultfs.py``).

The run in the normal suite explores every call with every error kind and every way a crash
may leave unsynced bytes and names, for the library's captures, the lease journal, gc,
verify, reads and ``toolswap run``, plus the captures of two more seeds (other output
sizes, chunkings and torn cuts), and prints the count per operation and fault kind.
``make faults`` (``TOOLSWAP_FAULTS=full``) adds grep and gc over a torn manifest, and every
operation under five more seeds.

The store-bound operations (``store_scenarios.py``: the binding, the replica's fetch and
verify, captures) talk to the real S3 server of the tests, which makes a state cost a few
S3 requests: the suite explores every 16th call (about 180 states, a minute),
``make faults`` every call (about 2,450 states, ten minutes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .explorer import Explorer
from .scenarios import operations

FULL = os.environ.get("TOOLSWAP_FAULTS") == "full"
QUICK_SEEDS = (1, 2)
FULL_SEEDS = tuple(range(1, 6))
STORE_STRIDE = 16


def test_every_fault_state_of_every_operation_keeps_the_invariants(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = FULL_SEEDS if FULL else QUICK_SEEDS
    explorer = Explorer(scratch)
    explorer.explore([op for op in operations() if FULL or not op.full_only])
    for seed in seeds:
        # Other outputs change what the captures do; the rest only changes torn cuts.
        seeded = [op for op in operations(seed) if FULL or op.seeded]
        explorer.explore(seeded, seed=seed)
    result = explorer.result

    with capsys.disabled():
        scope = "full" if FULL else "quick"
        print(f"\n\nfault exploration ({scope}; the fixed outputs, then seeds {list(seeds)})")
        print(result.table())
    assert not result.violations, "\n".join(str(v) for v in result.violations[:30])
    assert result.states >= 10_000


def test_every_fault_state_of_every_store_bound_operation_keeps_the_invariants(
    scratch: Path,
    s3_server: Any,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("boto3")
    from .bucket import Bucket
    from .store_scenarios import STORE_PREFIX, store_operations

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TOOLSWAP_STORE", f"s3://{bucket}/{STORE_PREFIX}")
    monkeypatch.setattr("toolswap.backends.store._STORES", {})
    explorer = Explorer(scratch, stride=1 if FULL else STORE_STRIDE)
    explorer.explore(store_operations(Bucket(s3_server.client(), bucket)))
    result = explorer.result

    with capsys.disabled():
        scope = "full" if FULL else f"quick: every {STORE_STRIDE}th call"
        print(f"\n\nfault exploration of a store-bound session's replica ({scope})")
        print(result.table())
    assert not result.violations, "\n".join(str(v) for v in result.violations[:30])
