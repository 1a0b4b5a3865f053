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
