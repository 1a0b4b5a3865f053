"""A child forked while another thread of its parent holds a lock of toolswap's (a harness's
``multiprocessing`` pool forking beside a capture) captures in its turn: it takes each lock
afresh, waits for its parent's ``flock``, and the session's records stay one chain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolswap._cores import usable_cores

_SCRIPT = """
import json, os, signal, sys, threading, time
from pathlib import Path
from typing import Any
from toolswap import ToolResultExternalizer
from toolswap.manifest import Manifest

ext = ToolResultExternalizer(Path(sys.argv[1]))
data = b"a line of output\\n" * 40_000
ext.externalize(data, "bash")  # (the log has been read: its position is known)
held, release = threading.Event(), threading.Event()
lock = {"log": lambda: ext.manifest.log.lock, "session": ext.session.lock}[sys.argv[2]]


def hold():
    with lock():
        held.set()
        release.wait()


threading.Thread(target=hold).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # (a child that waits forever is ended: the test sees it)
    name = ext.externalize(data + b"child\\n", "bash").artifact.path.name
    os.write(1, (json.dumps({"child": name}) + "\\n").encode())
    os._exit(0)
time.sleep(0.3)  # (the child meets the lock held)
release.set()
_, status = os.waitpid(pid, 0)
parent = ext.externalize(data + b"parent\\n", "bash").artifact.path.name
names = sorted(record.filename for record in Manifest.of(ext.session).records())
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "parent": parent,
                  "names": names}))
"""


@pytest.mark.parametrize("lock", ["log", "session"])
def test_a_child_forked_while_a_lock_is_held_captures(lock: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "s"), lock],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 2, (done.stdout, done.stderr[-2000:])
    child, said = lines
    assert said["status"] == 0  # (not ended by its alarm: it never waited forever)
    first, second, third = "tool_result_001.txt", "tool_result_002.txt", "tool_result_003.txt"
    assert child == {"child": second} and said["parent"] == third
    assert said["names"] == [first, second, third]


_LOG = """
import json, os, sys, threading
from pathlib import Path
from typing import Any
from toolswap.chainlog import ChainLog

log = ChainLog(Path(sys.argv[1]), "s1")
for n in range(3):
    log.append({"n": n}, crash_prefix="manifest")
log.refresh()
offset, (seq, digest), identity = log.offset, log.head, log.identity
held, release = threading.Event(), threading.Event()


def hold():
    with log.lock:
        held.set()
        release.wait()


def child(how):
    if how == "held, resumed":  # (from a checkpoint: its reader restores its fold there)
        assert log.resume(offset, seq, digest, identity)
    said = []
    for _ in range(2):
        reset, records = log.refresh()
        said.append([reset, len(records)])
    os.write(1, (json.dumps({how: said}) + "\\n").encode())
    os._exit(0)


for how in ("free", "held", "held, resumed"):
    holder = None
    if how != "free":
        held.clear(), release.clear()
        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
    pid = os.fork()
    if pid == 0:
        child(how)
    os.waitpid(pid, 0)
    if holder is not None:
        release.set()
        holder.join()
"""


def test_a_forked_child_s_log_is_read_again_once(tmp_path: Path) -> None:
    """A log whose lock another thread held at the fork may have been half-way through an
    update: the child reads it whole and says ``reset`` (its reader folds every record
    again), once; a child that resumes from a checkpoint starts its fold there instead, and
    is told nothing else (a reset would have it drop the fold it just restored). A log no
    thread held is read again too: its reader may have folded outside its lock."""
    done = subprocess.run(
        [sys.executable, "-c", _LOG, str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert said == [
        {"free": [[True, 3], [False, 0]]},
        {"held": [[True, 3], [False, 0]]},
        {"held, resumed": [[False, 0], [False, 0]]},
    ], done.stderr[-2000:]


def _said(script: str, *args: str) -> list[dict[str, object]]:
    """What ``script`` printed, one JSON object a line (its children print theirs too)."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


_MODULE_LOCKS = """
import importlib, json, os, signal, sys, threading
names = [("toolswap.grep", "_GNU_GUARD"), ("toolswap.wrap", "_DEFAULTS_LOCK"),
         ("toolswap.durable", "_SWAP_GUARD"), ("toolswap.reader", "_VERIFIED_GUARD"),
         ("toolswap.backends.store", "_STORES_GUARD"), ("toolswap.session", "_LOCKS_GUARD")]
locks = [getattr(importlib.import_module(module), name) for module, name in names]
held, release = threading.Event(), threading.Event()


def hold():
    for lock in locks:
        lock.acquire()
    held.set()
    release.wait()


threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    free = {f"{module}.{name}": getattr(importlib.import_module(module), name).acquire(timeout=5)
            for module, name in names}
    os.write(1, (json.dumps(free) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_each_module_lock_is_new_in_a_forked_child() -> None:
    (free,) = _said(_MODULE_LOCKS)
    assert len(free) == 6 and all(free.values()), free


_WRAPPED = """
import json, os, signal, sys, threading
from pathlib import Path
from typing import Any
from toolswap import wrap

at_path = wrap._resolver(Path(sys.argv[1]))  # (a tool wrapped with externalizer=<dir>)
held, release = threading.Event(), threading.Event()


def hold():  # (its first call, making the externalizer, on a slow disk)
    with at_path._lock:
        held.set()
        release.wait()


threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    ext = at_path()
    said = ext.externalize(b"x" * 100_000, "bash").artifact.path.name
    os.write(1, (json.dumps({"child": said}) + "\\n").encode())
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status)}))
"""


def test_a_tool_wrapped_with_a_session_directory_runs_in_a_forked_child(tmp_path: Path) -> None:
    said = _said(_WRAPPED, str(tmp_path / "s"))
    assert said == [{"child": "tool_result_001.txt"}, {"status": 0}]


_INSIDE = """
import fcntl, json, os, signal, sys
from pathlib import Path
from typing import Any
from toolswap import ToolResultExternalizer

ext = ToolResultExternalizer(Path(sys.argv[1]))
data = b"a line of output\\n" * 40_000
ext.externalize(data, "bash")


def held_for_others():
    fd = os.open(ext.session.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


with ext.session.lock():
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
if pid == 0:
    os._exit(0)  # (it has left the parent's `with`)
os.waitpid(pid, 0)
with ext.session.lock():
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
    else:
        os.waitpid(pid, 0)
        print(json.dumps({"held after the child left": held_for_others()}))
if pid == 0:
    os._exit(0)
"""


def test_a_child_forked_inside_a_held_session_lock_leaves_it_held(tmp_path: Path) -> None:
    """The child leaves the ``with`` its parent entered: its copy of the lock's descriptor
    is closed, never unlocked (that would unlock its parent's, which other processes would
    then take while the parent appends)."""
    assert _said(_INSIDE, str(tmp_path / "s")) == [{"held after the child left": True}]


_IMPORTING = """
import importlib.abc, json, os, signal, sys, threading, time
from pathlib import Path
from typing import Any
from toolswap import ToolResultExternalizer

importing = threading.Event()


class Slow(importlib.abc.MetaPathFinder):  # (a cold disk: the capture's modules load slowly)
    def find_spec(self, name, path, target=None):
        if name == "toolswap.capture":
            importing.set()
            time.sleep(0.5)
        return None


sys.meta_path.insert(0, Slow())
at_fork = []
os.register_at_fork(before=lambda: at_fork.append("toolswap.capture" in sys.modules))
ext = ToolResultExternalizer(Path(sys.argv[1]))
data = b"a line of output\\n" * 40_000
threading.Thread(target=lambda: ext.externalize(data, "bash")).start()  # the first capture
importing.wait()
pid = os.fork()  # (while that thread imports what a capture needs)
if pid == 0:
    signal.alarm(20)
    said = ext.externalize(data + b"child\\n", "bash").artifact.path.name
    os.write(1, (json.dumps({"child": said}) + "\\n").encode())
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "mid-import": at_fork == [False]}))
"""


def test_a_child_forked_while_a_capture_s_modules_load_captures(tmp_path: Path) -> None:
    """Those modules are imported before the fork: the child waits on no import that a
    thread of its parent was in the middle of."""
    said = _said(_IMPORTING, str(tmp_path / "s"))
    assert said[-1] == {"status": 0, "mid-import": True} and said[0]["child"] in (
        "tool_result_001.txt",
        "tool_result_002.txt",
    )


_LEASES = """
import json, os, signal, sys, threading
from pathlib import Path
from typing import Any
from toolswap import ArtifactRetentionClaim, ArtifactRetentionJournal, ToolResultExternalizer

root = Path(sys.argv[1])
ext = ToolResultExternalizer(root)
art = ext.externalize(b"x\\n" * 100_000, "bash")
ref = ext.get_artifact(art.artifact.source_id).for_memory()
journal = ArtifactRetentionJournal(root, owner=None, checkpoint_every=0)
for n in range(3):
    journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(ref), lambda: None, transaction_id=f"tx-{n}"
    )
assert journal.checkpoint() == journal.head
print(json.dumps({"parent": len(journal.transactions())}), flush=True)
held, release = threading.Event(), threading.Event()


def hold():  # (a sync of another thread: the log may be half-way through it)
    with journal.log.lock:
        held.set()
        release.wait()


if sys.argv[2] == "held":
    threading.Thread(target=hold, daemon=True).start()
    held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    os.write(1, (json.dumps({"child": len(journal.transactions())}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("log", ["free", "held"])
def test_a_forked_child_s_leases_are_its_parent_s(log: str, tmp_path: Path) -> None:
    """The journal wrote a checkpoint at its head: a child whose log is read afresh (its
    lock was held at the fork) resumes from that checkpoint, and keeps the fold it restored
    there (a reset after the resume dropped it, and the child refused its own journal)."""
    assert _said(_LEASES, str(tmp_path / "s"), log) == [{"parent": 3}, {"child": 3}]


_SHARED = """
import json, os, signal, sys, threading
from pathlib import Path
from typing import Any
import psycopg
from toolswap import ArtifactRetentionJournal, ToolResultExternalizer
from toolswap.retention.postgres_journal import PostgresJournalStore

dsn, root = sys.argv[1], Path(sys.argv[2])
ToolResultExternalizer(root).externalize(b"x\\n" * 100_000, "bash")
store = PostgresJournalStore(dsn, root, schema="forked")
journal = ArtifactRetentionJournal(root, owner=None, store=store)
journal.transactions()


def advisory_locks():
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        return row[0]


held, release = threading.Event(), threading.Event()


def hold():
    with journal.lock():
        held.set()
        release.wait()


holder = threading.Thread(target=hold)
holder.start()
held.wait()
pid = os.fork()
if pid == 0:  # (another thread held the journal's lock: the child takes its own)
    signal.alarm(20)
    leases = len(journal.transactions())
    os.write(1, (json.dumps({"child read": leases}) + "\\n").encode())
    os._exit(0)
threading.Timer(0.3, release.set).start()
_, status = os.waitpid(pid, 0)
holder.join()
with journal.lock():
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
    else:
        os.waitpid(pid, 0)
        inside = advisory_locks()
if pid == 0:
    os._exit(0)  # (it has left the parent's `with`: the parent's lock is not its own)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "inside": inside,
                  "after": advisory_locks()}))
store.close()
"""


def test_a_forked_child_takes_the_shared_journal_s_lock_afresh_and_never_frees_its_parent_s(
    postgres_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("psycopg")
    said = _said(_SHARED, postgres_server.dsn, str(tmp_path / "s"))
    assert said == [{"child read": 0}, {"status": 0, "inside": 1, "after": 0}]


_FEEDING = """
import json, os, signal, sys, threading, time
from pathlib import Path
from toolswap import ToolResultExternalizer

ext = ToolResultExternalizer(Path(sys.argv[1]))
go_on, done = threading.Event(), threading.Event()
line = json.dumps({"id": 1, "status": "ok", "text": "x" * 200}).encode() + b"\\n"


def output():  # (JSON Lines: grep takes the text scan from the first KiB)
    for n in range(8):
        yield line * 4_000
        if n == 3:
            go_on.wait()


def capture():
    ext.externalize(output(), "api")
    done.set()


threading.Thread(target=capture, daemon=True).start()


def feeding_grep():
    for pid in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if "(grep)" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            return True
    return False


while not feeding_grep():
    time.sleep(0.01)
pid = os.fork()  # (a pool's worker, forked while the capture feeds grep: it lives on)
if pid == 0:
    signal.alarm(120)
    signal.pause()
    os._exit(0)
go_on.set()
print(json.dumps({"capture ended while the child lives": done.wait(60)}))
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
"""


def test_a_capture_feeding_grep_ends_while_a_child_forked_meanwhile_lives(
    tmp_path: Path,
) -> None:
    """The child's copy of grep's input is not left open: grep sees its input end when the
    capture ends it, not when the child exits."""
    assert _said(_FEEDING, str(tmp_path / "s")) == [{"capture ended while the child lives": True}]


_HELD_BY_A_CHILD = """
def held_by_a_child(folder):
    \"\"\"The files below ``folder`` a child forked now holds open.\"\"\"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        held = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(folder) and not os.path.isdir(target):
                held.append(os.path.basename(target))
        os.write(write, json.dumps(held).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        held = json.loads(f.read())
    os.waitpid(pid, 0)
    return held
"""

_HOLDING = (
    """
import json, os, sys, threading
from pathlib import Path
from toolswap import ToolResultExternalizer
"""
    + _HELD_BY_A_CHILD
    + """
ext = ToolResultExternalizer(Path(sys.argv[1]))
results = ext.session.tool_results_dir
midway, go_on = threading.Event(), threading.Event()


def output():  # (text past the threshold: written to its temporary file as it comes)
    yield b"step ok\\n" * 100_000
    midway.set()
    go_on.wait()
    yield b"done\\n"


def capture():
    ext.externalize(output(), "bash")


thread = threading.Thread(target=capture)
thread.start()
midway.wait()
try:
    held = held_by_a_child(str(results))  # (a pool's worker, forked while another thread captures)
finally:
    go_on.set()
thread.join()
print(json.dumps({"files of the capture the child holds": held}))
"""
)


def test_a_child_forked_while_another_thread_captures_holds_none_of_its_files(
    tmp_path: Path,
) -> None:
    """A child's copy of the capture's temporary file kept its blocks after the artifact
    was collected, for as long as the child lived (a pool's worker)."""
    said = _said(_HOLDING, str(tmp_path / "s"))

    assert said == [{"files of the capture the child holds": []}]


_OUTLINE_COPIES = (
    """
import json, os, sys, threading, time
from toolswap.capture import StreamCapture
from toolswap.structured import inspect_output
from toolswap.structured.outline_process import OUTLINES
"""
    + _HELD_BY_A_CHILD
    + """
folder = sys.argv[1]
os.makedirs(folder)
dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
doc = json.dumps({"items": [{"id": n, "status": "ok"} for n in range(20_000)]}).encode()
outlining, go_on = threading.Event(), threading.Event()


def slow_inspect(head, read, size):  # (the outline's thread, held while a child forks)
    outlining.set()
    go_on.wait()
    return inspect_output(head, read, size)


capture = StreamCapture(
    dir_fd, head_keep=65536, tail_keep=100, scan_limit=1000, inspect=slow_inspect
)
capture.write(doc)
stats = capture.finish()
outlining.wait()
on_the_thread = held_by_a_child(folder)
go_on.set()
assert stats.outline
capture.discard()

OUTLINES.warm()  # (the helper process: it reads a copy kept until its answer is had)
deadline = time.monotonic() + 60
while not OUTLINES.ready and time.monotonic() < deadline:
    time.sleep(0.05)
capture = StreamCapture(
    dir_fd, head_keep=65536, tail_keep=100, scan_limit=1000, inspect=inspect_output,
    outliner=OUTLINES,
)
capture.write(doc)
stats = capture.finish()
by_the_helper = held_by_a_child(folder)
assert stats.outline
capture.discard()
print(json.dumps({"helper ready": OUTLINES.ready, "on the thread": on_the_thread,
                  "by the helper": by_the_helper}))
"""
)


@pytest.mark.skipif(usable_cores() < 2, reason="the outline's helper needs a second core")
def test_a_child_holds_no_copy_an_outline_reads(tmp_path: Path) -> None:
    """The outline's thread reads a copy of the capture's descriptor, and the helper
    process's request keeps one until it answers: a child forked meanwhile held both."""
    said = _said(_OUTLINE_COPIES, str(tmp_path / "results"))

    assert said == [{"helper ready": True, "on the thread": [], "by the helper": []}]


_GOING_ON = """
import json, os, sys
from toolswap.capture import StreamCapture

folder = sys.argv[1]
os.makedirs(folder)
dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
capture = StreamCapture(dir_fd, head_keep=100, tail_keep=100, scan_limit=1000)
capture.write(sys.argv[2].encode() * 100_000)  # (past a chunk: its writer thread runs)
pid = os.fork()
if pid == 0:  # a child that goes on with its parent's capture
    mine = os.open(os.path.join(folder, "mine"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        capture.write(b"the child's bytes\\n")
        capture.finish()
        said = {"finish": "returned"}
    except OSError as exc:
        said = {"finish": os.strerror(exc.errno)}
    capture.discard()
    said["its own file"] = open(os.path.join(folder, "mine"), "rb").read().decode()
    os.write(1, (json.dumps(said) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
stats = capture.finish()
assert capture.link_as("tool_result_001.txt")
print(json.dumps({"parent's bytes": stats.byte_size}))
"""


def test_a_child_that_goes_on_with_its_parent_s_capture_fails_it_and_touches_no_file(
    tmp_path: Path,
) -> None:
    """Its copy of the descriptor was closed and its number taken by a file of the
    child's own, which the capture then wrote to, fsynced and closed."""
    said = _said(_GOING_ON, str(tmp_path / "results"), "a\n")

    assert said == [
        {"finish": "Bad file descriptor", "its own file": ""},
        {"parent's bytes": 200_000},
    ]


_ONE_FAILS = """
import json, os
from toolswap._fork import track


class Failing:
    def _forked(self):
        raise RuntimeError("this one fails")


class Working:
    def _forked(self):
        os.write(1, b'{"the next one ran": true}\\n')


objects = [Failing(), Working()]
for obj in objects:
    track(obj)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_one_failing_fork_hook_leaves_the_others_to_run() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ONE_FAILS], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"the next one ran": True}]
    assert "RuntimeError: this one fails" in done.stderr  # (still said)


_MANY = """
import gc, json, os, subprocess, sys, threading, time
from pathlib import Path
from toolswap import ToolResultExternalizer
from toolswap._gc import collector_paused

ext = ToolResultExternalizer(Path(sys.argv[1]))  # (no capture yet: the first fork imports)
stop = time.monotonic() + 1.0


def forks():  # (grep and query start their processes with a preexec_fn: the fork hooks run)
    while time.monotonic() < stop:
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)


threads = [threading.Thread(target=forks) for _ in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
free = ext.manifest.log.lock.acquire(timeout=5)
paused, release = threading.Event(), threading.Event()


def pause():  # (another thread folding a log, the collector paused)
    with collector_paused():
        paused.set()
        release.wait()


threading.Thread(target=pause, daemon=True).start()
paused.wait()
pid = os.fork()
if pid == 0:
    os.write(1, (json.dumps({"child's collector": gc.isenabled()}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
release.set()
print(json.dumps({"log lock free after concurrent forks": free}))
"""


def test_concurrent_forks_leave_no_lock_held_and_a_child_s_collector_runs(tmp_path: Path) -> None:
    assert _said(_MANY, str(tmp_path / "s")) == [
        {"child's collector": True},
        {"log lock free after concurrent forks": True},
    ]


_POOLED = """
import json, os, sys
from toolswap.retention._postgres import PgConnections

pg = PgConnections(
    sys.argv[1], "pooled", lock_timeout=5, connect_timeout=5, error=lambda a, e: RuntimeError(a)
)
with pg.connection("a query") as conn:
    pid = os.fork()
if pid == 0:  # (it has left the operation its parent was in)
    os.write(1, (json.dumps({"child keeps": len(pg._idle)}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
with pg.connection("another") as again:
    works = again.execute("SELECT 1").fetchone()[0]
    print(json.dumps({"parent's own": again is conn, "works": works}))
pg.close()
"""


def test_a_child_forked_inside_a_database_operation_never_pools_its_parent_s_connection(
    postgres_server: Any,
) -> None:
    """The child leaving the operation does not keep the parent's connection for its own
    next one (a socket shared by two processes) nor close it (the parent's session)."""
    pytest.importorskip("psycopg")
    assert _said(_POOLED, postgres_server.dsn) == [
        {"child keeps": 0},
        {"parent's own": True, "works": 1},
    ]


def _killed_inside_the_lock_leaves_it_free(script: str, tmp_path: Path) -> None:
    """Run ``script`` (it forks a child that lives on, takes the session lock, prints the
    child's pid and is SIGKILLed inside the lock); the lock is then free while the child
    lives."""
    import fcntl
    import os
    import signal

    from toolswap import ToolResultExternalizer

    session = tmp_path / "s"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(session)], capture_output=True, timeout=60
    )
    child = json.loads(proc.stdout.decode().splitlines()[0])["child"]
    try:
        assert proc.returncode == -signal.SIGKILL
        fd = os.open(ToolResultExternalizer(session).session.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: still held
        finally:
            os.close(fd)
    finally:
        os.kill(child, signal.SIGKILL)


_WAITING = """
import json, os, signal, sys, time
from pathlib import Path
from toolswap import ToolResultExternalizer, durable

ext = ToolResultExternalizer(Path(sys.argv[1]))
ext.check_ready()
child = []


class ForkWhileWaiting(durable.DurableIO):
    def flock(self, fd, operation):
        if not child:  # (a pool's worker forked while this thread waits for the lock)
            child.append(os.fork())
            if child[0] == 0:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)  # (the test reads to the end of its parent's output)
                os.dup2(null, 2)
                signal.alarm(20)
                time.sleep(20)
                os._exit(0)
        super().flock(fd, operation)


with durable.substituted(ForkWhileWaiting()):
    with ext.session.lock():
        print(json.dumps({"child": child[0]}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # killed inside the lock
"""


def test_a_child_forked_while_its_parent_waits_for_a_session_lock_does_not_hold_it(
    tmp_path: Path,
) -> None:
    """The lock's descriptor is the session's from the moment it is opened: a child forked
    before the ``flock`` returns closes its copy too. Kept, the copy held the lock its
    parent took afterwards: a harness killed inside the lock left the session locked for as
    long as a worker it had forked lived."""
    _killed_inside_the_lock_leaves_it_free(_WAITING, tmp_path)


_OPENED = """
import json, os, signal, sys, threading, time
from pathlib import Path
from toolswap import ToolResultExternalizer, durable

ext = ToolResultExternalizer(Path(sys.argv[1]))
ext.check_ready()
go, forked, child = threading.Event(), threading.Event(), []


def fork_when_told():  # (a pool's worker forked by another thread of the harness)
    go.wait()
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)  # (the test reads to the end of its parent's output)
        os.dup2(null, 2)
        signal.alarm(20)
        time.sleep(20)
        os._exit(0)
    child.append(pid)
    forked.set()


class ForkRightAfterOpen(durable.DurableIO):
    def open(self, path, flags, mode=0o600, *, dir_fd=None):
        fd = super().open(path, flags, mode, dir_fd=dir_fd)
        if str(path) == str(ext.session.lock_path) and not go.is_set():
            go.set()
            forked.wait(1.0)  # (the fork lands here, unless it waits for the open to end)
        return fd


threading.Thread(target=fork_when_told).start()
with durable.substituted(ForkRightAfterOpen()):
    with ext.session.lock():
        forked.wait(20)
        print(json.dumps({"child": child[0]}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # killed inside the lock
"""


def test_a_child_forked_by_another_thread_as_a_session_lock_opens_does_not_hold_it(
    tmp_path: Path,
) -> None:
    """A fork waits while a session lock's file is being opened and its descriptor kept: a
    child forked between the two held a copy nothing knew of, and with it the lock its
    parent took next, after the parent was gone."""
    _killed_inside_the_lock_leaves_it_free(_OPENED, tmp_path)
