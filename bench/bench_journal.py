"""The lease journal: cold recovery of a large journal, and the cost of one publish.

1. Recovering a 100,000-record journal (verify every hash, fold every lease) against the
   floor of one SHA-256 pass over the same file: from the first byte (no checkpoint), from
   a checkpoint at the head, and from a checkpoint CHECKPOINT_INTERVAL - 1 records behind
   (the worst case: the journal writes the next one at the interval). Target: <= 1 s.
2. One publish_reference (prepare: artifact verification + PREPARED fsync; publisher;
   COMMITTED fsync) on a journal of 100 records and on one of 100,000, each journal
   object warm. The folded view is cached and only appended records are verified, so
   the two should cost the same. Target: within 1.2x.
3. One publish_reference whose publisher writes to SqliteMemoryOwner and to
   PostgresMemoryOwner (a server started for the run, on a Unix socket), side by side.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from toolswap import (
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from postgres_server import PostgresServer, unavailable_reason
from toolswap.chainlog import GENESIS_HASH, SCHEMA_VERSION, canonical_json
from toolswap.retention.checkpoint import CHECKPOINT_INTERVAL, checkpoint_path

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
LARGE = 2_000 if QUICK else 100_000
SMALL = 100
PUBLISHES = 10 if QUICK else 40


def write_journal(
    path: Path, session: str, claims: list[ArtifactRetentionClaim], n: int
) -> list[int]:
    """Write ``n`` valid records (PREPARED, COMMITTED, every third lease RELEASED) at once.

    Same encoding as toolswap.chainlog (canonical JSON, then the hash member); recovery
    verifies every record, so a drift in the format fails loudly.

    Returns:
        The byte offset just past each record.
    """
    when = datetime(2026, 1, 1, tzinfo=UTC)
    out = bytearray()
    ends: list[int] = []
    prev = GENESIS_HASH
    seq = 0
    lease = 0

    def emit(body: dict[str, Any]) -> None:
        nonlocal prev, seq
        seq += 1
        record = {**body, "v": SCHEMA_VERSION, "seq": seq, "session": session, "prev": prev}
        encoded = canonical_json(record)
        prev = hashlib.sha256(encoded).hexdigest()
        out.extend(encoded[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
        ends.append(len(out))

    while seq < n:
        lease += 1
        claim = claims[lease % len(claims)]
        if lease % 5 == 0:
            claim = ArtifactRetentionClaim(
                claim.source_id, claim.content_sha256, 2, when + timedelta(days=lease % 30)
            )
        intent = claim.to_dict()
        digest = hashlib.sha256(canonical_json(intent)).hexdigest()
        base = {"transaction_id": f"bulk-{lease}", "intent_hash": digest}
        stamp = (when + timedelta(seconds=seq)).isoformat()
        emit({**base, "phase": "PREPARED", "recorded_at": stamp, "intent": intent})
        for phase in ("COMMITTED", "RELEASED") if lease % 3 == 0 else ("COMMITTED",):
            if seq < n:
                emit({**base, "phase": phase, "recorded_at": stamp})
    path.write_bytes(bytes(out))
    return ends


def sha_floor(path: Path) -> float:
    start = time.perf_counter()
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
    return time.perf_counter() - start


def make_session(
    root: Path, name: str, records: int
) -> tuple[ToolResultExternalizer, list[Any], list[int]]:
    ext = ToolResultExternalizer(root / name)
    refs = [
        ext.externalize(f"{tag} {i}\n" * 4_000, "bench").artifact.for_memory()
        for i, tag in enumerate(("alpha", "beta", "gamma"))
    ]
    claims = [ArtifactRetentionClaim.from_memory_reference(r) for r in refs]
    ends = write_journal(ext.session.journal_path, ext.session.session_id, claims, records)
    return ext, refs, ends


def cold_recover(ext: ToolResultExternalizer) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        view = ArtifactRetentionJournal(ext.session, owner=None, checkpoint_every=0).recover()
        best = min(best, time.perf_counter() - start)
    assert view.journal_seq == LARGE
    return best


def checkpoint_at(ext: ToolResultExternalizer, ends: list[int], seq: int) -> None:
    """Write the checkpoint as of record ``seq`` (the journal cut there, then restored)."""
    path = ext.session.journal_path
    checkpoint_path(path).unlink(missing_ok=True)
    full = path.read_bytes()
    with open(path, "r+b") as f:
        f.truncate(ends[seq - 1])
    assert ArtifactRetentionJournal(ext.session, owner=None).checkpoint() is not None
    with open(path, "r+b") as f:
        f.seek(ends[seq - 1])
        f.write(full[ends[seq - 1] :])


def sqlite_owner(root: Path) -> SqliteMemoryOwner:
    return SqliteMemoryOwner(root / "memory.sqlite3")


def owned_publish(ext: ToolResultExternalizer, refs: list[Any], owner: Any) -> float:
    """Median seconds of one publish_reference whose publisher writes to ``owner``."""
    journal = ArtifactRetentionJournal(ext.session, owner=owner)
    journal.recover()
    owned: list[float] = []
    tag = type(owner).__name__
    for i in range(PUBLISHES):
        ref = refs[i % len(refs)]
        claim = ArtifactRetentionClaim.from_memory_reference(ref)
        tx = f"{tag}-{i}"
        start = time.perf_counter()
        journal.publish_reference(
            claim, lambda tx=tx, ref=ref: owner.publish(tx, ref), transaction_id=tx
        )  # type: ignore[misc]
        owned.append(time.perf_counter() - start)
    return statistics.median(owned)


def postgres_recovery(dsn: str, ext: ToolResultExternalizer) -> dict[str, float]:
    """Cold recovery of the session's journal copied into PostgreSQL, without and with a
    checkpoint (each run opens its own connections)."""
    import json

    from toolswap.retention.postgres_journal import PostgresJournalStore

    def store() -> PostgresJournalStore:
        return PostgresJournalStore(dsn, ext.session, schema="bench_journal")

    first = store()
    with (
        first._pg.connection("copy") as conn,
        conn.cursor() as cur,
        cur.copy("COPY lease_journal (journal_key, seq, prev, hash, line) FROM STDIN") as copy,
        open(ext.session.journal_path, "rb") as f,
    ):
        for line in f:
            record = json.loads(line)
            copy.write_row((first.journal_key, record["seq"], record["prev"], record["hash"], line))
    first.close()

    def cold() -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            journal = ArtifactRetentionJournal(
                ext.session, owner=None, store=store(), checkpoint_every=0
            )
            view = journal.recover()
            best = min(best, time.perf_counter() - start)
        assert view.journal_seq >= LARGE
        return best

    full = cold()
    ArtifactRetentionJournal(ext.session, owner=None, store=store()).checkpoint()
    return {"no checkpoint (read + verify + fold all)": full, "checkpoint at the head": cold()}


def main() -> None:
    root = Path(__file__).resolve().parent / ".data" / "journal"
    shutil.rmtree(root, ignore_errors=True)
    large_ext, large_refs, ends = make_session(root, "large", LARGE)
    small_ext, small_refs, _ = make_session(root, "small", SMALL)
    path = large_ext.session.journal_path
    size_mb = path.stat().st_size / 1e6

    floor = min(sha_floor(path) for _ in range(3))
    cold = cold_recover(large_ext)
    checkpoint_at(large_ext, ends, LARGE)
    at_head = cold_recover(large_ext)
    behind = min(CHECKPOINT_INTERVAL - 1, LARGE - 1)
    checkpoint_at(large_ext, ends, LARGE - behind)
    worst = cold_recover(large_ext)
    checkpoint_path(large_ext.session.journal_path).unlink()
    print(f"recover a {LARGE:,}-record journal ({size_mb:.1f} MB, page cache warm)")
    print(f"  floor (one sha256 pass): {floor * 1e3:8.1f} ms")
    for label, took in (
        ("no checkpoint (verify + fold all)", cold),
        ("checkpoint at the head", at_head),
        (f"checkpoint {behind:,} records behind", worst),
    ):
        print(f"  {label:<36} {took * 1e3:8.1f} ms  ({took / floor:.1f}x the floor)")
    print("  target: <= 1000 ms")

    journals = {
        SMALL: (ArtifactRetentionJournal(small_ext.session, owner=None), small_refs),
        LARGE: (ArtifactRetentionJournal(large_ext.session, owner=None), large_refs),
    }
    for journal, _ in journals.values():
        journal.recover()  # warm: the one full verification happens here
    times: dict[int, list[float]] = {SMALL: [], LARGE: []}
    for i in range(PUBLISHES):  # alternate, so drift in fsync cost hits both alike
        for size, (journal, refs) in journals.items():
            claim = ArtifactRetentionClaim.from_memory_reference(refs[i % len(refs)])
            start = time.perf_counter()
            journal.publish_reference(claim, lambda: None, transaction_id=f"bench-{i}")
            times[size].append(time.perf_counter() - start)
    small_t, large_t = (statistics.median(times[s]) for s in (SMALL, LARGE))
    print(f"one publish_reference (median of {PUBLISHES}; two fsynced appends + verification)")
    print(f"  at {SMALL:>7,} records: {small_t * 1e3:7.2f} ms")
    print(f"  at {LARGE:>7,} records: {large_t * 1e3:7.2f} ms")
    print(f"  ratio large / small:  {large_t / small_t:.2f}x  (target <= 1.2x)")

    # Each owner gets its own copy of the session: the manifest anchors the owner that
    # acknowledged the journal, and a second owner that never did would be refused.
    pg_root = root / "pg" / large_ext.session.session_id
    shutil.copytree(large_ext.session.root, pg_root)
    owned = {"SqliteMemoryOwner": owned_publish(large_ext, large_refs, sqlite_owner(root))}
    reason = unavailable_reason()
    if reason is None:
        from toolswap.retention.owners.postgres import PostgresMemoryOwner

        server = PostgresServer().start()
        try:
            # Its own copy without the manifest, which anchors the local journal (a
            # session's leases live in one store, and a second one is refused).
            shared_root = root / "pg-journal" / large_ext.session.session_id
            shutil.copytree(
                large_ext.session.root, shared_root, ignore=shutil.ignore_patterns("manifest*")
            )
            pg_recovery = postgres_recovery(server.dsn, ToolResultExternalizer(shared_root))
            with PostgresMemoryOwner(server.dsn) as pg_owner:
                pg_ext = ToolResultExternalizer(pg_root)
                owned["PostgresMemoryOwner"] = owned_publish(pg_ext, large_refs, pg_owner)
        finally:
            server.stop()
            server.remove()
    if reason is None:
        print(f"recover the same {LARGE:,}-record journal from PostgreSQL (PostgresJournalStore)")
        for label, took in pg_recovery.items():
            print(f"  {label:<36} {took * 1e3:8.1f} ms  ({took / floor:.1f}x the file floor)")
        print("  target: <= 1000 ms")
    print(f"one publish_reference through a memory owner at {LARGE:,} records")
    print("  (PREPARED fsync, head ack, owner.publish, COMMITTED fsync, head ack)")
    for name, took in owned.items():
        print(f"  {name:<20} {took * 1e3:7.2f} ms")
    if len(owned) == 2:
        ratio = owned["PostgresMemoryOwner"] / owned["SqliteMemoryOwner"]
        print(f"  PostgreSQL / SQLite: {ratio:.2f}x  (PostgreSQL on a local Unix socket)")
    else:
        print(f"  PostgresMemoryOwner: not measured ({reason})")
    shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
