"""The fleet explorer: every request to the store and every statement to the database of
every operation on a shared session fails, and every state that leaves keeps the
invariants.

The session lives in the real S3 server of the tests (moto's, a subprocess) with its
lease journal and memory owner in the real PostgreSQL server; toolswap reaches both
through the fault proxies of :mod:`fault_proxy`. For each operation a dry run counts its
requests and statements; then, for every request n, one run per :class:`S3Fault`, and for
every statement n, one run per :class:`PgFault`. The caller must see the operation succeed
or a one-line typed toolswap error (a capture: an ArtifactWriteError with the output's
bounded preview); no database connection may stay open.

Each state is then recovered with the proxies passing everything: host ``a`` verifies,
collects garbage with a policy that deletes every unreferenced object at once (planning
recovers the journal), host ``b`` captures (its name must never have been handed out)
and a new host ``c`` reads that artifact; :func:`check` holds the store, the database and
every host's replica to the invariants before and after. A state already checked (the
same objects, rows, replicas and promises) is not recovered twice.

Hosts are directories of their own in this process (one session replica each). The
explorer shortens what only costs time: botocore's retry backoff is zero and its read
timeout one second (a held reply is given up on sooner; what happens is the same).
"""

from __future__ import annotations

import gc as _gc
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import toolswap.backends.store
import toolswap.reader
from fault_proxy import HttpFaultProxy, PgFault, PgFaultProxy, S3Fault
from toolswap import (
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    ArtifactWriteError,
    ToolResultExternalizer,
    ToolswapError,
)
from toolswap.cleanup import apply_cleanup_from_journal, plan_cleanup_from_journal
from toolswap.retention.owners.postgres import PostgresMemoryOwner
from toolswap.retention.postgres_journal import PostgresJournalStore
from toolswap.verify import FindingKind, VerifyFinding, verify_session

from .bucket import Bucket
from .explorer import Exploration, Violation, _preview_problems
from .oracle import _name, lease_problems
from .scenarios import DELETE_ORPHANS, Outcome, clock, later, text_output

__all__ = ["FleetExplorer", "FleetServers", "check", "fleet_operations"]

WORKSPACE = "ws"
SESSION = "s1"
PREFIX = "team"
SCHEMA = "fleet_state"
"""The schema every explored state's journal and owner live in (reset from a template's)."""
HOSTS = ("a", "b", "c")
TABLES = (
    "owner_meta",
    "publications",
    "memory_references",
    "tombstones",
    "journal_heads",
    "lease_journal",
    "lease_journal_checkpoints",
)
_FINAL_PREFIX = "tool_result_"


# -- the servers and the proxies in front of them ------------------------------------------


class FleetServers(Bucket):
    """The real servers, the fault proxies toolswap talks to, and direct clients that
    bypass the proxies (to build, reset and inspect states)."""

    def __init__(self, s3_server: Any, postgres_server: Any, bucket: str) -> None:
        super().__init__(s3_server.client(), bucket)
        self.http = HttpFaultProxy(s3_server.port)
        self.pg_socket = str(postgres_server.dir / ".s.PGSQL.5432")
        self.pg_direct = postgres_server.dsn
        self.pg = PgFaultProxy(self.pg_socket)
        self.dsn = self.pg.dsn()
        self.env = dict(s3_server.env(), AWS_ENDPOINT_URL=self.http.endpoint)
        self.env["TOOLSWAP_STORE"] = f"s3://{bucket}/{PREFIX}"
        self.url = self.env["TOOLSWAP_STORE"]
        self.session_prefix = f"{PREFIX}/{WORKSPACE}/{SESSION}/"
        self.journal_key = f"{self.url}/{WORKSPACE}/{SESSION}"
        self._direct: psycopg.Connection[Any] | None = None

    def close(self) -> None:
        self.http.close()
        self.pg.close()
        if self._direct is not None:
            self._direct.close()

    def reset(self) -> None:
        """No fault, and every connection through the proxies closed."""
        self.http.reset()
        self.pg.reset()
        self.http.before = None

    def arm(self, target: str | None = None, at: int | None = None, fault: Any = None) -> None:
        """Count from zero on both proxies; fault the ``at``-th of ``target`` ("s3"/"pg")."""
        self.http.arm(at, fault if target == "s3" else None)
        self.pg.arm(at, fault if target == "pg" else None)

    # -- the database ------------------------------------------------------------------

    def sql(
        self, statement: str, params: tuple[object, ...] | None = None
    ) -> list[tuple[Any, ...]]:
        if self._direct is None or self._direct.closed:
            self._direct = psycopg.connect(self.pg_direct, autocommit=True)
        cur = self._direct.execute(statement, params)  # type: ignore[arg-type]
        return list(cur.fetchall()) if cur.description else []

    def save_schema(self, template: str) -> None:
        """Copy the state's tables into the template's own schema."""
        copy = f"tpl_{template}"
        statements = [f"DROP SCHEMA IF EXISTS {copy} CASCADE", f"CREATE SCHEMA {copy}"]
        statements += [f"CREATE TABLE {copy}.{t} AS TABLE {SCHEMA}.{t}" for t in TABLES]
        self.sql("; ".join(statements))

    def restore_schema(self, template: str) -> None:
        """Put the template's rows back (the tables' own triggers refuse this to clients:
        a reset runs as a replica would, triggers off)."""
        copy = f"tpl_{template}"
        statements = [
            "BEGIN",
            "SET LOCAL session_replication_role = replica",
            "SET LOCAL synchronous_commit = off",
            f"TRUNCATE {', '.join(f'{SCHEMA}.{t}' for t in TABLES)}",
        ]
        statements += [f"INSERT INTO {SCHEMA}.{t} SELECT * FROM {copy}.{t}" for t in TABLES]
        statements.append("COMMIT")
        self.sql("; ".join(statements))

    def drop_schema(self) -> None:
        self.sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")

    def drop_schemas(self) -> None:
        """Drop the state's schema and every template's."""
        rows = self.sql(
            "SELECT nspname FROM pg_namespace WHERE nspname = %s OR nspname LIKE 'tpl\\_%%'",
            (SCHEMA,),
        )
        for (name,) in rows:
            self.sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


# -- one explored state --------------------------------------------------------------------


@dataclass
class FleetWorld:
    """One explored state's hosts and what callers were promised."""

    servers: FleetServers
    root: Path
    """Holds a directory per host (its replica of the session)."""
    template: str = ""
    handed_out: dict[str, str] = field(default_factory=dict)
    """Every artifact name a caller was handed, with its SHA-256."""
    leases: dict[str, str] = field(default_factory=dict)
    """Every lease phase a caller was told is durable, by transaction ID."""
    source_ids: list[str] = field(default_factory=list)
    memories: dict[int, ArtifactMemoryReference] = field(default_factory=dict)
    rival: tuple[str, bytes, str, str] | None = None
    """For the append race: another host's record (key, line) and the artifact it names
    (source ID, SHA-256), which lands just before this host's first record."""
    opened: list[Any] = field(default_factory=list)
    """Owners and journal stores to close when the state ends."""

    def session_dir(self, host: str) -> Path:
        return self.root / host / "projects" / WORKSPACE / SESSION

    def externalizer(self, host: str = "a") -> ToolResultExternalizer:
        return ToolResultExternalizer(self.session_dir(host), now=clock)

    def owner(self) -> PostgresMemoryOwner:
        owner = PostgresMemoryOwner(self.servers.dsn, schema=SCHEMA, now=clock)
        self.opened.append(owner)
        return owner

    def journal(
        self, host: str = "a", owner: PostgresMemoryOwner | None = None
    ) -> ArtifactRetentionJournal:
        owner = owner or self.owner()
        store = PostgresJournalStore(self.servers.dsn, self.session_dir(host), schema=SCHEMA)
        self.opened.append(store)
        return ArtifactRetentionJournal(self.session_dir(host), owner=owner, store=store, now=clock)

    def claim(self, index: int) -> ArtifactRetentionClaim:
        return ArtifactRetentionClaim.from_memory_reference(self.memories[index])

    def hand_out(self, source_id: str, sha256: str) -> None:
        self.handed_out[source_id.split(":")[2]] = sha256

    def close(self) -> None:
        opened, self.opened = self.opened, []
        for thing in opened:
            thing.close()


@dataclass(frozen=True)
class FleetOperation:
    """One operation on the shared session, run with the proxies armed."""

    name: str
    template: str
    run: Callable[[FleetWorld, Callable[[], None]], Outcome]
    """Gets the world and ``arm`` (call it when the operation proper starts)."""
    output: bytes | None = None
    """For a capture: the output, whose head a failure's preview must show."""


@dataclass
class _Template:
    objects: dict[str, dict[str, Any]]
    world: FleetWorld
    hosts: Path


def _clear_caches() -> None:
    """What a new process would not have: opened stores (their clients, pools and retry
    quotas) and the reader's verified identities."""
    toolswap.backends.store._STORES.clear()
    toolswap.reader._VERIFIED.clear()


# -- templates -----------------------------------------------------------------------------


def _build_empty(world: FleetWorld) -> None:
    """Nothing yet: the first capture binds the session to the store."""


def _build_fleet(world: FleetWorld) -> None:
    """Five artifacts captured on host ``a``; host ``b`` read the first after the third
    was recorded (its replica lags); in the database a COMMITTED lease on the first, a
    PREPARED one whose reference the owner holds on the second (a crash between publish
    and commit), a PREPARED one the owner never saw on the third; in the store an upload
    whose record was never written (a capture killed between the two)."""
    ext = world.externalizer("a")
    for i in range(5):
        if i == 3:
            world.externalizer("b").read_lines(world.source_ids[0], 0, 1)
        ref = ext.externalize(text_output(i, 900 + 40 * i), "bash").artifact
        world.source_ids.append(ref.source_id)
        world.hand_out(ref.source_id, ref.content_sha256)
        world.memories[i] = ext.get_artifact(ref.source_id).for_memory()
    owner = world.owner()
    journal = world.journal("a", owner)
    memory = world.memories[0]
    journal.publish_reference(
        world.claim(0), lambda: owner.publish("tx-committed", memory), transaction_id="tx-committed"
    )
    journal.prepare(world.claim(1), transaction_id="tx-published")
    owner.publish("tx-published", world.memories[1])
    journal.prepare(world.claim(2), transaction_id="tx-pending")
    world.leases.update(
        {"tx-committed": "COMMITTED", "tx-published": "PREPARED", "tx-pending": "PREPARED"}
    )
    data = b"an upload whose record was never written\n" * 900
    world.servers.put(
        f"{world.servers.session_prefix}tool-results/{_FINAL_PREFIX}009.txt",
        {"body": data, "metadata": {"sha256": hashlib.sha256(data).hexdigest()}},
    )


def _build_race(world: FleetWorld) -> None:
    """``fleet``, and host ``a`` has uploaded its next capture; its record is kept aside
    and lands just before host ``b``'s first record (:meth:`FleetWorld.rival`)."""
    _build_fleet(world)
    servers = world.servers
    before = set(servers.etags())
    keep = world.root / "a-before"
    shutil.copytree(world.root / "a", keep)
    artifact = world.externalizer("a").externalize(text_output(77, 700), "bash").artifact
    records = sorted(
        k
        for k in set(servers.etags()) - before
        if k.startswith(servers.session_prefix + "manifest/")
    )
    (record,) = records
    line = servers.s3.get_object(Bucket=servers.bucket, Key=record)["Body"].read()
    servers.s3.delete_object(Bucket=servers.bucket, Key=record)
    shutil.rmtree(world.root / "a")
    keep.rename(world.root / "a")
    world.rival = (record, line, artifact.source_id, artifact.content_sha256)


_BUILDERS: dict[str, Callable[[FleetWorld], None]] = {
    "empty": _build_empty,
    "fleet": _build_fleet,
    "race": _build_race,
}


# -- the operations ------------------------------------------------------------------------


def _capture(host: str, output: bytes) -> Callable[[FleetWorld, Callable[[], None]], Outcome]:
    text = output.decode()

    def run(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
        if world.rival is not None:
            _land_rival_before_first_record(world)
        arm()
        try:
            ext = world.externalizer(host)
        except ToolswapError as exc:  # before any output was read: the caller has it
            return Outcome(failure=f"the session did not open: {exc}", output_kept=True)
        artifact = ext.externalize(text, "bash").artifact
        assert artifact is not None
        return Outcome(artifacts={artifact.source_id: artifact.content_sha256})

    return run


def _land_rival_before_first_record(world: FleetWorld) -> None:
    assert world.rival is not None
    key, line, source_id, sha256 = world.rival
    servers = world.servers
    landed = threading.Event()

    def before(method: str, target: str) -> None:
        if method == "PUT" and "/manifest/" in target and not landed.is_set():
            landed.set()
            servers.s3.put_object(Bucket=servers.bucket, Key=key, Body=line)
            world.hand_out(source_id, sha256)  # host a's capture returned it

    servers.http.before = before


def _read_elsewhere(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    """Host ``b`` reads an artifact it never fetched (its replica lags two records), then
    pages one it holds."""
    arm()
    ext = world.externalizer("b")
    ext.read_lines(world.source_ids[4], 100, 20)
    ext.read_bytes(world.source_ids[0], 1000, 3000)
    return Outcome()


def _publish(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    claim, memory = world.claim(3), world.memories[3]
    arm()
    owner = world.owner()
    journal = world.journal("a", owner)
    lease, _ = journal.publish_reference(
        claim, lambda: owner.publish("tx-new", memory), transaction_id="tx-new"
    )
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _commit(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    arm()
    lease = world.journal("a").commit("tx-published")
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _release(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    arm()
    owner = world.owner()
    journal = world.journal("a", owner)
    lease = journal.remove_reference("tx-committed", lambda: owner.remove("tx-committed"))
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _reconcile(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    arm()
    owner = world.owner()
    reports = world.journal("b", owner).reconcile_pending(owner)
    settled = {r.transaction_id: r.status.value.upper() for r in reports}
    return Outcome(leases={tx: s for tx, s in settled.items() if s in ("COMMITTED", "ABORTED")})


def _gc_plan(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    arm()
    plan_cleanup_from_journal(world.journal("b"), policy=DELETE_ORPHANS, now=later())
    return Outcome()


def _gc_apply(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    plan = plan_cleanup_from_journal(world.journal("b"), policy=DELETE_ORPHANS, now=later())
    world.close()
    _clear_caches()
    arm()
    apply_cleanup_from_journal(plan, world.journal("b"), policy=DELETE_ORPHANS, now=later())
    return Outcome()


def _verify(world: FleetWorld, arm: Callable[[], None]) -> Outcome:
    arm()
    verify_session(world.externalizer("b").session)
    return Outcome()


def fleet_operations() -> tuple[FleetOperation, ...]:
    first = text_output(500, 1200).encode()
    again = text_output(600, 1500).encode()
    racing = text_output(700, 1100).encode()
    return (
        FleetOperation("capture (new session)", "empty", _capture("a", first), first),
        FleetOperation("capture", "fleet", _capture("a", again), again),
        FleetOperation("capture (append race)", "race", _capture("b", racing), racing),
        FleetOperation("read on another host", "fleet", _read_elsewhere),
        FleetOperation("journal publish", "fleet", _publish),
        FleetOperation("journal commit", "fleet", _commit),
        FleetOperation("journal release", "fleet", _release),
        FleetOperation("journal reconcile", "fleet", _reconcile),
        FleetOperation("gc plan", "fleet", _gc_plan),
        FleetOperation("gc apply", "fleet", _gc_apply),
        FleetOperation("verify", "fleet", _verify),
    )


# -- the invariants ------------------------------------------------------------------------


@dataclass
class FleetDisk:
    """What the store, the database and the replicas hold, read without toolswap."""

    chain: list[bytes]
    """The store's manifest records, in sequence order."""
    gaps: list[str]
    records: dict[str, tuple[str, int]]
    collected: set[str]
    ever: dict[str, set[str]]
    """Every SHA-256 a record ever gave a name."""
    objects: dict[str, bytes]
    metadata: dict[str, str | None]
    leases: dict[str, tuple[str, str]]
    references: dict[str, tuple[str, str]]
    replicas: dict[str, tuple[list[bytes], dict[str, bytes]]]
    """Per host: its manifest's complete lines and its final-named files."""

    @classmethod
    def read(cls, world: FleetWorld) -> FleetDisk:
        servers = world.servers
        prefix = servers.session_prefix
        chain_keys: list[tuple[str, str]] = []
        objects: dict[str, bytes] = {}
        metadata: dict[str, str | None] = {}
        for key, etag in sorted(servers.etags().items()):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if rest.startswith("manifest/"):
                chain_keys.append((key, etag))
            elif rest.startswith("tool-results/"):
                name = rest.split("/", 1)[1]
                objects[name], metadata[name] = servers.body(key, etag)
        gaps = []
        chain = []
        for seq, (key, etag) in enumerate(chain_keys, 1):
            if not key.endswith(f"/{seq:012d}.jsonl"):
                gaps.append(f"the store's manifest has {key} where record {seq} belongs")
                break
            chain.append(servers.body(key, etag)[0])
        records: dict[str, tuple[str, int]] = {}
        collected: set[str] = set()
        ever: dict[str, set[str]] = {}
        for line in chain:
            record = json.loads(line)
            name = str(record.get("filename"))
            if record.get("event") == "artifact":
                records[name] = (str(record["sha256"]), int(record["byte_size"]))
                ever.setdefault(name, set()).add(str(record["sha256"]))
                collected.discard(name)
            elif record.get("event") == "collected":
                records.pop(name, None)
                collected.add(name)
        leases: dict[str, tuple[str, str]] = {}
        rows = servers.sql(
            f"SELECT line FROM {SCHEMA}.lease_journal WHERE journal_key = %s ORDER BY seq",
            (servers.journal_key,),
        )
        for (line,) in rows:
            record = json.loads(bytes(line))
            tx, phase = str(record["transaction_id"]), str(record["phase"])
            intent = record.get("intent")
            source = str(intent["source_id"]) if isinstance(intent, dict) else leases[tx][1]
            leases[tx] = (phase, source)
        references = {
            str(tx): (str(sid), str(sha))
            for tx, sid, sha in servers.sql(
                f"SELECT transaction_id, source_id, content_sha256 FROM {SCHEMA}.memory_references"
            )
        }
        replicas = {}
        for host in HOSTS:
            root = world.session_dir(host)
            if not root.is_dir():
                continue
            try:
                raw = (root / "manifest.jsonl").read_bytes()
            except FileNotFoundError:
                raw = b""
            lines = [line + b"\n" for line in raw.split(b"\n")[:-1]]
            files = {}
            results = root / "tool-results"
            if results.is_dir():
                for name in os.listdir(results):
                    if name.startswith(_FINAL_PREFIX) and name.endswith(".txt"):
                        files[name] = (results / name).read_bytes()
            replicas[host] = (lines, files)
        return cls(
            chain, gaps, records, collected, ever, objects, metadata, leases, references, replicas
        )

    def whole(self, name: str, sha256: str) -> str | None:
        data = self.objects.get(name)
        if data is None:
            return "its object is missing from the store"
        if hashlib.sha256(data).hexdigest() != sha256:
            return f"its object holds {len(data)} other bytes"
        return None


def check(world: FleetWorld, findings: Iterable[VerifyFinding] | None = None) -> list[str]:
    """Every invariant this state breaks (``findings``: host ``a``'s verify)."""
    disk = FleetDisk.read(world)
    problems = list(disk.gaps)
    for name, data in sorted(disk.objects.items()):
        meta = disk.metadata.get(name)
        if meta is not None and hashlib.sha256(data).hexdigest() != meta:
            problems.append(f"{name} is in the store with bytes that are not its SHA-256")
    for name, (sha256, size) in sorted(disk.records.items()):
        why = disk.whole(name, sha256)
        if why is None and len(disk.objects[name]) != size:
            why = "its size is not the recorded one"
        if why is not None:
            problems.append(f"{name} is recorded but {why}")
    if findings is not None:
        reported = {f.name: f.kind for f in findings}
        for name in sorted(disk.objects.keys() - disk.records.keys()):
            if reported.get(name) not in (FindingKind.UNRECORDED, FindingKind.COLLECTING):
                problems.append(
                    f"{name} is in the store without a record and verify says "
                    f"{reported.get(name)!r}"
                )
        local = disk.replicas.get("a", ([], {}))[1]
        for name in sorted(local.keys() - disk.records.keys() - disk.objects.keys()):
            if reported.get(name) not in (FindingKind.UNRECORDED, FindingKind.COLLECTING):
                problems.append(
                    f"host a holds {name} without a record and verify says {reported.get(name)!r}"
                )
        for name in sorted(disk.records):
            if reported.get(name) is not FindingKind.OK and not any(
                p.startswith(name) for p in problems
            ):
                problems.append(f"{name} is whole but verify says {reported.get(name)!r}")
    for host, (lines, files) in sorted(disk.replicas.items()):
        if lines != disk.chain[: len(lines)]:
            problems.append(f"host {host}'s manifest is not a prefix of the store's records")
        for name, data in sorted(files.items()):
            digest = hashlib.sha256(data).hexdigest()
            if name in disk.records and digest != disk.records[name][0]:
                problems.append(f"host {host} holds {name} with other bytes than its record")
            elif name not in disk.ever and name in disk.objects and data != disk.objects[name]:
                problems.append(f"host {host} holds unrecorded {name} unlike the store's object")
    for name, sha256 in sorted(world.handed_out.items()):
        if name in disk.records:
            if disk.records[name][0] != sha256:
                problems.append(f"{name} was handed out twice (another digest is recorded now)")
        elif name not in disk.collected:
            problems.append(f"{name} was handed out but is neither recorded nor collected")
    problems.extend(lease_problems(disk, world.leases))
    return problems


# -- the explorer --------------------------------------------------------------------------


class FleetExplorer:
    """Explores fleet operations under store and database faults.

    Args:
        root: a scratch directory for the hosts' replicas and the templates.
        s3_faults, pg_faults: the kinds to inject.
        stride, pg_stride: explore every ``stride``-th request (``pg_stride``-th statement)
            only (1: every one).
        kinds_per_index: inject only this many kinds at each request or statement, taking
            the kinds in turn across them (None: every kind at every one).
    """

    def __init__(
        self,
        servers: FleetServers,
        root: Path,
        *,
        s3_faults: Iterable[S3Fault] = tuple(S3Fault),
        pg_faults: Iterable[PgFault] = tuple(PgFault),
        stride: int = 1,
        pg_stride: int | None = None,
        kinds_per_index: int | None = None,
    ) -> None:
        self.servers = servers
        self.root = root
        self.hosts = root / "hosts"
        self.s3_faults = tuple(s3_faults)
        self.pg_faults = tuple(pg_faults)
        self.stride = stride
        self.pg_stride = pg_stride or stride
        self.kinds_per_index = kinds_per_index
        self._turn = 0
        self.result = Exploration()
        self._templates: dict[str, _Template] = {}
        self._verdicts: dict[str, tuple[str, ...]] = {}
        self.dry_counts: dict[str, tuple[int, int]] = {}

    def explore(self, operations: Iterable[FleetOperation]) -> Exploration:
        started, cpu = time.monotonic(), time.process_time()
        for op in operations:
            self.explore_one(op)
        self.result.seconds += time.monotonic() - started
        self.result.cpu_seconds += time.process_time() - cpu
        return self.result

    def explore_one(self, op: FleetOperation) -> None:
        requests, statements = self.dry_run(op)
        self.dry_counts[op.name] = (len(requests), len(statements))
        for target, calls, faults, stride in (
            ("s3", requests, self.s3_faults, self.stride),
            ("pg", statements, self.pg_faults, self.pg_stride),
        ):
            for n in range(1, len(calls) + 1):
                if (n - 1) % stride or not faults:
                    continue
                chosen = list(faults)
                if self.kinds_per_index is not None:
                    chosen = [
                        faults[(self._turn + k) % len(faults)] for k in range(self.kinds_per_index)
                    ]
                    self._turn += self.kinds_per_index
                for fault in chosen:
                    self.state(op, target, n, fault)

    def dry_run(self, op: FleetOperation) -> tuple[list[str], list[str]]:
        """The operation's requests and statements without a fault; the state it leaves
        is checked too (as ``none``: a bug needs no fault to break an invariant)."""
        world, outcome, error = self._run(op, None, None, None)
        problems = self._failed(op, outcome, error) + self._leaks()
        if problems:
            raise AssertionError(f"{op.name} fails without a fault: {problems}")
        requests, statements = self.servers.http.trace, self.servers.pg.trace
        self.result.counts[(op.name, "none")] += 1
        self._promised(world, outcome)
        problems = self._verdict(world)
        if problems:
            trace = (*requests, *statements)
            self.result.violations.append(Violation(op.name, "no fault", tuple(problems), trace))
        return requests, statements

    def state(self, op: FleetOperation, target: str, n: int, fault: S3Fault | PgFault) -> None:
        world, outcome, error = self._run(op, target, n, fault)
        proxy = self.servers.http if target == "s3" else self.servers.pg
        injected = proxy.injected
        trace = tuple(proxy.trace)
        if injected is None:
            return  # fewer requests this time (a retry or a pull it skipped): nothing injected
        kind = f"{target} {fault}"
        self.result.counts[(op.name, kind)] += 1
        problems = self._failed(op, outcome, error) + self._leaks()
        self._promised(world, outcome)
        problems += self._verdict(world)
        if problems:
            self.result.violations.append(Violation(op.name, injected, tuple(problems), trace))

    # -- one state -------------------------------------------------------------------

    def _world(self, template: str) -> FleetWorld:
        built = self._templates.get(template)
        if built is None:
            built = self._build(template)
        self.servers.reset()
        self.servers.restore_objects(built.objects)
        self.servers.restore_schema(template)
        if self.hosts.exists():
            shutil.rmtree(self.hosts)
        shutil.copytree(built.hosts, self.hosts, symlinks=True)
        _clear_caches()
        tpl = built.world
        return FleetWorld(
            self.servers,
            self.hosts,
            template,
            handed_out=dict(tpl.handed_out),
            leases=dict(tpl.leases),
            source_ids=list(tpl.source_ids),
            memories=tpl.memories,
            rival=tpl.rival,
        )

    def _build(self, template: str) -> _Template:
        servers = self.servers
        servers.reset()
        servers.restore_objects({})
        servers.drop_schema()
        PostgresMemoryOwner(servers.dsn, schema=SCHEMA).close()  # the tables, empty
        building = self.root / "building"
        if building.exists():
            shutil.rmtree(building)
        _clear_caches()
        world = FleetWorld(servers, building, template)
        try:
            _BUILDERS[template](world)
        finally:
            world.close()
        servers.reset()
        servers.save_schema(template)
        hosts = self.root / "templates" / template
        if hosts.exists():
            shutil.rmtree(hosts)
        hosts.parent.mkdir(parents=True, exist_ok=True)
        building.mkdir(exist_ok=True)
        building.rename(hosts)
        made = _Template(servers.objects(), world, hosts)
        self._templates[template] = made
        return made

    def _run(
        self, op: FleetOperation, target: str | None, n: int | None, fault: Any
    ) -> tuple[FleetWorld, Outcome | None, BaseException | None]:
        world = self._world(op.template)
        outcome: Outcome | None = None
        error: BaseException | None = None

        def arm() -> None:
            self.servers.arm(target, n, fault)

        try:
            outcome = op.run(world, arm)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            error = exc
        finally:
            world.close()
            self.servers.http.before = None
            self.servers.http.plan.at = None  # keep the trace, stop faulting
            self.servers.pg.plan.at = None
        return world, outcome, error

    def _leaks(self) -> list[str]:
        """Database connections left open once the operation's objects are closed."""
        deadline = time.monotonic() + 0.2
        while (left := self.servers.pg.open_connections()) and time.monotonic() < deadline:
            time.sleep(0.005)
        if left:  # an object dropped without close() closes its pool when collected
            _gc.collect()
            deadline = time.monotonic() + 2
            while (left := self.servers.pg.open_connections()) and time.monotonic() < deadline:
                time.sleep(0.01)
        return [f"left {left} database connection(s) open"] if left else []

    def _failed(
        self, op: FleetOperation, outcome: Outcome | None, error: BaseException | None
    ) -> list[str]:
        if error is None:
            lost = outcome is not None and outcome.failure and not outcome.output_kept
            if op.output is not None and lost:
                assert outcome is not None
                return [f"the capture failed without a preview: {outcome.failure}"]
            return []
        problems = []
        if "\n" in str(error):
            problems.append(f"the error is more than one line: {str(error)!r}")
        if op.output is not None:
            if not isinstance(error, ArtifactWriteError):
                return [
                    *problems,
                    f"the capture failed with {type(error).__name__} ({error}), not an "
                    "ArtifactWriteError carrying the output's preview",
                ]
            return problems + _preview_problems(op.output, error.preview)
        if not isinstance(error, ToolswapError):
            return [*problems, f"raw {type(error).__name__} reached the caller: {error}"]
        return problems

    @staticmethod
    def _promised(world: FleetWorld, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        for source_id, sha256 in outcome.artifacts.items():
            name = _name(source_id)
            if name in world.handed_out and world.handed_out[name] != sha256:
                world.handed_out[f"{name} (again)"] = sha256
            world.hand_out(source_id, sha256)
        world.leases.update(outcome.leases)

    def _verdict(self, world: FleetWorld) -> list[str]:
        key = _state_key(world)
        known = self._verdicts.get(key)
        if known is None:
            self.result.recovered += 1
            known = tuple(dict.fromkeys(recover(world)))
            self._verdicts[key] = known
        return list(known)


_ROWS = "SELECT " + ", ".join(
    f"(SELECT coalesce(json_agg(json_build_array({columns}) ORDER BY {columns}), '[]')::text "
    f"FROM {SCHEMA}.{table})"
    for table, columns in (
        ("lease_journal", "journal_key, seq, hash"),
        ("memory_references", "transaction_id, source_id"),
        ("tombstones", "transaction_id, generation, reason"),
        ("publications", "transaction_id, generation"),
        ("journal_heads", "journal_key, seq, hash"),
        ("lease_journal_checkpoints", "journal_key, seq"),
    )
)
"""The rows of a state that matter (no times), in one query."""


def _state_key(world: FleetWorld) -> str:
    """The store's objects, the database's rows, the replicas' files and the promises
    made to callers, as one digest (times and random temporary names left out)."""
    servers = world.servers
    sha = hashlib.sha256()
    for item in sorted(world.handed_out.items()) + sorted(world.leases.items()):
        sha.update(repr(item).encode())
    for key, etag in sorted(servers.etags().items()):
        sha.update(f"{key} {etag}\n".encode())
    sha.update(repr(servers.sql(_ROWS)).encode())
    for directory, dirs, names in sorted(os.walk(world.root)):
        dirs.sort()
        sha.update(directory.encode())
        for name in sorted(names):
            path = Path(directory) / name
            label = "temporary" if name.startswith(".tmp") or ".tmp" in name else name
            sha.update(label.encode())
            if label != "temporary" and name not in (".lock",):
                sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


# -- recovery ------------------------------------------------------------------------------


def _step(what: str, action: Callable[[], object]) -> tuple[object, str | None]:
    try:
        return action(), None
    except ToolswapError as exc:
        return None, f"recovery refused at {what}: {type(exc).__name__}: {exc}"
    except Exception as exc:
        return None, f"recovery hit a raw {type(exc).__name__} at {what}: {exc}"


def recover(world: FleetWorld) -> Iterator[str]:
    """Go on from this state with nothing failing: verify on host ``a``, recover the
    journal and collect garbage there, capture on ``b``, read on a new host ``c``; yields
    every broken invariant and every refused step."""
    world.servers.reset()
    _clear_caches()
    try:
        yield from _recover(world)
    finally:
        world.close()


def _recover(world: FleetWorld) -> Iterator[str]:
    ext, why = _step("open", lambda: world.externalizer("a"))
    if why:
        yield why
        return
    assert isinstance(ext, ToolResultExternalizer)
    findings, why = _step("verify", lambda: verify_session(ext.session))
    if why:
        yield why
        return
    yield from check(world, findings)  # type: ignore[arg-type]

    def collect() -> None:
        journal = world.journal("a")
        plan = plan_cleanup_from_journal(journal, policy=DELETE_ORPHANS, now=later())
        apply_cleanup_from_journal(plan, journal, policy=DELETE_ORPHANS, now=later())

    _, why = _step("journal recovery and gc", collect)
    if why:
        yield why

    def capture_and_read() -> str | None:
        artifact = world.externalizer("b").externalize("after the fault\n" * 2000, "bash")
        ref = artifact.artifact
        assert ref is not None
        page = world.externalizer("c").read_lines(ref.source_id, 10, 2)
        if page.lines != ("after the fault",) * 2:
            raise AssertionError("the next capture does not read back on another host")
        name = _name(ref.source_id)
        if name in world.handed_out:
            return f"the next capture was handed {name}, a name handed out before"
        world.hand_out(ref.source_id, ref.content_sha256)
        return None

    reused, why = _step("the next capture", capture_and_read)
    if why or reused:
        yield str(why or reused)
    yield from check(world)
