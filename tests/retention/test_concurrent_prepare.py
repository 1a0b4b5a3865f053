"""Several processes preparing leases at the same time on one journal."""

from __future__ import annotations

import fcntl

from toolswap import ArtifactRetentionJournal

from .conftest import Env


def test_processes_preparing_at_once_leave_a_contiguous_journal_with_every_lease(
    env: Env,
) -> None:
    gate = env.tmp / "gate"
    gate.write_bytes(b"")
    workers, count = 4, 12
    with open(gate, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # every worker starts when this is released
        procs = [
            env.spawn("prepare-many", f"w{w}", str(count), str(gate), *env.source_ids)
            for w in range(workers)
        ]
    results = [env.finish(p) for p in procs]
    assert [(r.code, r.out) for r in results] == [(0, count)] * workers, results
    journal = ArtifactRetentionJournal(env.session_dir, owner=None)
    summary = journal.verify()
    assert summary.records == workers * count
    assert summary.phases["PREPARED"] == workers * count
    view = journal.recover()
    expected = {f"w{w}-{i}" for w in range(workers) for i in range(count)}
    assert set(view.pending_transaction_ids) == expected
    assert sum(c.reference_count for c in view.claims.values()) == workers * count
    seqs = [t.prepared_seq for t in journal.transactions()]
    assert sorted(seqs) == list(range(1, workers * count + 1))
    # Each worker's own leases are in its own order.
    for w in range(workers):
        mine = [t for t in journal.transactions() if t.transaction_id.startswith(f"w{w}-")]
        assert [t.transaction_id for t in mine] == [f"w{w}-{i}" for i in range(count)]
