"""A child forked while another thread of its parent holds a lock of toolswap's (a harness's
``multiprocessing`` pool forking beside a capture) captures in its turn: it takes each lock
afresh, waits for its parent's ``flock``, and the session's records stay one chain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = """
import json, os, signal, sys, threading, time
from pathlib import Path
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
import json, os, sys
from pathlib import Path
from toolswap.chainlog import ChainLog

log = ChainLog(Path(sys.argv[1]), "s1")
for n in range(3):
    log.append({"n": n}, crash_prefix="manifest")
log.refresh()
offset, (seq, digest), identity = log.offset, log.head, log.identity


def child(how):
    if how == "resumed":  # (from a checkpoint: its reader restores its fold from there)
        assert log.resume(offset, seq, digest, identity)
    said = []
    for _ in range(2):
        reset, records = log.refresh()
        said.append([reset, len(records)])
    os.write(1, (json.dumps({how: said}) + "\\n").encode())
    os._exit(0)


for how in ("refreshed", "resumed"):
    pid = os.fork()
    if pid == 0:
        child(how)
    os.waitpid(pid, 0)
"""


def test_a_forked_child_s_log_says_reset_once_unless_it_resumes(tmp_path: Path) -> None:
    """A parent's thread may have been half-way through an update of the log's position:
    the child reads the log whole and says ``reset`` (its reader folds every record again),
    once; a child that resumes from a checkpoint starts its fold there instead, and is told
    nothing else (a reset would have it drop the fold it just restored)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOG, str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert said == [
        {"refreshed": [[True, 3], [False, 0]]},
        {"resumed": [[False, 0], [False, 0]]},
    ], done.stderr[-2000:]
