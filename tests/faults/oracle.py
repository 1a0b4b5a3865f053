"""The invariants every explored state must satisfy, read straight from the files.

The oracle parses the manifest, the lease journal and the owner's database itself (only
complete lines count: a torn final line is what a crash leaves) and checks what they say
against the bytes in ``tool-results/``:

- a recorded artifact is there, whole (its size and SHA-256 are the recorded ones);
- a final artifact name without a record is one ``toolswap verify`` reports;
- an artifact a caller was handed is still recorded under the same digest, or recorded as
  collected (a name is never handed out twice);
- every artifact a live lease (PREPARED or COMMITTED) or a stored memory reference names is
  there, whole; the owner holds no reference the journal calls ABORTED or RELEASED;
- a lease phase a caller was told is durable is in the journal (or a later phase is).

For a session bound to a store (:func:`check_store`), the store is the authority: its
records form one chain without gaps, each names an object that is there, whole; this
host's manifest is a prefix of that chain byte for byte, and a file under a recorded name
here holds the recorded bytes; an artifact a caller was handed is recorded in the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from toolswap.verify import VerifyFinding

from .scenarios import OWNER_DB, World

__all__ = ["Disk", "Leased", "check", "check_store", "lease_problems"]

_FINAL = re.compile(r"tool_result_\d{3,}\.txt")
_LATER = {
    "PREPARED": {"PREPARED", "COMMITTED", "ABORTED", "RELEASED"},
    "COMMITTED": {"COMMITTED", "RELEASED"},
    "ABORTED": {"ABORTED"},
    "RELEASED": {"RELEASED"},
}
"""The phases a lease may have once a caller was told it has the key's phase."""


def _complete_lines(path: Path) -> list[dict[str, object]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")[:-1]  # the last piece is empty or a torn record
    try:
        return [json.loads(line) for line in lines]
    except ValueError as exc:
        raise Corrupt(f"{path.name} holds a complete line that is not a record: {exc}") from None


class Corrupt(Exception):
    """A file holds a complete record that is not one (what no crash may leave)."""


@dataclass
class Disk:
    """What the session's files say, parsed without toolswap."""

    records: dict[str, tuple[str, int]]
    """Current artifact records: name -> (SHA-256, size)."""
    collected: set[str]
    files: dict[str, bytes]
    """Every final artifact name in tool-results/ and its bytes."""
    leases: dict[str, tuple[str, str]]
    """Transaction ID -> (phase, source ID)."""
    references: dict[str, tuple[str, str]]
    """The owner's stored references: transaction ID -> (source ID, SHA-256)."""

    @classmethod
    def read(cls, session_dir: Path) -> Disk:
        records: dict[str, tuple[str, int]] = {}
        collected: set[str] = set()
        for record in _complete_lines(session_dir / "manifest.jsonl"):
            name = str(record.get("filename"))
            if record.get("event") == "artifact":
                records[name] = (str(record["sha256"]), int(record["byte_size"]))  # type: ignore[call-overload]
                collected.discard(name)
            elif record.get("event") == "collected":
                records.pop(name, None)
                collected.add(name)
        leases: dict[str, tuple[str, str]] = {}
        for record in _complete_lines(session_dir / "retention-leases.jsonl"):
            tx, phase = str(record["transaction_id"]), str(record["phase"])
            intent = record.get("intent")
            source = str(intent["source_id"]) if isinstance(intent, dict) else leases[tx][1]
            leases[tx] = (phase, source)
        files: dict[str, bytes] = {}
        results = session_dir / "tool-results"
        if results.is_dir():
            for name in os.listdir(results):
                if _FINAL.fullmatch(name):
                    files[name] = (results / name).read_bytes()
        references: dict[str, tuple[str, str]] = {}
        db = session_dir / OWNER_DB
        if db.exists():
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                rows = conn.execute(
                    "SELECT transaction_id, source_id, content_sha256 FROM memory_references"
                ).fetchall()
            except sqlite3.OperationalError:  # created, its schema never written: empty
                rows = []
            finally:
                conn.close()
            references = {tx: (sid, sha) for tx, sid, sha in rows}
        return cls(records, collected, files, leases, references)

    def whole(self, name: str, sha256: str) -> str | None:
        """Why ``name`` is not the whole artifact with this digest (None: it is)."""
        data = self.files.get(name)
        if data is None:
            return "its file is missing"
        if hashlib.sha256(data).hexdigest() != sha256:
            return f"its file holds {len(data)} other bytes"
        return None


def _name(source_id: str) -> str:
    return source_id.split(":")[2]


class Leased(Protocol):
    """What the lease rules read of a state (a local session's or a fleet's)."""

    records: dict[str, tuple[str, int]]
    leases: dict[str, tuple[str, str]]
    references: dict[str, tuple[str, str]]

    def whole(self, name: str, sha256: str) -> str | None: ...


def lease_problems(disk: Leased, told: Mapping[str, str]) -> list[str]:
    """How ``disk`` breaks the lease rules: a PREPARED or COMMITTED lease, or an owner's
    reference, whose artifact is not whole; a reference the journal does not hold; a lease
    behind what its caller was ``told`` (transaction ID -> phase)."""
    problems = []
    for tx, (phase, source_id) in sorted(disk.leases.items()):
        if phase in ("PREPARED", "COMMITTED"):
            name = _name(source_id)
            why = (
                disk.whole(name, disk.records[name][0])
                if name in disk.records
                else "it has no record"
            )
            if why is not None:
                problems.append(f"{name} has a {phase} lease ({tx}) but {why}")
    for tx, (source_id, sha256) in sorted(disk.references.items()):
        why = disk.whole(_name(source_id), sha256)
        if why is not None:
            problems.append(f"{_name(source_id)} is referenced by the owner ({tx}) but {why}")
        phase = disk.leases.get(tx, ("", ""))[0]
        if phase in ("ABORTED", "RELEASED", ""):
            problems.append(f"the owner holds {tx} but the journal says {phase or 'nothing'}")
    for tx, phase_told in sorted(told.items()):
        phase = disk.leases.get(tx, ("", ""))[0]
        if phase not in _LATER[phase_told]:
            problems.append(
                f"{tx} was {phase_told} for its caller but the journal says {phase or 'nothing'}"
            )
    return problems


def check(world: World, findings: Iterable[VerifyFinding] | None = None) -> list[str]:
    """Every invariant this state breaks (see the module docstring)."""
    try:
        disk = Disk.read(world.session_dir)
    except Corrupt as exc:
        return [str(exc)]
    problems = []
    for name, (sha256, size) in sorted(disk.records.items()):
        why = disk.whole(name, sha256)
        if why is None and len(disk.files[name]) != size:
            why = "its size is not the recorded one"
        if why is not None:
            problems.append(f"{name} is recorded but {why}")
    if findings is not None:
        reported = {f.name: f.kind.value for f in findings}
        for name in sorted(disk.files.keys() - disk.records.keys()):
            if reported.get(name) not in ("unrecorded", "collecting"):
                problems.append(f"{name} has no record and verify says {reported.get(name)!r}")
        for name in sorted(disk.records):
            if (
                name in disk.files
                and reported.get(name) != "ok"
                and not any(p.startswith(name) for p in problems)
            ):
                problems.append(f"{name} is whole but verify says {reported.get(name)!r}")
    for name, sha256 in sorted(world.handed_out.items()):
        if name in disk.records:
            if disk.records[name][0] != sha256:
                problems.append(f"{name} was handed out twice (another digest is recorded now)")
        elif name not in disk.collected:
            problems.append(f"{name} was handed out but is neither recorded nor collected")
    problems.extend(lease_problems(disk, world.leases))
    return problems


def check_store(world: World) -> list[str]:
    """Every invariant a store-bound state breaks in the store and this host's replica."""
    store, prefix = world.store, world.store_prefix
    assert store is not None
    chain: list[bytes] = []
    objects: dict[str, tuple[str, str]] = {}
    problems = []
    for key, etag in sorted(store.etags().items()):
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :]
        if rest.startswith("manifest/"):
            if rest != f"manifest/{len(chain) + 1:012d}.jsonl":
                problems.append(
                    f"the store's manifest has {rest} where record {len(chain) + 1} belongs"
                )
                break
            chain.append(store.body(key, etag)[0])
        elif rest.startswith("tool-results/"):
            objects[rest.split("/", 1)[1]] = (key, etag)
    records: dict[str, tuple[str, int]] = {}
    collected: set[str] = set()
    for line in chain:
        record = json.loads(line)
        name = str(record.get("filename"))
        if record.get("event") == "artifact":
            records[name] = (str(record["sha256"]), int(record["byte_size"]))
            collected.discard(name)
        elif record.get("event") == "collected":
            records.pop(name, None)
            collected.add(name)
    for name, (sha256, size) in sorted(records.items()):
        if name not in objects:
            problems.append(f"{name} is recorded in the store but its object is missing")
            continue
        data = store.body(*objects[name])[0]
        if (hashlib.sha256(data).hexdigest(), len(data)) != (sha256, size):
            problems.append(f"{name} is recorded in the store but its object holds other bytes")
    try:
        local = (world.session_dir / "manifest.jsonl").read_bytes()
    except FileNotFoundError:
        local = b""
    lines = [line + b"\n" for line in local.split(b"\n")[:-1]]
    if lines != chain[: len(lines)]:
        problems.append("this host's manifest is not a prefix of the store's records")
    results = world.session_dir / "tool-results"
    for name in sorted(os.listdir(results) if results.is_dir() else []):
        if name in records:
            data = (results / name).read_bytes()
            if hashlib.sha256(data).hexdigest() != records[name][0]:
                problems.append(f"this host holds {name} with other bytes than its record")
    for name, sha256 in sorted(world.handed_out.items()):
        if name in records:
            if records[name][0] != sha256:
                problems.append(f"{name} was handed out twice (the store records another digest)")
        elif name not in collected:
            problems.append(f"{name} was handed out but the store neither records nor collected it")
    return problems
