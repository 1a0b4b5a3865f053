"""The operations the explorer faults, and the sessions they start from.

Every operation starts from a copy of a template session built once (without faults):

- ``fresh``: nothing yet (the first capture creates the session);
- ``plain``: five artifacts, no lease journal and no memory owner yet;
- ``busy``: the five artifacts, the embedded SQLite memory owner, a COMMITTED lease on the
  first artifact, a PREPARED one whose reference the owner holds on the second (a crash
  between publish and commit), a PREPARED one the owner never saw on the third, and the
  leftovers of a crashed capture (a temporary file of a dead process, a final name
  without a record);
- ``torn``: ``busy`` after a power loss cut the last records of the manifest and of the
  lease journal (each ends in half a record).

What each operation hands its caller (source IDs, lease phases) is recorded, so the
invariants can hold the session to it after a fault.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from click.testing import CliRunner

from toolswap import (
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
    ToolswapError,
)
from toolswap.artifact import temporary_filename
from toolswap.cleanup import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    apply_cleanup_from_journal,
    plan_cleanup_from_journal,
)
from toolswap.cli import main
from toolswap.testing import substituted
from toolswap.verify import verify_session

from .faultfs import FaultIO

if TYPE_CHECKING:
    from .bucket import Bucket

__all__ = [
    "DELETE_ORPHANS",
    "OWNER_DB",
    "Operation",
    "Outcome",
    "Templates",
    "World",
    "clock",
    "later",
    "operations",
    "register_template",
]

WORKSPACE = "ws"
SESSION = "s1"
DEAD_PID = 2**22 + 7
"""Above Linux's largest pid: the process that wrote this temporary file is gone."""
DELETE_ORPHANS = ArtifactCleanupPolicy(dry_run=False, orphan_ttl_seconds=0)
"""A policy that deletes every unreferenced file at once (the riskiest gc there is)."""
OWNER_DB = "memory.sqlite3"
RUN_LINES = 9000
"""``toolswap run`` prints the numbers 1 to this (about 44 KB)."""


def clock() -> datetime:
    """The fixed clock of every explored operation (the same state twice is the same bytes)."""
    return datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def later() -> datetime:
    """A clock a little ahead, so every file counts as older than a zero TTL."""
    return datetime.now(UTC) + timedelta(seconds=5)


def text_output(seed: int, lines: int) -> str:
    """Tool-like text with a failure line in its middle (the pointer lists it)."""
    body = [f"[{seed}] step {i}: compiling module_{i % 97} ok" for i in range(lines)]
    body[lines // 2] = f"[{seed}] ERROR: assertion failed in test_{seed}"
    return "\n".join(body) + "\n"


@dataclass
class World:
    """One explored state's sandbox."""

    home: Path
    """TOOLSWAP_HOME of this state (its session lives below it)."""
    template: str = ""
    """The template this state was copied from."""
    handed_out: dict[str, str] = field(default_factory=dict)
    """Every artifact name a caller was handed, with its SHA-256 (names are never reused)."""
    leases: dict[str, str] = field(default_factory=dict)
    """Every lease phase a caller was told is durable, by transaction ID."""
    source_ids: list[str] = field(default_factory=list)
    """The template's artifacts, oldest first."""
    memories: dict[int, ArtifactMemoryReference] = field(default_factory=dict)
    """The memory reference of each of them (values: the same in every copy)."""
    linked: frozenset[int] = frozenset()
    """Inodes of the template's artifacts (hard-linked into every copy, never changed)."""
    store: Bucket | None = None
    """For a session bound to a store (``TOOLSWAP_STORE``): the bucket of the real S3
    server it lives in (this host is one replica; the store is another machine, which a
    fault here leaves as it is)."""
    store_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The bucket's objects as the template left them (put back before every state)."""
    store_prefix: str = ""
    """The keys of the session's objects in the bucket start with this."""

    @property
    def session_dir(self) -> Path:
        return self.home / "projects" / WORKSPACE / SESSION

    @property
    def scratch(self) -> Path:
        """Beside the home: for the explorer and the operations' own files."""
        return self.home.parent

    @property
    def keep_dir(self) -> Path:
        return self.scratch / "kept"

    def externalizer(self) -> ToolResultExternalizer:
        return ToolResultExternalizer(self.session_dir, now=clock)

    def owner(self) -> SqliteMemoryOwner:
        """The session's owner (one object for every copy at this path: it holds nothing
        but the path and settings, and opening a database costs)."""
        path = self.session_dir / OWNER_DB
        owner = _OWNERS.get(path)
        if owner is None:
            owner = _OWNERS[path] = SqliteMemoryOwner(path, create=False, now=clock)
        return owner

    def journal(self, owner: SqliteMemoryOwner | None = None) -> ArtifactRetentionJournal:
        return ArtifactRetentionJournal(self.session_dir, owner=owner or self.owner(), now=clock)

    def memory(self, index: int) -> ArtifactMemoryReference:
        if index not in self.memories:
            ref = self.externalizer().get_artifact(self.source_ids[index])
            self.memories[index] = ref.for_memory()
        return self.memories[index]

    def claim(self, index: int) -> ArtifactRetentionClaim:
        return ArtifactRetentionClaim.from_memory_reference(self.memory(index))

    def hand_out(self, source_id: str, sha256: str) -> None:
        self.handed_out[source_id.split(":")[2]] = sha256


_OWNERS: dict[Path, SqliteMemoryOwner] = {}


@dataclass
class Outcome:
    """What an operation handed its caller."""

    artifacts: dict[str, str] = field(default_factory=dict)
    """Source ID -> SHA-256 of every artifact returned."""
    leases: dict[str, str] = field(default_factory=dict)
    """Transaction ID -> phase of every lease returned."""
    failure: str | None = None
    """A failure the caller saw as a clean, typed message (the CLI's exit status 1)."""
    output_kept: bool = False
    """For a failed capture: whether the caller still has the output (its preview was
    shown, or the session failed to open before any of it was read)."""


@dataclass(frozen=True)
class Operation:
    """One operation of the library or the CLI, run under the fault seam."""

    name: str
    template: str
    run: Callable[[World, FaultIO], Outcome]
    output: bytes | None = None
    """For a capture: the output, whose head a failure's preview must show."""
    full_only: bool = False
    """Explored by ``make faults`` only (slow, or adds little to the quick run)."""
    seeded: bool = False
    """Whether a seed changes what it does (a capture's output), not only torn cuts."""


class Templates:
    """Template sessions built once per process, copied into each explored state.

    A state's copy is made by putting back only what the last state changed: artifacts
    (never written in place) are hard links to the template's, the files toolswap
    appends to or rewrites are copies, and anything new is removed.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._worlds: dict[str, World] = {}
        self._files: dict[str, dict[str, tuple[str, int | None]]] = {}
        """Per template: every file (relative path) -> (origin, inode if hard-linked)."""
        self._placed: tuple[str, Path] | None = None
        self._copied: dict[str, tuple[int, ...]] = {}
        """The signature of each copied file as placed (a change means: copy it again)."""

    def world(self, template: str, home: Path, *, reuse: bool = False) -> World:
        """A fresh copy of ``template`` at ``home``, or, with ``reuse``, the copy already
        there (the caller knows it is untouched)."""
        built = self._worlds.get(template)
        if built is None:
            built = World(self.root / template / "home", template)
            with substituted(FaultIO()):  # no fsync: a template is durable by definition
                _BUILDERS[template](built)
            self._worlds[template] = built
            self._files[template] = _files(built.home)
        if not reuse:
            self._restore(template, built.home, home)
        return World(
            home,
            template,
            handed_out=dict(built.handed_out),
            leases=dict(built.leases),
            source_ids=list(built.source_ids),
            memories=built.memories,
            linked=frozenset(i for _, i in self._files[template].values() if i is not None),
            store=built.store,
            store_objects=built.store_objects,
            store_prefix=built.store_prefix,
        )

    def _restore(self, template: str, source: Path, home: Path) -> None:
        files = self._files[template]
        if self._placed != (template, home) or not home.is_dir():
            if home.parent.exists():
                shutil.rmtree(home.parent)
            home.parent.mkdir(parents=True)
            home.mkdir(mode=0o700)
            self._placed, self._copied = (template, home), {}
        present = set()
        root = str(home)
        for directory, _, names in os.walk(root, topdown=False):
            rel = directory[len(root) + 1 :]
            for name in names:
                key = f"{rel}/{name}" if rel else name
                path = f"{directory}/{name}"
                origin = files.get(key)
                st = os.lstat(path)
                if origin is not None and (
                    st.st_ino == origin[1] if origin[1] else self._copied.get(key) == _sig(st)
                ):
                    present.add(key)
                else:
                    os.unlink(path)
            if rel and not os.path.isdir(f"{source}/{rel}"):
                os.rmdir(directory)
        for key, (origin, inode) in files.items():
            if key in present:
                continue
            target = f"{root}/{key}"
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            if inode is not None:
                os.link(origin, target)
            else:
                shutil.copy2(origin, target)
                self._copied[key] = _sig(os.lstat(target))
        keep = home.parent / "kept"
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir()


def _files(home: Path) -> dict[str, tuple[str, int | None]]:
    """Every file of a template: artifacts are hard-linked (their inode), the rest copied."""
    files: dict[str, tuple[str, int | None]] = {}
    root = str(home)
    for directory, _, names in os.walk(root):
        rel = directory[len(root) + 1 :]
        for name in names:
            path = f"{directory}/{name}"
            linked = os.path.basename(directory) == "tool-results"
            files[f"{rel}/{name}" if rel else name] = (
                path,
                os.lstat(path).st_ino if linked else None,
            )
    return files


def _sig(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _build_fresh(world: World) -> None:
    world.home.mkdir(parents=True)


def _build_plain(world: World) -> None:
    ext = world.externalizer()
    for i in range(5):
        ref = ext.externalize(text_output(i, 200 + 30 * i), "bash").artifact
        world.source_ids.append(ref.source_id)
        world.hand_out(ref.source_id, ref.content_sha256)
    for i in range(len(world.source_ids)):
        world.memory(i)  # once, for every copy


def _build_busy(world: World) -> None:
    _build_plain(world)
    owner = SqliteMemoryOwner(world.session_dir / OWNER_DB, now=clock)
    journal = world.journal(owner)
    memory = world.memory(0)
    journal.publish_reference(
        world.claim(0), lambda: owner.publish("tx-committed", memory), transaction_id="tx-committed"
    )
    journal.prepare(world.claim(1), transaction_id="tx-published")
    owner.publish("tx-published", world.memory(1))
    journal.prepare(world.claim(2), transaction_id="tx-pending")
    world.leases.update(
        {"tx-committed": "COMMITTED", "tx-published": "PREPARED", "tx-pending": "PREPARED"}
    )
    results = world.session_dir / "tool-results"
    (results / temporary_filename(DEAD_PID, "0" * 16)).write_bytes(b"a capture cut short\n")
    (results / "tool_result_009.txt").write_bytes(b"linked, never recorded\n")
    for path in results.iterdir():  # old enough for any TTL
        os.utime(path, (1_700_000_000, 1_700_000_000))


def _build_torn(world: World) -> None:
    _build_busy(world)
    for name in ("manifest.jsonl", "retention-leases.jsonl"):
        path = world.session_dir / name
        last = path.read_bytes().splitlines(keepends=True)[-1]
        with open(path, "ab") as f:
            f.write(last[: len(last) // 2])  # half of a record, as a power loss leaves


_BUILDERS: dict[str, Callable[[World], None]] = {
    "fresh": _build_fresh,
    "plain": _build_plain,
    "busy": _build_busy,
    "torn": _build_torn,
}


def register_template(name: str, builder: Callable[[World], None]) -> None:
    """Add a template (the store-bound ones need the S3 server of the test that runs them)."""
    _BUILDERS[name] = builder


# -- the operations ----------------------------------------------------------------------


def _captured(result: object) -> Outcome:
    artifact = getattr(result, "artifact", None)
    if artifact is None:
        return Outcome()
    return Outcome(artifacts={artifact.source_id: artifact.content_sha256})


Source = Callable[[World], object]
"""Makes the output a capture reads (a fresh one each run: a pipe can be read once)."""


def _capture(source: Source, *, via: str = "externalize") -> Callable[[World, FaultIO], Outcome]:
    def run(world: World, fio: FaultIO) -> Outcome:
        data = source(world)
        fio.arm()
        try:
            try:
                ext = world.externalizer()
            except ToolswapError as exc:  # before any output was read: the caller has it
                return Outcome(failure=f"the session did not open: {exc}", output_kept=True)
            method = ext.process if via == "process" else ext.externalize
            return _captured(method(data, "bash"))  # type: ignore[arg-type]
        finally:
            if isinstance(data, io.IOBase):
                data.close()

    return run


def _pipe(data: bytes) -> Source:
    if len(data) > 60_000:
        raise ValueError("a piped output must fit a pipe's buffer (no writer thread here)")

    def source(world: World) -> io.BufferedReader:
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        return os.fdopen(read, "rb")

    return source


def _file(data: bytes) -> Source:
    def source(world: World) -> io.BufferedReader:
        path = world.scratch / "tool-output.log"
        path.write_bytes(data)
        return open(path, "rb")

    return source


def _chunks(parts: list[bytes]) -> Source:
    def source(world: World) -> Iterator[bytes]:
        return iter(parts)

    return source


def _run_cli(world: World, fio: FaultIO) -> Outcome:
    """``toolswap run --json -- sh -c 'touch ran; seq 1 9000'`` in this process."""
    ran = world.scratch / "command-ran"
    ran.unlink(missing_ok=True)
    command = ["sh", "-c", f"touch {ran}; seq 1 {RUN_LINES}"]
    fio.arm()
    try:
        result = CliRunner().invoke(
            main, ["run", "--session-dir", str(world.session_dir), "--json", "--", *command]
        )
    except BaseException as exc:
        _reap_children(exc.__traceback__)
        raise
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code != 0:
        # Refused before the command ran (nothing of its output lost), or not.
        failure = result.stderr.strip() or f"exit status {result.exit_code}"
        return Outcome(failure=failure, output_kept=not ran.exists())
    shown = json.loads(result.stdout)
    artifact = shown.get("artifact")
    if not shown.get("saved", True) or artifact is None:
        # Unsaved: the preview must still show the command's output.
        kept = "1\n2\n3\n" in shown["context_text"]
        return Outcome(failure=str(shown.get("error")), output_kept=kept)
    return Outcome(artifacts={artifact["source_id"]: artifact["content_sha256"]})


def _reap_children(tb: types.TracebackType | None) -> None:
    """Wait for the command a power loss left running (as its parent's death would)."""
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, subprocess.Popen):
                if value.stdout is not None:
                    value.stdout.close()
                value.wait()
        tb = tb.tb_next


def _prepare(world: World, fio: FaultIO) -> Outcome:
    journal, claim = world.journal(), world.claim(3)
    fio.arm()
    lease = journal.prepare(claim, transaction_id="tx-new")
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _first_prepare(world: World, fio: FaultIO) -> Outcome:
    claim = world.claim(3)
    fio.arm()
    journal = ArtifactRetentionJournal(world.session_dir, owner=None, now=clock)
    lease = journal.prepare(claim, transaction_id="tx-new")
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _first_publish(world: World, fio: FaultIO) -> Outcome:
    """The session's first publication: the owner's database is created too."""
    claim, memory = world.claim(3), world.memory(3)
    fio.arm()
    owner = SqliteMemoryOwner(world.session_dir / OWNER_DB, now=clock)
    journal = ArtifactRetentionJournal(world.session_dir, owner=owner, now=clock)
    lease, _ = journal.publish_reference(
        claim, lambda: owner.publish("tx-new", memory), transaction_id="tx-new"
    )
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _publish(world: World, fio: FaultIO) -> Outcome:
    owner = world.owner()
    journal, claim, memory = world.journal(owner), world.claim(3), world.memory(3)
    fio.arm()
    lease, _ = journal.publish_reference(
        claim, lambda: owner.publish("tx-new", memory), transaction_id="tx-new"
    )
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _commit(world: World, fio: FaultIO) -> Outcome:
    journal = world.journal()
    fio.arm()
    lease = journal.commit("tx-published")
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _abort(world: World, fio: FaultIO) -> Outcome:
    journal = world.journal()
    fio.arm()
    lease = journal.abort("tx-pending")
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _release(world: World, fio: FaultIO) -> Outcome:
    owner = world.owner()
    journal = world.journal(owner)
    fio.arm()
    lease = journal.remove_reference("tx-committed", lambda: owner.remove("tx-committed"))
    return Outcome(leases={lease.transaction_id: lease.phase.value})


def _reconcile(world: World, fio: FaultIO) -> Outcome:
    owner = world.owner()
    journal = world.journal(owner)
    fio.arm()
    reports = journal.reconcile_pending(owner)
    settled = {r.transaction_id: r.status.value.upper() for r in reports}
    return Outcome(leases={tx: s for tx, s in settled.items() if s in ("COMMITTED", "ABORTED")})


def _checkpoint(world: World, fio: FaultIO) -> Outcome:
    journal = world.journal()
    fio.arm()
    journal.checkpoint()
    return Outcome()


def _gc_plan(world: World, fio: FaultIO) -> Outcome:
    journal = world.journal()
    fio.arm()
    plan_cleanup_from_journal(journal, policy=DELETE_ORPHANS, now=later())
    return Outcome()


def _gc_apply(world: World, fio: FaultIO) -> Outcome:
    # Every copy of a template holds the very same files in tool-results/ (hard links:
    # the same inodes, sizes and times), so one plan, made on the first, fits them all.
    key = (world.template, world.session_dir)
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_cleanup_from_journal(world.journal(), policy=DELETE_ORPHANS, now=later())
        _PLANS[key] = plan
    journal = world.journal()  # read for the first time by apply, as in a new process
    fio.arm()
    apply_cleanup_from_journal(plan, journal, policy=DELETE_ORPHANS, now=later())
    return Outcome()


_PLANS: dict[object, ArtifactCleanupPlan] = {}


def _verify(world: World, fio: FaultIO) -> Outcome:
    ext = world.externalizer()
    fio.arm()
    verify_session(ext.session)
    return Outcome()


def _reads(world: World, fio: FaultIO) -> Outcome:
    ext = world.externalizer()
    fio.arm()
    ext.read_lines(world.source_ids[4], 150, 40)
    ext.read_bytes(world.source_ids[3], 1000, 3000)
    ext.read_artifact(world.source_ids[0], 0, 20)
    return Outcome()


def _grep(world: World, fio: FaultIO) -> Outcome:
    ext = world.externalizer()
    fio.arm()
    ext.grep(world.source_ids[4], "ERROR", context=1)
    return Outcome()


@dataclass(frozen=True)
class _Outputs:
    """What the captures read: fixed, or drawn from a seed (sizes, chunking, bytes)."""

    text: bytes
    binary: bytes
    chunks: list[bytes]
    piped: bytes
    filed: bytes

    @classmethod
    def drawn(cls, seed: int | None) -> _Outputs:
        if seed is None:
            # A chunk of 64 KiB or more goes to the capture's writer thread (the first of
            # the chunks and the binary output); smaller ones are written inline.
            return cls(
                text=text_output(100, 600).encode(),
                binary=bytes(range(256)) * 260,
                chunks=[text_output(200, 1600).encode(), b"tail 1\n" * 900, b"tail 2\n" * 900],
                piped=text_output(300, 900).encode(),  # over the 30,000 characters of bash
                filed=text_output(400, 600).encode(),
            )
        rng = random.Random(seed)

        def text(base: int) -> bytes:
            return text_output(base + seed, rng.randrange(40, 3000)).encode()

        parts = [text(200 + i) for i in range(rng.randrange(1, 5))]
        return cls(
            text=text(100),
            binary=rng.randbytes(rng.randrange(1, 150_000)),
            chunks=parts,
            piped=text_output(300 + seed, rng.randrange(40, 1300)).encode(),
            filed=text(400),
        )


def _seeded(
    name: str, template: str, run: Callable[[World, FaultIO], Outcome], output: bytes
) -> Operation:
    """A capture whose output a seed draws."""
    return Operation(name, template, run, output, seeded=True)


def operations(seed: int | None = None) -> tuple[Operation, ...]:
    """Every explored operation; a seed draws other outputs for the captures."""
    out = _Outputs.drawn(seed)
    text = out.text.decode()
    return (
        _seeded("capture str (new session)", "fresh", _capture(lambda w: text), out.text),
        _seeded("capture str", "busy", _capture(lambda w: text), out.text),
        _seeded("capture str (torn manifest)", "torn", _capture(lambda w: text), out.text),
        _seeded("capture bytes (binary)", "busy", _capture(lambda w: out.binary), out.binary),
        Operation("capture empty output", "busy", _capture(lambda w: b""), b""),
        _seeded("capture chunks", "busy", _capture(_chunks(out.chunks)), b"".join(out.chunks)),
        _seeded("capture pipe", "busy", _capture(_pipe(out.piped), via="process"), out.piped),
        _seeded("capture file object", "busy", _capture(_file(out.filed)), out.filed),
        Operation(
            "toolswap run",
            "busy",
            _run_cli,
            "".join(f"{i}\n" for i in range(1, RUN_LINES + 1)).encode(),
        ),
        Operation("journal prepare (first lease)", "plain", _first_prepare),
        Operation("journal publish (new owner)", "plain", _first_publish),
        Operation("journal prepare", "busy", _prepare),
        Operation("journal prepare (torn journal)", "torn", _prepare),
        Operation("journal publish", "busy", _publish),
        Operation("journal commit", "busy", _commit),
        Operation("journal abort", "busy", _abort),
        Operation("journal release", "busy", _release),
        Operation("journal reconcile", "busy", _reconcile),
        Operation("journal checkpoint", "busy", _checkpoint),
        Operation("gc plan", "busy", _gc_plan),
        Operation("gc apply", "busy", _gc_apply),
        Operation("gc apply (torn manifest)", "torn", _gc_apply, full_only=True),
        Operation("verify", "busy", _verify),
        Operation("reads", "busy", _reads),
        Operation("grep", "busy", _grep, full_only=True),
    )
