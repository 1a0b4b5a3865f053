"""A verified checkpoint of the lease journal's fold, kept beside the journal.

Like etcd's snapshot beside its WAL: ``retention-leases.checkpoint`` holds the folded
state (every lease and the hash of every record) as of one journal record, so a cold
recovery loads it and verifies and folds only the records appended after it.

The file is the canonical JSON of its body, a newline, the SHA-256 of that JSON, and a
newline. The body names the session, the record it covers (``seq``, ``hash``), the byte
offset just past that record, and the SHA-256 of the journal's bytes up to that offset
(``prefix_sha256``).

Trust. A checkpoint is used only when its own digest matches, it is of this format and
this session, and the journal's first ``offset`` bytes hash to ``prefix_sha256`` (one
sequential SHA-256 pass, the floor of reading the journal at all): those are then
exactly the bytes whose records were verified and folded when the checkpoint was
written. A damaged, unreadable, unsafe or foreign checkpoint is ignored and the journal
is folded from its first byte. An intact checkpoint of this session that the journal
contradicts (the journal is missing, shorter than ``offset``, or holds other bytes before
it) proves the journal lost or rewrote records it once held: that is refused with
:class:`~toolswap.errors.ArtifactLeaseJournalError`, never repaired silently.

Writing happens under the session lock: a temporary file, fsync, rename over the
checkpoint, fsync of the directory (crash points ``journal.checkpoint.*``). A crash at
any step leaves the previous checkpoint or the new one, each valid for a prefix of the
journal; a leftover temporary file is replaced by the next write.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import durable
from ..chainlog import canonical_json
from ..errors import ArtifactLeaseJournalError, ArtifactRetentionError, SourceIdError
from .claims import ArtifactRetentionClaim
from .lease import TRANSACTION_ID_RE, ArtifactLeasePhase, ArtifactLeaseTransaction

__all__ = [
    "CHECKPOINT_INTERVAL",
    "FoldCheckpoint",
    "check_against",
    "checkpoint_fold",
    "checkpoint_path",
    "decode_checkpoint",
    "encode_checkpoint",
    "load_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_INTERVAL = 10_000
"""Records appended after the last checkpoint before the journal writes a new one."""
FORMAT = "toolswap.lease-checkpoint"
VERSION = 1
_HASH_BLOCK = 4 << 20
_PHASES = {p.value: p for p in ArtifactLeasePhase}


def checkpoint_path(journal_path: Path) -> Path:
    """Where the checkpoint of the journal at ``journal_path`` lives."""
    return journal_path.with_name(journal_path.stem + ".checkpoint")


@dataclass(frozen=True, slots=True)
class FoldCheckpoint:
    """A checkpoint checked against the journal: the fold as of record ``seq``."""

    seq: int
    hash: str
    offset: int
    """Byte offset just past record ``seq`` in the journal."""
    identity: tuple[int, int]
    """(device, inode) of the journal file whose prefix was checked."""
    leases: list[ArtifactLeaseTransaction]
    """Every lease as of record ``seq``, in the order they were prepared."""
    hashes: bytes
    """The 32-byte hash of every record up to ``seq``, by sequence."""


class _Ignored(Exception):
    """The checkpoint cannot be used (damaged, foreign, unsafe); fold the whole journal."""


def _open_regular(path: Path) -> int | None:
    try:
        fd, _ = durable.open_trusted(path, error=_Ignored)
    except FileNotFoundError:
        return None
    return fd


def _prefix_sha256(fd: int, length: int) -> str:
    try:
        return durable.hash_fd(fd, limit=length, block=_HASH_BLOCK)[0]
    except OSError as exc:
        raise _Ignored(exc.strerror) from exc


def _read_body(path: Path) -> dict[str, Any] | None:
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        data = durable.current().pread(fd, size, 0)
    except OSError as exc:
        raise _Ignored(exc.strerror) from exc
    finally:
        durable.close_unwritten(fd)
    return _body(data)


def _body(data: bytes) -> dict[str, Any]:
    body, sep, rest = data.rpartition(b"\n")
    if sep and not rest:
        body, sep, digest = body.rpartition(b"\n")
        if sep and hashlib.sha256(body).hexdigest().encode() == digest:
            try:
                value = json.loads(body)
            except ValueError as exc:
                raise _Ignored("not JSON") from exc
            if isinstance(value, dict):
                return value
    raise _Ignored("damaged (its digest does not match)")


def _claims(intents: object, session: str) -> dict[str, ArtifactRetentionClaim]:
    if not isinstance(intents, dict):
        raise _Ignored("no intents")
    claims: dict[str, ArtifactRetentionClaim] = {}
    for digest, intent in intents.items():
        claim = ArtifactRetentionClaim.from_dict(intent)
        if claim.session != session:
            raise _Ignored("claims an artifact of another session")
        claims[digest] = claim
    return claims


def _leases(
    rows: object, claims: dict[str, ArtifactRetentionClaim], seq: int
) -> list[ArtifactLeaseTransaction]:
    if not isinstance(rows, list):
        raise _Ignored("no leases")
    leases: list[ArtifactLeaseTransaction] = []
    last_prepared = 0
    for tx, digest, phase, prepared_at, updated_at, prepared_seq, last_seq in rows:
        if not (
            isinstance(tx, str)
            and TRANSACTION_ID_RE.fullmatch(tx)
            and isinstance(prepared_seq, int)
            and isinstance(last_seq, int)
            and last_prepared < prepared_seq <= last_seq <= seq
        ):
            raise _Ignored("a lease row is malformed")
        last_prepared = prepared_seq
        leases.append(
            ArtifactLeaseTransaction(
                tx,
                claims[digest],
                _PHASES[phase],
                digest,
                datetime.fromisoformat(prepared_at),
                datetime.fromisoformat(updated_at),
                prepared_seq,
                last_seq,
            )
        )
    return leases


def _header(body: dict[str, Any], session: str) -> tuple[int, str, bytes]:
    if body.get("format") != FORMAT or body.get("v") != VERSION:
        raise _Ignored("another format")
    if body.get("session") != session:
        raise _Ignored("of another session")
    seq, digest, raw_hashes = body["seq"], body["hash"], body["hashes"]
    if not (
        isinstance(seq, int) and seq > 0 and isinstance(digest, str) and isinstance(raw_hashes, str)
    ):
        raise _Ignored("malformed header")
    hashes = base64.b64decode(raw_hashes, validate=True)
    if len(hashes) != 32 * seq or hashes[-32:].hex() != digest:
        raise _Ignored("record hashes do not match the head")
    return seq, digest, hashes


def _fold(body: dict[str, Any], session: str, seq: int) -> list[ArtifactLeaseTransaction] | None:
    try:
        claims = _claims(body.get("intents"), session)
        return _leases(body.get("leases"), claims, seq)
    except (_Ignored, KeyError, TypeError, ValueError, ArtifactRetentionError, SourceIdError):
        return None


def decode_checkpoint(data: bytes, session: str) -> tuple[int, str, dict[str, Any]] | None:
    """``(seq, hash, body)`` of an intact checkpoint of ``session``, else None."""
    try:
        body = _body(data)
        seq, digest, _ = _header(body, session)
    except (_Ignored, KeyError, TypeError, ValueError):
        return None
    return seq, digest, body


def checkpoint_fold(body: dict[str, Any], session: str) -> FoldCheckpoint | None:
    """The fold a decoded checkpoint body holds (None if it is malformed)."""
    try:
        seq, digest, hashes = _header(body, session)
    except (_Ignored, KeyError, TypeError, ValueError):
        return None
    leases = _fold(body, session, seq)
    if leases is None:
        return None
    return FoldCheckpoint(seq, digest, 0, (0, 0), leases, hashes)


def load_checkpoint(journal_path: Path, session: str) -> FoldCheckpoint | None:
    """The checkpoint beside ``journal_path``, checked against the journal (see module doc).

    Returns:
        None when there is no usable checkpoint (absent, damaged, unsafe or foreign).

    Raises:
        ArtifactLeaseJournalError: an intact checkpoint of this session covers records
            the journal no longer holds as they were.
    """
    path = checkpoint_path(journal_path)
    try:
        body = _read_body(path)
        if body is None:
            return None
        seq, _, _ = _header(body, session)
        offset, prefix = body["offset"], body["prefix_sha256"]
        if not (isinstance(offset, int) and offset > 0 and isinstance(prefix, str)):
            raise _Ignored("malformed header")
    except (_Ignored, KeyError, TypeError, ValueError):
        return None
    fd = None
    try:
        fd = _open_regular(journal_path)
    except _Ignored:
        return None  # the journal itself is unsafe: the full read reports it
    if fd is None:
        raise _refuse(path, f"the journal is missing but its checkpoint covers record {seq}")
    try:
        st = os.fstat(fd)
        if st.st_size < offset:
            raise _refuse(
                path,
                f"the journal holds {st.st_size} bytes but its checkpoint covers {offset} "
                f"bytes (record {seq}): records were lost",
            )
        if _prefix_sha256(fd, offset) != prefix:
            raise _refuse(
                path, f"the journal's records up to {seq} are not the ones its checkpoint covers"
            )
        identity = (st.st_dev, st.st_ino)
    finally:
        durable.close_unwritten(fd)
    fold = checkpoint_fold(body, session)
    if fold is None:
        return None
    return dataclasses.replace(fold, offset=offset, identity=identity)


def _refuse(path: Path, message: str) -> ArtifactLeaseJournalError:
    return ArtifactLeaseJournalError(
        f"{path.name}: {message}; nothing may be deleted until the journal is restored "
        f"(run `toolswap journal verify`; if the journal as it is now is the one to trust, "
        f"move {path.name} aside)"
    )


def check_against(journal_path: Path, session: str, hashes: bytes) -> None:
    """Refuse a checkpoint the fully verified journal (``hashes`` by record) contradicts.

    Raises:
        ArtifactLeaseJournalError: an intact checkpoint of this session names a record
            the journal does not hold.
    """
    path = checkpoint_path(journal_path)
    try:
        body = _read_body(path)
        if body is None or body.get("format") != FORMAT or body.get("session") != session:
            return
        seq, digest = int(body["seq"]), str(body["hash"])
    except (_Ignored, KeyError, TypeError, ValueError):
        return
    if seq < 1 or hashes[(seq - 1) * 32 : seq * 32].hex() != digest:
        raise _refuse(path, f"the journal does not hold record {seq} that its checkpoint covers")


def encode_checkpoint(
    session: str,
    *,
    seq: int,
    digest: str,
    leases: list[ArtifactLeaseTransaction],
    hashes: bytes,
    extra: dict[str, object],
) -> bytes:
    """The bytes of a checkpoint of a fold as of record ``seq`` (``extra``: store fields)."""
    intents: dict[str, object] = {}
    rows: list[list[object]] = []
    for lease in leases:
        if lease.intent_hash not in intents:
            intents[lease.intent_hash] = lease.claim.to_dict()
        rows.append(
            [
                lease.transaction_id,
                lease.intent_hash,
                lease.phase.value,
                lease.prepared_at.isoformat(),
                lease.updated_at.isoformat(),
                lease.prepared_seq,
                lease.last_seq,
            ]
        )
    body = canonical_json(
        {
            **extra,
            "format": FORMAT,
            "v": VERSION,
            "session": session,
            "seq": seq,
            "hash": digest,
            "hashes": base64.b64encode(hashes).decode("ascii"),
            "intents": intents,
            "leases": rows,
        }
    )
    return body + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n"


def write_checkpoint(
    journal_path: Path,
    session: str,
    *,
    seq: int,
    digest: str,
    offset: int,
    identity: tuple[int, int] | None,
    leases: list[ArtifactLeaseTransaction],
    hashes: bytes,
) -> bool:
    """Write the checkpoint of a fold as of record ``seq`` (hold the session lock).

    Returns:
        False (nothing written) when the journal file is no longer the one folded.

    Raises:
        OSError: the checkpoint could not be written (the previous one stays).
    """
    try:
        fd = _open_regular(journal_path)
        if fd is None:
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != identity or st.st_size < offset:
                return False
            prefix = _prefix_sha256(fd, offset)
        finally:
            durable.close_unwritten(fd)
    except _Ignored as exc:
        raise OSError(f"cannot read the journal to checkpoint it: {exc}") from exc
    data = encode_checkpoint(
        session,
        seq=seq,
        digest=digest,
        leases=leases,
        hashes=hashes,
        extra={"offset": offset, "prefix_sha256": prefix},
    )
    path = checkpoint_path(journal_path)
    durable.write_atomically(
        path.parent,
        path.name,
        data,
        replace=True,
        tmp_name=path.name + ".tmp",
        crash_prefix="journal.checkpoint",
    )
    return True
