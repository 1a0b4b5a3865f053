"""The fault explorer: every operation, every durable call, every fault.

For each operation a dry run counts its durable calls; then, for every call n:

- **error mode**: one run per fault kind that can happen to call n (ENOSPC, EIO, EDQUOT,
  EMFILE, EINTR, a short write, and a disk that stays full, a device that stays dead, a
  descriptor limit that stays reached); the caller must see a typed toolswap error (a
  capture: an :class:`~toolswap.ArtifactWriteError` with the output's preview), or nothing;
- **crash mode**: the machine loses power after call n (and once more after the operation
  returned), the tree is rebuilt with what was durable, once per way unsynced bytes and
  names may survive (:class:`~.faultfs.Survival`: none, all, torn, or a process crash that
  keeps the page cache) that gives a state of its own.

Each state is then recovered as a restarted process would: the session is opened fresh,
verified, its journal recovered, garbage-collected with a policy that deletes every
unreferenced file, captured into again (the new name must never have been handed out)
and read; the invariants (:mod:`.oracle`) are checked before and after. A state already
checked (the same files, the same promises to callers) is not recovered twice: the explorer
counts it and reuses the verdict.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import toolswap.reader
from toolswap import (
    ArtifactRetentionJournal,
    ArtifactWriteError,
    ToolResultExternalizer,
    ToolswapError,
)
from toolswap.cleanup import apply_cleanup_from_journal, plan_cleanup_from_journal
from toolswap.testing import substituted
from toolswap.verify import verify_session

from . import oracle
from .faultfs import Fault, FaultIO, PowerLoss, Survival, fault_applies
from .scenarios import (
    DELETE_ORPHANS,
    Operation,
    Outcome,
    Templates,
    World,
    clock,
    later,
)

__all__ = ["Exploration", "Explorer", "Violation"]

PREVIEW_MAX = 64 << 10
"""A preview larger than this is not bounded (the defaults show 6 KB + 24 KB)."""
_THREAD_PREFIX = "toolswap-"


@dataclass(frozen=True)
class Violation:
    """One explored state that broke an invariant."""

    operation: str
    fault: str
    problems: tuple[str, ...]
    trace: tuple[str, ...]
    """The durable calls of the operation up to the fault."""

    def __str__(self) -> str:
        calls = " ".join(self.trace[-8:])
        lines = "\n    ".join(self.problems)
        return f"{self.operation}: {self.fault} (last calls: {calls})\n    {lines}"


@dataclass
class Exploration:
    """What an exploration did: states per (operation, fault) and what they broke."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    recovered: int = 0
    """Distinct states recovered (the rest had the same files and promises as one)."""
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def states(self) -> int:
        return sum(self.counts.values())

    def table(self) -> str:
        """The counts per operation and fault kind, as a text table."""
        kinds = sorted({kind for _, kind in self.counts}, key=_kind_order)
        operations = list(dict.fromkeys(op for op, _ in self.counts))
        width = max(len(op) for op in operations) if operations else 10
        widths = [max(11, len(k)) for k in kinds]

        def line(label: str, cells: list[object]) -> str:
            joined = " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
            return f"{label:<{width}} {joined}"

        rows = [line("operation", list(kinds)) + "  total"]
        for op in operations:
            counts = [self.counts.get((op, k), 0) for k in kinds]
            rows.append(f"{line(op, list(counts))}  {sum(counts):>5}")
        totals = [sum(self.counts.get((op, k), 0) for op in operations) for k in kinds]
        rows.append(f"{line('total', list(totals))}  {self.states:>5}")
        rows.append(
            f"{self.states} fault states, {self.recovered} distinct states recovered, "
            f"{len(self.violations)} violations, {self.seconds:.1f} s wall, "
            f"{self.cpu_seconds:.1f} s CPU"
        )
        return "\n".join(rows)


def _kind_order(kind: str) -> tuple[int, str]:
    return (0 if kind == "none" else 2 if kind.startswith("power") else 1, kind)


class Explorer:
    """Explores operations under faults in a scratch directory ``root``.

    Args:
        faults: the error kinds to inject.
        survivals: the ways unsynced bytes may survive a crash.
        stride: explore every ``stride``-th call only (1: every call).
    """

    def __init__(
        self,
        root: Path,
        *,
        faults: Iterable[Fault] = tuple(Fault),
        survivals: Iterable[Survival] = tuple(Survival),
        stride: int = 1,
    ) -> None:
        self.root = root
        self.templates = Templates(root / "templates")
        self.home = root / "state" / "home"
        self.faults = tuple(faults)
        self.survivals = tuple(survivals)
        self.seed: int | None = None
        self.stride = stride
        self.result = Exploration()
        self._verdicts: dict[str, tuple[str, ...]] = {}
        self._untouched: tuple[str, object] | None = None
        """(template, signature) of the copy at ``home`` while nothing changed it."""

    # -- driving ---------------------------------------------------------------------

    def explore(self, operations: Iterable[Operation], *, seed: int | None = None) -> Exploration:
        """Explore ``operations``; ``seed`` (None: the first page boundary) picks where
        torn changes are cut."""
        started, cpu = time.monotonic(), time.process_time()
        self.seed = seed
        for op in operations:
            self.explore_one(op)
        self.result.seconds += time.monotonic() - started
        self.result.cpu_seconds += time.process_time() - cpu
        return self.result

    def explore_one(self, op: Operation) -> None:
        calls = self.dry_run(op)
        for n, call in enumerate(calls, 1):
            if (n - 1) % self.stride:
                continue
            for fault in self.faults:
                if fault_applies(fault, call):
                    self.error_state(op, n, fault)
        for n in range(1, len(calls) + 2):
            if (n - 1) % self.stride and n != len(calls) + 1:
                continue
            self.power_states(op, n)

    def dry_run(self, op: Operation) -> list[str]:
        """The kinds of the operation's durable calls, in order (no fault)."""
        fio = FaultIO(armed=False)
        _, outcome, error = self._run(op, fio)
        problems = self._failed(op, outcome, error)
        if problems:
            raise AssertionError(f"{op.name} fails without a fault: {problems}")
        self._untouched = None
        return fio.trace

    def error_state(self, op: Operation, n: int, fault: Fault) -> None:
        fio = FaultIO(fail_at=n, fault=fault, armed=False)
        world, outcome, error = self._run(op, fio)
        if fio.injected is None:
            self._forget_copy()
            return  # call n was another kind this time (threads): nothing was injected
        self.result.counts[(op.name, str(fault))] += 1
        problems = list(self._failed(op, outcome, error))
        problems += [f"left {fd} descriptor(s) open" for fd in [fio.close_leftovers()] if fd]
        self._promised(world, outcome)
        problems += self._verdict(world)
        if problems:
            self._violation(op, fio.injected, problems, fio.trace)

    def power_states(self, op: Operation, n: int) -> None:
        for survival in self.survivals:
            rng = None if self.seed is None else random.Random(f"{self.seed}/{op.name}/{n}")
            fio = FaultIO(power_at=n, armed=False, rng=rng)
            world, outcome, error = self._run(op, fio, keep=True)
            problems = (
                [] if isinstance(error, PowerLoss) else list(self._failed(op, outcome, error))
            )
            fio.close_leftovers()
            report = fio.lose_power(survival)
            if survival is not Survival.NONE and not report.differs[survival]:
                self._forget_copy()
                continue  # the same state as with nothing unsynced surviving
            where = fio.injected or f"power lost after the operation returned ({fio.calls} calls)"
            self.result.counts[(op.name, f"power/{survival}")] += 1
            self._promised(world, outcome)
            problems += self._verdict(world)
            if problems:
                self._violation(op, f"{where}, {survival} survives", problems, fio.trace)

    # -- one state -------------------------------------------------------------------

    def _run(
        self, op: Operation, fio: FaultIO, *, keep: bool = False
    ) -> tuple[World, Outcome | None, BaseException | None]:
        reuse = self._untouched is not None and self._untouched[0] == op.template
        world = self.templates.world(op.template, self.home, reuse=reuse)
        if world.store is not None:  # the other machine: as the template left it
            world.store.restore_objects(world.store_objects)
        before = self._untouched[1] if reuse else _signature(world.home)  # type: ignore[index]
        self._untouched = None
        fio.keep_dir = world.keep_dir if keep else None
        toolswap.reader._VERIFIED.clear()  # a restarted process verifies afresh
        outcome: Outcome | None = None
        error: BaseException | None = None
        try:
            with substituted(fio):
                outcome = op.run(world, fio)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # PowerLoss included: the machine stopped here
            error = exc
        finally:
            _join_helper_threads()
        if not fio.changed and _signature(world.home) == before:
            self._untouched = (op.template, before)
        return world, outcome, error

    def _forget_copy(self) -> None:
        self._untouched = None

    def _failed(
        self, op: Operation, outcome: Outcome | None, error: BaseException | None
    ) -> list[str]:
        """How the failure the caller saw breaks the rules (none if it did not fail)."""
        if error is None:
            lost = outcome is not None and outcome.failure and not outcome.output_kept
            if op.output is not None and lost:
                assert outcome is not None
                return [f"the capture failed without a preview: {outcome.failure}"]
            return []
        if isinstance(error, PowerLoss):
            return []
        if op.output is not None:
            if not isinstance(error, ArtifactWriteError):
                return [
                    f"the capture failed with {type(error).__name__} ({error}), not an "
                    "ArtifactWriteError carrying the output's preview"
                ]
            return _preview_problems(op.output, error.preview)
        if not isinstance(error, ToolswapError):
            return [f"raw {type(error).__name__} reached the caller: {error}"]
        return []

    @staticmethod
    def _promised(world: World, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        for source_id, sha256 in outcome.artifacts.items():
            name = source_id.split(":")[2]
            if name in world.handed_out and world.handed_out[name] != sha256:
                world.handed_out[f"{name} (again)"] = sha256
            world.hand_out(source_id, sha256)
        world.leases.update(outcome.leases)

    def _verdict(self, world: World) -> list[str]:
        key = _state_key(world)
        known = self._verdicts.get(key)
        if known is None:
            self._untouched = None  # recovery changes the copy
            self.result.recovered += 1
            known = tuple(dict.fromkeys(recover(world)))  # each problem once
            self._verdicts[key] = known
        return list(known)

    def _violation(self, op: Operation, fault: str, problems: list[str], trace: list[str]) -> None:
        self.result.violations.append(Violation(op.name, fault, tuple(problems), tuple(trace)))


def _preview_problems(output: bytes, preview: str) -> list[str]:
    if not isinstance(preview, str) or not preview:
        return ["the capture failed without a preview"]
    if len(preview.encode()) > PREVIEW_MAX:
        return [f"the preview of a failed capture is {len(preview)} characters (unbounded)"]
    text = output[:200].decode("utf-8", "replace")
    if "\x00" not in text and "\ufffd" not in text:
        first = text.split("\n", 1)[0]
        if first not in preview:
            return ["the preview of a failed capture does not show the output's head"]
    return []


def _join_helper_threads() -> None:
    from toolswap.structured.outline_process import SERVICE_THREAD

    for thread in threading.enumerate():
        if thread.name == SERVICE_THREAD:
            continue  # (the outline helper's, which serves every capture after the first)
        if thread.name.startswith(_THREAD_PREFIX) and thread is not threading.current_thread():
            thread.join(10)
            if thread.is_alive():
                raise AssertionError(f"thread {thread.name} still runs after the operation")


_TOKENS = re.compile(r"(\.tmp-\d+-)[0-9a-f]{16}|(\.\d+\.)[0-9a-f]{12}(\.tmp)")


def _state_key(world: World) -> str:
    """The files of the session and the promises made to callers, as one digest."""
    sha = hashlib.sha256()
    if world.store is not None:
        sha.update(repr(sorted(world.store.etags().items())).encode())
    for key in sorted(world.handed_out.items()):
        sha.update(repr(key).encode())
    for key in sorted(world.leases.items()):
        sha.update(repr(key).encode())
    for directory, dirs, names in sorted(os.walk(world.home)):
        dirs.sort()
        sha.update(directory.encode())
        for name in sorted(names):
            path = Path(directory) / name
            sha.update(_TOKENS.sub(r"\1\2X\3", name).encode())
            inode = os.lstat(path).st_ino
            if inode in world.linked:  # the template's artifact, unchanged by design
                sha.update(str(inode).encode())
            else:
                sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def _signature(home: Path) -> object:
    """Every name below ``home`` with its inode, size and times (changes with any write)."""
    entries = []
    for directory, _, names in os.walk(home):
        for name in names:
            st = os.lstat(os.path.join(directory, name))
            entries.append((directory, name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return sorted(entries)


# -- recovery ------------------------------------------------------------------------------


def recover(world: World) -> Iterator[str]:
    """Restart on this state: open, verify, recover the journal, collect garbage, capture
    again and read; yields every broken invariant and every refused step."""
    toolswap.reader._VERIFIED.clear()
    with substituted(FaultIO()):
        yield from _recover(world)


def _step(what: str, action: Callable[[], object]) -> tuple[object, str | None]:
    try:
        return action(), None
    except ToolswapError as exc:
        return None, f"recovery refused at {what}: {type(exc).__name__}: {exc}"
    except Exception as exc:
        return None, f"recovery hit a raw {type(exc).__name__} at {what}: {exc}"


def _recover(world: World) -> Iterator[str]:
    sd = world.session_dir
    ext, why = _step("open", lambda: ToolResultExternalizer(sd, now=clock))
    if why:
        yield why
        return
    assert isinstance(ext, ToolResultExternalizer)
    findings, why = _step("verify", lambda: verify_session(ext.session))
    if why:
        yield why
        return
    yield from oracle.check(world, findings)  # type: ignore[arg-type]
    if world.store is not None:
        yield from oracle.check_store(world)

    def collect() -> None:
        journal = ArtifactRetentionJournal(sd, now=clock)  # bound to the owner, if any
        plan = plan_cleanup_from_journal(journal, policy=DELETE_ORPHANS, now=later())
        apply_cleanup_from_journal(plan, journal, policy=DELETE_ORPHANS, now=later())

    # A store-bound session's leases live in the journal every host shares (PostgreSQL):
    # its gc is the fleet explorer's (fleet.py).
    if world.store is None:
        _, why = _step("journal recovery and gc", collect)  # planning recovers the journal
        if why:
            yield why

    def capture_and_read() -> str | None:
        artifact = ext.externalize("after the fault\n" * 64, "bash").artifact
        if ext.read_lines(artifact.source_id, 10, 2).lines != ("after the fault",) * 2:
            raise AssertionError("the next capture does not read back")
        name = artifact.source_id.split(":")[2]
        if name in world.handed_out:
            return f"the next capture was handed {name}, a name handed out before"
        world.hand_out(artifact.source_id, artifact.content_sha256)
        return None

    reused, why = _step("the next capture", capture_and_read)
    if why or reused:
        yield str(why or reused)
    yield from oracle.check(world)  # nothing leased went, no name came back
    if world.store is not None:
        yield from oracle.check_store(world)
