"""The fold of a lease journal: its records in, every lease and the claim view out.

Pure: nothing here reads or writes a file, a database or the clock. The journal feeds
:meth:`LeaseFold.fold` each record the chain log verified, in sequence order, and asks the
fold for a lease, the live leases, a record's hash or the claim view at a given time. A
record that breaks the protocol (an unknown field or phase, an illegal transition, an
intent that does not match its hash, a claim of another session) raises the error the
journal's ``fail`` builds, so the message names the journal's store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from ..artifact import SHA256_RE
from ..chainlog import canonical_json
from ..errors import ArtifactLeaseJournalError, ArtifactRetentionError, SourceIdError
from .claims import MAX_REFERENCE_COUNT, ArtifactClaimView, ArtifactRetentionClaim
from .lease import TRANSACTION_ID_RE, ArtifactLeasePhase, ArtifactLeaseTransaction

__all__ = ["TRANSITIONS", "LeaseFold", "intent_hash"]

P = ArtifactLeasePhase
TRANSITIONS: dict[ArtifactLeasePhase, frozenset[ArtifactLeasePhase]] = {
    P.PREPARED: frozenset({P.COMMITTED, P.ABORTED}),
    P.COMMITTED: frozenset({P.RELEASED}),
    P.ABORTED: frozenset(),
    P.RELEASED: frozenset(),
}
"""The only phase changes a lease can make."""

_RECORD_KEYS = frozenset(
    {"v", "seq", "session", "prev", "hash", "transaction_id", "phase", "recorded_at"}
    | {"intent_hash", "intent"}
)
_PHASES = {p.value: p for p in ArtifactLeasePhase}
_INTENT_CACHE = 4096


def intent_hash(claim: ArtifactRetentionClaim) -> str:
    """SHA-256 of the claim's canonical JSON (the intent a PREPARED record carries)."""
    return hashlib.sha256(canonical_json(claim.to_dict())).hexdigest()


class LeaseFold:
    """Every lease of one session's journal as its records so far make it.

    Args:
        session_id: the session every intent must claim an artifact of.
        fail: builds the error a record that breaks the protocol raises.
    """

    def __init__(self, session_id: str, fail: Callable[[str], ArtifactLeaseJournalError]) -> None:
        self._session_id = session_id
        self._fail = fail
        self.leases: dict[str, ArtifactLeaseTransaction] = {}
        """Every lease by transaction ID, as its last record left it."""
        self.live: dict[str, ArtifactLeaseTransaction] = {}
        """PREPARED and COMMITTED leases, in the order they were prepared."""
        self.hashes = bytearray()
        """The 32-byte hash of every record, by sequence: checks a recorded head in O(1)."""
        self._intents: dict[str, tuple[dict[str, Any], ArtifactRetentionClaim]] = {}
        """Intents already validated, by intent hash (many leases repeat an intent)."""

    def clear(self) -> None:
        """Forget every record (the intents stay: they are checked against their hash)."""
        self.leases.clear()
        self.live.clear()
        self.hashes = bytearray()

    def restore(self, leases: Iterable[ArtifactLeaseTransaction], hashes: bytes) -> None:
        """Start from a verified checkpoint of the fold instead of from the first record."""
        self.clear()
        for lease in leases:
            self.leases[lease.transaction_id] = lease
            if not lease.phase.is_terminal:
                self.live[lease.transaction_id] = lease
        self.hashes = bytearray(hashes)

    def hash_at(self, seq: int) -> str:
        """The hash of record ``seq`` (an empty string past the last one)."""
        return self.hashes[(seq - 1) * 32 : seq * 32].hex()

    def phases(self) -> dict[str, int]:
        """How many leases are in each phase now."""
        counts = {p.value: 0 for p in ArtifactLeasePhase}
        for lease in self.leases.values():
            counts[lease.phase.value] += 1
        return counts

    def fold(self, record: dict[str, Any]) -> None:
        """Apply the next record (the chain log already checked its chain fields)."""
        seq = record["seq"]
        where = f"record {seq}"
        if not record.keys() <= _RECORD_KEYS:
            extra = sorted(record.keys() - _RECORD_KEYS)
            raise self._fail(f"{where} has unknown fields {extra}")
        tx = record.get("transaction_id")
        if not isinstance(tx, str) or not TRANSACTION_ID_RE.fullmatch(tx):
            raise self._fail(f"{where} has an invalid transaction ID")
        phase = _PHASES.get(record.get("phase"))  # type: ignore[arg-type]
        if phase is None:
            raise self._fail(f"{where} has unknown phase {record.get('phase')!r}")
        recorded_at = record.get("recorded_at")
        try:
            when = datetime.fromisoformat(recorded_at)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._fail(f"{where} has an invalid recorded_at") from None
        if when.tzinfo is None:
            raise self._fail(f"{where} has a recorded_at without a timezone")
        digest = record.get("intent_hash")
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            raise self._fail(f"{where} has an invalid intent_hash")
        if phase is P.PREPARED:
            intent = record.get("intent")
            if not isinstance(intent, dict):
                raise self._fail(f"{where} is PREPARED without an intent")
            if tx in self.leases:
                raise self._fail(f"{where} prepares transaction {tx!r} a second time")
            claim = self._intent_claim(where, intent, digest)
            lease = ArtifactLeaseTransaction(tx, claim, phase, digest, when, when, seq, seq)
            self.live[tx] = lease
        else:
            if "intent" in record:
                raise self._fail(f"{where}: only a PREPARED record carries the intent")
            prev = self.leases.get(tx)
            if prev is None:
                raise self._fail(f"{where} records {phase.value} for {tx!r}, never prepared")
            if phase not in TRANSITIONS[prev.phase]:
                raise self._fail(
                    f"{where}: illegal transition {prev.phase.value} -> {phase.value} for {tx!r}"
                )
            if digest != prev.intent_hash:
                raise self._fail(f"{where} rewrites the intent of {tx!r}")
            lease = ArtifactLeaseTransaction(
                tx, prev.claim, phase, digest, prev.prepared_at, when, prev.prepared_seq, seq
            )
            if phase is P.COMMITTED:
                self.live[tx] = lease
            else:
                self.live.pop(tx, None)
        self.leases[tx] = lease
        self.hashes += bytes.fromhex(record["hash"])

    def _intent_claim(
        self, where: str, intent: dict[str, Any], digest: str
    ) -> ArtifactRetentionClaim:
        """The validated claim of a PREPARED intent (identical intents are checked once)."""
        cached = self._intents.get(digest)
        if cached is not None and cached[0] == intent:
            return cached[1]
        if hashlib.sha256(canonical_json(intent)).hexdigest() != digest:
            raise self._fail(f"{where}: the intent does not match its intent_hash")
        try:
            claim = ArtifactRetentionClaim.from_dict(intent)
        except (ArtifactRetentionError, SourceIdError) as exc:
            raise self._fail(f"{where} has an invalid intent: {exc}") from None
        if claim.to_dict() != intent:
            raise self._fail(f"{where} has an intent that is not in canonical form")
        if claim.session != self._session_id:
            raise self._fail(f"{where} claims an artifact of another session")
        if len(self._intents) >= _INTENT_CACHE:
            self._intents.clear()
        self._intents[digest] = (intent, claim)
        return claim

    def view(self, when: datetime, head: tuple[int, str]) -> ArtifactClaimView:
        """The claims the live leases make at ``when``, as of the record ``head``.

        Committed leases count while active; every PREPARED lease counts with no deadline
        and is listed as pending.
        """
        folded: dict[str, list[Any]] = {}
        conflicts: list[str] = []
        pending: list[str] = []
        for lease in self.live.values():
            claim = lease.claim
            if lease.phase is P.PREPARED:
                pending.append(lease.transaction_id)
                deadline = None
            elif claim.retain_until is not None and claim.retain_until <= when:
                continue
            else:
                deadline = claim.retain_until
            entry = folded.get(claim.source_id)
            if entry is None:
                folded[claim.source_id] = [claim.content_sha256, claim.reference_count, deadline]
                continue
            if entry[0] != claim.content_sha256:
                if claim.source_id not in conflicts:
                    conflicts.append(claim.source_id)
                continue
            entry[1] = min(entry[1] + claim.reference_count, MAX_REFERENCE_COUNT)
            entry[2] = None if entry[2] is None or deadline is None else max(entry[2], deadline)
        seq, digest = head
        return ArtifactClaimView(
            claims={
                sid: ArtifactRetentionClaim(sid, sha, count, deadline)
                for sid, (sha, count, deadline) in folded.items()
            },
            pending_transaction_ids=tuple(pending),
            as_of=when,
            journal_seq=seq,
            journal_hash=digest,
            digest_conflicts=tuple(conflicts),
        )
