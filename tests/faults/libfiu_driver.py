"""Every CLI operation under libfiu's POSIX preload: random EIO, ENOSPC, EMFILE and ENOMEM,
and short reads and writes, in the real system calls (run by ``test_libfiu.py``).

Run under ``fiu-run -x -f ""`` (the preload, no remote control), as
``python -m faults.libfiu_driver ROOT OUT SEED...`` with ``tests/`` on the path. Nothing is
enabled at start-up: once every toolswap module is imported, the driver registers one
libfiu callback (``fiu_enable_external``) on the preload's I/O points, and arms it only
while an operation runs. Armed, a call fails with a probability the seed picks, with an
errno drawn for its point (``failinfo``), or is cut short (the ``/reduce`` points), and
only when the code that made it is toolswap's: a call from the import system, from
``subprocess`` or on the pipe of ``toolswap run``'s command (a pipe never fails with
EIO) passes.

Per seed: a session with three artifacts, a COMMITTED lease (its reference in the SQLite
owner) and a PREPARED one whose reference the owner holds; then each operation once,
armed, each checked: no Python traceback, every error one line of ``toolswap: ...``, what
a command prints when it succeeds is what it prints without faults (less the time it
printed it, and but for what it says it could not read), ``run`` hands back the command's
output (saved whole, or its bounded preview) and exit status and ``wrap`` the output it
read; and, disarmed, the session against the invariants of :mod:`faults.oracle` with
``verify``'s findings. After the last operation the session must recover
(:func:`faults.explorer.recover`).

Each (seed, operation) writes one JSON line to OUT, preceded by a ``start`` line, so a
caller can tell which one a crash interrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import importlib
import json
import os
import pkgutil
import random
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

import toolswap
from toolswap import (
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    SqliteMemoryOwner,
    ToolResultExternalizer,
    ToolswapError,
)
from toolswap.cli import main
from toolswap.session import Session
from toolswap.verify import verify_session

from . import oracle
from .explorer import PREVIEW_MAX, recover
from .scenarios import OWNER_DB, SESSION, WORKSPACE, World, clock, text_output

__all__ = ["POINTS", "PROBABILITIES", "main_driver"]

POINTS: dict[str, tuple[int, ...]] = {
    "posix/io/oc/open": (errno.EIO, errno.EMFILE, errno.ENOMEM, errno.ENOSPC),
    "posix/io/oc/close": (errno.EIO,),
    "posix/io/rw/read": (errno.EIO,),
    "posix/io/rw/pread": (errno.EIO,),
    "posix/io/rw/readv": (errno.EIO,),
    "posix/io/rw/write": (errno.EIO, errno.ENOSPC),
    "posix/io/rw/pwrite": (errno.EIO, errno.ENOSPC),
    "posix/io/rw/writev": (errno.EIO, errno.ENOSPC),
    "posix/io/rw/ftruncate": (errno.EIO,),
    "posix/io/sync/fsync": (errno.EIO, errno.ENOSPC),
    "posix/io/sync/fdatasync": (errno.EIO, errno.ENOSPC),
    "posix/io/dir/opendir": (errno.EIO, errno.EMFILE, errno.ENOMEM),
    "posix/io/dir/readdir": (errno.EIO,),
    "posix/io/dir/unlink": (errno.EIO,),
    "posix/io/dir/rename": (errno.EIO, errno.ENOSPC),
    # A short read or write (libfiu cuts the count to a random 1..count).
    "posix/io/rw/read/reduce": (),
    "posix/io/rw/pread/reduce": (),
    "posix/io/rw/write/reduce": (),
    "posix/io/rw/pwrite/reduce": (),
}
"""The preload's failure points armed, with the errnos each may fail with."""
PROBABILITIES = (0.01, 0.03, 0.08)
"""A seed fails each eligible call with one of these probabilities."""
SHORT_ONLY = 0.3
"""The probability of a short read or write on the seeds that only cut them short."""
RUN_LINES = 9000
RUN_STATUS = 3
_TOOLSWAP = os.path.dirname(toolswap.__file__) + os.sep
_PASS_FILES = ("subprocess.py", "selectors.py")
_PASS_FUNCTIONS = {
    ("cli/_signals.py", "pipe_chunks"),
    ("grep.py", "run"),
    ("cli/capture.py", "run"),
}
"""The pipes of ``run``'s command and of a search child: never EIO on a pipe (paths below
the toolswap package; :func:`main_driver` refuses to start if one is no longer there)."""

_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.POINTER(ctypes.c_int),
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_uint),
)


def _toolswap_caller() -> str | None:
    """Where in toolswap the current thread's system call comes from (None: not from
    toolswap, or from a call that must pass)."""
    frame = sys._current_frames().get(threading.get_ident())
    lines: list[str] = []
    while frame is not None:
        path = frame.f_code.co_filename
        base = os.path.basename(path)
        if (
            base in _PASS_FILES
            or path.startswith("<frozen importlib")
            or (path[len(_TOOLSWAP) :], frame.f_code.co_name) in _PASS_FUNCTIONS
        ):
            return None
        if path.startswith(_TOOLSWAP):
            lines.append(f"{path[len(_TOOLSWAP) :]}:{frame.f_lineno}")
            if len(lines) == 3:
                break
        frame = frame.f_back
    return " < ".join(lines) or None


class Injector:
    """The libfiu callback on :data:`POINTS`; fails nothing until :meth:`arm`."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libfiu.so.0")
        lib.fiu_enable_external.argtypes = [
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_uint,
            _CALLBACK,
        ]
        self.armed = False
        self.rng = random.Random(0)
        self.probability = 0.0
        self.short_only = False
        self.injected: list[str] = []
        self._callback = _CALLBACK(self._decide)  # kept alive as long as libfiu calls it
        for name in POINTS:
            if lib.fiu_enable_external(name.encode(), 1, None, 0, self._callback) != 0:
                raise RuntimeError(f"libfiu refused to enable {name}")

    def arm(self, seed: str, probability: float, *, short_only: bool = False) -> None:
        self.rng = random.Random(seed)
        self.probability = probability
        self.short_only = short_only
        self.injected = []
        self.armed = True

    def disarm(self) -> list[str]:
        self.armed = False
        return self.injected

    def _decide(self, name: bytes, failnum: Any, failinfo: Any, flags: Any) -> int:
        if not self.armed:
            return 0
        try:
            where = _toolswap_caller()
            if where is None or self.rng.random() >= self.probability:
                return 0
            point = name.decode()
            if self.short_only and not point.endswith("/reduce"):
                return 0
            errnos = POINTS.get(point, ())
            if errnos:
                code = self.rng.choice(errnos)
                failinfo[0] = code
                self.injected.append(f"{point} {errno.errorcode[code]} at {where}")
            else:
                self.injected.append(f"{point} (short) at {where}")
            return 1
        except Exception:  # never let the callback itself fail a call
            return 0


# -- one seed ------------------------------------------------------------------------------


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    exit_code: int | None = None
    stderr: str = ""


@dataclass
class Seed:
    number: int
    home: Path
    world: World
    artifacts: list[tuple[str, bytes]]
    """Source ID and output of each text artifact the seed starts with."""
    structured: str
    """Source ID of a JSON Lines artifact (for ``query``)."""
    runner: CliRunner = field(default_factory=CliRunner)

    @property
    def session_dir(self) -> Path:
        return self.world.session_dir

    def cli(self, *args: str, stdin: bytes | None = None) -> Result:
        return self.runner.invoke(main, list(args), input=stdin, catch_exceptions=True)


def _cli_problems(result: Result, *, ok_codes: tuple[int, ...] = (0,)) -> list[str]:
    """A traceback, or stderr that is not one-line toolswap messages."""
    problems = []
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        problems.append(f"Python traceback: {_where(result.exception)}")
    lines = result.stderr.splitlines()
    if "Traceback" in result.stderr:
        problems.append(f"a traceback on stderr: {result.stderr[-300:]!r}")
    if result.exit_code not in (*ok_codes, 1):
        problems.append(f"exit status {result.exit_code}")
    one_line_error = bool(lines) and lines[-1].startswith("toolswap: ")
    if (
        result.exit_code == 1
        and 1 not in ok_codes
        and result.exception is None
        and not one_line_error
    ):
        problems.append(f"exit status 1 without a one-line error: {result.stderr[-300:]!r}")
    return problems


def _where(exc: BaseException) -> str:
    """The exception and the toolswap lines it passed (the innermost last)."""
    lines = []
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if path.startswith(_TOOLSWAP):
            lines.append(f"{path[len(_TOOLSWAP) :]}:{tb.tb_lineno}")
        tb = tb.tb_next
    return f"{type(exc).__name__}: {exc} at {' < '.join(reversed(lines[-4:]))}"


def _same_as_without_faults(
    seed: Seed,
    injector: Injector,
    name: str,
    args: tuple[str, ...],
    ok_codes: tuple[int, ...] = (0,),
) -> Callable[[], Outcome]:
    def run() -> Outcome:
        expected = seed.cli(*args)
        _arm(injector, seed, name)
        try:
            result = seed.cli(*args)
        finally:
            injector.disarm()
        problems = _cli_problems(result, ok_codes=ok_codes)
        got, wanted = _comparable(result.stdout, expected.stdout)
        if result.exit_code == expected.exit_code == 0 and got != wanted:
            at = next(
                (i for i, (a, b) in enumerate(zip(got, wanted, strict=False)) if a != b),
                min(len(got), len(wanted)),
            )
            start = max(0, at - 60)
            problems.append(
                f"printed other output than without faults at character {at}: "
                f"{got[start : at + 120]!r} instead of {wanted[start : at + 120]!r}"
            )
        return Outcome(problems, result.exit_code, result.stderr or result.stdout[-400:])

    return run


_AS_OF = re.compile(r'"as_of": "[^"]*"')


def _comparable(got: str, wanted: str) -> tuple[str, str]:
    """What a command printed under faults and without, made comparable: without the time
    it printed it (``leases``' ``as_of``), and with a session's store that ``sessions``
    could not read and says so (``"? (cannot read ...)"``: unknown, not wrong) taken as
    the store it has."""
    got, wanted = _AS_OF.sub('"as_of": "..."', got), _AS_OF.sub('"as_of": "..."', wanted)
    try:
        entries, expected = json.loads(got), json.loads(wanted)
    except ValueError:
        return got, wanted
    if not (isinstance(entries, list) and isinstance(expected, list)):
        return got, wanted
    if len(entries) != len(expected):
        return got, wanted
    for entry, known in zip(entries, expected, strict=True):
        store = entry.get("store") if isinstance(entry, dict) else None
        if isinstance(store, str) and store.startswith("? (") and isinstance(known, dict):
            entry["store"] = known.get("store")
    return json.dumps(entries), json.dumps(expected)


def _run(seed: Seed, injector: Injector) -> Outcome:
    mark = seed.home.parent / f"ran-{seed.number}"
    mark.unlink(missing_ok=True)
    script = f"touch {mark}; seq 1 {RUN_LINES}; exit {RUN_STATUS}"
    output = "".join(f"{i}\n" for i in range(1, RUN_LINES + 1)).encode()
    _arm(injector, seed, "run")
    try:
        result = seed.cli("run", "--json", "--session", SESSION, "--", "sh", "-c", script)
    finally:
        injector.disarm()
    problems = _cli_problems(result, ok_codes=(RUN_STATUS,))
    ran = mark.exists()
    if not ran:
        if result.exit_code != 1:
            problems.append(f"the command never ran, yet the exit status is {result.exit_code}")
        return Outcome(problems, result.exit_code, result.stderr)
    if result.exit_code != RUN_STATUS:
        problems.append(f"the command ran but run exited {result.exit_code}, not {RUN_STATUS}")
    try:
        printed = json.loads(result.stdout)
    except ValueError:
        problems.append(f"the command ran but run printed no result: {result.stdout[:200]!r}")
        return Outcome(problems, result.exit_code, result.stderr)
    if printed.get("exit_code") != RUN_STATUS:
        problems.append(f"the result says exit status {printed.get('exit_code')}")
    artifact = printed.get("artifact")
    if artifact:
        if artifact["content_sha256"] != hashlib.sha256(output).hexdigest():
            problems.append("the saved artifact is not the command's output")
        seed.world.hand_out(artifact["source"]["source_id"], artifact["content_sha256"])
    else:
        preview = str(printed.get("context_text") or "")
        head, tail = "\n1\n2\n3\n", f"\n{RUN_LINES - 1}\n{RUN_LINES}"
        if head not in f"\n{preview}" or tail not in preview:
            problems.append(f"the output was lost: the preview is {preview[:300]!r}")
        elif len(preview.encode()) > PREVIEW_MAX:
            problems.append(f"the preview is {len(preview)} characters (unbounded)")
    return Outcome(problems, result.exit_code, result.stderr)


def _wrap(seed: Seed, injector: Injector) -> Outcome:
    """``tool | toolswap wrap``: the output comes from standard input and is read once, so
    a save that fails must still show its bounded preview."""
    output = text_output(seed.number * 10 + 7, 1200).encode()  # over the bash threshold
    _arm(injector, seed, "wrap")
    try:
        result = seed.cli(
            "wrap", "--json", "--session", SESSION, "--tool", "bash", "--exit-code", "0",
            stdin=output,
        )  # fmt: skip
    finally:
        injector.disarm()
    problems = _cli_problems(result)
    try:
        printed = json.loads(result.stdout)
    except ValueError:
        printed = None
    if not isinstance(printed, dict):
        if result.exit_code == 1 and "toolswap: ArtifactWriteError" in result.stderr:
            problems.append(f"the output read from stdin was lost: {result.stderr[-300:]!r}")
        elif result.exit_code == 0:
            problems.append(f"wrap printed no result: {result.stdout[:200]!r}")
        return Outcome(problems, result.exit_code, result.stderr)
    artifact = printed.get("artifact")
    if artifact:
        if artifact["content_sha256"] != hashlib.sha256(output).hexdigest():
            problems.append("the saved artifact is not the output wrap read")
        seed.world.hand_out(artifact["source"]["source_id"], artifact["content_sha256"])
    else:
        preview = str(printed.get("context_text") or "")
        lines = output.decode().splitlines()
        if lines[0] not in preview or lines[-1] not in preview:
            problems.append(f"the output was lost: the preview is {preview[:300]!r}")
        elif len(preview.encode()) > PREVIEW_MAX:
            problems.append(f"the preview is {len(preview)} characters (unbounded)")
    return Outcome(problems, result.exit_code, result.stderr)


def _library(
    seed: Seed, injector: Injector, name: str, action: Callable[[], dict[str, str]]
) -> Outcome:
    """A small script's call of the library (publish, remove), armed."""
    _arm(injector, seed, name)
    try:
        leases = action()
    except ToolswapError as exc:
        injector.disarm()
        problems = [f"the error is more than one line: {exc!r}"] if "\n" in str(exc) else []
        return Outcome(problems, 1, f"toolswap: {type(exc).__name__}: {exc}")
    except Exception as exc:
        injector.disarm()
        return Outcome([f"Python traceback: {_where(exc)}"], 1)
    injector.disarm()
    seed.world.leases.update(leases)
    return Outcome([], 0)


def _publish(seed: Seed) -> dict[str, str]:
    ext = ToolResultExternalizer(seed.session_dir, now=clock)
    ref = ext.get_artifact(seed.artifacts[2][0]).for_memory()
    owner = SqliteMemoryOwner(seed.session_dir / OWNER_DB, now=clock)
    journal = ArtifactRetentionJournal(seed.session_dir, owner=owner, now=clock)
    lease, _ = journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(ref),
        lambda: owner.publish("tx-new", ref),
        transaction_id="tx-new",
    )
    return {lease.transaction_id: lease.phase.value}


def _remove(seed: Seed) -> dict[str, str]:
    owner = SqliteMemoryOwner(seed.session_dir / OWNER_DB, now=clock)
    journal = ArtifactRetentionJournal(seed.session_dir, owner=owner, now=clock)
    lease = journal.remove_reference("tx-0", lambda: owner.remove("tx-0"))
    return {lease.transaction_id: lease.phase.value}


def _reconcile(seed: Seed, injector: Injector) -> Outcome:
    _arm(injector, seed, "reconcile")
    try:
        result = seed.cli("reconcile", "--session", SESSION, "--json")
    finally:
        injector.disarm()
    problems = _cli_problems(result, ok_codes=(0, 3))
    if result.exit_code in (0, 3):
        for report in json.loads(result.stdout):
            status = str(report["status"]).upper()
            if status in ("COMMITTED", "ABORTED"):
                seed.world.leases[str(report["transaction_id"])] = status
    return Outcome(problems, result.exit_code, result.stderr)


def _gc(seed: Seed, injector: Injector, *args: str) -> Outcome:
    _arm(injector, seed, f"gc {args[0]}")
    try:
        result = seed.cli("gc", *args, "--session", SESSION, "--ttl", "0s", "--json")
    finally:
        injector.disarm()
    return Outcome(_cli_problems(result), result.exit_code, result.stderr)


def _checkpoint(seed: Seed, injector: Injector) -> Outcome:
    _arm(injector, seed, "journal checkpoint")
    try:
        result = seed.cli("journal", "checkpoint", "--session", SESSION)
    finally:
        injector.disarm()
    return Outcome(_cli_problems(result), result.exit_code, result.stderr)


def _probability(seed: int) -> float:
    """The seed's probability; every fourth seed cuts reads and writes short only, often."""
    return SHORT_ONLY if seed % 4 == 0 else PROBABILITIES[seed % len(PROBABILITIES)]


def _arm(injector: Injector, seed: Seed, operation: str) -> None:
    number = seed.number
    injector.arm(f"{number}/{operation}", _probability(number), short_only=number % 4 == 0)


def operations(seed: Seed, injector: Injector) -> list[tuple[str, Callable[[], Outcome]]]:
    sid = seed.artifacts[1][0]

    def same(name: str, *args: str, ok: tuple[int, ...] = (0,)) -> Callable[[], Outcome]:
        return _same_as_without_faults(seed, injector, name, args, ok)

    return [
        ("run", lambda: _run(seed, injector)),
        ("read", same("read", "read", sid, "--offset", "100", "--limit", "5")),
        (
            "read bytes",
            same("read bytes", "read", sid, "--byte-start", "900", "--byte-length", "3000"),
        ),
        ("grep", same("grep", "grep", sid, "ERROR", "-C", "1", "--json")),
        ("query", same("query", "query", seed.structured, '[.[] | select(.status == "failed")]')),
        ("show", same("show", "show", sid, "--json")),
        ("ls", same("ls", "ls", "--session", SESSION, "--json")),
        ("publish", lambda: _library(seed, injector, "publish", lambda: _publish(seed))),
        ("remove", lambda: _library(seed, injector, "remove", lambda: _remove(seed))),
        ("reconcile", lambda: _reconcile(seed, injector)),
        ("gc plan", lambda: _gc(seed, injector, "plan")),
        ("gc apply", lambda: _gc(seed, injector, "apply", "--yes")),
        ("verify", same("verify", "verify", "--session", SESSION, "--json", ok=(0, 1))),
        ("wrap", lambda: _wrap(seed, injector)),
        ("sessions", same("sessions", "sessions", "--json")),
        ("leases", same("leases", "leases", "--session", SESSION, "--json")),
        (
            "journal verify",
            same("journal verify", "journal", "verify", "--session", SESSION, "--json"),
        ),
        ("journal checkpoint", lambda: _checkpoint(seed, injector)),
    ]


def start_seed(root: Path, number: int) -> Seed:
    """The session a seed starts from (built with nothing armed)."""
    home = root / f"seed-{number}" / "home"
    os.environ["TOOLSWAP_HOME"] = str(home)
    os.environ["TOOLSWAP_WORKSPACE"] = WORKSPACE
    world = World(home)
    ext = ToolResultExternalizer(world.session_dir, now=clock)
    rng = random.Random(number)
    artifacts = []
    for i in range(3):
        data = text_output(number * 10 + i, rng.randrange(900, 4000)).encode()
        ref = ext.externalize(data, "bash").artifact
        assert ref is not None
        artifacts.append((ref.source_id, data))
        world.source_ids.append(ref.source_id)
        world.hand_out(ref.source_id, ref.content_sha256)
    records = [{"id": i, "status": "ok" if i % 97 else "failed"} for i in range(900)]
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()  # JSON Lines, 30 KB
    structured = ext.externalize(lines, "bash").artifact
    assert structured is not None
    world.hand_out(structured.source_id, structured.content_sha256)
    owner = SqliteMemoryOwner(world.session_dir / OWNER_DB, now=clock)
    journal = ArtifactRetentionJournal(world.session_dir, owner=owner, now=clock)
    refs = [ext.get_artifact(sid).for_memory() for sid, _ in artifacts]
    journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(refs[0]),
        lambda: owner.publish("tx-0", refs[0]),
        transaction_id="tx-0",
    )
    journal.prepare(ArtifactRetentionClaim.from_memory_reference(refs[1]), transaction_id="tx-1")
    owner.publish("tx-1", refs[1])
    world.leases.update({"tx-0": "COMMITTED", "tx-1": "PREPARED"})
    return Seed(number, home, world, artifacts, structured.source_id)


def _invariants(seed: Seed) -> list[str]:
    try:
        findings = verify_session(Session.at(seed.session_dir, create=False))
    except ToolswapError as exc:
        return [f"verify (nothing armed) refused: {type(exc).__name__}: {exc}"]
    return oracle.check(seed.world, findings)


def _import_everything() -> None:
    """Import every toolswap module now, so no import happens while a fault is armed."""
    for module in pkgutil.walk_packages(toolswap.__path__, "toolswap."):
        if module.name == "toolswap.__main__":
            continue  # runs the CLI
        with contextlib.suppress(ImportError):  # an optional extra that is not installed
            importlib.import_module(module.name)


def _check_pass_functions() -> None:
    """Each function whose pipe calls must pass is still where the filter looks for it (a
    moved one would make the run fail a pipe, which no kernel does)."""
    for rel, name in _PASS_FUNCTIONS:
        source = Path(_TOOLSWAP, rel).read_text(encoding="utf-8")
        if not re.search(rf"^\s*def {name}\(", source, re.MULTILINE):
            raise RuntimeError(f"toolswap/{rel} has no function {name}: update _PASS_FUNCTIONS")


def main_driver(argv: list[str]) -> int:
    root, out = Path(argv[0]), Path(argv[1])
    seeds = [int(arg) for arg in argv[2:]]
    _check_pass_functions()
    _import_everything()
    injector = Injector()
    with open(out, "a", encoding="utf-8") as results:

        def emit(record: dict[str, object]) -> None:
            results.write(json.dumps(record) + "\n")
            results.flush()

        for number in seeds:
            seed = start_seed(root, number)
            for name, run in operations(seed, injector):
                emit({"start": [number, name]})
                outcome = run()
                injected = list(injector.injected)
                problems = outcome.problems + _invariants(seed)
                if injected and all("(short)" in i for i in injected) and outcome.exit_code == 1:
                    # A short read or write is no error: POSIX allows one at any time.
                    problems.append(f"failed on short reads or writes alone: {outcome.stderr!r}")
                emit(
                    {
                        "seed": number,
                        "op": name,
                        "p": _probability(number),
                        "injected": injected,
                        "problems": problems,
                        "exit": outcome.exit_code,
                        "stderr": outcome.stderr[-400:],
                    }
                )
            emit({"start": [number, "recovery"]})
            problems = list(dict.fromkeys(recover(seed.world)))
            emit({"seed": number, "op": "recovery", "injected": [], "problems": problems})
    return 0


if __name__ == "__main__":
    sys.exit(main_driver(sys.argv[1:]))
